"""``history check``: change points per case and metric, each judged as a regression, improvement or suspicious.

For every series of the history (cluster, hardware, case, metric; software versions are attributes of its runs),
oldest run first:

- fewer than ``2 * min_size`` runs: ``insufficient data`` (no split could have both sides long enough);
- E-divisive means with a permutation test (``changepoint.py``) finds the change points; in a series longer than
  ``changepoint.EXACT_RUNS`` runs, with its splits seen within windows (``windows.py``), where Apache Otava's search
  finds a candidate (``otava_search.py``);
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

Each side of a change point holds at least ``min_size`` runs (3 by default), so a single outlier never raises an
alert. A change point whose first bad run is the first run after a version change (events.py) is attributed to it;
any other names the commit range to look in: last good commit .. first bad commit. Either way its alert carries
the command that reproduces it on a PR gate and the bisect to run (alerts.py); summary.py writes them out.
"""

from __future__ import annotations

import dataclasses
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from scalegate.history import alerts, changepoint, events, otava_search, store
from scalegate.history.db import Db
from scalegate.history.events import Event
from scalegate.history.store import Point, Run
from scalegate.record import baselines, quarantine

HIGHER_IS_BETTER = ("efficiency", "local_efficiency", "throughput", "mfu")
# the collectives' (the ledger's): bytes the job's ranks send across nodes a step, and its collectives a step
LEDGER = ("cross_node_bytes_per_step", "collectives_per_step")
LOWER_IS_BETTER = ("peak_memory_bytes", "bytes_per_step", "checkpoint_s_per_gb", *LEDGER)
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
    event: Event | None = None  # the version change this change point sits at, if any

    def describe(self, metric: str) -> str:
        age = "NEW" if self.new else "old"
        commits = f"commits {self.last_good.commit}..{self.first_bad.commit}"
        where = f"at {self.event.what} ({commits})" if self.event else commits
        return (
            f"{self.kind} {self.effect:+.1%} ({fmt(metric, self.before)} -> {fmt(metric, self.after)}) "
            f"from run {self.first_bad.run_id}, {where} (p={self.pvalue:.3f}, {age})"
        )

    def next_steps(self, case_id: str) -> alerts.NextSteps:
        """The commands that reproduce this change on a PR gate and find its cause (alerts.py)."""
        if self.event is not None:
            return alerts.for_versions(self.event.changes, self.event.describe(), case_id)
        return alerts.for_commits(self.last_good.commit, self.first_bad.commit, case_id)


@dataclass(frozen=True, kw_only=True)
class SeriesVerdict:
    profile: str  # the latest run's: its baseline lends the tolerance and the quarantine
    case_key: str
    case_id: str
    metric: str
    points: tuple[Point, ...]
    changes: tuple[Change, ...]
    status: str  # the latest change's kind, NO_CHANGE or INSUFFICIENT
    min_effect: float
    quarantined: str = ""  # the baseline's quarantine (reason, until): reported, never failing
    cluster: str = ""
    hardware: str = ""
    events: tuple[Event, ...] = ()  # the version changes drawn on the series

    @property
    def machine(self) -> str:
        return store.machine(self.cluster, self.hardware or self.profile)

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
    "cross_node_bytes_per_step": ("MB across nodes per step (collectives)", 1e6),
    "collectives_per_step": ("collectives per step", 1.0),
    "throughput": ("throughput (samples/s)", 1.0),
    "checkpoint_s_per_gb": ("checkpoint save + load (s/GB)", 1.0),
}


def unit(metric: str) -> tuple[str, float]:
    return UNITS.get(metric, (metric.replace("_", " "), 1.0))


def fmt(metric: str, value: float) -> str:
    if metric in ("peak_memory_bytes",):
        return f"{value / 2**20:.1f} MiB"
    if metric in ("bytes_per_step", "cross_node_bytes_per_step"):
        return f"{value / 1e6:.2f} MB"
    if metric == "collectives_per_step":
        return f"{value:g} a step"
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


def workers(jobs: int, *, long: bool) -> ProcessPoolExecutor | None:
    """The processes that search ``jobs`` series at once (None for one at a time), started now; where the history
    is ``long`` (series Otava's search screens), each imports Otava (``otava_search.prepare``) while the caller
    still reads the store. A fork starts them all at the first task."""
    if jobs <= 1:
        return None
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=otava_search.prepare if long else None)
    pool.submit(int)
    return pool


def change_points(
    series: list[tuple[list[float], str]], settings: Settings, pool: ProcessPoolExecutor | None = None
) -> Iterator[list[changepoint.ChangePoint] | None]:
    """Each (values, name) series' change points in order, None where it is too short to split, each as soon as it
    is found; in ``pool``'s processes (``workers``), every series handed to them at once, one a task so that a few
    slow series do not leave a process idle, else here. A series' answer is its own (its shuffles are seeded by its
    name), the same in any number of processes."""
    tasks = [
        (values, name, settings.pvalue, settings.permutations, settings.min_size)
        if len(values) >= 2 * settings.min_size
        else None
        for values, name in series
    ]
    todo = [task for task in tasks if task is not None]
    done = iter(pool.map(_found, todo) if pool is not None and len(todo) > 1 else map(_found, todo))
    return (None if task is None else next(done) for task in tasks)


def _found(task: tuple[list[float], str, float, int, int]) -> list[changepoint.ChangePoint]:
    values, name, pvalue, permutations, min_size = task
    seed = changepoint.seed_for(name)
    return changepoint.find(values, pvalue=pvalue, permutations=permutations, min_size=min_size, seed=seed)


def judge_series(
    points: list[Point],
    metric: str,
    *,
    min_effect: float,
    settings: Settings,
    name: str,
    known: tuple[Event, ...] = (),
    found: list[changepoint.ChangePoint] | None = None,
) -> tuple[tuple[Change, ...], str]:
    """The series' change points, each judged; ``known``: its version changes, to attribute a change point to;
    ``found``: its change points where they were found already (``change_points``)."""
    if len(points) < 2 * settings.min_size:
        return (), INSUFFICIENT
    values = [p.value for p in points]
    if found is None:
        [found] = list(change_points([(values, name)], settings))
    edges = [0] + [c.index for c in found] + [len(values)]
    at = {e.index: e for e in known}
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
                event=at.get(cp.index),
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


def by_machine(runs: list[Run]) -> dict[str, list[Run]]:
    """Each machine's (cluster and hardware) runs, oldest first."""
    found: dict[str, list[Run]] = {}
    for run in runs:
        found.setdefault(run.machine, []).append(run)
    return found


def check(
    db: Db,
    *,
    baseline_dir: Path,
    settings: Settings,
    cases: list[str] | None = None,
    runs: list[Run] | None = None,
    jobs: int = 1,
) -> list[SeriesVerdict]:
    """Every checked series of the history (or only ``cases``, by id or key), judged. ``runs``: the store's runs,
    where the caller has read them already; ``jobs``: series checked at once (``workers``)."""
    runs = runs if runs is not None else [r for r, _ in store.runs(db)]
    loaded: dict[str, baselines.BaselineFile | None] = {}
    machines = by_machine(runs)
    latest = {m: {r.run_id for r in rs[-settings.recent :]} for m, rs in machines.items()}
    out = []
    pool = workers(jobs, long=any(len(rs) > changepoint.EXACT_RUNS for rs in machines.values()))
    try:
        series = store.read_series(db, CHECKED, read=runs)
        chosen = [key for key in series.keys if not cases or key.case_key in cases or key.case_id in cases]
        names = {key: f"{key.machine}/{key.case_key}/{key.metric}" for key in chosen}
        found = change_points([(series.values(key), names[key]) for key in chosen], settings, pool)
        with store.bulk():  # each series' points built and judged while the workers search the series after it
            for key in chosen:
                points = series.points(key)
                out.append(_verdict(key, points, next(found), names[key], baseline_dir, settings, loaded, latest))
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return out


def _verdict(
    key: store.SeriesKey,
    points: list[Point],
    found: list[changepoint.ChangePoint] | None,
    name: str,
    baseline_dir: Path,
    settings: Settings,
    loaded: dict[str, baselines.BaselineFile | None],
    latest: dict[str, set[str]],
) -> SeriesVerdict:
    profile = points[-1].profile
    if profile not in loaded:
        loaded[profile] = baselines.load(baseline_dir, profile)
    baseline = loaded[profile]
    effect = min_effect_for(baseline, key.case_key, key.metric, settings)
    known = events.of_series(points)
    changes, status = judge_series(
        points, key.metric, min_effect=effect, settings=settings, name=name, known=known, found=found
    )
    if points[-1].run_id not in latest.get(key.machine, ()):  # no longer run: nothing of it is new
        changes = tuple(dataclasses.replace(c, new=False) for c in changes)
    return SeriesVerdict(
        profile=profile,
        case_key=key.case_key,
        case_id=key.case_id,
        metric=key.metric,
        points=tuple(points),
        changes=changes,
        status=status,
        min_effect=effect,
        quarantined=quarantined(baseline, key.case_key, settings.today),
        cluster=key.cluster,
        hardware=key.hardware,
        events=known,
    )
