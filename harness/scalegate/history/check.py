"""``history check``: change points per case and metric, each judged as a regression, improvement or suspicious.

For every (profile, case, metric) series of the history, oldest run first:

- fewer than ``2 * min_size`` runs: ``insufficient data`` (no split could have both sides long enough);
- E-divisive means with a permutation test (``changepoint.py``) finds the change points;
- each change point compares the median of its segment before with the median after (back to the previous
  and on to the next change point). The direction is the metric's: lower efficiency, local efficiency,
  throughput or MFU is worse; higher peak memory or bytes per step is worse. A shift smaller than the minimum
  effect (the case's tolerance for that metric in the baseline, else ``DEFAULT_MIN_EFFECT``) is
  ``suspicious``: statistically there, too small to act on. Otherwise ``regression`` or ``improvement``;
- a change point is *new* when its first run is one of the series' last ``recent`` runs, and the case is
  still being run (its latest run is one of the profile's last ``recent`` runs: a case dropped from the
  matrix must not fail every later nightly). Only a new, unquarantined regression fails the check (exit 1):
  an old one has already failed the nightlies after it and is then history (it stays on the page and in
  ``history check``'s table, marked old).

Each change names the commit range to look in: last good commit .. first bad commit.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from scalegate.history import changepoint, store
from scalegate.history.store import Point
from scalegate.record import baselines, quarantine

HIGHER_IS_BETTER = ("efficiency", "local_efficiency", "throughput", "mfu")
LOWER_IS_BETTER = ("peak_memory_bytes", "bytes_per_step", "checkpoint_s_per_gb")
CHECKED = HIGHER_IS_BETTER + LOWER_IS_BETTER
REGRESSION, IMPROVEMENT, SUSPICIOUS = "regression", "improvement", "suspicious"
NO_CHANGE, INSUFFICIENT = "no change", "insufficient data"
DEFAULT_MIN_EFFECT = 0.05
DEFAULT_RECENT = 5


@dataclass(frozen=True, kw_only=True)
class Settings:
    pvalue: float = changepoint.DEFAULT_PVALUE
    permutations: int = changepoint.DEFAULT_PERMUTATIONS
    min_size: int = changepoint.DEFAULT_MIN_SIZE
    recent: int = DEFAULT_RECENT  # a change point whose first run is among the last `recent` runs is new
    min_effect: float | None = None  # overrides every baseline tolerance
    default_min_effect: float = DEFAULT_MIN_EFFECT
    today: str = field(default_factory=quarantine.today)


@dataclass(frozen=True, kw_only=True)
class Change:
    index: int  # position of the first bad (changed) run in the series
    kind: str
    effect: float  # relative change of the medians, after / before - 1
    before: float
    after: float
    last_good: Point
    first_bad: Point
    pvalue: float
    new: bool

    def describe(self, metric: str) -> str:
        age = "NEW" if self.new else "old"
        return (
            f"{self.kind} {self.effect:+.1%} ({fmt(metric, self.before)} -> {fmt(metric, self.after)}) "
            f"from run {self.first_bad.run_id}, commits {self.last_good.commit}..{self.first_bad.commit} "
            f"(p={self.pvalue:.3f}, {age})"
        )


@dataclass(frozen=True, kw_only=True)
class SeriesVerdict:
    profile: str
    case_key: str
    case_id: str
    metric: str
    points: tuple[Point, ...]
    changes: tuple[Change, ...]
    status: str  # the latest change's kind, NO_CHANGE or INSUFFICIENT
    min_effect: float
    quarantined: str = ""  # the baseline's quarantine (reason, until): reported, never failing

    @property
    def new_regressions(self) -> list[Change]:
        return [c for c in self.changes if c.new and c.kind == REGRESSION]

    @property
    def failed(self) -> bool:
        return bool(self.new_regressions) and not self.quarantined


# How a page shows each metric: axis label and the divisor from the stored unit (bytes, samples/s, ...)
UNITS = {
    "peak_memory_bytes": ("peak memory (MiB)", 2**20),
    "bytes_per_step": ("MB on the wire per step", 1e6),
    "throughput": ("throughput (samples/s)", 1.0),
    "checkpoint_s_per_gb": ("checkpoint save + load (s/GB)", 1.0),
}


def unit(metric: str) -> tuple[str, float]:
    return UNITS.get(metric, (metric.replace("_", " "), 1.0))


def bisect_command(change: Change, case_id: str) -> str:
    """The next step for a regression: the command that finds the first bad commit inside its range (a run of an
    uncommitted tree records ``<commit>-dirty``; bisect takes the commit)."""
    good, bad = (x.removesuffix("-dirty") for x in (change.last_good.commit, change.first_bad.commit))
    return f"python -m scalegate bisect {good} {bad} -k {case_id}"


def fmt(metric: str, value: float) -> str:
    if metric in ("peak_memory_bytes",):
        return f"{value / 2**20:.1f} MiB"
    if metric == "bytes_per_step":
        return f"{value / 1e6:.2f} MB"
    if metric == "throughput":
        return f"{value:.1f}/s"
    if metric == "checkpoint_s_per_gb":
        return f"{value:.3g} s/GB"
    return f"{value:.3f}"


def classify(metric: str, effect: float, min_effect: float) -> str:
    if abs(effect) < min_effect:
        return SUSPICIOUS
    worse = effect < 0 if metric in HIGHER_IS_BETTER else effect > 0
    return REGRESSION if worse else IMPROVEMENT


def _relative(before: float, after: float) -> float:
    if before == 0:
        return 0.0 if after == 0 else float("inf") if after > 0 else float("-inf")
    return after / before - 1


def judge_series(
    points: list[Point], metric: str, *, min_effect: float, settings: Settings, name: str
) -> tuple[tuple[Change, ...], str]:
    if len(points) < 2 * settings.min_size:
        return (), INSUFFICIENT
    values = [p.value for p in points]
    found = changepoint.e_divisive(
        values,
        pvalue=settings.pvalue,
        permutations=settings.permutations,
        min_size=settings.min_size,
        seed=changepoint.seed_for(name),
    )
    edges = [0] + [c.index for c in found] + [len(values)]
    changes = []
    for k, cp in enumerate(found):
        before = statistics.median(values[edges[k] : cp.index])
        after = statistics.median(values[cp.index : edges[k + 2]])
        effect = _relative(before, after)
        changes.append(
            Change(
                index=cp.index,
                kind=classify(metric, effect, min_effect),
                effect=effect,
                before=before,
                after=after,
                last_good=points[cp.index - 1],
                first_bad=points[cp.index],
                pvalue=cp.pvalue,
                new=cp.index >= len(points) - settings.recent,
            )
        )
    return tuple(changes), (changes[-1].kind if changes else NO_CHANGE)


def min_effect_for(baseline: baselines.BaselineFile | None, case_key: str, metric: str, settings: Settings) -> float:
    if settings.min_effect is not None:
        return settings.min_effect
    ref = baseline.reference(case_key, metric) if baseline else None
    return ref.tolerance if ref is not None and ref.tolerance > 0 else settings.default_min_effect


def quarantined(baseline: baselines.BaselineFile | None, case_key: str, today: str) -> str:
    held = quarantine.of(baseline.cases.get(case_key)) if baseline else None
    return held.describe() if held is not None and held.active(today) else ""


def _last(conn, recent: int) -> dict[str, list[str]]:
    """Each profile's last ``recent`` run ids."""
    by_profile: dict[str, list[str]] = {}
    for run, _ in store.runs(conn):  # oldest first
        by_profile.setdefault(run.profile, []).append(run.run_id)
    return {p: ids[-recent:] for p, ids in by_profile.items()}


def check(conn, *, baseline_dir: Path, settings: Settings, cases: list[str] | None = None) -> list[SeriesVerdict]:
    """Every checked series of the history (or only ``cases``, by id or key), judged."""
    loaded: dict[str, baselines.BaselineFile | None] = {}
    latest = {p: set(ids) for p, ids in _last(conn, settings.recent).items()}
    out = []
    for profile, key, case_id, metric in store.series_keys(conn):
        if metric not in CHECKED or (cases and key not in cases and case_id not in cases):
            continue
        if profile not in loaded:
            loaded[profile] = baselines.load(baseline_dir, profile)
        baseline = loaded[profile]
        points = store.series(conn, profile, key, metric)
        effect = min_effect_for(baseline, key, metric, settings)
        changes, status = judge_series(
            points, metric, min_effect=effect, settings=settings, name=f"{profile}/{key}/{metric}"
        )
        if points and points[-1].run_id not in latest.get(profile, ()):  # no longer run: nothing of it is new
            changes = tuple(dataclasses.replace(c, new=False) for c in changes)
        out.append(
            SeriesVerdict(
                profile=profile,
                case_key=key,
                case_id=case_id,
                metric=metric,
                points=tuple(points),
                changes=changes,
                status=status,
                min_effect=effect,
                quarantined=quarantined(baseline, key, settings.today),
            )
        )
    return out


def text(verdicts: list[SeriesVerdict], settings: Settings) -> str:
    """The check's report: every change point and short series, then one line of totals."""
    lines = []
    for v in verdicts:
        head = f"{v.case_key} {v.metric} [{v.profile}]"
        held = f" (quarantined, not failing: {v.quarantined})" if v.quarantined else ""
        if v.status == INSUFFICIENT:
            lines.append(f"{head}: {INSUFFICIENT} ({len(v.points)} runs, need {2 * settings.min_size})")
        for c in v.changes:
            lines.append(f"{head}: {c.describe(v.metric)}; min effect {v.min_effect:.0%}{held}")
    failing = [v for v in verdicts if v.failed]
    quiet = sum(1 for v in verdicts if v.status == NO_CHANGE)
    lines.append(
        f"history check: {len(verdicts)} series, {sum(len(v.changes) for v in verdicts)} change points, "
        f"{quiet} without change; new regressions (first bad run among the last {settings.recent}): "
        f"{len(failing)}"
        + (f" in {', '.join(sorted({f'{v.case_key} {v.metric}' for v in failing}))}" if failing else "")
    )
    steps: dict[str, list[str]] = {}  # the next step: the first bad commit inside each range
    for v in failing:
        for c in v.new_regressions:
            steps.setdefault(bisect_command(c, v.case_id), []).append(v.metric)
    lines += [f"  next: {command}   # {', '.join(metrics)}" for command, metrics in steps.items()]
    return "\n".join(lines) + "\n"


def to_json(verdicts: list[SeriesVerdict], settings: Settings) -> dict:
    """The verdicts as data, for a dashboard or a bot: every series with its status and change points."""

    def change(c: Change) -> dict:
        return {
            "index": c.index,
            "kind": c.kind,
            "effect": c.effect,
            "before": c.before,
            "after": c.after,
            "pvalue": c.pvalue,
            "new": c.new,
            "last_good": {"run": c.last_good.run_id, "commit": c.last_good.commit},
            "first_bad": {"run": c.first_bad.run_id, "commit": c.first_bad.commit},
        }

    return {
        "settings": dataclasses.asdict(settings),
        "failed": any(v.failed for v in verdicts),
        "series": [
            {
                "profile": v.profile,
                "case": v.case_key,
                "metric": v.metric,
                "runs": len(v.points),
                "status": v.status,
                "min_effect": v.min_effect,
                "quarantined": v.quarantined,
                "failed": v.failed,
                "changes": [change(c) for c in v.changes],
            }
            for v in verdicts
        ],
    }
