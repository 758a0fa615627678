"""``history report --out DIR``: ``DIR/index.html``, the interactive history page (docs/history.md, "The page").

Every series (cluster x hardware x case x metric) is a card: its verdict, its change points with their cause (a
version change, or a commit range) and, for a regression, the commands to copy that reproduce it on a PR gate and
bisect it; and a Plotly figure of the metric over the runs (hover: value, run, date, commit), each segment's median
as a black line, every change point as a vertical line (red regression, green improvement, orange suspicious;
solid new, dashed old) and every version change as a grey dotted one, named. New regressions come first, under a
banner of their alerts; chips filter by cluster, hardware, strategy, model, topology, metric and verdict.

The page is one offline file (page/build.py): the runs once (id, commit, date), each series as run ranges and
compact values, its script (dashboard.js) drawing a card's figure when it comes near the screen.
1,000 runs x 300 series: benchmarks/dashboard_scale.py measures its size and the time it takes to open.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from scalegate.contract import cards
from scalegate.history import check as C
from scalegate.history import summary
from scalegate.history.store import Run
from scalegate.page import build
from scalegate.page.facets import split_case_id

SCRIPT = Path(__file__).with_name("dashboard.js")
NEW_REGRESSION = "new regression"
VERDICTS = (NEW_REGRESSION, C.REGRESSION, C.SUSPICIOUS, C.IMPROVEMENT, C.NO_CHANGE, C.INSUFFICIENT)


def verdict(v: C.SeriesVerdict) -> str:
    """The filter's verdict: a failing (new, unquarantined) regression apart from the rest."""
    return NEW_REGRESSION if v.failed else v.status


def order(verdicts: list[C.SeriesVerdict]) -> list[C.SeriesVerdict]:
    """New regressions first, then by verdict; the latest change first within a verdict, then by case and metric."""
    return sorted(
        verdicts,
        key=lambda v: (
            VERDICTS.index(verdict(v)) if verdict(v) in VERDICTS else len(VERDICTS),
            len(v.points) - v.changes[-1].index if v.changes else 0,
            v.machine,
            v.case_key,
            v.metric,
        ),
    )


def _change(c: C.Change, v: C.SeriesVerdict) -> dict[str, Any]:
    steps = c.next_steps(v.case_id)
    regression = c.kind == C.REGRESSION
    return {
        "i": c.index,
        "kind": c.kind,
        "new": c.new,
        "effect": c.effect,
        "text": c.describe(v.metric),
        "reproduce": steps.reproduce if regression else "",
        "bisect": list(steps.bisect) if regression else [],
    }


def _series(v: C.SeriesVerdict, run_index: dict[str, int], known: list[str]) -> dict[str, Any]:
    label, scale = C.unit(v.metric)
    values = [p.value / scale for p in v.points]
    edges = [0] + [c.index for c in v.changes] + [len(values)]
    medians = [statistics.median(values[a:b]) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    values_q = build.compact(values)
    return {
        "cluster": v.cluster or "(none)",
        "hardware": v.hardware,
        "machine": v.machine,
        "profile": v.profile,
        "case": v.case_key,
        "case_id": v.case_id,
        "preset": v.case_key.rpartition(":")[2] or "?",  # the last part: a model may hold a colon (hf:gpt2)
        **split_case_id(v.case_id, known),
        "metric": v.metric,
        "unit": label,
        "verdict": verdict(v),
        "quarantined": v.quarantined,
        "min_effect": v.min_effect,
        "runs": build.ranges([run_index[p.run_id] for p in v.points]),
        "v": values_q,
        "medians": [round(m / values_q["q"], 1) for m in medians],  # in the values' integer scale
        "changes": [_change(c, v) for c in v.changes],
        "events": [{"i": e.index, "text": e.what.replace(" -> ", " → ")} for e in v.events],
    }


def data(
    verdicts: list[C.SeriesVerdict], db: Path | str, settings: C.Settings, store_runs: list[Run] | None = None
) -> dict[str, Any]:
    """The page's blob: every run once, every series by reference to them, the alerts, the version changes and
    the settings line. ``store_runs``: the store's runs in its order (else ordered by date here)."""
    ordered = order(verdicts)
    runs: dict[str, tuple[str, str]] = {}
    for v in verdicts:
        for p in v.points:
            runs.setdefault(p.run_id, (p.commit, p.date))
    if store_runs is not None:  # the store's order, so each series is one range
        by_date = [r.run_id for r in store_runs if r.run_id in runs]
    else:
        by_date = sorted(runs, key=lambda r: (runs[r][1], r))
    run_index = {r: i for i, r in enumerate(by_date)}
    known = [*cards.names(), "single"]
    return {
        "title": "scalegate history",
        "db": str(db),
        "method": (
            f"E-divisive means, p ≤ {settings.pvalue}, up to {settings.permutations} permutations (sequential), "
            f"segments of at least {settings.min_size} runs (a single outlier never raises an alert); new = first "
            f"bad run among the last {settings.recent}; a version change is judged on the cases run on both sides."
        ),
        "runs": {
            "id": by_date,
            "commit": [runs[r][0] for r in by_date],
            "date": [runs[r][1][:16].replace("T", " ") for r in by_date],
        },
        "verdicts": list(VERDICTS),
        "alerts": [a.to_dict() for a in summary.new_alerts(verdicts)],
        "version_changes": [vc.line() for vc in summary.version_changes(store_runs or [], verdicts)],
        "series": [_series(v, run_index, known) for v in ordered],
    }


def write(
    verdicts: list[C.SeriesVerdict],
    out: Path,
    db: Path | str,
    settings: C.Settings,
    store_runs: list[Run] | None = None,
) -> Path:
    """``out/index.html``; its path."""
    page = data(verdicts, db, settings, store_runs)
    return build.write(Path(out) / "index.html", title="scalegate history", data=page, script=SCRIPT)
