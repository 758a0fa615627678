"""The frozen case specification shared by the launching side and the worker side."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalegate.contract.errors import SpecError
from scalegate.contract.script import ScriptSpec
from scalegate.contract.topology import Topology

DTYPES = ("fp32", "bf16")
SCALINGS = ("weak", "strong")
DEVICES = ("auto", "cpu", "cuda")
DUET_THREADS = ("auto", "bound", "free")  # --scaling-duet-threads (contract/affinity.py gloo_threads)
PAIRINGS = ("duet", "alternate")  # how a gate's two sides' jobs take turns: step by step, or whole jobs (docs/duet.md)


@dataclass(frozen=True, kw_only=True)
class Faults:
    """Injected faults, all off by default. They exist so tests can prove each gate fires."""

    delay_ms: float = 0.0  # sleep inside every step of a multi-rank job (a slow interconnect)
    grad_scale: float = 1.0  # scale this rank's gradients before the optimizer (a wrong reduction)
    grad_scale_rank: int = 0
    skip_step: int = -1  # this untimed step's optimizer update is skipped on skip_step_rank (a desync)
    skip_step_rank: int = 0
    # sleep this fraction of the step's own measured time inside every step of a multi-rank job:
    # a relative slowdown, the same size on any machine (experiments/detection.py measures the gate with it)
    slowdown: float = 0.0
    # reliability faults (--scaling-inject-fault); -1 = off. Steps count from 0 over every step, warm-up included.
    hang_rank: int = -1  # this rank sleeps forever at hang_step (a collective that never completes)
    hang_step: int = 0
    crash_rank: int = -1  # this rank raises at crash_step
    crash_step: int = 0
    no_result_rank: int = -1  # this rank exits 0 without writing its result
    bad_result_rank: int = -1  # this rank writes a malformed result file
    # this many extra gradient-sized all-reduces in every step (a duplicated collective: the bytes gate)
    extra_allreduce: int = 0
    hold_memory_mb: int = 0  # every rank holds this much more memory through the measured steps (memory gate)
    # this rank sleeps this long in every forward, before its loss (a straggler: harness/scalegate/figures/stragglers.py names it)
    straggler_rank: int = -1
    straggler_ms: int = 0
    # --scaling-checkpoint's window restores the model but not the optimizer state (a resume that loses Adam's
    # moments and step count): the round-trip parity check must fail the case (harness/scalegate/measure/checkpoint.py)
    checkpoint_skip_optimizer: bool = False
    # the single-process reference normalises the whole global batch even where the ranks' BatchNorm sees only their
    # shard (a loose reference): gradient agreement must fail on such a model, so the check is not loose
    whole_batch_reference: bool = False
    # a script's bootstrap counts every optimizer-step call of every optimizer as a training step (a naive step
    # hook): the measurement self-check (harness/scalegate/checks/script.py) must fail the case
    count_every_step: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "checkpoint_skip_optimizer", bool(self.checkpoint_skip_optimizer))  # 1 from the CLI
        object.__setattr__(self, "whole_batch_reference", bool(self.whole_batch_reference))
        object.__setattr__(self, "count_every_step", bool(self.count_every_step))
        if self.delay_ms < 0:
            raise SpecError(f"injected delay {self.delay_ms} ms is negative", "use a delay >= 0")
        if not 0 <= self.slowdown <= 10:
            raise SpecError(
                f"injected slowdown {self.slowdown} is not a fraction in [0, 10]", "e.g. 0.1 for a 10% slower step"
            )

    @property
    def any(self) -> bool:
        return (
            self.delay_ms > 0
            or self.grad_scale != 1.0
            or self.skip_step >= 0
            or self.slowdown > 0
            or max(self.hang_rank, self.crash_rank, self.no_result_rank, self.bad_result_rank) >= 0
            or self.extra_allreduce > 0
            or self.hold_memory_mb > 0
            or (self.straggler_rank >= 0 and self.straggler_ms > 0)
            or self.checkpoint_skip_optimizer
            or self.whole_batch_reference
            or self.count_every_step
        )


FAULT_SYNTAX = (
    "hang:rank=R,step=K | crash:rank=R[,step=K] | no-result:rank=R | bad-result:rank=R | "
    "straggler:rank=R,ms=M | checkpoint-skip-optimizer (with --scaling-checkpoint) | count-every-step (scripts)"
)
_FAULT_KEYS = {
    "hang": ("hang", ("rank", "step")),
    "crash": ("crash", ("rank", "step")),
    "no-result": ("no_result", ("rank",)),
    "bad-result": ("bad_result", ("rank",)),
    "straggler": ("straggler", ("rank", "ms")),
    "checkpoint-skip-optimizer": ("checkpoint_skip_optimizer", ()),
    "count-every-step": ("count_every_step", ()),
}  # a switch: no arguments
_FAULT_REQUIRED = {"hang": ("rank", "step"), "straggler": ("rank", "ms")}  # the others need only a rank


def parse_fault(text: str) -> dict[str, int]:
    """``hang:rank=1,step=3`` -> ``{"hang_rank": 1, "hang_step": 3}`` (``Faults`` field values)."""
    hint = f"write --scaling-inject-fault as {FAULT_SYNTAX}, e.g. hang:rank=1,step=3"
    kind, _, args = str(text).strip().partition(":")
    if kind not in _FAULT_KEYS:
        raise SpecError(f"--scaling-inject-fault {text!r}: unknown fault {kind!r}", hint)
    prefix, allowed = _FAULT_KEYS[kind]
    values: dict[str, int] = {}
    for item in filter(None, (a.strip() for a in args.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not allowed:
            raise SpecError(f"--scaling-inject-fault {text!r}: {kind} takes no arguments, got {item!r}", hint)
        if not eq or key not in allowed or key in values:
            raise SpecError(
                f"--scaling-inject-fault {text!r}: {item!r} is not one of {', '.join(allowed)}=N (each at most once)",
                hint,
            )
        value = value.strip()
        if not (value.isascii() and value.isdigit()) or len(value) > 6:
            raise SpecError(f"--scaling-inject-fault {text!r}: {key}={value!r} is not a whole number >= 0", hint)
        values[key] = int(value)
    if not allowed:  # a switch (checkpoint-skip-optimizer): on, with no arguments (any was refused above)
        return {prefix: 1}
    missing = [key for key in _FAULT_REQUIRED.get(kind, ("rank",)) if key not in values]
    if missing:
        raise SpecError(f"--scaling-inject-fault {text!r}: missing {' and '.join(missing)}", hint)
    return {f"{prefix}_{key}": value for key, value in values.items()}


@dataclass(frozen=True, kw_only=True)
class CaseSpec:
    strategy: str
    model: str
    preset: str
    topology: str
    micro_batch: int
    steps: int = 20
    warmup: int = 5
    dtype: str = "fp32"
    seed: int = 1234
    scaling: str = "weak"
    global_batch: int | None = None  # strong scaling only: fixed across world sizes
    device: str = "auto"
    cpu_threads: int = 1
    cpu_binding: bool = False  # CPU devices: each local rank on cores of its own (scalegate/contract/affinity.py)
    # an A/B gate's pairing (docs/duet.md): the coordinator's address (None: no gate, every turn is a no-op), this
    # side, and whether the two sides' jobs take turns step by step (duet) or one whole job at a time (alternate)
    duet_address: str | None = None
    duet_side: str = "head"
    duet_pairing: str = "duet"
    # a duet on CPU devices: gloo's worker threads bound with the rank, or free (contract/affinity.py gloo_threads)
    duet_threads: str = "auto"
    tp_sequence_parallel: bool = False  # tp, fsdp-tp: the norms run on sequence shards (scalegate/strategies/tp.py)
    # --scaling-compile: the workload's blocks run under torch.compile (harness/scalegate/worker/compiling.py); a baseline of its own
    compile: bool = False
    lr: float = 1e-3
    grad_check: bool = True
    timeout_s: float = 300.0
    memory_interval_ms: float = 50.0  # memory sampler period on every rank (--scaling-memory-interval-ms)
    microbatches: int = 0  # pipeline strategies: micro-batches per step; 0 = one per stage (world size)
    # --scaling-profile: this many profiled steps after the measured ones (0 = none), one Chrome trace per rank
    # into profile_dir (harness/scalegate/measure/profiling.py); set by the session, never timed
    profile_steps: int = 0
    profile_dir: str = ""
    # the same-launch reference (harness/scalegate/measure/local_steps.py): this many (distributed, local) step pairs after the
    # measured window, 0 = none; judged as the local efficiency (docs/gate.md)
    local_steps: int = 0
    # --scaling-checkpoint (harness/scalegate/measure/checkpoint.py): after every other window, save and load a checkpoint into
    # checkpoint_dir (set by the session: <case dir>/checkpoint), timed, and check that the resumed step matches
    # the uninterrupted one; checkpoint_keep leaves the files there (tests load them at another world size)
    checkpoint: bool = False
    checkpoint_dir: str = ""
    checkpoint_keep: bool = False
    # parity (harness/scalegate/parity.py): a second strategy trained in the same launch, its steps interleaved with
    # ``strategy``'s, each rank running both (harness/scalegate/worker/companion.py); "" = none. The name is checked where
    # strategies are resolved (harness/scalegate/plan/matrix.py, the worker), so the spec never imports the registry
    companion: str = ""
    faults: Faults = field(default_factory=Faults)
    dims: dict[str, Any] = field(default_factory=dict)  # overrides of the preset's model size knobs
    # Where the worker finds a workload that is not built in (scalegate.workloads.resolve): "package.module:Class" or
    # "hf:<model_type>"; "" = the built-in workload named ``model``. The ranks are other processes (torchrun,
    # srun, the warm agent's forkserver, possibly another node, any cwd), so the spec carries the absolute
    # directories they put in front of sys.path before importing it, rather than trusting their environment.
    workload: str = ""
    import_paths: tuple[str, ...] = ()
    # Parameter elements whose true gradient is 0, which gradient and parameter agreement leave out: found once per
    # workload and preset by the pytest side's probe before a launch (fixtures/probe.py, harness/scalegate/plan/probe.py):
    # {"dtype", "why", "params": {name: {"numel", "ranges": [[start, stop], ...]}}}; {} = not probed
    zero_grad: dict[str, Any] = field(default_factory=dict)
    # A team's own training script instead of a workload (harness/scalegate/contract/script.py): the ranks run it through the
    # bootstrap, and ``strategy`` is the script's own word for its strategy
    script: ScriptSpec | None = None

    def __post_init__(self) -> None:
        if isinstance(self.script, dict):  # a JSON round trip
            object.__setattr__(self, "script", ScriptSpec.from_dict(self.script))
        topo = Topology.parse(self.topology)  # raises with a HINT on a malformed string
        object.__setattr__(self, "topology", str(topo))
        if self.steps < 1:
            raise SpecError(
                f"steps={self.steps} for {self.case_id}: at least one measured step is needed",
                "pass --scaling-steps 1 or more",
            )
        if self.warmup < 0:
            raise SpecError(f"warmup={self.warmup} for {self.case_id} is negative", "pass --scaling-warmup 0 or more")
        if self.micro_batch < 1:
            raise SpecError(
                f"micro-batch {self.micro_batch} for {self.case_id} must be >= 1", "fix the model preset's micro_batch"
            )
        _one_of("dtype", self.dtype, DTYPES, self.case_id)
        _one_of("scaling", self.scaling, SCALINGS, self.case_id)
        _one_of("device", self.device, DEVICES, self.case_id)
        _one_of("duet_threads", self.duet_threads, DUET_THREADS, self.case_id)
        _one_of("duet_side", self.duet_side, ("base", "head"), self.case_id)
        _one_of("duet_pairing", self.duet_pairing, PAIRINGS, self.case_id)
        if self.cpu_threads < 1:
            raise SpecError(f"cpu_threads={self.cpu_threads} must be >= 1", "pass --scaling-cpu-threads 1 or more")
        if not self.memory_interval_ms > 0:
            raise SpecError(
                f"memory_interval_ms={self.memory_interval_ms} must be positive",
                "pass --scaling-memory-interval-ms 50 (or any period > 0)",
            )
        if self.timeout_s <= 0:
            raise SpecError(f"timeout {self.timeout_s}s must be positive", "pass --scaling-timeout 60 or more")
        if self.local_steps < 0:
            raise SpecError(
                f"local_steps={self.local_steps} for {self.case_id} is negative",
                "pass --scaling-local-steps 0 (off) or more",
            )
        if not isinstance(self.companion, str):
            raise SpecError(
                f"companion={self.companion!r} for {self.case_id} is not a strategy name",
                'name a strategy, e.g. companion="ddp", or leave it "" (none)',
            )
        self._check_workload()
        if self.microbatches < 0:
            raise SpecError(
                f"microbatches={self.microbatches} for {self.case_id} is negative",
                "use 0 (one micro-batch per pipeline stage) or a positive count",
            )
        self._check_batch()

    def _check_workload(self) -> None:
        if not isinstance(self.workload, str):
            raise SpecError(
                f"workload={self.workload!r} for {self.case_id} is not an import reference",
                'write "package.module:Class", or leave it "" for the built-in workload named by model',
            )
        paths = self.import_paths
        if isinstance(paths, str) or not all(isinstance(p, str) for p in paths):
            raise SpecError(
                f"import_paths={paths!r} for {self.case_id} is not a list of directories",
                'pass a tuple of absolute directories, e.g. ("/home/me/repo",)',
            )
        object.__setattr__(self, "import_paths", tuple(paths))  # a JSON round trip reads a list
        if not isinstance(self.zero_grad, dict) or not isinstance(self.zero_grad.get("params", {}), dict):
            raise SpecError(
                f"zero_grad={self.zero_grad!r} for {self.case_id} is not the probe's mapping",
                'leave it {} (the pytest side fills it in before a launch) or {"params": {name: {"numel": n, '
                '"ranges": [[start, stop]]}}}',
            )
        relative = [p for p in paths if not Path(p).is_absolute()]
        if relative:
            raise SpecError(
                f"import_paths for {self.case_id}: {relative[0]!r} is relative; ranks run in other "
                "directories (torchrun, srun, other nodes)",
                "pass absolute directories",
            )

    def _check_batch(self) -> None:
        if self.scaling == "weak":
            return
        if self.global_batch is None or self.global_batch < 1:
            raise SpecError(
                f"strong scaling for {self.case_id} needs a global batch >= 1, got {self.global_batch}",
                "pass --scaling-global-batch N",
            )
        if self.global_batch % self.world_size:
            raise SpecError(
                f"global batch {self.global_batch} does not divide by world size {self.world_size} "
                f"(topology {self.topology}) for {self.case_id}",
                f"use a global batch that is a multiple of {self.world_size}, "
                f"e.g. {self.world_size * max(1, self.global_batch // self.world_size)}",
            )

    @property
    def topo(self) -> Topology:
        return Topology.parse(self.topology)

    @property
    def world_size(self) -> int:
        return self.topo.world_size

    @property
    def case_id(self) -> str:
        """``ddp-cnn-1x2``; under strong scaling ``ddp-cnn-1x2-strong``: another global batch, another baseline."""
        return f"{self.strategy}-{self.model}-{self.topology}{'-strong' if self.scaling == 'strong' else ''}"

    @property
    def local_batch(self) -> int:
        """Samples each data-parallel rank processes per step."""
        if self.scaling == "weak":
            return self.micro_batch
        return self.global_batch // self.world_size  # type: ignore[operator]

    @property
    def global_batch_size(self) -> int:
        return self.local_batch * self.world_size

    def replace(self, **changes: Any) -> "CaseSpec":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CaseSpec":
        data = dict(data)
        data["faults"] = Faults(**data.get("faults", {}))
        return cls(**data)

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.to_dict(), indent=2))
        return path

    @classmethod
    def read(cls, path: Path) -> "CaseSpec":
        return cls.from_dict(json.loads(Path(path).read_text()))


def _one_of(name: str, value: str, allowed: tuple[str, ...], case_id: str) -> None:
    if value not in allowed:
        raise SpecError(
            f"{name}={value!r} for {case_id} is not one of {', '.join(allowed)}", f"pick one of: {', '.join(allowed)}"
        )
