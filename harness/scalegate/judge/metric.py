"""Performance verdicts: a metric against its baseline, aware of the measured noise.

Regression (docs/concepts.md): efficiency below baseline * (1 - tolerance) *and* outside the measured noise
band. The noise band is the measurement's bootstrap interval widened by the baseline's own recorded
noise (both are single measurements), combined in quadrature:

- ``regressed``: even the top of the band is below the limit;
- ``improved``: even the bottom of the band is above baseline * (1 + tolerance);
- ``noisy``: the band is wider than ``noisy_limit``, or the value is past the limit but the band
  reaches back into it: the run cannot tell. Reported; it fails only under ``--scaling-strict``;
- ``ok`` otherwise. A value inside the tolerance band is never ``regressed``.

Deterministic metrics (bytes on the wire, memory) have no noise band: ``budgets.py`` gates them tightly against
baseline * (1 + tolerance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalegate.contract.errors import ScalegateError
from scalegate.figures.stats import Estimate
from scalegate.record.baselines import Reference

OK, REGRESSED, IMPROVED, NOISY, NO_BASELINE, NOT_MEANINGFUL, FAILED = (
    "ok",
    "regressed",
    "improved",
    "noisy",
    "no-baseline",
    "not-meaningful",
    "failed",
)

# A combined relative half-width above this cannot resolve a regression of the default tolerance.
# Chosen from docs/evidence/detection.md#the-defaults-it-set-a-10-tolerance-and-a-noisy-band.
DEFAULT_NOISY_LIMIT = 0.10


@dataclass(frozen=True, kw_only=True)
class Verdict:
    status: str
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.status in (REGRESSED, FAILED)

    def failed_strict(self) -> bool:
        """``--scaling-strict``: a run too noisy to judge fails too."""
        return self.failed or self.status == NOISY


def band_rel(estimate: Estimate, baseline_noise: float = 0.0) -> float:
    return math.sqrt(estimate.half_width_rel**2 + baseline_noise**2)


def higher_is_better(
    estimate: Estimate,
    reference: Reference | None,
    where: str,
    *,
    baseline_noise: float = 0.0,
    noisy_limit: float = DEFAULT_NOISY_LIMIT,
    metric: str = "efficiency",
) -> Verdict:
    """A timing metric (higher is better) with its bootstrap interval against its baseline."""
    if reference is None:
        return Verdict(status=NO_BASELINE, message=f"no baseline for {where}")
    value, noise = estimate.value, band_rel(estimate, baseline_noise)
    low, high = reference.value * (1 - reference.tolerance), reference.value * (1 + reference.tolerance)
    band = f"(tolerance {reference.tolerance:.0%}, noise ±{noise:.1%}) [{where}]"
    base = f"baseline {reference.value:.3f}"
    if value * (1 + noise) < low:
        return Verdict(status=REGRESSED, message=f"{metric} {value:.3f} is below {base} {band}")
    if value * (1 - noise) > high:
        return Verdict(
            status=IMPROVED,
            message=f"{metric} {value:.3f} is above {base} {band}: consider `python -m scalegate update-baselines`",
        )
    if noise > noisy_limit:
        return Verdict(
            status=NOISY,
            message=f"{metric} {value:.3f} vs {base}: noise ±{noise:.1%} is above the "
            f"±{noisy_limit:.0%} a verdict needs {band}; run more steps",
        )
    if value < low:
        return Verdict(
            status=NOISY, message=f"{metric} {value:.3f} is below {base} but within its noise {band}; rerun to confirm"
        )
    return Verdict(status=OK, message=f"{metric} {value:.3f} within {base} {band}")


TOLERANCE_METRICS = ("efficiency", "throughput", "mfu", "peak_memory_bytes", "bytes_per_step", "final_loss")


def tolerance_overrides(args: tuple, kwargs: dict) -> dict[str, float]:
    """Validate ``@pytest.mark.scaling_tolerance(efficiency=0.15, ...)``: known metrics, fractions."""
    hint = (
        f"use keyword fractions, e.g. @pytest.mark.scaling_tolerance(efficiency=0.15); metrics: "
        f"{', '.join(TOLERANCE_METRICS)}"
    )
    if args:
        raise ScalegateError(f"scaling_tolerance takes keywords only, got positional {args!r}", hint)
    for metric, value in kwargs.items():
        if metric not in TOLERANCE_METRICS:
            raise ScalegateError(f"scaling_tolerance: unknown metric {metric!r}", hint)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 10:
            raise ScalegateError(f"scaling_tolerance: {metric}={value!r} is not a fraction in [0, 10)", hint)
    return {k: float(v) for k, v in kwargs.items()}
