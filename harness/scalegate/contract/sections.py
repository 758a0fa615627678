"""The option sections a case carries to its ranks, each option declared once (contract/option.py).

``CaseSpec`` (contract/spec.py) holds them whole, as the session's options give them (plan/options.py), and a rank
reads them as ``spec.run.steps`` or ``spec.duet.side``: a field added to ``Run``, ``Execution`` or ``Duet`` is a
``--scaling-*`` option of pytest and of the gate, a row of docs/options.md, and a value every rank of every case
reads, with nothing else to edit. ``Windows`` is what the session sets from its other options; the faults a case
injects are contract/faults.py's; the sections the pytest side alone reads are plan/option_groups.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalegate.contract.option import OneOf, OnOff, Real, Whole, option

DTYPES = ("fp32", "bf16")
DUET_SIDES = ("base", "head")
DUET_THREADS = ("auto", "bound", "free")  # contract/affinity.py gloo_threads
# How an A/B gate's two sides share the host (docs/duet.md): their jobs take turns step by step (duet), whole
# (alternate), or step by step with the idle job's state swapped out (swap); or each side's session runs in turn
# (rounds). A session's jobs run in the first two: a swap's as a duet's, and the coordinator's turns swap them.
PAIRINGS = ("duet", "alternate", "swap", "rounds")
SESSION_PAIRINGS = PAIRINGS[:2]


@dataclass(frozen=True, kw_only=True)
class Run:
    """How each case trains and is measured: steps, seed, dtype, threads per rank, the memory sampler."""

    steps: int = option(20, "measured steps per case (default: %(default)s)", check=Whole(1))
    warmup: int = option(5, "untimed warm-up steps per case (default: %(default)s)", check=Whole(0))
    seed: int = option(1234, "seed for weights and data (default: %(default)s)", check=Whole())
    dtype: str = option("fp32", "fp32 or bf16 (default: %(default)s)", check=OneOf(DTYPES, "pick fp32 or bf16"))
    cpu_threads: int = option(
        1, "torch threads per rank on CPU: a rank is a device of this many cores (default: %(default)s)", check=Whole(1)
    )
    memory_interval_ms: float = option(
        50.0,
        "memory sampler period on every rank (its cost: python -m benchmarks.sampler_overhead) (default: %(default)s)",
        check=Real(lambda v: v > 0, "must be positive", "e.g. {option} 50"),
    )


@dataclass(frozen=True, kw_only=True)
class Execution:
    """How each launch's ranks run: its time limit, core binding, torch.compile, sequence parallel."""

    timeout_s: float = option(
        300.0,
        "seconds before a launch is killed (default: %(default)s)",
        check=Real(lambda v: 0 < v < math.inf, "must be a positive number of seconds", "e.g. {option} 300"),
        name="timeout",
    )
    cpu_binding: bool = option(
        False,
        "CPU devices: bind each local rank's main thread to cores of its own (default: off)",
        check=OnOff(),
        metavar="{on,off}",
        shown="off",
    )
    compile: bool = option(
        False,
        "run each workload block under torch.compile; compile time is reported apart, baselines keyed "
        "'<case>:<preset>+compile' (default: off)",
        flag=True,
    )
    tp_sequence_parallel: bool = option(
        False,
        "tp, fsdp-tp: shard the norms along the sequence, so the row-wise all-reduces become reduce-scatters "
        "(default: off)",
        flag=True,
    )


@dataclass(frozen=True, kw_only=True)
class Duet:
    """An A/B gate's pairing, set by `python -m scalegate gate --base` for each side's session."""

    address: str | None = option(
        None,
        "the gate's coordinator (unix:/path or tcp:HOST:PORT): this session's jobs pair in time with the other "
        "side's; set by the gate (default: none)",
        metavar="ADDRESS",
        name="duet",
        key="duet_address",
    )
    side: str = option(
        "head",
        "which side of the A/B gate this session is; set by the gate (default: %(default)s)",
        choices=DUET_SIDES,
        key="duet_side",
    )
    pairing: str = option(
        "duet",
        "how the two sides' jobs share the host: duet, step by step; alternate, whole jobs one at a time (one "
        "resident job); set by the gate (default: %(default)s)",
        choices=SESSION_PAIRINGS,
        key="duet_pairing",
    )
    threads: str = option(
        "auto",
        "CPU devices in a duet: bind gloo's worker threads with their rank (bound) or leave them to the "
        "scheduler (free); auto binds them except for a team's script and strategies whose card says why not "
        "(default: %(default)s)",
        choices=DUET_THREADS,
        key="duet_threads",
    )


@dataclass(frozen=True, kw_only=True)
class Windows:
    """What a launch runs after its measured steps, as its session sets it from its options; 0 and off: nothing."""

    # --scaling-local-steps: (distributed, local) step pairs, the same-launch reference (measure/local_steps.py),
    # judged as the local efficiency (docs/gate.md); the session asks for them where a case's timing means something
    local_steps: int = 0
    # --scaling-profile: this many profiled steps, one Chrome trace per rank into profile_dir (measure/profiling.py)
    profile_steps: int = 0
    profile_dir: str = ""
    # --scaling-checkpoint (measure/checkpoint.py): after every other window, save and load a checkpoint into
    # checkpoint_dir (set by the session: <case dir>/checkpoint), timed, and check that the resumed step matches the
    # uninterrupted one; checkpoint_keep leaves the files there (tests load them at another world size)
    checkpoint: bool = False
    checkpoint_dir: str = ""
    checkpoint_keep: bool = False
