"""Per-rank results written by workers, and the aggregated ``CaseResult`` built from them."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalegate.contract import SCHEMA_VERSION, metrics
from scalegate.contract.errors import LaunchError
from scalegate.contract.spec import CaseSpec


@dataclass(frozen=True, kw_only=True)
class RankResult:
    rank: int
    world_size: int
    node_rank: int
    host: str
    device: str
    step_times_s: list[float]  # measured steps only, each timed between device syncs
    losses: list[float]  # this rank's loss per measured step (nan where the rank computes none)
    warmup_losses: list[float]
    loss_weight: float  # this rank's share of the global loss (1/W for data parallel)
    peak_memory_bytes: int = 0
    memory_source: str = ""
    # on CUDA the judged peak is the allocator's; NVML's reading of the whole process stays beside it
    device_peak_bytes: int = 0
    device_peak_source: str = ""
    cpu_user_s: float = 0.0
    cpu_system_s: float = 0.0
    wall_s: float = 0.0
    grad_check: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    memory_interval_s: float = 0.0
    memory_timeline: list[tuple[float, int]] = field(default_factory=list)  # (s into the window, bytes), <= 200
    cuda_memory: dict[str, int] = field(default_factory=dict)  # max_allocated / max_reserved on CUDA
    state_bytes: dict[str, int] = field(default_factory=dict)  # params/grads/optimizer this rank holds
    full_state_bytes: dict[str, int] = field(default_factory=dict)  # analytic unsharded (DDP) replica
    shard_group: int = 1  # ranks that split one copy of the sharded state
    # what the strategy promises (``Strategy.shards``, ``shard_granularity``, ``wire_factor`` for this rank's
    # backend), reported by the rank so the launching side judges it without importing strategy code
    shards: list[str] = field(default_factory=list)
    shard_granularity: str = "element"
    wire_factor: float | None = None
    wire: dict[str, Any] = field(default_factory=dict)  # bytes sent in the measured window (scalegate/measure/wire.py)
    # every collective of the measured steps, per step (scalegate/measure/ledger.py); {} from a rank without one
    ledger: dict[str, Any] = field(default_factory=dict)
    # the stepping thread's wait for a core and the host's steal through the window (scalegate/measure/contention.py)
    cpu_wait: dict[str, Any] = field(default_factory=dict)
    # the same-launch reference (harness/scalegate/measure/local_steps.py): distributed step i, then this rank's local step i
    pair_step_times_s: list[float] = field(default_factory=list)
    local_step_times_s: list[float] = field(default_factory=list)
    # a parity launch's companion strategy (harness/scalegate/worker/companion.py), interleaved with this rank's steps
    companion_step_times_s: list[float] = field(default_factory=list)  # measured steps only
    companion_losses: list[float] = field(default_factory=list)
    companion_warmup_losses: list[float] = field(default_factory=list)
    # FLOPs of one forward and backward of the whole global batch by the single-process model, counted by torch
    # on rank 0 (harness/scalegate/measure/flops.py); None elsewhere, with the reason
    flops_per_step: int | None = None
    flops_by_op: dict[str, int] = field(default_factory=dict)
    flops_unavailable: str = ""
    forward_s: list[float] = field(
        default_factory=list
    )  # measured steps: step start to loss (scalegate/measure/clock.py)
    forward_collectives: bool = False  # the strategy communicates inside its forward (Strategy.forward_collectives)
    compile_s: float | None = None  # --scaling-compile: the first (compiling) forward and backward, untimed
    tokens_per_sample: int | None = None  # token workloads: tokens/s = samples/s x this (Workload.tokens_per_sample)

    @classmethod
    def read(cls, path: Path) -> "RankResult":
        try:
            data = json.loads(Path(path).read_text())
            return cls(**data)
        except FileNotFoundError:
            raise LaunchError(
                f"rank result {path} was not written",
                "the worker exited without writing its result; read its log next to it",
            ) from None
        except (json.JSONDecodeError, TypeError) as exc:
            raise LaunchError(
                f"rank result {path} is malformed: {exc}",
                "the worker wrote a partial or foreign file; rerun the case and read its log",
            ) from None


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    spec: CaseSpec
    ranks: list[RankResult]
    step_times_s: list[float]  # per measured step, the slowest rank's time
    losses: list[float]  # global loss per measured step (weighted over ranks)
    median_step_s: float
    mad_step_s: float
    throughput: float  # samples/s = global batch / median step time
    noise_rel: float  # relative half-width of the ~95% interval of the median step time
    launch_wall_s: float = 0.0  # launch to result, including process start and set-up
    launch: dict[str, Any] = field(default_factory=dict)  # how it ran: launcher, nodes' links (emulated, SLURM)
    # the same-launch pairs (harness/scalegate/measure/local_steps.py): distributed step i (slowest rank), local step i (ranks' mean)
    pair_step_times_s: list[float] = field(default_factory=list)
    local_step_times_s: list[float] = field(default_factory=list)
    # a parity launch's companion strategy, measured step i (slowest rank), interleaved with step i above
    companion_step_times_s: list[float] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @property
    def measured_s(self) -> float:
        return sum(self.step_times_s)

    @property
    def peak_memory_bytes(self) -> list[int]:
        return [r.peak_memory_bytes for r in self.ranks]

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["spec"] = self.spec.to_dict()  # the spec's own JSON (flat), as SPEC.json holds it
        data["case_id"] = self.spec.case_id
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CaseResult":
        """What ``to_dict`` wrote, read back (a parity file's launches, re-judged by ``compare``)."""
        fields = {f.name for f in dataclasses.fields(cls)} - {"spec", "ranks"}
        return cls(
            spec=CaseSpec.from_dict(data["spec"]),
            ranks=[RankResult(**r) for r in data["ranks"]],
            **{k: v for k, v in data.items() if k in fields},
        )


def aggregate(spec: CaseSpec, ranks: list[RankResult], launch_wall_s: float = 0.0) -> CaseResult:
    """Combine every rank's measurements: a step lasts as long as its slowest rank."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    if [r.rank for r in ranks] != list(range(spec.world_size)):
        raise LaunchError(
            f"{spec.case_id}: expected results from ranks 0..{spec.world_size - 1}, got {[r.rank for r in ranks]}",
            "read the missing ranks' logs in the case directory",
        )
    companion_steps = spec.run.steps if spec.companion else 0
    for series, expected in (("step_times_s", spec.run.steps), ("companion_step_times_s", companion_steps)):
        lengths = {len(getattr(r, series)) for r in ranks}
        if lengths != {expected}:
            raise LaunchError(
                f"{spec.case_id}: ranks measured {sorted(lengths)} steps ({series}), expected {expected}",
                "a rank stopped early; read its log",
            )
    step_times = [max(r.step_times_s[i] for r in ranks) for i in range(spec.run.steps)]
    losses = [_weighted_loss(ranks, i) for i in range(spec.run.steps)]
    median = metrics.median(step_times)
    pairs = {len(r.pair_step_times_s) for r in ranks} | {len(r.local_step_times_s) for r in ranks}
    n_pairs = pairs.pop() if len(pairs) == 1 else 0  # a window skipped on any rank is skipped for the case
    # the distributed step lasts as long as its slowest rank; the local step is the ranks' mean: the slowest rank's
    # local step would let one slowed core of the host inflate the estimate (DDP's communication work moves to the
    # other core, the local step cannot; docs/evidence/detection.md#designing-the-same-launch-reference)
    slowest = {
        "pair_step_times_s": [max(r.pair_step_times_s[i] for r in ranks) for i in range(n_pairs)],
        "local_step_times_s": [sum(r.local_step_times_s[i] for r in ranks) / len(ranks) for i in range(n_pairs)],
        # a distributed step, like the strategy's own: it lasts as long as its slowest rank
        "companion_step_times_s": [max(r.companion_step_times_s[i] for r in ranks) for i in range(companion_steps)],
    }
    return CaseResult(
        spec=spec,
        ranks=ranks,
        step_times_s=step_times,
        losses=losses,
        median_step_s=median,
        mad_step_s=metrics.mad(step_times),
        throughput=metrics.throughput(spec.global_batch_size, median),
        noise_rel=metrics.median_noise_rel(step_times),
        launch_wall_s=launch_wall_s,
        **slowest,
    )


def _weighted_loss(ranks: list[RankResult], step: int) -> float:
    # Ranks that compute no loss (early pipeline stages) carry weight 0 and report nan.
    return sum(r.loss_weight * r.losses[step] for r in ranks if r.loss_weight > 0)
