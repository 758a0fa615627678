"""Every ``--scaling-*`` option, declared once: a section (a dataclass) per group, a field per option.

A field's default is the option's; ``option(...)`` (contract/option.py) holds its help, its check and how it is read.
The sections a case carries to its ranks (``Run``, ``Execution``, ``Duet``, the faults) are contract/'s, so the ranks
read the same declarations; the others are here. The plugin declares ``SECTIONS`` with the prefix ``scaling-``, the
gate declares them again to read what it passes on, and docs/options.md is written from them (cli/reference.py).
plan/options.py turns the sections into the session's ``Options``. Tuned defaults come from scalegate/policy.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scalegate import policy
from scalegate.contract.faults import FAULT_SYNTAX, Faults
from scalegate.contract.option import FRACTION, OneOf, Real, Whole, option
from scalegate.contract.sections import Duet, Execution, Run
from scalegate.plan import option_types as t

# --scaling-matrix: default, every strategy x workload on 1x2 plus the single 1x1 references; full adds 1x1 for every
# strategy, 1x4 and emulated 2x1, 2x2; smoke, every strategy once on SMOKE_MODEL (a bare `pytest` in a repository
# whose pytest.ini sets `scaling_testpaths_matrix = smoke`, as this one does).
MATRICES = {"default": "1x1,1x2", "full": "1x1,1x2,1x4,2x1,2x2", "smoke": "1x1,1x2"}
SMOKE_MODEL = "cnn"  # the cheapest built-in: a smoke case costs its launch, not its steps
TESTPATHS_MATRIX_INI = "scaling_testpaths_matrix"
PROFILE_STEPS = 3  # --scaling-profile's window: enough steps to see one repeat, a small trace
SCALING_MODES = ("weak", "strong", "both")
PROBABILITY = Real(lambda v: 0 < v < 0.5, "is not a probability in (0, 0.5)", "e.g. {option} 0.01")


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
        None,
        "comma-separated NxG topologies, instead of the matrix's (default: the matrix's)",
        check=t.Text(t.topologies),
    )
    preset: str = option(
        "auto", "model size preset: tiny, small, full, or auto (tiny on CPU, small on GPU) (default: %(default)s)"
    )
    scaling: str = option(
        "weak",
        "weak: fixed micro-batch per rank; strong: fixed global batch (with --scaling-global-batch); both: each "
        "case twice, the strong one as <case>-strong (default: %(default)s)",
        check=OneOf(SCALING_MODES, "pass {option} weak, strong or both"),
    )
    global_batch: int | None = option(
        None,
        "global batch for strong scaling; every world size run must divide it (default: none)",
        check=Whole(1),
    )


@dataclass(frozen=True, kw_only=True)
class Launching:
    """What starts each launch's ranks and what they read: the launcher, the emulated nodes' links, real data."""

    launcher: str = option(
        "warm",
        "single-node launches: warm forks each launch's fresh ranks from one preloaded torchrun agent per session "
        "(~2 s a launch); torchrun starts a cold one per launch (~6 s) (default: %(default)s)",
        choices=("warm", "torchrun"),
    )
    link_rate: str = option(
        "1gbit",
        "bandwidth cap (tc tbf) on each emulated node's link, for NxG with N >= 2 on one machine "
        "(default: %(default)s)",
        check=t.Text(t.link_rate),
    )
    data_dir: str | None = option(
        None,
        "real data instead of synthetic: a directory of MNIST idx files, SQuAD JSON and tokenizer/ (default: synthetic)",
        check=t.Text(t.directory),
    )


@dataclass(frozen=True, kw_only=True)
class Judging:
    """How a case is judged: tolerances, noisy cases, how many launches a verdict is made of."""

    tolerance: float | None = option(
        None,
        "efficiency tolerance as a fraction, instead of the baseline's (default: the baseline's)",
        check=FRACTION,
    )
    parity_tolerance: float = option(
        policy.PARITY_TOLERANCE,
        "how far a front end's throughput may fall below ddp's in the same launch (default: %(default)s)",
        check=FRACTION,
    )
    step_time_tolerance: float | None = option(
        None,
        "A/B gate: also fail a case whose step time at its world size is this fraction slower than the base "
        "commit's (default: efficiency only)",
        check=FRACTION,
    )
    ledger_tolerance: float = option(
        policy.LEDGER_TOLERANCE,
        "how far a case's collective bytes a step, across nodes or within one, may rise above the base commit's "
        "or the baseline's before it regresses, without timing (default: %(default)s)",
        check=FRACTION,
    )
    strict: bool = option(False, "also fail cases whose timing is too noisy to judge", flag=True)
    confirm: int = option(
        1,
        "classic gate: relaunch a case and its reference this many times to confirm a timing regression "
        "(default: %(default)s)",
        check=Whole(0, 5, "pass 0 (no relaunch) to 5"),
    )
    launches: int | None = option(
        None,
        "launch each case and its reference this many times and judge the median launch (default: 1; a training "
        "script's case in a paired A/B gate: 4 a round, pooled)",
        check=Whole(1, 20, "pass 1 to 20; 3-5 is typical"),
    )
    reference_launches: int | None = option(
        None,
        "launches of each case's 1x1 reference a session, pooled (default: as --scaling-launches; a training "
        "script's in a paired A/B gate: 4)",
        check=Whole(1, 20, "pass 1 to 20"),
    )
    reference_steps: int | None = option(
        None,
        "measured steps of each 1x1 reference launch (default: as --scaling-steps; a training script's in a "
        "paired A/B gate: half of them, at least 100)",
        check=Whole(1),
    )


@dataclass(frozen=True, kw_only=True)
class Sequential:
    """The sequential gate: its same-launch reference, launch budget and error rates."""

    local_steps: int = option(
        policy.LOCAL_STEPS,
        "after each multi-rank case's measured steps, this many (distributed, local) step pairs: the same-launch "
        "reference the gate judges; 0 falls back to the separate 1x1 launch (default: %(default)s)",
        check=Whole(0, 1000, f"pass 0 (off) or e.g. {policy.LOCAL_STEPS}"),
    )
    max_launches: int = option(
        policy.MAX_LAUNCHES,
        "launch a case again while its verdict is undecided, up to this many launches (default: %(default)s; "
        f"the gate's: {policy.GATE_MAX_LAUNCHES} rounds, a training script's {policy.SCRIPT_ROUNDS} and an alternate "
        f"pairing's {policy.ALTERNATE_ROUNDS} unless named)",
        check=Whole(1, 20, "pass 1 to 20"),
    )
    alpha: float = option(
        policy.ALPHA,
        "false alarms the sequential gate allows when nothing changed (default: %(default)s)",
        check=PROBABILITY,
    )
    beta: float = option(
        policy.BETA,
        "misses the sequential gate allows at the drop it is built to catch (default: %(default)s)",
        check=PROBABILITY,
    )


@dataclass(frozen=True, kw_only=True)
class Baselines:
    """Where baselines are, and whether this run writes or needs them."""

    baseline_dir: str | None = option(
        None, "baseline directory (default: baselines/ beside the rootdir)", check=t.Text(t.output_dir)
    )
    update_baselines: bool = option(False, "write this run's measurements as baselines", flag=True)
    require_baseline: bool = option(False, "fail cases that have no baseline", flag=True)
    default_tolerance: float = option(
        policy.RECORDED_TOLERANCE, "tolerance written into new baselines (default: %(default)s)", check=FRACTION
    )


@dataclass(frozen=True, kw_only=True)
class FaultInjection(Faults):
    """FAULT INJECTION: slow or break multi-rank jobs on purpose, to watch the gates and the checks fire."""

    # the faults' own options (--scaling-inject-delay-ms, --scaling-inject-slowdown: contract/faults.py), then the
    # others' text, which sets the session's faults (plan/options.py)
    inject_fault: list = option(
        [],
        f"repeatable: {FAULT_SYNTAX}; steps count from 0, warm-up included (default: off)",
        check=t.Text(t.faults),
        repeat=True,
        metavar="FAULT",
    )


@dataclass(frozen=True, kw_only=True)
class Output:
    """What a run writes beside its verdicts: results, profiler traces, a checkpoint window, TensorBoard scalars."""

    results_dir: str = option(
        "results", "where each run's results go (default: %(default)s)", check=t.Text(t.output_dir)
    )
    profile: bool = option(
        False,
        "after each case's measured steps, profile a few more and write a Chrome trace per rank to "
        "<case dir>/profile/ (default: off)",
        flag=True,
    )
    profile_steps: int | None = option(
        None,
        f"profiled steps per case with --scaling-profile (default: {PROFILE_STEPS})",
        check=Whole(1, 100, f"pass a few steps (default {PROFILE_STEPS}): traces grow with every step"),
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
        check=t.Text(t.tensorboard_dir),
        metavar="DIR",
    )


SECTIONS = (Selection, Run, Execution, Launching, Duet, Judging, Sequential, Baselines, FaultInjection, Output)


@dataclass(frozen=True, kw_only=True)
class Recorded:
    """The tolerances a command writes into new baselines (update-baselines, record-baselines): no prefix."""

    tolerance: float = option(
        policy.RECORDED_TOLERANCE, "efficiency tolerance to record (default: %(default)s)", check=FRACTION
    )
    local_tolerance: float = option(
        policy.DETECT,
        "the drop the sequential gate must catch, recorded with the local efficiency (default: %(default)s)",
        check=FRACTION,
    )
