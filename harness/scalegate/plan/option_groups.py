"""The option groups, each declared once: ``add_<group>_options(addoption, prefix="scaling-")``.

As pytest-benchmark declares its display options once for its plugin and its CLI, each group here takes the
``addoption`` to call (pytest's ``group.addoption`` or argparse's ``add_argument``) and the prefix of its names.
The plugin declares every group with ``scaling-`` (``add_scaling_options``); the CLI's commands that write
baselines declare ``add_recorded_tolerance_options`` with no prefix. Every value is checked by its ``type=``
callable (plan/option_types.py) as it is read; plan/options.py builds the frozen ``Options`` from them.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from scalegate.contract.spec import DUET_THREADS, FAULT_SYNTAX
from scalegate.plan import option_types as t

AddOption = Callable[..., Any]  # pytest's OptionGroup.addoption or argparse's add_argument

# The default matrix: every strategy x workload on 1x2 plus the single 1x1 references (the main job, the nightly).
# --scaling-matrix full adds 1x1 for every strategy, 1x4 and emulated 2x1, 2x2. smoke: every strategy once, on
# SMOKE_MODEL only, on the default matrix's topologies: what a bare `pytest` runs in a repository whose pytest.ini
# sets `scaling_testpaths_matrix = smoke` (this one's: the harness's own tests, docs/testing.md).
MATRICES = {"default": "1x1,1x2", "full": "1x1,1x2,1x4,2x1,2x2", "smoke": "1x1,1x2"}
SMOKE_MODEL = "cnn"  # the cheapest built-in: a smoke case costs its launch, not its steps
TESTPATHS_MATRIX_INI = "scaling_testpaths_matrix"
PROFILE_STEPS = 3  # --scaling-profile's default window: enough steps to see one repeat, a small trace
# The same-launch reference and the sequential gate (docs/gate.md, docs/detection.md): 40 pairs give a
# launch-to-launch spread of ~2% on the 2-core VMs (20 pairs: ~4.5%); a 10% drop, 1% false alarms, 5% misses.
LOCAL_STEPS = 40
MAX_LAUNCHES = 4
ALPHA, BETA = 0.01, 0.05
PARITY_TOLERANCE = 0.10  # a front end (fabric-ddp, lightning-ddp) may fall this far below ddp's throughput
RECORDED_TOLERANCE = 0.10  # written into new baselines: 5% raised false alarms on the 2-core VMs (detection.md)
DTYPES = ("fp32", "bf16")
SCALING_MODES = ("weak", "strong", "both")


def add_selection_options(addoption: AddOption, prefix: str = "scaling-") -> None:
    """Which cases run: strategies x workloads x topologies, their size and how the batch scales."""
    addoption(
        f"--{prefix}strategies",
        default="all",
        help="comma-separated strategies to run (default: %(default)s; "
        "all leaves out lightning-ddp, lightning-fsdp and lightning-deepspeed, which run when named)",
    )
    addoption(
        f"--{prefix}models",
        default="all",
        help="comma-separated workloads to run: built-in or registered names, or a Workload class as "
        "package.module:Class (docs/your-model.md) (default: %(default)s)",
    )
    addoption(
        f"--{prefix}canaries",
        action="store_true",
        help="only the cases a test declares as canaries (scaling_script(..., canary=True)); all of them where none "
        "is declared. `python -m scalegate gate` passes it in a repository that names nothing else to run",
    )
    addoption(
        f"--{prefix}matrix",
        default=None,
        choices=sorted(MATRICES),
        help="default: every strategy x workload on 1x2 plus the single 1x1 references; full: also every strategy "
        f"on {MATRICES['full']}; smoke: every strategy on {SMOKE_MODEL} only, on the default topologies "
        f"(default: default; a bare `pytest`, run from the ini's testpaths, takes the ini's {TESTPATHS_MATRIX_INI})",
    )
    addoption(
        f"--{prefix}topologies",
        type=t.topologies(f"--{prefix}topologies"),
        default=None,
        help="comma-separated NxG topologies, overriding the matrix's (default: the matrix's)",
    )
    addoption(
        f"--{prefix}preset",
        default="auto",
        help="model size preset: tiny, small, full, or auto = tiny without a GPU, small with one (default: %(default)s)",
    )
    addoption(
        f"--{prefix}scaling",
        type=t.one_of(
            f"--{prefix}scaling",
            SCALING_MODES,
            f"pass --{prefix}scaling weak (default), strong or both, with --{prefix}global-batch N for strong and both",
        ),
        default="weak",
        help=f"weak: fixed micro-batch per rank; strong: fixed global batch (needs --{prefix}global-batch); both: "
        "every case twice, side by side, the strong one as <case>-strong (default: %(default)s)",
    )
    addoption(
        f"--{prefix}global-batch",
        type=t.whole(f"--{prefix}global-batch", 1),
        default=None,
        help=f"global batch for --{prefix}scaling strong; must divide by every world size run (default: none)",
    )


def add_run_options(addoption: AddOption, prefix: str = "scaling-") -> None:
    """How each case trains and is measured: steps, seed, dtype, data, threads per rank, the memory sampler."""
    addoption(
        f"--{prefix}steps",
        type=t.whole(f"--{prefix}steps", 1),
        default=20,
        help="measured steps per case (default: %(default)s)",
    )
    addoption(
        f"--{prefix}warmup",
        type=t.whole(f"--{prefix}warmup", 0),
        default=5,
        help="untimed warm-up steps per case (default: %(default)s)",
    )
    addoption(
        f"--{prefix}seed",
        type=t.whole(f"--{prefix}seed"),
        default=1234,
        help="seed for weights and data (default: %(default)s)",
    )
    addoption(
        f"--{prefix}dtype",
        type=t.one_of(f"--{prefix}dtype", DTYPES, "pick fp32 or bf16"),
        default="fp32",
        help="fp32 or bf16 (default: %(default)s)",
    )
    addoption(
        f"--{prefix}data-dir",
        type=t.directory(f"--{prefix}data-dir"),
        default=None,
        help="read real data from this directory instead of synthetic data: "
        "MNIST idx files, SQuAD JSON + tokenizer/ (default: synthetic)",
    )
    addoption(
        f"--{prefix}cpu-threads",
        type=t.whole(f"--{prefix}cpu-threads", 1),
        default=1,
        help="torch threads per rank on CPU: one rank is one 'device' of this many cores (default: %(default)s)",
    )
    addoption(
        f"--{prefix}memory-interval-ms",
        type=t.real(
            f"--{prefix}memory-interval-ms",
            lambda v: v > 0,
            "must be positive",
            f"e.g. --{prefix}memory-interval-ms 50",
        ),
        default=50.0,
        help="memory sampler period on every rank; its cost is measured by benchmarks/sampler_overhead.py "
        "(default: %(default)s)",
    )


def add_execution_options(addoption: AddOption, prefix: str = "scaling-") -> None:
    """What runs the ranks and how: the launcher, its timeout, core binding, emulated links, torch.compile,
    sequence parallel."""
    addoption(
        f"--{prefix}launcher",
        default="warm",
        choices=("warm", "torchrun"),
        help="single-node launches: warm = one torchrun agent per session forks each launch's fresh ranks from a "
        "preloaded forkserver (~2 s a launch); torchrun = a cold torchrun per launch (~6 s) (default: %(default)s)",
    )
    addoption(
        f"--{prefix}timeout",
        type=t.real(
            f"--{prefix}timeout",
            lambda v: 0 < v < math.inf,  # nan and inf fail too
            "must be a positive number of seconds",
            f"e.g. --{prefix}timeout 300",
        ),
        default=300.0,
        help="seconds before a case is killed (default: %(default)s)",
    )
    addoption(
        f"--{prefix}cpu-binding",
        default="off",
        choices=("on", "off"),
        help="CPU devices: bind each local rank's main thread to cores of its own (harness/scalegate/contract/affinity.py); "
        "faster, steadier DDP, but a process group created later shares the rank's core (default: %(default)s)",
    )
    addoption(
        f"--{prefix}duet-threads",
        default="auto",
        choices=DUET_THREADS,
        help="CPU devices, a gate --base duet: bind gloo's worker threads with their rank (bound), or leave them to "
        "the scheduler (free); auto binds them except for a team's script and where the strategy's card says why "
        "not, as zero1-torch's and ZeRO-3's do (harness/scalegate/contract/affinity.py; default: %(default)s)",
    )
    addoption(
        f"--{prefix}link-rate",
        type=t.link_rate(f"--{prefix}link-rate"),
        default="1gbit",
        help="bandwidth cap (tc tbf) on each emulated node's link, for NxG with N >= 2 on one machine; "
        "below the intra-node rate on purpose, as on a cluster (default: %(default)s)",
    )
    addoption(
        f"--{prefix}compile",
        action="store_true",
        default=False,
        help="run each workload block under torch.compile (single, ddp, fsdp, hsdp, zero1-torch, tp, fsdp-tp); "
        "compile time is reported apart from step time; baselines keyed '<case>:<preset>+compile' (default: off)",
    )
    addoption(
        f"--{prefix}tp-sequence-parallel",
        action="store_true",
        default=False,
        help="tp, fsdp-tp: shard the norms along the sequence (SequenceParallel), so the row-wise all-reduces become "
        "reduce-scatters and the column-wise inputs all-gathers (default: off)",
    )


def add_gate_options(addoption: AddOption, prefix: str = "scaling-") -> None:
    """How a case is judged: tolerances, noisy cases, and how many launches a verdict may take."""
    addoption(
        f"--{prefix}tolerance",
        type=t.fraction(f"--{prefix}tolerance"),
        default=None,
        help="efficiency tolerance as a fraction; overrides the baseline's own (default: the baseline's)",
    )
    addoption(
        f"--{prefix}parity-tolerance",
        type=t.fraction(f"--{prefix}parity-tolerance"),
        default=PARITY_TOLERANCE,
        help="parity (harness/scalegate/parity.py): how far a front end's throughput may fall below ddp's in the same launch, "
        "as a fraction (default: %(default)s)",
    )
    addoption(
        f"--{prefix}step-time-tolerance",
        type=t.fraction(f"--{prefix}step-time-tolerance"),
        default=None,
        help="A/B duet (gate --base): also fail a case whose step time at its world size is this fraction slower "
        "than the base commit's, step by step (a slower model on one process too: efficiency alone does not "
        "move); default: efficiency only",
    )
    addoption(f"--{prefix}strict", action="store_true", help="also fail cases whose timing is too noisy to judge")
    addoption(
        f"--{prefix}confirm",
        type=t.whole(f"--{prefix}confirm", 0, 5, "pass 0 (no relaunch) to 5; the default is 1"),
        default=1,
        help="relaunch a case (and its reference) this many times to confirm a timing regression before "
        "failing; 0 judges the first launch alone (default: %(default)s)",
    )
    addoption(
        f"--{prefix}launches",
        type=t.whole(f"--{prefix}launches", 1, 20, "pass 1 (one launch) to 20; 3-5 is typical"),
        default=None,
        help="launch each case and its reference this many times and judge the median launch, with the spread "
        "between launches as its noise; 3-5 make timing verdicts trustworthy on shared hosts (default: 1; a "
        "training script's case in an A/B duet: 4 a round, pooled, docs/duet.md)",
    )
    addoption(
        f"--{prefix}reference-launches",
        type=t.whole(f"--{prefix}reference-launches", 1, 20, "pass 1 to 20; 4 for a training script's A/B duet"),
        default=None,
        help="launch each case's 1x1 reference this many times a session, pooled (an A/B duet pairs them launch by "
        "launch: a 1x1 launch keeps a level of its own, docs/duet.md); default: as --scaling-launches",
    )
    addoption(
        f"--{prefix}reference-steps",
        type=t.whole(f"--{prefix}reference-steps", 1),
        default=None,
        help="measured steps of each 1x1 reference launch, where they should differ from the case's (docs/duet.md); "
        "default: as --scaling-steps, except a training script's in a duet: half of them, at least 100",
    )


def add_sequential_options(addoption: AddOption, prefix: str = "scaling-") -> None:
    """The sequential gate (docs/gate.md): its same-launch reference, launch budget and error rates."""
    addoption(
        f"--{prefix}local-steps",
        type=t.whole(
            f"--{prefix}local-steps",
            0,
            1000,
            f"pass 0 (off: the separate 1x1 launch is the reference) or e.g. {LOCAL_STEPS}",
        ),
        default=LOCAL_STEPS,
        help="after each multi-rank case's measured steps, this many (distributed step, local step) pairs: the "
        "same-launch reference the gate judges (docs/gate.md); 0 = off, the gate falls back to the separate "
        "1x1 launch (default: %(default)s)",
    )
    addoption(
        f"--{prefix}max-launches",
        type=t.whole(
            f"--{prefix}max-launches",
            1,
            20,
            f"pass 1 (judge what the first launches say) to 20; the default is {MAX_LAUNCHES}",
        ),
        default=MAX_LAUNCHES,
        help="sequential verdicts: launch a case again while its verdict is undecided, up to this many launches "
        "(default: %(default)s; the gate's: 8 rounds, a training script's duet 7 unless this is named)",
    )
    for name, default, text in (
        ("alpha", ALPHA, "false alarms the sequential gate allows when nothing changed (default: %(default)s)"),
        (
            "beta",
            BETA,
            "misses the sequential gate allows at a drop of the baseline's local_efficiency tolerance, the drop it "
            "is built to catch (docs/gate.md) (default: %(default)s)",
        ),
    ):
        addoption(
            f"--{prefix}{name}",
            type=t.real(
                f"--{prefix}{name}",
                lambda v: 0 < v < 0.5,
                "is not a probability in (0, 0.5)",
                f"e.g. --{prefix}alpha {ALPHA} --{prefix}beta {BETA}",
            ),
            default=default,
            help=text,
        )


def add_baseline_options(addoption: AddOption, prefix: str = "scaling-") -> None:
    """Where baselines are and when this run writes or needs them."""
    addoption(
        f"--{prefix}baseline-dir", default=None, help="baseline directory (default: baselines/ beside conftest.py)"
    )
    addoption(f"--{prefix}update-baselines", action="store_true", help="write this run's measurements as baselines")
    addoption(f"--{prefix}require-baseline", action="store_true", help="fail cases that have no baseline")
    addoption(
        f"--{prefix}default-tolerance",
        type=t.fraction(f"--{prefix}default-tolerance"),
        default=RECORDED_TOLERANCE,
        help="tolerance written into new baselines (default: %(default)s)",
    )


def add_fault_options(addoption: AddOption, prefix: str = "scaling-") -> None:
    """FAULT INJECTION: slow or break multi-rank jobs on purpose, to watch the gate and the checks fire."""
    addoption(
        f"--{prefix}inject-delay-ms",
        type=t.real(
            f"--{prefix}inject-delay-ms",
            lambda v: 0 <= v < math.inf,
            "is not a delay >= 0",
            "pass a delay in milliseconds >= 0",
        ),
        default=0.0,
        help="FAULT INJECTION: sleep this long in every step of multi-rank jobs (default: off)",
    )
    addoption(
        f"--{prefix}inject-slowdown",
        type=t.real(
            f"--{prefix}inject-slowdown",
            lambda v: 0 <= v <= 10,
            "is not in [0, 10]",
            "pass a fraction, e.g. 0.1 for 10% slower steps",
        ),
        default=0.0,
        help="FAULT INJECTION: make every multi-rank step this fraction slower, e.g. 0.1 (default: off)",
    )
    addoption(
        f"--{prefix}inject-fault",
        type=t.faults(f"--{prefix}inject-fault"),
        action="append",
        default=[],
        metavar="FAULT",
        help=f"FAULT INJECTION, repeatable: {FAULT_SYNTAX}; steps count from 0, warm-up included (default: off)",
    )


def add_output_options(addoption: AddOption, prefix: str = "scaling-") -> None:
    """What a run writes beside its verdicts: results, profiler traces, a checkpoint window, TensorBoard scalars."""
    addoption(f"--{prefix}results-dir", default="results", help="where each run's results go (default: %(default)s)")
    addoption(
        f"--{prefix}profile",
        action="store_true",
        help="after each case's measured steps, run a few more under torch.profiler and write a Chrome trace per "
        "rank to <case dir>/profile/rank<R>.json.gz; the measured steps are not profiled (default: off)",
    )
    addoption(
        f"--{prefix}profile-steps",
        type=t.whole(
            f"--{prefix}profile-steps",
            1,
            100,
            f"pass a few steps (default {PROFILE_STEPS}): traces grow with every step",
        ),
        default=None,
        help=f"profiled steps per case with --{prefix}profile, after one untraced profiler warm-up step "
        f"(default: {PROFILE_STEPS})",
    )
    addoption(
        f"--{prefix}checkpoint",
        action="store_true",
        default=False,
        help="after each case's other windows, save and load a checkpoint (torch.distributed.checkpoint; DeepSpeed's "
        "own for ZeRO) into <case dir>/checkpoint, time both and check that training resumed from it matches "
        "training that did not stop; off by default: it adds a save, a load and two steps to every launch "
        "(docs/checkpoints.md) (default: off)",
    )
    addoption(
        f"--{prefix}tensorboard",
        type=t.tensorboard_dir(f"--{prefix}tensorboard"),
        default=None,
        metavar="DIR",
        help="write each case's loss, step times, throughput, efficiency, peak memory per rank and bytes per step "
        "as TensorBoard scalars under DIR/<run id>/<case id>; needs tensorboard (pip install -e .[report]) "
        "(default: off)",
    )


PLUGIN_GROUPS = (
    add_selection_options,
    add_run_options,
    add_execution_options,
    add_gate_options,
    add_sequential_options,
    add_baseline_options,
    add_fault_options,
    add_output_options,
)


def add_scaling_options(addoption: AddOption, prefix: str = "scaling-") -> None:
    """Every group the pytest plugin declares (plan/options.py reads them back by their ``scaling_`` names)."""
    for add_group in PLUGIN_GROUPS:
        add_group(addoption, prefix=prefix)


def add_recorded_tolerance_options(addoption: AddOption, prefix: str = "") -> None:
    """The tolerances a command writes into new baselines: ``update-baselines`` and ``record-baselines``."""
    addoption(
        f"--{prefix}tolerance",
        type=t.fraction(f"--{prefix}tolerance"),
        default=RECORDED_TOLERANCE,
        help="efficiency tolerance to record (default: %(default)s)",
    )
    addoption(
        f"--{prefix}local-tolerance",
        type=t.fraction(f"--{prefix}local-tolerance"),
        default=RECORDED_TOLERANCE,
        help="the drop the sequential gate must catch, recorded with the local efficiency (default: %(default)s)",
    )
