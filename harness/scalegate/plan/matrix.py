"""The test matrix: strategy x model x topology, each a ``Case`` that runs or says why it cannot."""

from __future__ import annotations

from dataclasses import dataclass

from scalegate import workloads
from scalegate.contract import cards
from scalegate.contract.errors import SpecError
from scalegate.contract.sections import Windows
from scalegate.contract.spec import CaseSpec
from scalegate.contract.topology import Topology
from scalegate.plan import availability, cluster
from scalegate.plan.hostinfo import HostInfo
from scalegate.plan.options import Options


@dataclass(frozen=True, kw_only=True)
class Case:
    id: str  # strategy-model-topology, so -k selects naturally
    spec: CaseSpec
    skip: str | None = None  # why it cannot run here
    oversubscribed: bool = False
    canary: bool = False  # declared as what `gate` runs when nothing is named (docs/your-script.md)


def resolve_preset(preset: str, host: HostInfo) -> str:
    if preset == "auto":
        return "tiny" if host.device == "cpu" else "small"
    return preset


def oversubscribed(topology: Topology, host: HostInfo, cpu_threads: int) -> bool:
    """More ranks than this machine has devices for: timing means nothing, correctness still does."""
    if host.device == "cuda":
        return topology.per_node > host.devices_per_node
    # Emulated nodes share this machine's cores, so every rank of every node counts.
    return topology.world_size * cpu_threads > host.cpu_cores


def spec_for(strategy: str, model: str, topology: str, options: Options, host: HostInfo) -> CaseSpec:
    preset_name = resolve_preset(options.selection.preset, host)
    found = options.workload(model)  # a built-in, or where a registered workload's ranks find it again
    preset = workloads.preset_of(
        workloads.load(found.ref or model, found.import_paths, where=found.source), preset_name
    )
    return CaseSpec(
        strategy=strategy,
        model=model,
        preset=preset_name,
        topology=topology,
        micro_batch=preset.micro_batch,
        workload=found.ref,
        import_paths=found.import_paths,
        scaling="strong" if options.selection.scaling == "both" else options.selection.scaling,
        global_batch=options.selection.global_batch,
        **options.spec_sections(),
        windows=Windows(
            # the same-launch reference, where a launch has more than one rank and its timing means something
            # (not under --scaling-compile: the local copy runs eager, so the ratio would measure the compiler)
            local_steps=options.sequential.local_steps
            if not options.execution.compile
            and Topology.parse(topology).world_size > 1
            and not oversubscribed(Topology.parse(topology), host, options.run.cpu_threads)
            else 0,
            checkpoint=options.output.checkpoint,
        ),
    )


def companion(spec: CaseSpec) -> cards.StrategyCard | None:
    """The card of the strategy a parity launch trains beside ``spec.strategy`` (harness/scalegate/worker/companion.py)."""
    if not spec.companion:
        return None
    try:
        return cards.card(spec.companion)
    except SpecError as exc:  # the registry's message alone would not say which field named it
        raise SpecError(f"{spec.case_id}: companion {exc.message}", exc.hint) from None


def skip_reason(spec: CaseSpec, host: HostInfo) -> str | None:
    topo = spec.topo
    workload = workloads.resolve(spec)
    for card in filter(None, (cards.card(spec.strategy), companion(spec))):
        reason = availability.unavailable(card, spec, workload, host.device, host.devices_per_node)
        if reason:
            return reason
    reason = workload.unavailable()
    if reason:
        return reason
    if host.device == "cuda" and topo.per_node > host.devices_per_node:
        return f"topology {topo} needs {topo.per_node} GPUs per node, this node has {host.devices_per_node}"
    # Under srun the allocation decides; elsewhere multi-node cases run as emulated nodes.
    return cluster.skip_reason(topo, host.device, cluster.detect())


def _outside_matrix(spec: CaseSpec, matrix: str) -> str | None:
    """The default and smoke matrices run only the single reference on 1x1: other 1x1 cases say where they are."""
    if matrix in ("default", "smoke") and spec.topology == "1x1" and spec.strategy != "single":
        return (
            f"{spec.case_id} is in the full matrix only (1x1 is the single reference in the {matrix} one): "
            "pass --scaling-matrix full, or --scaling-topologies 1x1"
        )
    return None


def build(options: Options, host: HostInfo) -> list[Case]:
    cases = []
    # --scaling-scaling both: each case weak and strong, side by side (the strong one's id ends in -strong)
    sel = options.selection
    scalings = ("weak", "strong") if sel.scaling == "both" else (sel.scaling,)
    for strategy in options.strategies:
        for model in options.models:
            for topology in options.topologies:
                for scaling in scalings:
                    spec = spec_for(strategy, model, topology, options, host).replace(
                        scaling=scaling, global_batch=None if scaling == "weak" else sel.global_batch
                    )
                    skip = _outside_matrix(spec, options.matrix) or skip_reason(spec, host)
                    cases.append(
                        Case(
                            id=spec.case_id,
                            spec=spec,
                            skip=skip,
                            oversubscribed=oversubscribed(spec.topo, host, options.run.cpu_threads),
                        )
                    )
    return cases
