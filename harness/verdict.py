"""Performance verdicts: efficiency against a baseline, aware of the measured noise.

Regression (DESIGN.md): efficiency below baseline * (1 - tolerance) *and* outside the measured noise
band, i.e. still below the limit after adding the noise half-width to the measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.baselines import Reference

OK, REGRESSED, IMPROVED, NO_BASELINE, NOT_MEANINGFUL, FAILED = (
    "ok", "regressed", "improved", "no-baseline", "not-meaningful", "failed")


@dataclass(frozen=True, kw_only=True)
class Verdict:
    status: str
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.status in (REGRESSED, FAILED)


def judge_efficiency(value: float, noise_rel: float, reference: Reference | None, where: str) -> Verdict:
    if reference is None:
        return Verdict(status=NO_BASELINE, message=f"no baseline for {where}")
    low = reference.value * (1 - reference.tolerance)
    high = reference.value * (1 + reference.tolerance)
    band = f"(tolerance {reference.tolerance:.0%}, noise ±{noise_rel:.1%}) [{where}]"
    if value < low and value * (1 + noise_rel) < low:
        return Verdict(status=REGRESSED,
                       message=f"efficiency {value:.3f} is below baseline {reference.value:.3f} {band}")
    if value > high and value * (1 - noise_rel) > high:
        return Verdict(status=IMPROVED,
                       message=f"efficiency {value:.3f} is above baseline {reference.value:.3f} {band}: "
                               f"consider --scaling-update-baselines")
    return Verdict(status=OK, message=f"efficiency {value:.3f} within baseline {reference.value:.3f} {band}")
