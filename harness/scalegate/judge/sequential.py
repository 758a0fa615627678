"""Sequential verdicts over launches: launch again only while the evidence is undecided.

Each launch gives one local efficiency L_i (``harness/scalegate/measure/local_steps.py``); the gate works on
x_i = ln(L_i / B), B the baseline's. Two hypotheses, the shape of an SPRT (Wald 1945):

- H0, no change: x ~ N(0, s^2);
- H1, a drop of ``detect`` (``policy.DETECT`` by default): x ~ N(ln(1 - detect), s^2).

After n launches the log-likelihood ratio of H1 to H0, for the mean of the x_i, is

    llr_n = n * (mu1 - mu0) * (mean(x) - (mu0 + mu1) / 2) / v_n,
    v_n   = sigma^2 * (1 + n / M) + n * drift^2

where sigma is the spread between launches recorded with the baseline (M launches: the baseline's own
error is shared by every launch judged against it, so it cannot be averaged away), and ``drift`` is a
floor on how far a case's efficiency moves between sessions on the same kind of machine (measured:
docs/evidence/detection.md#each-vm-has-its-own-level). ``regressed`` when llr_n >= ln((1 - beta) / alpha), ``ok`` when
llr_n <= ln(beta / (1 - alpha)), else launch again, up to ``max_launches``; still undecided there is
``noisy`` (reported, not failing). Truncation only ever turns a decision into ``noisy``, so the false
alarm rate over the whole procedure stays below Wald's bound alpha / (1 - beta); ``simulate``
checks it, and tests/test_sequential.py asserts it under the normal model. Each x_i is clipped to
[mu1 - clip * w, mu0 + clip * w] first (w = sqrt(s^2 + drift^2): a launch's whole spread about the baseline), so one launch disturbed far beyond the recorded spread (another
tenant's burst) counts as strong evidence, never as unbounded evidence; and ``regressed`` needs at
least ``min_launches_regressed`` launches (a lone slow launch is confirmed by a second, as
``--scaling-confirm`` did).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Sequence

from scalegate import policy

OK, REGRESSED, UNDECIDED = "ok", "regressed", "undecided"


@dataclass(frozen=True, kw_only=True)
class Design:
    detect: float = policy.DETECT  # the drop (fraction of the baseline) the gate must catch with probability 1 - beta
    alpha: float = policy.ALPHA  # false alarms, over the whole sequential procedure, when nothing changed
    beta: float = policy.BETA  # misses when efficiency dropped by ``detect``
    max_launches: int = policy.MAX_LAUNCHES
    min_launches_regressed: int = 2
    min_launches_ok: int = 1  # A/B: a lone round reading no change is confirmed too (harness/scalegate/judge/ab.py)
    sigma_floor: float = 0.015  # a recorded spread narrower than this is not trusted (few launches)
    drift: float = 0.0  # between-session movement on the same kind of machine (relative)
    clip: float = 3.0

    def __post_init__(self) -> None:
        if not 0 < self.detect < 1:
            raise ValueError(f"detect={self.detect} is not a fraction in (0, 1)")
        if not (0 < self.alpha < 0.5 and 0 < self.beta < 0.5):
            raise ValueError(f"alpha={self.alpha}, beta={self.beta}: both must be in (0, 0.5)")
        if self.max_launches < 1 or self.min_launches_regressed < 1:
            raise ValueError("max_launches and min_launches_regressed must be >= 1")

    @property
    def upper(self) -> float:
        return math.log((1 - self.beta) / self.alpha)

    @property
    def lower(self) -> float:
        return math.log(self.beta / (1 - self.alpha))


@dataclass(frozen=True, kw_only=True)
class Decision:
    status: str  # ok | regressed | undecided
    launches: int
    llr: float
    upper: float
    lower: float
    change: float  # exp(mean of the clipped x) - 1: the estimated relative change in efficiency
    sigma: float

    @property
    def decided(self) -> bool:
        return self.status != UNDECIDED


def state(found: Decision, design: Design, **extra: Any) -> dict[str, Any]:
    """The test's state when it stopped, as a case file records it (timing, A/B and parity verdicts alike)."""
    return {
        "llr": round(found.llr, 3),
        "upper": round(found.upper, 3),
        "lower": round(found.lower, 3),
        "change": round(found.change, 4),
        "sigma": round(found.sigma, 4),
        "detect": design.detect,
        "alpha": design.alpha,
        "beta": design.beta,
        "max_launches": design.max_launches,
        **extra,
    }


def power(design: Design) -> str:
    """What the test promises, in the words every verdict message uses."""
    return f"a {design.detect:.0%} drop caught with probability {1 - design.beta:.0%}, false alarms {design.alpha:.0%}"


def decidable(
    values: Sequence[float], baseline: float, sigma: float, baseline_launches: int, design: Design = Design()
) -> bool:
    """Whether the budget can still reach a verdict: if the remaining launches read exactly no change, or exactly
    a ``detect`` drop, does either bound get crossed by ``max_launches``? With a shared movement (``drift``) as
    wide as the drop no number of launches averages it away, and launching them only spends time."""
    for target in (0.0, math.log(1 - design.detect)):
        more = [baseline * math.exp(target)] * (design.max_launches - len(values))
        for n in range(len(values), design.max_launches + 1):
            if decide([*values, *more[: n - len(values)]], baseline, sigma, baseline_launches, design).decided:
                return True
    return False


def decide(
    values: Sequence[float], baseline: float, sigma: float, baseline_launches: int, design: Design = Design()
) -> Decision:
    """The verdict after ``values`` (one local efficiency per launch, in launch order) against ``baseline``."""
    if baseline <= 0 or not values or any(v <= 0 for v in values):
        raise ValueError(f"efficiencies must be positive: baseline {baseline}, launches {list(values)}")
    s = max(sigma, design.sigma_floor)
    mu0, mu1 = 0.0, math.log(1 - design.detect)
    wide = design.clip * math.hypot(s, design.drift)  # a launch's whole spread about the baseline, shared part too
    xs = [min(max(math.log(v / baseline), mu1 - wide), mu0 + wide) for v in values]
    n = len(xs)
    mean = sum(xs) / n
    var = s * s * (1 + n / max(baseline_launches, 1)) + n * design.drift**2
    llr = n * (mu1 - mu0) * (mean - (mu0 + mu1) / 2) / var
    if llr >= design.upper and n >= design.min_launches_regressed:
        status = REGRESSED
    elif llr <= design.lower and n >= design.min_launches_ok:
        status = OK
    else:
        status = UNDECIDED
    return Decision(
        status=status, launches=n, llr=llr, upper=design.upper, lower=design.lower, change=math.exp(mean) - 1, sigma=s
    )


def run(draw, baseline: float, sigma: float, baseline_launches: int, design: Design = Design()) -> Decision:
    """The whole procedure: ``draw()`` one more launch's efficiency until decided or out of launches."""
    values = [draw()]
    while True:
        decision = decide(values, baseline, sigma, baseline_launches, design)
        if decision.decided or len(values) >= design.max_launches:
            return decision
        values.append(draw())


def simulate(
    drop: float, sigma: float, baseline_launches: int, design: Design = Design(), trials: int = 20000, seed: int = 0
) -> dict[str, float]:
    """Operating characteristics under the normal model: verdict shares and mean launches at a true ``drop``.

    The baseline is itself drawn from ``baseline_launches`` launches, as it is recorded."""
    rng = random.Random(seed)
    counts = {OK: 0, REGRESSED: 0, UNDECIDED: 0}
    launches = 0
    for _ in range(trials):
        base = math.exp(sum(rng.gauss(0, sigma) for _ in range(baseline_launches)) / baseline_launches)
        decision = run(lambda: (1 - drop) * math.exp(rng.gauss(0, sigma)), base, sigma, baseline_launches, design)
        counts[decision.status] += 1
        launches += decision.launches
    return {**{k: v / trials for k, v in counts.items()}, "mean_launches": launches / trials}
