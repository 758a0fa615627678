"""The ``--scaling-*`` options, built once into a frozen ``Options``.

The options are declared in groups (plan/option_groups.py), and argparse checks each value with its
``type=`` callable as it reads the command line (plan/option_types.py), so a bad value is a usage error
naming the option before anything else happens. What is left for ``parse`` needs two options at once
(``--scaling-global-batch`` against the topologies, faults against ``--scaling-update-baselines``) or the
session's catalog (which names ``--scaling-models`` may use); it raises ``SpecError`` naming the options,
which the plugin turns into a ``pytest.UsageError``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from scalegate.contract import cards, duet
from scalegate.contract.errors import SpecError
from scalegate.contract.topology import Topology
from scalegate.plan.catalog import Registered
from scalegate.plan.option_groups import (
    ALPHA,
    BETA,
    LOCAL_STEPS,
    MATRICES,
    MAX_LAUNCHES,
    PARITY_TOLERANCE,
    PROFILE_STEPS,
    SMOKE_MODEL,
    TESTPATHS_MATRIX_INI,
    add_scaling_options,
)

if TYPE_CHECKING:
    import pytest

    from scalegate.plan.catalog import Catalog

__all__ = [  # the defaults are re-exported: benchmarks and tests read them here
    "ALPHA",
    "BETA",
    "LOCAL_STEPS",
    "MATRICES",
    "MAX_LAUNCHES",
    "PARITY_TOLERANCE",
    "PROFILE_STEPS",
    "SMOKE_MODEL",
    "TESTPATHS_MATRIX_INI",
    "Options",
    "add_options",
    "parse",
]


def add_options(parser: "pytest.Parser") -> None:
    """Every ``--scaling-*`` option, in one help group."""
    add_scaling_options(parser.getgroup("scaling", "scalegate scaling benchmarks").addoption, prefix="scaling-")


@dataclass(frozen=True, kw_only=True)
class Options:
    strategies: tuple[str, ...]
    models: tuple[str, ...]
    topologies: tuple[str, ...]
    matrix: str = "explicit"  # "default", "full", "smoke", or "explicit" when --scaling-topologies was given
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
    launches: int = 1  # launches per case (and reference) judged together (scalegate/session.py)
    launches_named: bool = False  # --scaling-launches was given: a script's duet case keeps it (contract/duet.py)
    reference_launches: int | None = None  # --scaling-reference-launches: the 1x1 reference's; None = ``launches``
    reference_steps: int | None = None  # --scaling-reference-steps: a 1x1 reference launch's; None = ``steps``
    cpu_binding: bool = False
    duet_threads: str = "auto"  # --scaling-duet-threads (contract/affinity.py gloo_threads)
    tp_sequence_parallel: bool = False
    compile: bool = False
    checkpoint: bool = False  # --scaling-checkpoint: the checkpoint window (scalegate/measure/checkpoint.py)
    inject_faults: tuple[tuple[str, int], ...] = ()  # Faults field values from --scaling-inject-fault
    scaling: str = "weak"
    global_batch: int | None = None
    profile_steps: int = 0  # --scaling-profile: profiled steps after the measured ones; 0 = off
    tensorboard_dir: Path | None = None  # --scaling-tensorboard
    launcher: str = "warm"  # --scaling-launcher: warm agent (scalegate/launch/warm.py) or a cold torchrun per launch
    local_steps: int = LOCAL_STEPS  # same-launch (distributed, local) pairs per multi-rank launch
    max_launches: int = MAX_LAUNCHES  # sequential verdicts: the launch budget per case
    step_time_tolerance: float | None = None  # A/B duet: the step time at W is judged too (judge/duet.py)
    alpha: float = ALPHA
    beta: float = BETA
    parity_tolerance: float = PARITY_TOLERANCE  # --scaling-parity-tolerance: parity's throughput shortfall
    # the workloads that are not built in (harness/scalegate/plan/catalog.py): how every case's ranks find them again
    workloads: tuple[Registered, ...] = ()

    def workload(self, model: str) -> Registered:
        """Where ``model`` comes from: a registered workload, or the built-in of that name."""
        return next((w for w in self.workloads if w.name == model), Registered(name=model))


def parse(values: argparse.Namespace, rootdir: Path, strategy_names: Sequence[str], catalog: "Catalog") -> Options:
    """``values``: the parsed command line (pytest's ``config.option``), each value already checked by its
    ``type=``. ``catalog`` (the plugin's, harness/scalegate/plan/catalog.py): the workloads ``--scaling-models`` may name;
    an import path there registers its workload in it."""
    v = values
    matrix_name = v.scaling_matrix or "default"  # None: not given (the plugin resolves a bare run's first)
    topologies = v.scaling_topologies or tuple(MATRICES[matrix_name].split(","))
    _refuse_faulty_baseline(v)
    scaling, global_batch = _scaling(v.scaling_scaling, v.scaling_global_batch, topologies)
    return Options(
        strategies=_strategies(v.scaling_strategies, strategy_names),
        models=_smoke(_models(v.scaling_models, catalog), matrix_name, v.scaling_models),
        workloads=catalog.registered(),
        topologies=topologies,
        matrix="explicit" if v.scaling_topologies else matrix_name,
        preset=v.scaling_preset,
        scaling=scaling,
        global_batch=global_batch,
        steps=v.scaling_steps,
        warmup=v.scaling_warmup,
        seed=v.scaling_seed,
        dtype=v.scaling_dtype,
        data_dir=v.scaling_data_dir,
        cpu_threads=v.scaling_cpu_threads,
        memory_interval_ms=v.scaling_memory_interval_ms,
        timeout_s=duet.launch_timeout(v.scaling_timeout),
        launcher=v.scaling_launcher,
        cpu_binding=v.scaling_cpu_binding == "on",
        duet_threads=v.scaling_duet_threads,
        link_rate=v.scaling_link_rate,
        compile=v.scaling_compile,
        tp_sequence_parallel=v.scaling_tp_sequence_parallel,
        tolerance=v.scaling_tolerance,
        parity_tolerance=v.scaling_parity_tolerance,
        strict=v.scaling_strict,
        confirm=v.scaling_confirm,
        launches=v.scaling_launches or 1,
        launches_named=v.scaling_launches is not None,
        reference_launches=v.scaling_reference_launches,
        reference_steps=v.scaling_reference_steps,
        local_steps=v.scaling_local_steps,
        max_launches=v.scaling_max_launches,
        step_time_tolerance=v.scaling_step_time_tolerance,
        alpha=v.scaling_alpha,
        beta=v.scaling_beta,
        baseline_dir=Path(v.scaling_baseline_dir) if v.scaling_baseline_dir else rootdir / "baselines",
        update_baselines=v.scaling_update_baselines,
        require_baseline=v.scaling_require_baseline,
        default_tolerance=v.scaling_default_tolerance,
        inject_delay_ms=v.scaling_inject_delay_ms,
        inject_slowdown=v.scaling_inject_slowdown,
        inject_faults=_faults(
            v.scaling_inject_fault, checkpoint=v.scaling_checkpoint, update_baselines=v.scaling_update_baselines
        ),
        results_dir=Path(v.scaling_results_dir),
        profile_steps=_profile_steps(v.scaling_profile, v.scaling_profile_steps),
        checkpoint=v.scaling_checkpoint,
        tensorboard_dir=v.scaling_tensorboard,
    )


def _strategies(text: str, known: Sequence[str]) -> tuple[str, ...]:
    if text.strip() == "all":  # the opt-in ones (the Lightning Trainer's) run only when named
        return tuple(n for n in known if n not in cards.OPT_IN)
    return _known("--scaling-strategies", text.split(","), known, "")


def _models(text: str, catalog: "Catalog") -> tuple[str, ...]:
    items = [n.strip() for n in text.split(",") if n.strip()]
    # an import path (mypkg.models:MyWorkload) registers its workload and stands for its name
    items = [catalog.model(n, f"--scaling-models {n}") if ":" in n else n for n in items]
    if text.strip() == "all":  # the opt-in ones (the decoder LM) run only when named
        return tuple(catalog.defaults())
    return _known("--scaling-models", items, catalog.names(), ", or name a Workload class as package.module:Class")


def _smoke(models: tuple[str, ...], matrix_name: str, text: str) -> tuple[str, ...]:
    """The smoke matrix runs every strategy on one workload, unless ``--scaling-models`` names others."""
    if matrix_name != "smoke" or text.strip() != "all" or SMOKE_MODEL not in models:
        return models
    return (SMOKE_MODEL,)


def _known(option: str, items: Sequence[str], known: Sequence[str], refs: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in items if n.strip()))
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SpecError(
            f"{option}: unknown name(s) {', '.join(map(repr, unknown)) or '(none given)'}",
            f"pick from: {', '.join(known)} (or 'all'){refs}",
        )
    return names


def _refuse_faulty_baseline(v: argparse.Namespace) -> None:
    """A baseline recorded with an injected slowdown would make the slowdown the norm."""
    if not v.scaling_update_baselines:
        return
    for option, injected in (
        ("--scaling-inject-slowdown", v.scaling_inject_slowdown),
        ("--scaling-inject-delay-ms", v.scaling_inject_delay_ms),
    ):
        if injected > 0:
            raise SpecError(
                f"--scaling-update-baselines with {option} would record a faulty baseline",
                "drop one of the two options",
            )


def _faults(
    given: Sequence[tuple[tuple[str, dict[str, int]], ...]], *, checkpoint: bool, update_baselines: bool
) -> tuple[tuple[str, int], ...]:
    """Every ``--scaling-inject-fault`` value (each already parsed by its ``type=``) as one set of ``Faults``
    field values; a fault given twice is refused rather than one silently winning."""
    values: dict[str, int] = {}
    for text, parsed in (fault for value in given for fault in value):
        clash = sorted(set(parsed) & set(values))
        if clash:
            raise SpecError(
                f"--scaling-inject-fault {text!r} repeats a fault already given ({clash[0]})",
                "inject each kind of fault once per run",
            )
        values.update(parsed)
    if values.get("checkpoint_skip_optimizer") and not checkpoint:
        raise SpecError(
            "--scaling-inject-fault checkpoint-skip-optimizer does nothing without --scaling-checkpoint",
            "add --scaling-checkpoint",
        )
    if values and update_baselines:
        raise SpecError(
            "--scaling-update-baselines with --scaling-inject-fault would record a faulty baseline",
            "drop one of the two options",
        )
    return tuple(sorted(values.items()))


def _scaling(scaling: str, batch: int | None, topologies: Sequence[str]) -> tuple[str, int | None]:
    """``--scaling-scaling`` with ``--scaling-global-batch``: strong scaling needs a batch every world size divides."""
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


def _lcm_multiple(batch: int, topologies: Sequence[str]) -> int:
    step = math.lcm(*(Topology.parse(t).world_size for t in topologies))
    return max(step, batch // step * step)


def _profile_steps(profile: bool, steps: int | None) -> int:
    """Profiled steps per case: 0 without ``--scaling-profile``, where ``--scaling-profile-steps`` would do nothing."""
    if not profile:
        if steps is not None:
            raise SpecError(
                f"--scaling-profile-steps {steps} does nothing without --scaling-profile",
                "add --scaling-profile, or drop --scaling-profile-steps",
            )
        return 0
    return PROFILE_STEPS if steps is None else steps
