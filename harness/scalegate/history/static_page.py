"""``history report --static --out DIR``: ``DIR/index.html``, one PNG per case and metric over the runs, and the verdicts.

The page before the interactive one (dashboard.py), kept for a viewer without JavaScript and for a PNG to paste.

Each plot shows the metric per run (x: run, labelled with its commit), the median of each segment between
change points, every change point as a vertical line (red a regression, green an improvement, orange
suspicious) and every version change as a grey dotted one. The table on top lists the latest verdict of every series, new regressions first.
"""

from __future__ import annotations

import datetime as _dt
import html
import re
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from scalegate.contract import atomic  # noqa: E402
from scalegate.history import check as C  # noqa: E402
from scalegate.history import summary  # noqa: E402

COLORS = {C.REGRESSION: "#d62728", C.IMPROVEMENT: "#2ca02c", C.SUSPICIOUS: "#ff7f0e"}


def plot_name(v: C.SeriesVerdict) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{v.machine}__{v.case_key}__{v.metric}") + ".png"


def plot(v: C.SeriesVerdict, path: Path) -> Path:
    label, scale = C.unit(v.metric)
    ys = [p.value / scale for p in v.points]
    xs = list(range(len(ys)))
    fig, ax = plt.subplots(figsize=(6.0, 3.0))
    ax.plot(xs, ys, "o-", color="#1f77b4", ms=4, lw=1)
    edges = [0] + [c.index for c in v.changes] + [len(ys)]
    for a, b in zip(edges[:-1], edges[1:]):  # each regime's median
        ax.hlines(statistics.median(ys[a:b]), a - 0.3, b - 0.7, color="k", lw=1.5, alpha=0.7)
    for e in v.events:
        ax.axvline(e.index - 0.5, color="#888", ls=":", lw=1.2)
        ax.annotate(
            e.what, (e.index - 0.5, 0.0), xycoords=("data", "axes fraction"), color="#666", fontsize=7,
            xytext=(3, 3), textcoords="offset points",
        )  # fmt: skip
    for c in v.changes:
        ax.axvline(c.index - 0.5, color=COLORS[c.kind], ls="--" if not c.new else "-", lw=2)
        ax.annotate(
            f"{c.kind} {c.effect:+.1%}",
            (c.index - 0.5, 1.0),
            xycoords=("data", "axes fraction"),
            color=COLORS[c.kind],
            fontsize=8,
            ha="left",
            va="top",
            xytext=(3, -2),
            textcoords="offset points",
        )
    if ys and statistics.median(ys) != 0:  # at least +-min effect around the median: noise must not look like a cliff
        mid, low, high = statistics.median(ys), min(ys), max(ys)
        pad = abs(mid) * v.min_effect
        low, high = min(low, mid - pad), max(high, mid + pad)
        ax.set_ylim(low - 0.06 * (high - low), high + 0.06 * (high - low))
    step = max(1, len(xs) // 12)
    labels = [p.commit if len(p.commit) <= 14 else p.commit[:12] + "…" for p in v.points]
    ax.set_xticks(xs[::step], labels[::step], rotation=40, ha="right", fontsize=7)
    ax.set(ylabel=label, title=f"{v.case_key}: {v.metric}")
    ax.title.set_fontsize(10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _row(v: C.SeriesVerdict) -> str:
    latest = v.changes[-1] if v.changes else None
    color = COLORS.get(v.status, "#555")
    if latest is not None:
        what = (
            f"{latest.effect:+.1%} ({C.fmt(v.metric, latest.before)} &rarr; {C.fmt(v.metric, latest.after)})"
            f", p={latest.pvalue:.3f}"
        )
        where = (
            f"<code>{html.escape(latest.last_good.commit)}</code>..<code>{html.escape(latest.first_bad.commit)}"
            f"</code> ({'new' if latest.new else 'old'})"
        )
        if latest.event is not None:
            where = f"at {html.escape(latest.event.what)}; " + where
    else:
        what, where = f"{len(v.points)} runs", ""
    held = f"<br><small>quarantined: {html.escape(v.quarantined)}</small>" if v.quarantined else ""
    return (
        f"<tr><td><a href='#{html.escape(v.case_key)}'>{html.escape(v.case_key)}</a>{held}</td>"
        f"<td>{html.escape(v.metric)}</td><td style='color:{color};font-weight:bold'>{html.escape(v.status)}"
        f"{' (NEW)' if v.failed else ''}</td><td>{what}</td><td>{where}</td>"
        f"<td>{v.min_effect:.0%}</td><td>{html.escape(v.machine)}</td></tr>"
    )


STYLE = """body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1250px}
table{border-collapse:collapse;font-size:14px;margin-bottom:1.5em}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#eee}
.grid{display:flex;flex-wrap:wrap;gap:8px}.grid img{width:600px;border:1px solid #ddd}
.bad{background:#fde0e0;padding:.6em;border-left:6px solid #d62728}.good{background:#e3f4e3;padding:.6em}"""


def write(verdicts: list[C.SeriesVerdict], out: Path, db: Path | str, settings: C.Settings) -> Path:
    """Every plot and ``index.html``; returns the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    order = sorted(verdicts, key=lambda v: (not v.failed, v.status not in (C.REGRESSION,), v.case_key, v.metric))
    failing = [v for v in verdicts if v.failed]
    banner = (
        (
            f"<div class='bad'><b>{len(failing)} new regression(s)</b>: "
            + ", ".join(html.escape(f"{v.case_key} {v.metric}") for v in failing)
            + "<pre>"
            + html.escape("\n".join(line for a in summary.new_alerts(verdicts) for line in a.lines()))
            + "</pre></div>"
        )
        if failing
        else "<p class='good'>No new regression.</p>"
    )
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    body = [
        f"<h1>scalegate history</h1><p>{html.escape(str(db))}, {now}. E-divisive means, p &le; {settings.pvalue}, "
        f"up to {settings.permutations} permutations (sequential), segments of at least {settings.min_size} runs; "
        f"<i>new</i> = first bad run among the last {settings.recent}. Lines: red regression, green improvement, orange suspicious "
        f"(smaller than the minimum effect); solid = new, dashed = old; black: each segment's median; grey dotted: a "
        "version change.</p>",
        banner,
        "<h2>Latest verdicts</h2><table><tr><th>case</th><th>metric</th><th>verdict</th><th>latest change</th>"
        "<th>last good..first bad</th><th>min effect</th><th>machine</th></tr>",
        *(_row(v) for v in order),
        "</table>",
    ]
    by_case: dict[str, list[C.SeriesVerdict]] = {}
    for v in verdicts:
        by_case.setdefault(v.case_key, []).append(v)
    for key, group in sorted(by_case.items()):
        body.append(f"<h2 id='{html.escape(key)}'>{html.escape(key)}</h2><div class='grid'>")
        for v in group:
            name = plot(v, out / plot_name(v)).name
            body.append(f"<img src='{name}' alt='{html.escape(v.case_key)} {html.escape(v.metric)}'>")
        body.append("</div>")
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>scalegate history</title><style>{STYLE}</style>"
        "</head><body>" + "\n".join(body) + "</body></html>\n"
    )
    return atomic.write_text(out / "index.html", page)
