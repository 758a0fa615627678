"""A team's own training script, declared in a test file of its repository, as scaling cases.

    @pytest.mark.scaling_script(
        "train.py", "--strategy={strategy}", "--max-steps={steps}",  # the script and its arguments (placeholders:
        name="mylm",                                            # {strategy} {world_size} {nnodes} {nproc_per_node}
                                                                # {steps}: the optimizer steps the case needs)
        strategies=["ddp", "fsdp"], topologies=["1x2"],         # ids ddp-mylm-1x2, fsdp-mylm-1x2
        scaling="weak",                                         # or "strong": the script keeps its global batch
        loss_pattern=r"step (\\d+) loss ([0-9.eE+-]+)",          # optional: read from rank 0's output
    )
    def test_train(scaling_case, benchmark):
        scaling_case.check(benchmark)

The strategies are the script's own words, not scalegate's registry. Each case's efficiency is against the same
script with the same strategy word on one process (``ddp-mylm-1x1``, launched once per strategy and session): a
strategy's code at one process is where its scaling starts, so its fixed costs (a wrapper, a sharded optimizer)
are not counted as scaling losses. Optional: ``batch`` (samples per step: per rank under weak scaling, in all
under strong; without it throughput is in optimizer steps/s), ``stop_after_window`` (stop the script once its
measured steps are done), ``loss_tolerance`` (strong scaling: how far the loss curves may differ from the 1x1
run's), ``canary`` (what ``gate`` runs when nothing is named). The script's path is relative to the repository's
root (pytest's rootdir), where it also runs. A marker that fixes the script's steps to a number (``--max-steps=40``)
fewer than a case needs is refused before any launch, naming ``{steps}``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalegate.contract.errors import SpecError
from scalegate.contract.faults import Faults
from scalegate.contract.script import ScriptSpec, fill, needed_steps, values
from scalegate.contract.spec import SCALINGS, CaseSpec
from scalegate.contract.topology import Topology
from scalegate.plan import cluster
from scalegate.plan.hostinfo import HostInfo
from scalegate.plan.matrix import Case, oversubscribed
from scalegate.plan.options import Options

USAGE = (
    '@pytest.mark.scaling_script("train.py", "--strategy={strategy}", name="mylm", strategies=["ddp", "fsdp"], '
    'topologies=["1x2"])'
)
KEYS = ("name", "strategies", "topologies", "scaling", "loss_pattern", "batch", "stop_after_window")
KEYS += ("loss_tolerance", "canary")
# How scripts name their flag for the number of optimizer steps (lower case, '-' for '_', no leading dashes)
STEP_FLAGS = (
    "max-steps", "steps", "max-train-steps", "num-steps", "num-train-steps", "train-steps", "total-steps",
    "training-steps", "max-iters", "iters", "max-iterations", "iterations", "num-iterations", "total-iters",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Declared:
    script: Path
    template: tuple[str, ...]
    name: str
    strategies: tuple[str, ...]
    topologies: tuple[str, ...] | None
    scaling: str
    loss_pattern: str
    batch: int | None
    stop_after_window: bool
    loss_tolerance: float
    canary: bool


def declared(args: tuple, kwargs: dict[str, Any], rootdir: Path, where: str) -> Declared:
    """The marker, validated: every mistake names the marker's test and says what to write."""
    unknown = sorted(set(kwargs) - set(KEYS))
    if unknown:
        raise SpecError(f"{where}: scaling_script has no argument {unknown[0]!r}", f"use {', '.join(KEYS)}: {USAGE}")
    if not args or not isinstance(args[0], str) or not args[0].strip():
        raise SpecError(f"{where}: scaling_script needs the script's path first", f"write {USAGE}")
    script = (rootdir / args[0]).resolve()
    if not script.is_file():
        raise SpecError(
            f"{where}: scaling_script's script {args[0]!r} is not a file under {rootdir}",
            "give the path relative to the repository's root (where pytest.ini or conftest.py is)",
        )
    template = tuple(str(a) for a in args[1:])
    fill(template, values("x", Topology.parse("1x1")), f"{where}: scaling_script")  # unknown placeholders, now
    strategies = kwargs.get("strategies") or ()
    if isinstance(strategies, str) or not strategies or not all(isinstance(s, str) and s for s in strategies):
        raise SpecError(
            f"{where}: scaling_script(strategies={strategies!r}) must list the script's strategy words",
            'e.g. strategies=["ddp", "fsdp"]; a script with no strategy flag declares one, e.g. strategies=["ddp"]',
        )
    scaling = kwargs.get("scaling", "weak")
    if scaling not in SCALINGS:
        raise SpecError(f"{where}: scaling_script(scaling={scaling!r})", f"pick one of: {', '.join(SCALINGS)}")
    batch = kwargs.get("batch")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise SpecError(f"{where}: scaling_script(batch={batch!r}) is not a whole number >= 1", "e.g. batch=32")
    topologies = kwargs.get("topologies")
    return Declared(
        script=script,
        template=template,
        name=str(kwargs.get("name") or script.stem),
        strategies=tuple(dict.fromkeys(strategies)),
        topologies=tuple(str(Topology.parse(t)) for t in topologies) if topologies else None,
        scaling=scaling,
        loss_pattern=str(kwargs.get("loss_pattern") or ""),
        batch=batch,
        stop_after_window=bool(kwargs.get("stop_after_window", False)),
        loss_tolerance=float(kwargs.get("loss_tolerance", 0.05)),
        canary=bool(kwargs.get("canary", False)),
    )


def flag_name(arg: str) -> str:
    """``--max_steps=40`` -> ``max-steps``: a flag's name as STEP_FLAGS spells it ("" for a value)."""
    return arg.split("=", 1)[0].lstrip("-").replace("_", "-").lower() if arg.startswith("-") else ""


def fixed_steps(template: tuple[str, ...]) -> tuple[str, int] | None:
    """The argument that fixes the script's step count to a number (``--max-steps=40``, or ``--max-steps 40`` as
    two), and that number; None where the steps come from ``{steps}`` or from no argument."""
    for i, arg in enumerate(template):
        if flag_name(arg) not in STEP_FLAGS:
            continue
        value = arg.split("=", 1)[1] if "=" in arg else (template[i + 1] if i + 1 < len(template) else "")
        if value.isdigit():
            return (arg if "=" in arg else f"{arg} {value}"), int(value)
    return None


def check_steps(decl: Declared, options: Options, where: str) -> None:
    """A script whose marker fixes its steps below what a case needs would stop inside the window of every launch:
    refused now, before any, with the placeholder that gives each case its steps."""
    fixed = fixed_steps(decl.template)
    steps = max(options.run.steps, options.reference_steps(True, options.run.steps))
    need = needed_steps(steps, options.run.warmup)
    if fixed is None or fixed[1] >= need:
        return
    arg, count = fixed
    flag = arg.split("=", 1)[0].split(" ", 1)[0]
    raise SpecError(
        f"{where}: scaling_script's argument {arg!r} stops the script after {count} optimizer steps; a case needs "
        f"{need} ({need - steps} before the window, {steps} measured: --scaling-warmup, --scaling-steps)",
        f'write "{flag}={{steps}}" in the marker: {{steps}} gives every case (and its 1x1 reference) the steps it needs',
    )


def cases(
    decl: Declared, options: Options, host: HostInfo, rootdir: Path, where: str, explicit: set[str]
) -> list[Case]:
    """One case per strategy word and topology; ``explicit``: the --scaling-* lists given on the command line,
    which select from the declared ones as -k does."""
    check_steps(decl, options, where)
    topologies = decl.topologies or options.topologies
    if "topologies" in explicit and decl.topologies:
        topologies = tuple(t for t in decl.topologies if t in options.topologies)
    strategies = decl.strategies
    if "strategies" in explicit:
        strategies = tuple(s for s in strategies if s in options.strategies)
    out = []
    for strategy in strategies:
        for topology in topologies:
            spec = spec_for(decl, strategy, Topology.parse(topology), options, rootdir, where)
            skip = cluster.skip_reason(spec.topo, host.device, cluster.detect())
            if host.device == "cuda" and spec.topo.per_node > host.devices_per_node:
                skip = f"topology {topology} needs {spec.topo.per_node} GPUs per node, this node has {host.devices_per_node}"
            over = oversubscribed(spec.topo, host, options.run.cpu_threads)
            out.append(Case(id=spec.case_id, spec=spec, skip=skip, oversubscribed=over, canary=decl.canary))
    return out


def spec_for(
    decl: Declared, strategy: str, topology: Topology, options: Options, rootdir: Path, where: str
) -> CaseSpec:
    script = ScriptSpec(
        path=str(decl.script),
        argv=(),
        template=decl.template,
        cwd=str(rootdir.resolve()),
        loss_pattern=decl.loss_pattern,
        stop_after_window=decl.stop_after_window,
        batch=decl.batch,
        loss_tolerance=decl.loss_tolerance,
        needed_steps=needed_steps(options.run.steps, options.run.warmup),
    ).at(strategy, topology, f"{where}: scaling_script")
    strong = decl.scaling == "strong"
    sections = options.spec_sections()
    return CaseSpec(
        strategy=strategy,
        model=decl.name,
        preset="script",
        topology=str(topology),
        micro_batch=(decl.batch or 1) if not strong else 1,
        scaling=decl.scaling,
        global_batch=(decl.batch or topology.world_size) if strong else None,
        grad_check=False,  # gradients cannot be checked from outside a script: the table says n/a
        script=script,
        # no windows: no local copy of a script's model (the classic efficiency decides)
        **{
            **sections,
            # a script times its own training: the workloads' dtype, compile and sequence-parallel options do not apply
            "run": dataclasses.replace(sections["run"], dtype="fp32"),
            "execution": dataclasses.replace(sections["execution"], compile=False, tp_sequence_parallel=False),
            # the faults a script's bootstrap injects (the others need the harness's own loop); the 1x1 reference has
            # none
            "faults": Faults(count_every_step=options.faults.count_every_step, slowdown=options.faults.slowdown),
        },
    )
