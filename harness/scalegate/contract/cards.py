"""What the pytest side may know of a strategy before anything is launched: its card.

A strategy is two things. Its *card* (here) is data both sides share: the name, where its code lives, which
topologies, devices and packages it needs, what it asks of a workload, whether ``--scaling-compile`` applies and
whether it runs only when named. Its *code* (``harness/scalegate/strategies/<name>.py``) is the worker side: it wraps a
model, steps it, hands back full tensors, and reports what it promises (sharding, bytes on the wire) in the rank's
results. The matrix, the launchers and the judge read cards and results, never strategy code, so the pytest
process imports neither ``torch.distributed``'s wrappers nor DeepSpeed or Lightning to build the matrix.

Adding a strategy: its module under ``harness/scalegate/strategies/`` and one card below (docs/architecture.md). The rules
that turn a card into a skip reason are ``harness/scalegate/plan/availability.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalegate.contract.errors import SpecError

# What a strategy can ask of a workload (harness/scalegate/plan/availability.py says why a workload cannot serve it):
PIPELINE = "pipeline"  # pipeline_stages() with split points (fixtures/base.py)
TENSOR_PARALLEL = "tensor_parallel"  # tensor_parallel_plan() and whole heads / MLP columns per rank


@dataclass(frozen=True, kw_only=True)
class StrategyCard:
    name: str
    impl: str  # "module:Class" of the worker side's code, imported by ranks only
    min_world: int = 1
    max_world: int | None = None
    min_nodes: int = 1
    max_nodes: int | None = None  # tp: its group is one node's ranks
    max_nodes_why: str = ""
    packages: tuple[str, ...] = ()  # optional packages its code imports
    needs_cuda: str = ""  # non-empty: why it cannot run without CUDA ("{device}" is filled in)
    min_cuda_devices: int = 0  # devices one process drives (DataParallel)
    needs: tuple[str, ...] = ()  # PIPELINE, TENSOR_PARALLEL
    compiles: bool = False  # --scaling-compile applies (harness/scalegate/worker/compiling.py)
    opt_in: bool = False  # runs only when named (--scaling-strategies, scaling_matrix, parity), not in "all"
    # why gloo's worker threads stay free in a duet on CPU (contract/affinity.py ``gloo_threads``); "" binds them
    # with the rank, as every other strategy's are (--scaling-duet-threads auto)
    duet_threads_free: str = ""


_S = "scalegate.strategies."
_LIGHTNING_FSDP = (
    'lightning-fsdp: Lightning refuses CPU: "The strategy `fsdp` requires a GPU accelerator, but received '
    "`accelerator='cpu'`. Please set `accelerator='cuda'`, `accelerator='gpu'`, or pass a "
    '`CUDAAccelerator()` instance to use FSDP."'
)
# Lightning's refusals on CPU, quoted from Lightning 2.6 (tests/test_strategies_ds_fabric.py keeps them true)
_FABRIC_FSDP = (
    'fabric-fsdp: Lightning refuses CPU: "You selected the FSDP strategy but FSDP is only available '
    "on GPU. Set `Fabric(accelerator='gpu', ...)` to continue or select a different strategy.\""
)
_DEEPSPEED_CPU = (
    'Lightning refuses CPU: "The DeepSpeed strategy is only supported on CUDA GPUs but `CPUAccelerator` is used."'
)
# The strategies whose duet step at W binding slows by half or more on the 2-core VMs (what binding costs each
# strategy: docs/evidence/duet.md#what-binding-costs-each-strategy).
ZERO1_THREADS_FREE = (
    "its many small broadcasts queue behind the rank's compute on its core: bound, its duet step at W took "
    "183-189 ms against 70-82 ms free (zero1-torch-resnet-1x2)"
)
ZERO3_THREADS_FREE = (
    "its many small all-gathers queue behind the rank's compute on its core: bound, its duet step at W took "
    "362-403 ms against 205-255 ms free (deepspeed-zero3-resnet-1x2)"
)
FSDP1_REFUSAL = "FSDP needs a non-CPU accelerator device, but no accelerator device is detected."

CARDS: dict[str, StrategyCard] = {
    c.name: c
    for c in (
        StrategyCard(name="single", impl=_S + "single:Single", max_world=1, compiles=True),
        StrategyCard(name="ddp", impl=_S + "ddp:DDP", compiles=True),
        StrategyCard(
            name="dp",
            impl=_S + "dp:DP",
            max_world=1,  # one process drives the node's GPUs
            needs_cuda="dp (nn.DataParallel) needs >= 2 CUDA devices in one process; this node has no CUDA device",
            min_cuda_devices=2,
        ),
        StrategyCard(name="fsdp", impl=_S + "fsdp:FSDP", compiles=True),
        StrategyCard(
            name="fsdp1",
            impl=_S + "fsdp1:FSDP1",
            needs_cuda=f'fsdp1 runs on CUDA only: torch refuses FullyShardedDataParallel on {{device}}: "{FSDP1_REFUSAL}"',
        ),
        # with one node the replicate dimension is 1 and HSDP is plain FSDP
        StrategyCard(name="hsdp", impl=_S + "hsdp:HSDP", min_nodes=2, compiles=True),
        StrategyCard(
            name="zero1-torch",
            impl=_S + "zero1_torch:Zero1Torch",
            compiles=True,
            duet_threads_free=ZERO1_THREADS_FREE,
        ),
        # one stage per rank; a single stage is not a pipeline
        StrategyCard(name="pipeline-gpipe", impl=_S + "pipeline:GPipe", min_world=2, needs=(PIPELINE,)),
        StrategyCard(name="pipeline-1f1b", impl=_S + "pipeline:OneFOneB", min_world=2, needs=(PIPELINE,)),
        StrategyCard(name="deepspeed-zero1", impl=_S + "deepspeed_zero:DeepSpeedZero1", packages=("deepspeed",)),
        StrategyCard(name="deepspeed-zero2", impl=_S + "deepspeed_zero:DeepSpeedZero2", packages=("deepspeed",)),
        StrategyCard(
            name="deepspeed-zero3",
            impl=_S + "deepspeed_zero:DeepSpeedZero3",
            packages=("deepspeed",),
            duet_threads_free=ZERO3_THREADS_FREE,
        ),
        StrategyCard(name="fabric-ddp", impl=_S + "fabric:FabricDDP", packages=("lightning",)),
        StrategyCard(
            name="fabric-fsdp", impl=_S + "fabric:FabricFSDP", packages=("lightning",), needs_cuda=_FABRIC_FSDP
        ),
        StrategyCard(
            name="fabric-deepspeed",
            impl=_S + "fabric:FabricDeepSpeed",
            packages=("lightning", "deepspeed"),
            needs_cuda="fabric-deepspeed: " + _DEEPSPEED_CPU,
        ),
        StrategyCard(
            name="tp",
            impl=_S + "tp:TP",
            min_world=2,
            max_nodes=1,
            max_nodes_why="tp: the tp group is one node's ranks; {topology} has {nodes} nodes: use fsdp-tp",
            needs=(TENSOR_PARALLEL,),
            compiles=True,
        ),
        # one node: dp = 1 and this is plain tp
        StrategyCard(
            name="fsdp-tp", impl=_S + "tp:FSDPTP", min_world=2, min_nodes=2, needs=(TENSOR_PARALLEL,), compiles=True
        ),
        # The Trainer's cases cost ~25 s each on 2-core CI runners: they run when named, not in "all"
        StrategyCard(
            name="lightning-ddp",
            impl=_S + "lightning_trainer:LightningDDP",
            packages=("lightning", "greenlet"),
            opt_in=True,
        ),
        StrategyCard(
            name="lightning-fsdp",
            impl=_S + "lightning_trainer:LightningFSDP",
            packages=("lightning", "greenlet"),
            needs_cuda=_LIGHTNING_FSDP,
            opt_in=True,
        ),
        StrategyCard(
            name="lightning-deepspeed",
            impl=_S + "lightning_trainer:LightningDeepSpeed",
            packages=("lightning", "greenlet", "deepspeed"),
            needs_cuda="lightning-deepspeed: " + _DEEPSPEED_CPU,
            opt_in=True,
        ),
    )
}

OPT_IN = frozenset(name for name, c in CARDS.items() if c.opt_in)


def names() -> list[str]:
    return list(CARDS)


def card(name: str) -> StrategyCard:
    if name not in CARDS:
        raise SpecError(f"unknown strategy {name!r}", f"pick one of: {', '.join(CARDS)}")
    return CARDS[name]
