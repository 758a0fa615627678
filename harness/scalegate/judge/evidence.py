"""What the judge reads: a case's launches as numbers, written into the case's result file.

A ``CaseRecord`` holds everything a verdict depends on and nothing it does not: every launch's measured
steps, same-launch pairs, final loss, peak memory and bytes on the wire, the single-process reference
steps of the session, the correctness problems found (they need no baseline), the test's tolerance
marker, and how the run was conducted (launches, confirmation rounds, the sequential design). The session
builds it from its launches; ``python -m scalegate compare`` reads it back from the result file; both hand
it to ``scalegate.judge.judge``, so the two cannot disagree.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from scalegate import policy
from scalegate.contract.errors import ScalegateError
from scalegate.contract.results import CaseResult
from scalegate.judge import gpu

RECORD_VERSION = 1
PAIRED = "paired"  # a launch that took turns with the other commit's job, step by step (LaunchRecord.duet)
ALTERNATE = "alternate"  # a launch that ran whole, the other commit's job of the case right before or after it


@dataclass(frozen=True, kw_only=True)
class LaunchRecord:
    step_times_s: tuple[float, ...]  # the measured window, slowest rank per step
    # a duet round's launches of the case pooled into one (gate/merge.py ``pooled``): each one's steps, in order
    lengths: tuple[int, ...] = ()
    pair_step_times_s: tuple[float, ...] = ()  # same-launch pairs: distributed step (slowest rank)
    local_step_times_s: tuple[float, ...] = ()  # ... and local step (ranks' mean); scalegate/measure/local_steps.py
    local_unavailable: str = ""  # why a launch has no pairs although they were asked for
    final_loss: float | None = None
    peak_memory_bytes: tuple[int, ...] = ()
    memory_source: str = ""
    bytes_per_step: float | None = None
    analytic_bytes_per_step: float | None = None
    wire_source: str = ""
    checkpoint_s_per_gb: float | None = None  # --scaling-checkpoint: (save + load) s per GB written
    # the 1x1 reference steps of the session this launch ran in, where the gate merges rounds (gate/merge.py):
    # an A/B on the classic efficiency pairs each round with its own reference, not the rounds' pooled one
    reference_step_times_s: tuple[float, ...] = ()
    reference_lengths: tuple[int, ...] = ()  # ... its launches' steps each, in order (a duet pairs launch by launch)
    # a gate --base round's duet (docs/duet.md): "paired" (took turns with the other commit's job), "solo: why", or ""
    duet: str = ""
    reference_duet: str = ""  # ... of the round's 1x1 reference
    duet_turn_steps: int = 1  # ... the steps of its turns (gate --turn-steps), the longest turn any rank took
    # the swap pairing (measure/swap.py): the most bytes a rank's swap-out moved, and a swap's seconds (out and back,
    # each a median of the rank's swaps, the slowest rank's); 0 where nothing was swapped
    duet_swap_bytes: int = 0
    duet_swap_s: float = 0.0
    duet_swap_freed: bool = False  # ... the swap freed what it copied out (a device job; a CPU job's copies are kept)
    # ... what stayed in a rank's CUDA caching allocator while it was swapped out, the most of any rank (None off CUDA)
    duet_swap_idle_bytes: int | None = None
    # ... what a swapped-out rank's whole process held on its GPU by NVML's count (its CUDA context, NCCL's buffers and
    # the allocator's share above), the most of any rank (None off CUDA, or where NVML did not list the rank's pid)
    duet_swap_idle_device_bytes: int | None = None
    # a duet on CPU: gloo's worker threads "bound" with the rank or "free: why" (contract/affinity.py), or "" (no duet,
    # CUDA, a base commit whose ranks do not say)
    duet_threads: str = ""
    # on a GPU: its state through the window, the ranks' pooled (judge/gpu.py); {} on CPU or from an older rank
    gpu_state: dict[str, Any] = field(default_factory=dict, compare=False)  # a dict: left out of eq and hash
    # every collective of the measured steps, the ranks' together (figures/ledger.py ``summarize``); {} where none
    ledger: dict[str, Any] = field(default_factory=dict, compare=False)
    # the most any rank's stepping thread waited for a core, as a share of its measured steps, and the host's steal
    # as a share of its cores' time (figures/resources.py ``cpu_wait``); None where not measured
    cpu_wait: float | None = None
    steal: float | None = None


@dataclass(frozen=True, kw_only=True)
class Conduct:
    """How the run measured the case: the judge needs it to know whether more launches would be made."""

    launches: int = 1  # --scaling-launches: launches judged together before any verdict
    confirm: int = 1  # --scaling-confirm: classic gate, rounds of relaunches that must also regress
    max_launches: int = policy.MAX_LAUNCHES  # --scaling-max-launches: sequential gate, the budget per case
    alpha: float = policy.ALPHA
    beta: float = policy.BETA
    tolerance: float | None = None  # --scaling-tolerance of the run: compare and gate re-judge with the same drop
    step_time_tolerance: float | None = None  # --scaling-step-time-tolerance: an A/B duet judges the step time too
    ledger_tolerance: float = policy.LEDGER_TOLERANCE  # --scaling-ledger-tolerance: the collectives' bytes a step


@dataclass(frozen=True, kw_only=True)
class CaseRecord:
    case_id: str
    key: str  # baseline key, "<case id>:<preset>"
    profile: str
    world_size: int
    global_batch: int
    steps: int
    warmup: int
    launches: tuple[LaunchRecord, ...] = ()
    reference_step_times_s: tuple[float, ...] = ()  # the session's single 1x1 launches, pooled
    reference_lengths: tuple[int, ...] = ()  # ... how many of those steps each launch measured, in launch order
    reference_global_batch: int = 0
    reference_launches: int = 0
    reference_duet: str = ""  # the reference launches' duet status (LaunchRecord.duet)
    problems: tuple[str, ...] = ()  # correctness failures: no performance verdict
    failure: str = ""  # the case produced no result (crash, hang, bad input)
    oversubscribed: bool = False
    oversubscribed_why: str = ""
    tolerances: dict[str, float] = field(default_factory=dict)  # @pytest.mark.scaling_tolerance
    conduct: Conduct = field(default_factory=Conduct)
    note: str = ""  # e.g. emulated links that could not be shaped
    reference_itself: bool = False  # the single-process 1x1 reference: its efficiency is 1 by definition
    host: str = ""  # HostInfo.host_id of the run; "" (hand-built records in unit tests) judges as the baseline's host
    # MFU's inputs (harness/scalegate/measure/flops.py, harness/scalegate/figures/peaks.py): the single-process model's FLOPs for one global batch,
    # counted by torch on rank 0; one device's peak at the case's dtype and where that figure comes from
    flops_per_step: float | None = None
    flops_unavailable: str = ""
    peak_flops: float | None = None
    peak_source: str = ""
    tokens_per_sample: int | None = None
    version: int = RECORD_VERSION

    @property
    def where(self) -> str:
        return f"{self.key} on {self.profile}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "the result file") -> "CaseRecord":
        try:
            if data.get("version") != RECORD_VERSION:
                raise ValueError(f"record version {data.get('version')!r}, this scalegate reads {RECORD_VERSION}")
            values = dict(data)
            values["launches"] = tuple(LaunchRecord(**_tuples(launch)) for launch in values.get("launches", ()))
            values["conduct"] = Conduct(**values.get("conduct", {}))
            for name in ("reference_step_times_s", "reference_lengths", "problems"):
                values[name] = tuple(values.get(name, ()))
            return cls(**values)
        except (TypeError, ValueError, AttributeError) as exc:
            raise ScalegateError(
                f"{source} holds no usable judge record ({exc})",
                "it was written by another scalegate version: rerun the case with this one",
            ) from None


def _tuples(launch: dict[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in launch.items()}


def launch_record(result: CaseResult, wire: dict[str, Any]) -> LaunchRecord:
    """One launch's numbers; ``wire`` is ``scalegate.figures.resources.wire(result)``."""
    from scalegate.figures import ledger, resources  # launch side
    from scalegate.figures.resources import memory_source

    unavailable = next((r.extra.get("local_unavailable") for r in result.ranks if r.extra.get("local_unavailable")), "")
    return LaunchRecord(
        step_times_s=tuple(result.step_times_s),
        pair_step_times_s=tuple(result.pair_step_times_s),
        local_step_times_s=tuple(result.local_step_times_s),
        local_unavailable=unavailable or "",
        final_loss=result.losses[-1] if result.losses else None,
        peak_memory_bytes=tuple(r.peak_memory_bytes for r in result.ranks),
        memory_source=memory_source(result),
        bytes_per_step=wire.get("bytes_per_step"),
        analytic_bytes_per_step=wire.get("analytic_bytes_per_step"),
        wire_source=wire.get("source") or "",
        checkpoint_s_per_gb=(resources.checkpoint(result) or {}).get("s_per_gb"),
        duet=duet_status(result),
        duet_turn_steps=max([(r.extra.get("duet") or {}).get("turn_steps") or 1 for r in result.ranks] or [1]),
        **swapped(result),
        duet_threads=duet_threads(result),
        gpu_state=gpu.pool([r.extra.get("gpu_state") or {} for r in result.ranks]),
        ledger=ledger.summarize(result),
        **resources.cpu_wait(result),
    )


def swapped(result: CaseResult) -> dict[str, Any]:
    """What the ranks' swaps moved and took (the swap pairing), the most of any rank; {} where none swapped."""
    swaps = [(r.extra.get("duet") or {}).get("swap") or {} for r in result.ranks]
    swaps = [s for s in swaps if s.get("swaps")]
    if not swaps:
        return {}
    return {
        "duet_swap_bytes": max(int(s.get("swap_bytes") or 0) for s in swaps),
        "duet_swap_s": max(float(s.get("swap_out_s") or 0.0) + float(s.get("swap_in_s") or 0.0) for s in swaps),
        "duet_swap_freed": any(s.get("freed") for s in swaps),
        "duet_swap_idle_bytes": _most(s.get("idle_reserved_bytes") for s in swaps),
        "duet_swap_idle_device_bytes": _most(s.get("idle_device_bytes") for s in swaps),
    }


def _most(values: Iterable[Any]) -> int | None:
    """The largest of the ranks' readings that were taken (None where none was)."""
    return max((int(value) for value in values if value is not None), default=None)


def duet_status(result: CaseResult) -> str:
    """ "paired" where every rank took turns with the other commit's job, "alternate" where every rank ran whole
    beside its partner in time, "solo: why" where one ran alone, "" outside a gate's pairing (ranks'
    ``extra["duet"]``, scalegate/measure/turns.py)."""
    duets = [r.extra.get("duet") or {} for r in result.ranks]
    if not duets or not all(duets):
        return ""
    if all(d.get("paired") for d in duets):
        return PAIRED
    if all(d.get("alternate") for d in duets):
        return ALTERNATE
    return "solo: " + next((d.get("why") or "" for d in duets if not d.get("paired")), "")


def duet_threads(result: CaseResult) -> str:
    """What a launch's ranks said of gloo's threads (``extra["cpu_binding"]["gloo_threads"]``, contract/affinity.py),
    as one (``threads_of``)."""
    return threads_of([(r.extra.get("cpu_binding") or {}).get("gloo_threads") or "" for r in result.ranks])


def threads_of(said: Sequence[str]) -> str:
    """ "bound" where every rank (or launch) bound gloo's threads, else the first "free: why"; "" where one said
    nothing."""
    if not said or not all(said):
        return ""
    return "bound" if all(s.startswith("bound") for s in said) else next(s for s in said if not s.startswith("bound"))


def references_duet(references: Sequence[CaseResult]) -> str:
    """The reference launches' pairing: the one every one of them had, else the first that differs."""
    found = [duet_status(r) for r in references]
    if len(set(found)) <= 1:
        return found[0] if found else ""
    return next((status for status in found if status not in (PAIRED, ALTERNATE)), "mixed pairings")


def pooled_steps(results: Sequence[CaseResult]) -> tuple[float, ...]:
    """Several launches of the steady single-process reference as one series of steps."""
    return tuple(t for r in results for t in r.step_times_s)


def from_results(
    results: Sequence[CaseResult], references: Sequence[CaseResult], *, key: str, profile: str, **fields: Any
) -> CaseRecord:
    """The record of a case's launches against the session's reference launches; ``fields`` are the rest
    (problems, oversubscribed, tolerances, conduct, note, failure)."""
    from scalegate.figures import resources  # launch side: bytes on the wire per launch

    spec = results[0].spec if results else None
    if spec is None:
        raise ValueError("from_results needs at least one launch; a case with none is CaseRecord(failure=...)")
    return CaseRecord(
        case_id=spec.case_id,
        key=key,
        profile=profile,
        world_size=spec.world_size,
        global_batch=spec.global_batch_size,
        steps=spec.run.steps,
        warmup=spec.run.warmup,
        launches=tuple(launch_record(r, resources.wire(r)) for r in results),
        reference_step_times_s=pooled_steps(references),
        reference_global_batch=references[0].spec.global_batch_size if references else 0,
        reference_launches=len(references),
        reference_lengths=tuple(len(r.step_times_s) for r in references),
        reference_duet=references_duet(references),
        **_flops(results),
        **fields,
    )


def _flops(results: Sequence[CaseResult]) -> dict[str, Any]:
    """The counted FLOPs and tokens of the first launch that has them (rank 0 counts; every launch counts the same)."""
    ranks = [r for result in results for r in result.ranks]
    counted = next((r for r in ranks if r.flops_per_step), None)
    why = next((r.flops_unavailable for r in ranks if r.flops_unavailable and r.rank == 0), "not counted")
    return {
        "flops_per_step": counted.flops_per_step if counted else None,
        "flops_unavailable": "" if counted else why,
        "tokens_per_sample": next((r.tokens_per_sample for r in ranks if r.tokens_per_sample), None),
    }
