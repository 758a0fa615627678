"""The judge's answer for one case, and the settings a caller may override when asking."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scalegate.judge import metric as V
from scalegate.record.quarantine import today

if TYPE_CHECKING:
    from scalegate.contract.results import CaseResult

OK, REGRESSED, IMPROVED, NOISY, NO_BASELINE, NOT_MEANINGFUL, FAILED = (
    V.OK,
    V.REGRESSED,
    V.IMPROVED,
    V.NOISY,
    V.NO_BASELINE,
    V.NOT_MEANINGFUL,
    V.FAILED,
)
SEVERITY = (FAILED, REGRESSED, NOISY, IMPROVED, OK, NO_BASELINE, NOT_MEANINGFUL)  # worst first
LOCAL, CLASSIC = "local", "classic"  # which efficiency decided the timing verdict (docs/gate.md)
AB = "a/b"  # the local efficiency against the base commit's, measured in the same gate run (scalegate/judge/ab.py)


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """What the caller (pytest's options, ``compare``'s flags) may change about a verdict after the fact."""

    tolerance: float | None = None  # --scaling-tolerance / compare --tolerance: efficiency (and the local gate's drop)
    strict: bool = False  # noisy fails too
    require_baseline: bool = False  # no baseline fails
    noisy_limit: float = V.DEFAULT_NOISY_LIMIT
    ledger_tolerance: float | None = None  # --scaling-ledger-tolerance (judge/ledger.py); None: the run's own
    today: str = field(default_factory=today)  # ISO date: a quarantine in the baseline runs until its date


@dataclass(frozen=True, kw_only=True)
class MetricVerdict:
    metric: str  # efficiency, local_efficiency, peak_memory_bytes, bytes_per_step, final_loss, throughput, mfu
    status: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Outcome:
    case_id: str
    key: str
    status: str
    message: str
    gate: str = ""  # LOCAL, CLASSIC or AB: the efficiency the timing verdict was decided on
    launches: int = 0
    # the reports' efficiency: against the separate single-process 1x1 launch (docs/concepts.md)
    speedup: float | None = None
    efficiency: float | None = None
    efficiency_ci: tuple[float, float] | None = None
    noise_rel: float | None = None
    reference_throughput: float | None = None
    baseline_efficiency: float | None = None
    launch_efficiencies: tuple[float, ...] = ()
    # the same-launch efficiency: local step over distributed step (docs/gate.md)
    local_efficiency: float | None = None
    local_ci: tuple[float, float] | None = None
    baseline_local_efficiency: float | None = None
    launch_local_efficiencies: tuple[float, ...] = ()
    # FLOPs and MFU (harness/scalegate/figures/peaks.py): counted FLOPs of one step at the measured throughput, per device, over
    # the device's peak; None with the reason in mfu_unavailable (n/a: no count, or no peak for the device)
    tokens_per_s: float | None = None
    flops_per_step: float | None = None
    achieved_flops: float | None = None  # per device, FLOP/s
    mfu: float | None = None
    mfu_ci: tuple[float, float] | None = None
    peak_flops: float | None = None
    peak_source: str = ""
    mfu_unavailable: str = ""
    sequential: dict[str, Any] = field(
        default_factory=dict
    )  # the sequential test's state (scalegate/judge/sequential.py)
    metrics: tuple[MetricVerdict, ...] = ()
    next_launches: int = 0  # > 0: the verdict is undecided and that many more launches could decide it
    needs_reference: bool = False  # ... and the separate reference must be launched again with them
    problems: tuple[str, ...] = ()
    oversubscribed: bool = False
    tolerances: dict[str, float] = field(default_factory=dict)  # @pytest.mark.scaling_tolerance overrides
    tolerance: float | None = None  # the efficiency tolerance the timing verdict used (scalegate/judge/references.py)
    quarantined: str = ""  # the baseline's quarantine of the case (reason, until): reported, never failing
    # filled in by the session, not by the judge: the median launch and its resources, for records and plots
    result: "CaseResult | None" = None
    resources: dict[str, Any] = field(default_factory=dict)
    stragglers: dict[str, Any] = field(default_factory=dict)  # which rank arrives last (figures/stragglers.py)
    # the exact verdict on the collective ledger (judge/ledger.py ``Exact.as_dict``): its state, lines and bytes
    collectives: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status in (REGRESSED, FAILED) and not self.quarantined

    @property
    def decided(self) -> bool:
        return self.next_launches == 0
