"""The ``--scaling-*`` options, parsed once into a frozen ``Options`` (errors name the option)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from scalegate.contract.errors import SpecError
from scalegate.contract.spec import FAULT_SYNTAX, SCALINGS, parse_fault
from scalegate.contract.topology import Topology
from scalegate.plan.catalog import Registered

if TYPE_CHECKING:
    from scalegate.plan.catalog import Catalog

# The default matrix keeps CI inside its budget: every strategy x workload on 1x2 plus the single
# 1x1 references. --scaling-matrix full adds 1x1 for every strategy, 1x4 and emulated 2x1, 2x2.
MATRICES = {"default": "1x1,1x2", "full": "1x1,1x2,1x4,2x1,2x2"}
PROFILE_STEPS = 3  # --scaling-profile's default window: enough steps to see one repeat, a small trace
# The same-launch reference and the sequential gate (docs/gate.md, docs/detection.md): 40 pairs give a
# launch-to-launch spread of ~2% on the 2-core VMs (20 pairs: ~4.5%); a 10% drop, 1% false alarms, 5% misses.
LOCAL_STEPS = 40
MAX_LAUNCHES = 4
ALPHA, BETA = 0.01, 0.05


def add_options(parser) -> None:
    group = parser.getgroup("scaling", "scalegate scaling benchmarks")
    add = group.addoption
    add(
        "--scaling-strategies",
        default="all",
        help="comma-separated strategies to run (default: %(default)s; "
        "all leaves out lightning-ddp, lightning-fsdp and lightning-deepspeed, which run when named)",
    )
    add(
        "--scaling-models",
        default="all",
        help="comma-separated workloads to run: built-in or registered names, or a Workload class as "
        "package.module:Class (docs/your-model.md) (default: %(default)s)",
    )
    add(
        "--scaling-matrix",
        default="default",
        choices=sorted(MATRICES),
        help="default: every strategy x workload on 1x2 plus the single 1x1 references; full: also every strategy "
        f"on {MATRICES['full']} (default: %(default)s)",
    )
    add(
        "--scaling-topologies",
        default=None,
        help="comma-separated NxG topologies, overriding the matrix's (default: the matrix's)",
    )
    add(
        "--scaling-preset",
        default="auto",
        help="model size preset: tiny, small, full, or auto = tiny without a GPU, "
        "small with one (default: %(default)s)",
    )
    add("--scaling-steps", type=int, default=20, help="measured steps per case (default: %(default)s)")
    add("--scaling-warmup", type=int, default=5, help="untimed warm-up steps per case (default: %(default)s)")
    add(
        "--scaling-tolerance",
        type=float,
        default=None,
        help="efficiency tolerance as a fraction; overrides the baseline's own (default: the baseline's)",
    )
    add(
        "--scaling-default-tolerance",
        type=float,
        default=0.10,
        help="tolerance written into new baselines (default: %(default)s)",
    )
    add("--scaling-results-dir", default="results", help="where each run's results go (default: %(default)s)")
    add(
        "--scaling-data-dir",
        default=None,
        help="read real data from this directory instead of synthetic data: "
        "MNIST idx files, SQuAD JSON + tokenizer/ (default: synthetic)",
    )
    add("--scaling-baseline-dir", default=None, help="baseline directory (default: baselines/ beside conftest.py)")
    add("--scaling-update-baselines", action="store_true", help="write this run's measurements as baselines")
    add("--scaling-require-baseline", action="store_true", help="fail cases that have no baseline")
    add("--scaling-strict", action="store_true", help="also fail cases whose timing is too noisy to judge")
    add(
        "--scaling-confirm",
        type=int,
        default=1,
        help="relaunch a case (and its reference) this many times to confirm a timing regression before "
        "failing; 0 judges the first launch alone (default: %(default)s)",
    )
    add(
        "--scaling-launches",
        type=int,
        default=1,
        help="launch each case and its reference this many times and judge the median launch, with the spread "
        "between launches as its noise; 3-5 make timing verdicts trustworthy on shared hosts (default: %(default)s)",
    )
    add(
        "--scaling-cpu-binding",
        default="off",
        choices=("on", "off"),
        help="CPU devices: bind each local rank's main thread to cores of its own (harness/contract/affinity.py); faster, "
        "steadier DDP, but a process group created later shares the rank's core (default: %(default)s)",
    )
    add(
        "--scaling-compile",
        action="store_true",
        default=False,
        help="run each workload block under torch.compile (single, ddp, fsdp, hsdp, zero1-torch, tp, fsdp-tp); "
        "compile time is reported apart from step time; baselines keyed '<case>:<preset>+compile' (default: off)",
    )
    add(
        "--scaling-tp-sequence-parallel",
        action="store_true",
        default=False,
        help="tp, fsdp-tp: shard the norms along the sequence (SequenceParallel), so the row-wise all-reduces become "
        "reduce-scatters and the column-wise inputs all-gathers (default: off)",
    )
    add("--scaling-timeout", type=float, default=300.0, help="seconds before a case is killed (default: %(default)s)")
    add(
        "--scaling-cpu-threads",
        type=int,
        default=1,
        help="torch threads per rank on CPU: one rank is one 'device' of this many cores (default: %(default)s)",
    )
    add("--scaling-seed", type=int, default=1234, help="seed for weights and data (default: %(default)s)")
    add("--scaling-dtype", default="fp32", help="fp32 or bf16 (default: %(default)s)")
    add(
        "--scaling-memory-interval-ms",
        type=float,
        default=50.0,
        help="memory sampler period on every rank; its cost is measured by benchmarks/sampler_overhead.py "
        "(default: %(default)s)",
    )
    add(
        "--scaling-link-rate",
        default="1gbit",
        help="bandwidth cap (tc tbf) on each emulated node's link, for NxG with N >= 2 on one machine; "
        "below the intra-node rate on purpose, as on a cluster (default: %(default)s)",
    )
    add(
        "--scaling-inject-delay-ms",
        type=float,
        default=0.0,
        help="FAULT INJECTION: sleep this long in every step of multi-rank jobs (default: off)",
    )
    add(
        "--scaling-inject-slowdown",
        type=float,
        default=0.0,
        help="FAULT INJECTION: make every multi-rank step this fraction slower, e.g. 0.1 (default: off)",
    )
    add(
        "--scaling-inject-fault",
        action="append",
        default=[],
        metavar="FAULT",
        help=f"FAULT INJECTION, repeatable: {FAULT_SYNTAX}; steps count from 0, warm-up included (default: off)",
    )
    add(
        "--scaling-scaling",
        default="weak",
        help="weak: fixed micro-batch per rank; strong: fixed global batch "
        "(needs --scaling-global-batch); both: every case twice, side by "
        "side, the strong one as <case>-strong (default: %(default)s)",
    )
    add(
        "--scaling-global-batch",
        type=int,
        default=None,
        help="global batch for --scaling-scaling strong; must divide by every world size run (default: none)",
    )
    add(
        "--scaling-profile",
        action="store_true",
        help="after each case's measured steps, run a few more under torch.profiler and write a Chrome trace per "
        "rank to <case dir>/profile/rank<R>.json.gz; the measured steps are not profiled (default: off)",
    )
    add(
        "--scaling-profile-steps",
        type=int,
        default=None,
        help=f"profiled steps per case with --scaling-profile, after one untraced profiler warm-up step "
        f"(default: {PROFILE_STEPS})",
    )
    add(
        "--scaling-checkpoint",
        action="store_true",
        default=False,
        help="after each case's other windows, save and load a checkpoint (torch.distributed.checkpoint; DeepSpeed's "
        "own for ZeRO) into <case dir>/checkpoint, time both and check that training resumed from it matches "
        "training that did not stop; off by default: it adds a save, a load and two steps to every launch "
        "(docs/checkpoints.md) (default: off)",
    )
    add(
        "--scaling-launcher",
        default="warm",
        choices=("warm", "torchrun"),
        help="single-node launches: warm = one torchrun agent per session forks each launch's fresh ranks from a "
        "preloaded forkserver (~2 s a launch); torchrun = a cold torchrun per launch (~6 s) (default: %(default)s)",
    )
    add(
        "--scaling-local-steps",
        type=int,
        default=LOCAL_STEPS,
        help="after each multi-rank case's measured steps, this many (distributed step, local step) pairs: the "
        "same-launch reference the gate judges (docs/gate.md); 0 = off, the gate falls back to the separate "
        "1x1 launch (default: %(default)s)",
    )
    add(
        "--scaling-max-launches",
        type=int,
        default=MAX_LAUNCHES,
        help="sequential verdicts: launch a case again while its verdict is undecided, up to this many launches "
        "(default: %(default)s)",
    )
    add(
        "--scaling-alpha",
        type=float,
        default=ALPHA,
        help="false alarms the sequential gate allows when nothing changed (default: %(default)s)",
    )
    add(
        "--scaling-beta",
        type=float,
        default=BETA,
        help="misses the sequential gate allows at a drop of the baseline's local_efficiency tolerance, the drop it "
        "is built to catch (docs/gate.md) (default: %(default)s)",
    )
    add(
        "--scaling-tensorboard",
        default=None,
        metavar="DIR",
        help="write each case's loss, step times, throughput, efficiency, peak memory per rank and bytes per step "
        "as TensorBoard scalars under DIR/<run id>/<case id>; needs tensorboard (pip install -e .[report]) "
        "(default: off)",
    )


@dataclass(frozen=True, kw_only=True)
class Options:
    strategies: tuple[str, ...]
    models: tuple[str, ...]
    topologies: tuple[str, ...]
    matrix: str = "explicit"  # "default", "full", or "explicit" when --scaling-topologies was given
    preset: str
    steps: int
    warmup: int
    tolerance: float | None
    default_tolerance: float
    results_dir: Path
    baseline_dir: Path
    update_baselines: bool
    require_baseline: bool
    timeout_s: float
    cpu_threads: int
    seed: int
    dtype: str
    inject_delay_ms: float
    data_dir: str | None = (
        None  # real datasets instead of synthetic ones (scalegate.workloads.data, scalegate.workloads.squad)
    )
    link_rate: str = "1gbit"
    inject_slowdown: float = 0.0
    strict: bool = False
    confirm: int = 1  # relaunches that must also regress before a timing regression fails
    memory_interval_ms: float = 50.0
    launches: int = 1  # launches per case (and reference) judged together (harness/session.py)
    cpu_binding: bool = False
    tp_sequence_parallel: bool = False
    compile: bool = False
    checkpoint: bool = False  # --scaling-checkpoint: the checkpoint window (harness/measure/checkpoint.py)
    inject_faults: tuple[tuple[str, int], ...] = ()  # Faults field values from --scaling-inject-fault
    scaling: str = "weak"
    global_batch: int | None = None
    profile_steps: int = 0  # --scaling-profile: profiled steps after the measured ones; 0 = off
    tensorboard_dir: Path | None = None  # --scaling-tensorboard
    launcher: str = "warm"  # --scaling-launcher: warm agent (harness/launch/warm.py) or a cold torchrun per launch
    local_steps: int = LOCAL_STEPS  # same-launch (distributed, local) pairs per multi-rank launch
    max_launches: int = MAX_LAUNCHES  # sequential verdicts: the launch budget per case
    alpha: float = ALPHA
    beta: float = BETA
    # the workloads that are not built in (harness/plan/catalog.py): how every case's ranks find them again
    workloads: tuple[Registered, ...] = ()

    def workload(self, model: str) -> Registered:
        """Where ``model`` comes from: a registered workload, or the built-in of that name."""
        return next((w for w in self.workloads if w.name == model), Registered(name=model))


def _data_dir(text: str | None) -> str | None:
    if not text:
        return None
    if not Path(text).is_dir():
        raise SpecError(
            f"--scaling-data-dir {text} is not a directory",
            "pass a directory holding MNIST idx files and/or SQuAD JSON with a tokenizer/ folder",
        )
    return str(Path(text).resolve())  # workers run elsewhere (other cwd, other nodes' agents)


def _names(option: str, text: str, known: list[str], catalog: "Catalog | None" = None) -> tuple[str, ...]:
    """Names from a comma-separated option; with a catalog (--scaling-models) an import path registers its
    workload (``mypkg.models:MyWorkload``) and stands for its name."""
    items = tuple(n.strip() for n in text.split(",") if n.strip())
    if catalog is not None:
        items = tuple(catalog.model(n, f"{option} {n}") if ":" in n else n for n in items)
        known = catalog.names()
    if text.strip() == "all":
        if option == "--scaling-strategies":  # the opt-in ones run only when named
            from scalegate.contract.cards import OPT_IN

            return tuple(n for n in known if n not in OPT_IN)
        from scalegate.workloads.loader import (
            OPT_IN as OPT_IN_MODELS,
        )  # the decoder LM runs when named (its own CI tests)

        return tuple(n for n in known if n not in OPT_IN_MODELS)
    names = tuple(dict.fromkeys(items))
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        refs = ", or name a Workload class as package.module:Class" if option == "--scaling-models" else ""
        raise SpecError(
            f"{option}: unknown name(s) {', '.join(map(repr, unknown)) or '(none given)'}",
            f"pick from: {', '.join(known)} (or 'all'){refs}",
        )
    return names


def _link_rate(text: str) -> str:
    from scalegate.contract.units import parse_rate  # raises a SpecError naming the option

    parse_rate(text)
    return text.strip().lower()


def _optional(getoption, name: str, default):
    try:  # callers that predate an option (fakes in tests) get its default
        return getoption(name)
    except (KeyError, ValueError, AttributeError):
        return default


def _faults(getoption) -> tuple[tuple[str, int], ...]:
    texts = [t for item in _optional(getoption, "--scaling-inject-fault", []) or [] for t in str(item).split(";")]
    values: dict[str, int] = {}
    for text in filter(str.strip, texts):
        parsed = parse_fault(text)
        clash = sorted(set(parsed) & set(values))
        if clash:
            raise SpecError(
                f"--scaling-inject-fault {text!r} repeats a fault already given ({clash[0]})",
                "inject each kind of fault once per run",
            )
        values.update(parsed)
    if values.get("checkpoint_skip_optimizer") and not _optional(getoption, "--scaling-checkpoint", False):
        raise SpecError(
            "--scaling-inject-fault checkpoint-skip-optimizer does nothing without --scaling-checkpoint",
            "add --scaling-checkpoint",
        )
    if values and getoption("--scaling-update-baselines"):
        raise SpecError(
            "--scaling-update-baselines with --scaling-inject-fault would record a faulty baseline",
            "drop one of the two options",
        )
    return tuple(sorted(values.items()))


def _scaling(getoption, topologies: list[str]) -> tuple[str, int | None]:
    scaling = _optional(getoption, "--scaling-scaling", "weak")
    batch = _optional(getoption, "--scaling-global-batch", None)
    if scaling not in (*SCALINGS, "both"):
        raise SpecError(
            f"--scaling-scaling={scaling!r} is not one of {', '.join(SCALINGS)}, both",
            "pass --scaling-scaling weak (default), strong or both, with --scaling-global-batch N for strong and both",
        )
    if scaling in ("strong", "both") and (batch is None or batch < 1):
        raise SpecError(
            f"--scaling-scaling {scaling} needs --scaling-global-batch N >= 1, got {batch}",
            f"e.g. --scaling-scaling {scaling} --scaling-global-batch 64",
        )
    for topology in topologies if scaling != "weak" else ():
        world = Topology.parse(topology).world_size
        if batch % world:
            raise SpecError(
                f"--scaling-global-batch {batch} does not divide by world size {world} of topology "
                f"{topology} (--scaling-topologies)",
                f"use a multiple of every world size run, e.g. {_lcm_multiple(batch, topologies)}, "
                "or drop that topology",
            )
    if scaling == "weak" and batch is not None:
        raise SpecError(
            f"--scaling-global-batch {batch} conflicts with weak scaling (the global batch grows with the world size)",
            "add --scaling-scaling strong, or drop --scaling-global-batch",
        )
    return scaling, batch


def _lcm_multiple(batch: int, topologies: list[str]) -> int:
    step = math.lcm(*(Topology.parse(t).world_size for t in topologies))
    return max(step, batch // step * step)


def _launches(value: int) -> int:
    if not 1 <= value <= 20:
        raise SpecError(f"--scaling-launches={value} is not in 1..20", "pass 1 (one launch) to 20; 3-5 is typical")
    return value


def _profile_steps(getoption) -> int:
    steps = _optional(getoption, "--scaling-profile-steps", None)
    if not _optional(getoption, "--scaling-profile", False):
        if steps is not None:
            raise SpecError(
                f"--scaling-profile-steps {steps} does nothing without --scaling-profile",
                "add --scaling-profile, or drop --scaling-profile-steps",
            )
        return 0
    steps = PROFILE_STEPS if steps is None else steps
    if not 1 <= steps <= 100:
        raise SpecError(
            f"--scaling-profile-steps={steps} is not in 1..100",
            f"pass a few steps (default {PROFILE_STEPS}): traces grow with every step",
        )
    return steps


def _tensorboard_dir(text: str | None) -> Path | None:
    if not text:
        return None
    if Path(text).exists() and not Path(text).is_dir():
        raise SpecError(
            f"--scaling-tensorboard {text} is a file, not a directory", "pass a directory (it is created if missing)"
        )
    from scalegate.report.tensorboard import require  # raises a SpecError with a HINT when tensorboard is missing

    require()
    return Path(text)


def _sequential(getoption) -> dict:
    """--scaling-local-steps, --scaling-max-launches, --scaling-alpha/-beta, checked together."""
    values = {
        "local_steps": _optional(getoption, "--scaling-local-steps", LOCAL_STEPS),
        "max_launches": _optional(getoption, "--scaling-max-launches", MAX_LAUNCHES),
        "alpha": _optional(getoption, "--scaling-alpha", ALPHA),
        "beta": _optional(getoption, "--scaling-beta", BETA),
    }
    if not 0 <= values["local_steps"] <= 1000:
        raise SpecError(
            f"--scaling-local-steps={values['local_steps']} is not in 0..1000",
            f"pass 0 (off: the separate 1x1 launch is the reference) or e.g. {LOCAL_STEPS}",
        )
    if not 1 <= values["max_launches"] <= 20:
        raise SpecError(
            f"--scaling-max-launches={values['max_launches']} is not in 1..20",
            f"pass 1 (judge what the first launches say) to 20; the default is {MAX_LAUNCHES}",
        )
    for name in ("alpha", "beta"):
        if not 0 < values[name] < 0.5:
            raise SpecError(
                f"--scaling-{name}={values[name]} is not a probability in (0, 0.5)",
                f"e.g. --scaling-alpha {ALPHA} --scaling-beta {BETA}",
            )
    return values


def _confirm(value: int) -> int:
    if not 0 <= value <= 5:
        raise SpecError(f"--scaling-confirm={value} is not in 0..5", "pass 0 (no relaunch) to 5; the default is 1")
    return value


def parse(
    getoption, rootdir: Path, strategy_names: list[str], model_names: list[str], catalog: "Catalog | None" = None
) -> Options:
    """``catalog`` (the plugin's, harness/plan/catalog.py): registered workloads join ``model_names`` and
    ``--scaling-models`` may name a workload class by import path."""
    topologies = []
    explicit = getoption("--scaling-topologies")
    for text in (explicit or MATRICES[getoption("--scaling-matrix")]).split(","):
        try:
            topologies.append(str(Topology.parse(text)))
        except SpecError as exc:
            raise SpecError(f"--scaling-topologies: {exc.message}", exc.hint) from None
    for option, minimum in (("--scaling-steps", 1), ("--scaling-warmup", 0), ("--scaling-cpu-threads", 1)):
        if getoption(option) < minimum:
            raise SpecError(f"{option}={getoption(option)} is below {minimum}", f"pass {option} {minimum} or more")
    for option in ("--scaling-tolerance", "--scaling-default-tolerance"):
        value = getoption(option)
        if value is not None and not 0 <= value < 1:
            raise SpecError(f"{option}={value} is not a fraction in [0, 1)", f"e.g. {option} 0.1 for 10%")
    if not 0 < getoption("--scaling-timeout") < math.inf:  # nan and inf fail too
        raise SpecError(
            f"--scaling-timeout={getoption('--scaling-timeout')} must be a positive number of seconds",
            "e.g. --scaling-timeout 300",
        )
    if getoption("--scaling-dtype") not in ("fp32", "bf16"):
        raise SpecError(f"--scaling-dtype={getoption('--scaling-dtype')!r} is not fp32 or bf16", "pick fp32 or bf16")
    if not 0 <= getoption("--scaling-inject-delay-ms") < math.inf:
        raise SpecError(
            f"--scaling-inject-delay-ms={getoption('--scaling-inject-delay-ms')} is not a delay >= 0",
            "pass a delay in milliseconds >= 0",
        )
    if not 0 <= getoption("--scaling-inject-slowdown") <= 10:
        raise SpecError(
            f"--scaling-inject-slowdown={getoption('--scaling-inject-slowdown')} is not in [0, 10]",
            "pass a fraction, e.g. 0.1 for 10% slower steps",
        )
    if getoption("--scaling-update-baselines") and getoption("--scaling-inject-slowdown") > 0:
        raise SpecError(
            "--scaling-update-baselines with --scaling-inject-slowdown would record a faulty baseline",
            "drop one of the two options",
        )
    if getoption("--scaling-update-baselines") and getoption("--scaling-inject-delay-ms") > 0:
        raise SpecError(
            "--scaling-update-baselines with --scaling-inject-delay-ms would record a faulty baseline",
            "drop one of the two options",
        )
    if not getoption("--scaling-memory-interval-ms") > 0:
        raise SpecError(
            f"--scaling-memory-interval-ms={getoption('--scaling-memory-interval-ms')} must be positive",
            "e.g. --scaling-memory-interval-ms 50",
        )
    baseline_dir = getoption("--scaling-baseline-dir")
    scaling, global_batch = _scaling(getoption, topologies)
    return Options(
        strategies=_names("--scaling-strategies", getoption("--scaling-strategies"), strategy_names),
        models=_names("--scaling-models", getoption("--scaling-models"), model_names, catalog),
        workloads=catalog.registered() if catalog is not None else (),
        topologies=tuple(dict.fromkeys(topologies)),
        matrix="explicit" if explicit else getoption("--scaling-matrix"),
        preset=getoption("--scaling-preset"),
        steps=getoption("--scaling-steps"),
        warmup=getoption("--scaling-warmup"),
        tolerance=getoption("--scaling-tolerance"),
        default_tolerance=getoption("--scaling-default-tolerance"),
        results_dir=Path(getoption("--scaling-results-dir")),
        baseline_dir=Path(baseline_dir) if baseline_dir else rootdir / "baselines",
        update_baselines=getoption("--scaling-update-baselines"),
        require_baseline=getoption("--scaling-require-baseline"),
        timeout_s=getoption("--scaling-timeout"),
        cpu_threads=getoption("--scaling-cpu-threads"),
        seed=getoption("--scaling-seed"),
        dtype=getoption("--scaling-dtype"),
        inject_delay_ms=getoption("--scaling-inject-delay-ms"),
        data_dir=_data_dir(getoption("--scaling-data-dir")),
        link_rate=_link_rate(getoption("--scaling-link-rate")),
        inject_slowdown=getoption("--scaling-inject-slowdown"),
        strict=getoption("--scaling-strict"),
        confirm=_confirm(getoption("--scaling-confirm")),
        launches=_launches(_optional(getoption, "--scaling-launches", 1)),
        cpu_binding=_optional(getoption, "--scaling-cpu-binding", "off") == "on",
        tp_sequence_parallel=bool(_optional(getoption, "--scaling-tp-sequence-parallel", False)),
        compile=bool(_optional(getoption, "--scaling-compile", False)),
        checkpoint=bool(_optional(getoption, "--scaling-checkpoint", False)),
        memory_interval_ms=getoption("--scaling-memory-interval-ms"),
        inject_faults=_faults(getoption),
        scaling=scaling,
        global_batch=global_batch,
        profile_steps=_profile_steps(getoption),
        tensorboard_dir=_tensorboard_dir(_optional(getoption, "--scaling-tensorboard", None)),
        launcher=_optional(getoption, "--scaling-launcher", "warm"),
        **_sequential(getoption),
    )
