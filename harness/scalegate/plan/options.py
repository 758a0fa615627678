"""The session's options: the declared sections (plan/option_groups.py) as read, and what they resolve to.

argparse checks each value with its ``type=`` callable as it reads the command line (plan/option_types.py), so
a bad value is a usage error naming the option before anything else happens. ``parse`` keeps every section as read
and resolves what needs several options or the session's catalog (the strategy, workload and topology lists, the
faults, the profiled steps, the directories); it raises ``SpecError`` naming the options, which the plugin turns
into a ``pytest.UsageError``. An A/B gate's session is told so explicitly (``--scaling-duet``); the launch counts
and timeouts a paired session takes follow from it here, never from the environment.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from scalegate import policy
from scalegate.contract import cards
from scalegate.contract.errors import SpecError
from scalegate.contract.faults import Faults
from scalegate.contract.option import fields
from scalegate.contract.topology import Topology
from scalegate.plan import declare
from scalegate.plan.catalog import Registered
from scalegate.plan.option_groups import (
    MATRICES,
    PROFILE_STEPS,
    SECTIONS,
    SMOKE_MODEL,
    TESTPATHS_MATRIX_INI,
    Baselines,
    Duet,
    Execution,
    FaultInjection,
    Judging,
    Launching,
    Output,
    Run,
    Selection,
    Sequential,
)

if TYPE_CHECKING:
    import pytest

    from scalegate.plan.catalog import Catalog

__all__ = ["MATRICES", "SMOKE_MODEL", "TESTPATHS_MATRIX_INI", "Options", "add_options", "parse", "from_argv"]


def add_options(parser: "pytest.Parser") -> None:
    """Every ``--scaling-*`` option, in one help group."""
    declare.declare(parser.getgroup("scaling", "scalegate scaling benchmarks").addoption, SECTIONS)


@dataclass(frozen=True, kw_only=True)
class Options:
    """Every section as the command line gave it, and what they resolve to for this session."""

    selection: Selection = Selection()
    run: Run = Run()
    execution: Execution = Execution()
    launching: Launching = Launching()
    duet: Duet = Duet()
    judging: Judging = Judging()
    sequential: Sequential = Sequential()
    baselines: Baselines = Baselines()
    injection: FaultInjection = FaultInjection()
    output: Output = Output()
    # resolved
    strategies: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    topologies: tuple[str, ...] = ("1x1", "1x2")
    matrix: str = "explicit"  # "default", "full", "smoke", or "explicit" where the topologies were named
    workloads: tuple[Registered, ...] = ()  # the workloads that are not built in: how the ranks find them again
    faults: Faults = Faults()  # --scaling-inject-delay-ms, --scaling-inject-slowdown and every --scaling-inject-fault
    profile_steps: int = 0  # --scaling-profile: profiled steps after the measured ones; 0 = off
    baseline_dir: Path = Path("baselines")
    results_dir: Path = Path("results")

    def spec_sections(self) -> dict[str, object]:
        """The option sections every ``CaseSpec`` of the session carries whole, the launch's time limit as this
        session's pairing makes it."""
        execution = dataclasses.replace(self.execution, timeout_s=self.timeout_s)
        return {"run": self.run, "execution": execution, "duet": self.duet, "faults": self.faults}

    def workload(self, model: str) -> Registered:
        """Where ``model`` comes from: a registered workload, or the built-in of that name."""
        return next((w for w in self.workloads if w.name == model), Registered(name=model))

    def replace(self, **changes: object) -> "Options":
        return dataclasses.replace(self, **changes)

    # --- a paired A/B gate's session (--scaling-duet) ----------------------------------------------------------
    @property
    def paired(self) -> bool:
        """This session's jobs pair in time with the other side's (``gate --base``: a duet, or alternating jobs)."""
        return self.duet.address is not None

    @property
    def launches(self) -> int:
        return self.judging.launches or 1

    def case_launches(self, script: bool) -> int:
        """A case's launches a session: ``--scaling-launches`` where named, else a training script's
        ``SCRIPT_CASE_LAUNCHES`` in a paired session (pooled into one estimate a round), else one."""
        if self.judging.launches is None and script and self.paired:
            return policy.SCRIPT_CASE_LAUNCHES
        return self.launches

    def reference_launches(self, script: bool) -> int:
        """The 1x1 reference's launches a session: ``--scaling-reference-launches``, else a training script's
        ``SCRIPT_REFERENCE_LAUNCHES`` in a paired session, else ``--scaling-launches``."""
        if self.judging.reference_launches is not None:
            return self.judging.reference_launches
        return policy.SCRIPT_REFERENCE_LAUNCHES if script and self.paired else self.launches

    def reference_steps(self, script: bool, steps: int) -> int:
        """A 1x1 reference launch's measured steps for a case of ``steps``: ``--scaling-reference-steps``, else a
        training script's in a paired session ``SCRIPT_REFERENCE_SHARE`` of them (at least
        ``SCRIPT_REFERENCE_MIN_STEPS``), else ``steps``."""
        if self.judging.reference_steps is not None:
            return self.judging.reference_steps
        if not (script and self.paired):
            return steps
        return min(steps, max(policy.SCRIPT_REFERENCE_MIN_STEPS, math.ceil(steps * policy.SCRIPT_REFERENCE_SHARE)))

    @property
    def timeout_s(self) -> float:
        """A launch's time limit: in a paired session its partner's steps run between its own (or before it), and
        it may wait for the partner to join first."""
        timeout = self.execution.timeout_s
        return 2 * timeout + policy.PAIR_WAIT_S if self.paired else timeout


def sections_of(values: argparse.Namespace) -> dict[str, object]:
    """Each section as ``values`` give it, under its ``Options`` field name."""
    by_name = {section.__name__: section for section in SECTIONS}  # the fields' types, as annotations name them
    return {f.name: declare.read(by_name[f.type], values) for f in dataclasses.fields(Options) if f.type in by_name}


def parse(values: argparse.Namespace, rootdir: Path, strategy_names: Sequence[str], catalog: "Catalog") -> Options:
    """``values``: the parsed command line (pytest's ``config.option``), each value already checked by its
    ``type=``. ``catalog`` (the plugin's, plan/catalog.py): the workloads ``--scaling-models`` may name; an import
    path there registers its workload in it."""
    found = sections_of(values)
    sel: Selection = found["selection"]  # type: ignore[assignment]
    base: Baselines = found["baselines"]  # type: ignore[assignment]
    out: Output = found["output"]  # type: ignore[assignment]
    injected: FaultInjection = found["injection"]  # type: ignore[assignment]
    matrix_name = sel.matrix or "default"  # None: not given (the plugin resolves a bare run's first)
    topologies = sel.topologies or tuple(MATRICES[matrix_name].split(","))
    _refuse_faulty_baseline(base, injected)
    _scaling(sel.scaling, sel.global_batch, topologies)
    return Options(
        **found,  # type: ignore[arg-type]
        strategies=_strategies(sel.strategies, strategy_names),
        models=_smoke(_models(sel.models, catalog), matrix_name, sel.models),
        workloads=catalog.registered(),
        topologies=topologies,
        matrix="explicit" if sel.topologies else matrix_name,
        faults=Faults(
            **{f.name: getattr(injected, f.name) for f in fields(Faults)},  # its own options: the delay, the slowdown
            **dict(_faults(injected.inject_fault, checkpoint=out.checkpoint, update_baselines=base.update_baselines)),
        ),
        profile_steps=_profile_steps(out.profile, out.profile_steps),
        baseline_dir=Path(base.baseline_dir) if base.baseline_dir else rootdir / "baselines",
        results_dir=Path(out.results_dir),
    )


def from_argv(
    argv: Sequence[str], rootdir: Path = Path("."), strategy_names: Sequence[str] | None = None, catalog=None
) -> Options:
    """The options a command line gives, as the plugin reads them: for tests, benchmarks and tools that build
    cases without a pytest session."""
    from scalegate.plan.catalog import Catalog

    parser = argparse.ArgumentParser(exit_on_error=False, allow_abbrev=False)
    declare.declare(parser.add_argument, SECTIONS)
    values = parser.parse_args(list(argv))
    return parse(values, rootdir, strategy_names or cards.names(), catalog or Catalog())


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


def _refuse_faulty_baseline(base: Baselines, injected: FaultInjection) -> None:
    """A baseline recorded with an injected slowdown would make the slowdown the norm."""
    if not base.update_baselines:
        return
    for option, value in (
        ("--scaling-inject-slowdown", injected.slowdown),
        ("--scaling-inject-delay-ms", injected.delay_ms),
    ):
        if value > 0:
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


def _scaling(scaling: str, batch: int | None, topologies: Sequence[str]) -> None:
    """``--scaling-scaling`` with ``--scaling-global-batch``: strong scaling needs a batch every world size divides."""
    if scaling in ("strong", "both") and (batch is None or batch < 1):
        raise SpecError(
            f"--scaling-scaling {scaling} needs --scaling-global-batch N >= 1, got {batch}",
            f"e.g. --scaling-scaling {scaling} --scaling-global-batch 64",
        )
    for topology in topologies if scaling != "weak" else ():
        world = Topology.parse(topology).world_size
        if batch % world:  # type: ignore[operator]
            raise SpecError(
                f"--scaling-global-batch {batch} does not divide by world size {world} of topology "
                f"{topology} (--scaling-topologies)",
                f"use a multiple of every world size run, e.g. {_lcm_multiple(batch, topologies)}, "  # type: ignore[arg-type]
                "or drop that topology",
            )
    if scaling == "weak" and batch is not None:
        raise SpecError(
            f"--scaling-global-batch {batch} conflicts with weak scaling (the global batch grows with the world size)",
            "add --scaling-scaling strong, or drop --scaling-global-batch",
        )


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
