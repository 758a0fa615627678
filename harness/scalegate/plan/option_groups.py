"""Every ``--scaling-*`` option, declared once: a section (a dataclass) per group, a field per option.

A field's default is the option's; ``option(...)`` (plan/declare.py) holds its help, its ``type=`` check
(plan/option_types.py) and how it is read. The plugin declares ``SECTIONS`` with the prefix ``scaling-``, the gate
declares them again to read what it passes on, and docs/options.md is written from them (cli/reference.py).
plan/options.py turns the sections into the session's ``Options``. Tuned defaults come from scalegate/policy.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from scalegate import policy
from scalegate.contract.spec import DUET_THREADS, FAULT_SYNTAX
from scalegate.plan import option_types as t
from scalegate.plan.declare import option

# --scaling-matrix: default, every strategy x workload on 1x2 plus the single 1x1 references; full adds 1x1 for every
# strategy, 1x4 and emulated 2x1, 2x2; smoke, every strategy once on SMOKE_MODEL (a bare `pytest` in a repository
# whose pytest.ini sets `scaling_testpaths_matrix = smoke`, as this one does).
MATRICES = {"default": "1x1,1x2", "full": "1x1,1x2,1x4,2x1,2x2", "smoke": "1x1,1x2"}
SMOKE_MODEL = "cnn"  # the cheapest built-in: a smoke case costs its launch, not its steps
TESTPATHS_MATRIX_INI = "scaling_testpaths_matrix"
PROFILE_STEPS = 3  # --scaling-profile's window: enough steps to see one repeat, a small trace
DTYPES = ("fp32", "bf16")
SCALING_MODES = ("weak", "strong", "both")
DUET_SIDES = ("base", "head")
PAIRING = ("duet", "alternate", "rounds")  # how an A/B gate's two sides share the host (gate/plan.py)


def _positive_seconds(name: str):
    return t.real(name, lambda v: 0 < v < math.inf, "must be a positive number of seconds", f"e.g. {name} 300")


def _probability(name: str):
    return t.real(name, lambda v: 0 < v < 0.5, "is not a probability in (0, 0.5)", f"e.g. {name} 0.01")


@dataclass(frozen=True, kw_only=True)
class Selection:
    """Which cases run: strategies x workloads x topologies, their size and how the batch scales."""

    strategies: str = option(
        "all",
        "comma-separated strategies to run; all leaves out the Lightning Trainer's, which run when named "
        "(default: %(default)s)",
    )
    models: str = option(
        "all",
        "comma-separated workloads: built-in or registered names, or a Workload class as package.module:Class "
        "(default: %(default)s)",
    )
    canaries: bool = option(
        False, "only the cases a test declares as canaries (canary=True), all of them where none is", flag=True
    )
    matrix: str | None = option(
        None,
        "default: every strategy x workload on 1x2 and the 1x1 references; full: also every strategy on "
        f"{MATRICES['full']}; smoke: every strategy on {SMOKE_MODEL} only (default: default, or the ini's "
        f"{TESTPATHS_MATRIX_INI} for a bare `pytest`)",
        choices=tuple(sorted(MATRICES)),
    )
    topologies: tuple[str, ...] | None = option(
        None, "comma-separated NxG topologies, instead of the matrix's (default: the matrix's)", check=t.topologies
    )
    preset: str = option(
        "auto", "model size preset: tiny, small, full, or auto (tiny on CPU, small on GPU) (default: %(default)s)"
    )
    scaling: str = option(
        "weak",
        "weak: fixed micro-batch per rank; strong: fixed global batch (with --scaling-global-batch); both: each "
        "case twice, the strong one as <case>-strong (default: %(default)s)",
        check=lambda name: t.one_of(name, SCALING_MODES, f"pass {name} weak, strong or both"),
    )
    global_batch: int | None = option(
        None,
        "global batch for strong scaling; every world size run must divide it (default: none)",
        check=lambda name: t.whole(name, 1),
    )


@dataclass(frozen=True, kw_only=True)
class Run:
    """How each case trains and is measured: steps, seed, dtype, data, threads per rank, the memory sampler."""

    steps: int = option(20, "measured steps per case (default: %(default)s)", check=lambda n: t.whole(n, 1))
    warmup: int = option(5, "untimed warm-up steps per case (default: %(default)s)", check=lambda n: t.whole(n, 0))
    seed: int = option(1234, "seed for weights and data (default: %(default)s)", check=t.whole)
    dtype: str = option(
        "fp32", "fp32 or bf16 (default: %(default)s)", check=lambda n: t.one_of(n, DTYPES, "pick fp32 or bf16")
    )
    data_dir: str | None = option(
        None,
        "real data instead of synthetic: a directory of MNIST idx files, SQuAD JSON and tokenizer/ (default: synthetic)",
        check=t.directory,
    )
    cpu_threads: int = option(
        1,
        "torch threads per rank on CPU: a rank is a device of this many cores (default: %(default)s)",
        check=lambda n: t.whole(n, 1),
    )
    memory_interval_ms: float = option(
        50.0,
        "memory sampler period on every rank (its cost: python -m benchmarks.sampler_overhead) (default: %(default)s)",
        check=lambda n: t.real(n, lambda v: v > 0, "must be positive", f"e.g. {n} 50"),
    )


@dataclass(frozen=True, kw_only=True)
class Execution:
    """What runs the ranks and how: the launcher, its timeout, core binding, emulated links, torch.compile,
    sequence parallel."""

    launcher: str = option(
        "warm",
        "single-node launches: warm forks each launch's fresh ranks from one preloaded torchrun agent per session "
        "(~2 s a launch); torchrun starts a cold one per launch (~6 s) (default: %(default)s)",
        choices=("warm", "torchrun"),
    )
    timeout_s: float = option(
        300.0, "seconds before a launch is killed (default: %(default)s)", check=_positive_seconds, name="timeout"
    )
    cpu_binding: bool = option(
        False,
        "CPU devices: bind each local rank's main thread to cores of its own (default: off)",
        check=t.on_off,
        metavar="{on,off}",
        shown="off",
    )
    link_rate: str = option(
        "1gbit",
        "bandwidth cap (tc tbf) on each emulated node's link, for NxG with N >= 2 on one machine "
        "(default: %(default)s)",
        check=t.link_rate,
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

    duet_address: str | None = option(
        None,
        "the gate's coordinator (unix:/path or tcp:HOST:PORT): this session's jobs pair in time with the other "
        "side's; set by the gate (default: none)",
        metavar="ADDRESS",
        name="duet",
    )
    duet_side: str = option(
        "head",
        "which side of the A/B gate this session is; set by the gate (default: %(default)s)",
        choices=DUET_SIDES,
    )
    duet_pairing: str = option(
        "duet",
        "how the two sides' jobs share the host: duet, step by step; alternate, whole jobs one at a time (one "
        "resident job); set by the gate (default: %(default)s)",
        choices=PAIRING[:2],
    )
    duet_threads: str = option(
        "auto",
        "CPU devices in a duet: bind gloo's worker threads with their rank (bound) or leave them to the "
        "scheduler (free); auto binds them except for a team's script and strategies whose card says why not "
        "(default: %(default)s)",
        choices=DUET_THREADS,
    )


@dataclass(frozen=True, kw_only=True)
class Judging:
    """How a case is judged: tolerances, noisy cases, how many launches a verdict is made of."""

    tolerance: float | None = option(
        None,
        "efficiency tolerance as a fraction, instead of the baseline's (default: the baseline's)",
        check=t.fraction,
    )
    parity_tolerance: float = option(
        policy.PARITY_TOLERANCE,
        "how far a front end's throughput may fall below ddp's in the same launch (default: %(default)s)",
        check=t.fraction,
    )
    step_time_tolerance: float | None = option(
        None,
        "A/B gate: also fail a case whose step time at its world size is this fraction slower than the base "
        "commit's (default: efficiency only)",
        check=t.fraction,
    )
    ledger_tolerance: float = option(
        policy.LEDGER_TOLERANCE,
        "how far a case's collective bytes a step, across nodes or within one, may rise above the base commit's "
        "or the baseline's before it regresses, without timing (default: %(default)s)",
        check=t.fraction,
    )
    strict: bool = option(False, "also fail cases whose timing is too noisy to judge", flag=True)
    confirm: int = option(
        1,
        "classic gate: relaunch a case and its reference this many times to confirm a timing regression "
        "(default: %(default)s)",
        check=lambda n: t.whole(n, 0, 5, "pass 0 (no relaunch) to 5"),
    )
    launches: int | None = option(
        None,
        "launch each case and its reference this many times and judge the median launch (default: 1; a training "
        "script's case in a paired A/B gate: 4 a round, pooled)",
        check=lambda n: t.whole(n, 1, 20, "pass 1 to 20; 3-5 is typical"),
    )
    reference_launches: int | None = option(
        None,
        "launches of each case's 1x1 reference a session, pooled (default: as --scaling-launches; a training "
        "script's in a paired A/B gate: 4)",
        check=lambda n: t.whole(n, 1, 20, "pass 1 to 20"),
    )
    reference_steps: int | None = option(
        None,
        "measured steps of each 1x1 reference launch (default: as --scaling-steps; a training script's in a "
        "paired A/B gate: half of them, at least 100)",
        check=lambda n: t.whole(n, 1),
    )


@dataclass(frozen=True, kw_only=True)
class Sequential:
    """The sequential gate: its same-launch reference, launch budget and error rates."""

    local_steps: int = option(
        policy.LOCAL_STEPS,
        "after each multi-rank case's measured steps, this many (distributed, local) step pairs: the same-launch "
        "reference the gate judges; 0 falls back to the separate 1x1 launch (default: %(default)s)",
        check=lambda n: t.whole(n, 0, 1000, f"pass 0 (off) or e.g. {policy.LOCAL_STEPS}"),
    )
    max_launches: int = option(
        policy.MAX_LAUNCHES,
        "launch a case again while its verdict is undecided, up to this many launches (default: %(default)s; "
        f"the gate's: {policy.GATE_MAX_LAUNCHES} rounds, a training script's {policy.SCRIPT_ROUNDS} and an alternate "
        f"pairing's {policy.ALTERNATE_ROUNDS} unless named)",
        check=lambda n: t.whole(n, 1, 20, "pass 1 to 20"),
    )
    alpha: float = option(
        policy.ALPHA,
        "false alarms the sequential gate allows when nothing changed (default: %(default)s)",
        check=_probability,
    )
    beta: float = option(
        policy.BETA,
        "misses the sequential gate allows at the drop it is built to catch (default: %(default)s)",
        check=_probability,
    )


@dataclass(frozen=True, kw_only=True)
class Baselines:
    """Where baselines are, and whether this run writes or needs them."""

    baseline_dir: str | None = option(
        None, "baseline directory (default: baselines/ beside the rootdir)", check=t.output_dir
    )
    update_baselines: bool = option(False, "write this run's measurements as baselines", flag=True)
    require_baseline: bool = option(False, "fail cases that have no baseline", flag=True)
    default_tolerance: float = option(
        policy.RECORDED_TOLERANCE, "tolerance written into new baselines (default: %(default)s)", check=t.fraction
    )


@dataclass(frozen=True, kw_only=True)
class FaultInjection:
    """FAULT INJECTION: slow or break multi-rank jobs on purpose, to watch the gates and the checks fire."""

    inject_delay_ms: float = option(
        0.0,
        "sleep this long in every step of multi-rank jobs (default: off)",
        check=lambda n: t.real(n, lambda v: 0 <= v < math.inf, "is not a delay >= 0", "pass milliseconds >= 0"),
    )
    inject_slowdown: float = option(
        0.0,
        "make every multi-rank step this fraction slower, e.g. 0.1 (default: off)",
        check=lambda n: t.real(n, lambda v: 0 <= v <= 10, "is not in [0, 10]", "e.g. 0.1 for 10% slower steps"),
    )
    inject_fault: list = option(
        [],
        f"repeatable: {FAULT_SYNTAX}; steps count from 0, warm-up included (default: off)",
        check=t.faults,
        repeat=True,
        metavar="FAULT",
    )


@dataclass(frozen=True, kw_only=True)
class Output:
    """What a run writes beside its verdicts: results, profiler traces, a checkpoint window, TensorBoard scalars."""

    results_dir: str = option("results", "where each run's results go (default: %(default)s)", check=t.output_dir)
    profile: bool = option(
        False,
        "after each case's measured steps, profile a few more and write a Chrome trace per rank to "
        "<case dir>/profile/ (default: off)",
        flag=True,
    )
    profile_steps: int | None = option(
        None,
        f"profiled steps per case with --scaling-profile (default: {PROFILE_STEPS})",
        check=lambda n: t.whole(n, 1, 100, f"pass a few steps (default {PROFILE_STEPS}): traces grow with every step"),
    )
    checkpoint: bool = option(
        False,
        "after each case's other windows, save and load a checkpoint, time both and check that training resumes "
        "as if it had not stopped (default: off)",
        flag=True,
    )
    tensorboard: Path | None = option(
        None,
        "write each case's loss, step times, throughput, efficiency and memory as TensorBoard scalars under "
        "DIR/<run id>/<case id> (default: off)",
        check=t.tensorboard_dir,
        metavar="DIR",
    )


SECTIONS = (Selection, Run, Execution, Duet, Judging, Sequential, Baselines, FaultInjection, Output)


@dataclass(frozen=True, kw_only=True)
class Recorded:
    """The tolerances a command writes into new baselines (update-baselines, record-baselines): no prefix."""

    tolerance: float = option(
        policy.RECORDED_TOLERANCE, "efficiency tolerance to record (default: %(default)s)", check=t.fraction
    )
    local_tolerance: float = option(
        policy.RECORDED_TOLERANCE,
        "the drop the sequential gate must catch, recorded with the local efficiency (default: %(default)s)",
        check=t.fraction,
    )
