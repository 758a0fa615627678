"""Why a case cannot run here, from strategy cards and the workload: the skip reasons of the matrix.

Each rule reads a card (harness/scalegate/contract/cards.py), never strategy code: the topology it needs, the devices and
packages, what it asks of the workload (pipeline cuts, a tensor-parallel plan with whole heads per rank), and
whether ``--scaling-compile`` applies. A reason is a sentence naming the strategy and the factor that fails.
"""

from __future__ import annotations

import importlib.util

from scalegate.contract.cards import PIPELINE, TENSOR_PARALLEL, StrategyCard
from scalegate.contract.errors import SpecError
from scalegate.contract.parallel_dims import ParallelDims
from scalegate.contract.spec import CaseSpec
from scalegate.contract.topology import Topology

COMPILED = "single, ddp, fsdp, hsdp, zero1-torch, tp, fsdp-tp"


def strategy_unavailable(card: StrategyCard, topology: Topology, device: str, devices_per_node: int) -> str | None:
    """Why this strategy cannot run this topology on this kind of node (a skip reason), or None."""
    if card.min_cuda_devices and (device != "cuda" or devices_per_node < card.min_cuda_devices):
        if device != "cuda":
            return card.needs_cuda.format(device=device)
        return card.needs_cuda.replace("no CUDA device", f"{devices_per_node} CUDA device")
    if topology.world_size < card.min_world:
        return f"{card.name} needs a world size >= {card.min_world}, topology {topology} has {topology.world_size}"
    if card.max_world is not None and topology.world_size > card.max_world:
        return f"{card.name} runs at most {card.max_world} process(es), topology {topology} has {topology.world_size}"
    if topology.nodes < card.min_nodes:
        return f"{card.name} needs >= {card.min_nodes} nodes, topology {topology} has {topology.nodes}"
    for package in card.packages:
        if importlib.util.find_spec(package) is None:
            return f"{card.name} needs the optional package {package!r}, which is not installed"
    if card.needs_cuda and device != "cuda":
        return card.needs_cuda.format(device=device)
    return None


def workload_unavailable(card: StrategyCard, workload: type, topology: Topology) -> str | None:
    """Why this strategy cannot run this workload (a ``Workload`` subclass) on this topology, or None."""
    if PIPELINE in card.needs:
        if not workload.supports_pipeline():
            return f"{card.name}: workload {workload.name!r} does not implement pipeline_stages() with split_points"
        if topology.world_size > workload.max_pipeline_stages():
            return (
                f"{card.name}: workload {workload.name!r} can be cut into at most "
                f"{workload.max_pipeline_stages()} stages ({len(workload.split_points)} split point(s)), "
                f"topology {topology} has {topology.world_size} ranks"
            )
    if TENSOR_PARALLEL in card.needs and not callable(getattr(workload, "tensor_parallel_plan", None)):
        return (
            f"{card.name}: workload {workload.name!r} has no tensor_parallel_plan() (which modules to split "
            "column- and row-wise): run it on the decoder LM, --scaling-models gpt (docs/llm.md)"
        )
    if card.max_nodes is not None and topology.nodes > card.max_nodes:
        return card.max_nodes_why.format(topology=topology, nodes=topology.nodes)
    return None


def case_unavailable(card: StrategyCard, spec: CaseSpec, workload: type) -> str | None:
    """Why this strategy cannot run this case's preset (its dims) of ``workload``, or None."""
    if spec.execution.compile and not card.compiles:
        return (
            f"{card.name}: --scaling-compile does not apply (it runs its own engine or stage wrappers); "
            f"compiled: {COMPILED}"
        )
    if TENSOR_PARALLEL in card.needs:  # whole heads and MLP columns per rank, or a skip naming each size
        try:
            ParallelDims.of(spec.topo).check_divides(
                workload(spec.preset, spec.run.seed, dims=spec.dims).tensor_parallel_divisors(), workload.name
            )
        except SpecError as exc:
            return f"{card.name}: {exc.message}"
    return None


def sync_batchnorm_unavailable(card: StrategyCard, workload: type, device: str) -> str | None:
    """Why a workload with ``sync_batchnorm`` cannot run this strategy here (torch's SyncBatchNorm), or None."""
    if not getattr(workload, "sync_batchnorm", False):
        return None
    if PIPELINE in card.needs:
        return (
            f"{card.name}: workload {workload.name!r} sets sync_batchnorm, and pipeline stages are not data-parallel "
            "replicas: SyncBatchNorm would wait for ranks that hold other stages"
        )
    if device != "cuda":
        return (
            f"{card.name}: workload {workload.name!r} sets sync_batchnorm, and torch runs SyncBatchNorm on CUDA only "
            '("SyncBatchNorm expected input tensor to be on GPU"); on CPU leave it off: the reference then '
            "normalises each rank's shard, as the ranks do"
        )
    return None


def unavailable(card: StrategyCard, spec: CaseSpec, workload: type, device: str, devices_per_node: int) -> str | None:
    """Every rule above in order: the first reason, or None."""
    return (
        strategy_unavailable(card, spec.topo, device, devices_per_node)
        or workload_unavailable(card, workload, spec.topo)
        or case_unavailable(card, spec, workload)
        or sync_batchnorm_unavailable(card, workload, device)
    )
