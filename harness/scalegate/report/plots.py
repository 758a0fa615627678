"""``python -m scalegate report RUN``: PNG plots of a run and a markdown page that embeds them.

Plots (matplotlib, Agg backend, so no display is needed): speedup against world size per strategy
with the ideal line; efficiency per case with its 95% interval against the baseline band; peak
memory per rank; bytes per step where the run measured them; achieved FLOP/s per device and MFU where the
device's peak is known. The page adds the compare table and the
alpha-beta projection (``harness/scalegate/report/extrapolate.py``) with its assumptions. The same figures to
hover and filter are run_page.py's ``index.html``, written beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from scalegate.contract import atomic
from scalegate.plan import hostinfo  # noqa: E402
from scalegate.record.baselines import BaselineFile  # noqa: E402
from scalegate.report import compare, extrapolate  # noqa: E402


def _world(case: dict[str, Any]) -> int:
    return len((case.get("result") or {}).get("ranks", [])) or 0


def speedup_plot(cases: list[dict[str, Any]], path: Path) -> Path:
    series: dict[str, list[tuple[int, float]]] = {}
    for case in cases:
        spec = case.get("spec", {})
        if case.get("speedup") is None or spec.get("strategy") == "single":
            continue
        label = f"{spec.get('strategy')} {spec.get('model')} ({spec.get('preset')})"
        series.setdefault(label, []).append((_world(case), case["speedup"]))
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    top = max([w for pts in series.values() for w, _ in pts] + [2])
    ax.plot([1, top], [1, top], "k--", lw=1, label="ideal (speedup = W)")
    for label, points in sorted(series.items()):
        # without its own 1x1 case a strategy starts at the single-process reference, speedup 1 by definition
        points = sorted(set(points if any(w == 1 for w, _ in points) else [(1, 1.0)] + points))
        ax.plot([w for w, _ in points], [s for _, s in points], "o-", label=label)
    ax.set(xlabel="world size W (devices)", ylabel="speedup over 1x1", title="Speedup vs world size")
    ax.set_xticks(sorted({w for pts in series.values() for w, _ in pts} | {1}))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _bytes(case: dict) -> float | None:
    return ((case.get("resources") or {}).get("wire") or {}).get("bytes_per_step")


def efficiency_plot(rows: list[compare.Row], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(max(6.4, 0.9 * len(rows) + 2), 4.4))
    xs = range(len(rows))
    colors = {"regressed": "tab:red", "failed": "tab:red", "noisy": "tab:orange", "improved": "tab:green"}
    for x, r in zip(xs, rows):
        if r.efficiency is None:
            continue
        low = r.efficiency - (r.efficiency_low if r.efficiency_low is not None else r.efficiency)
        high = (r.efficiency_high if r.efficiency_high is not None else r.efficiency) - r.efficiency
        ax.bar(x, r.efficiency, color=colors.get(r.status, "tab:blue"), alpha=0.8)
        ax.errorbar(x, r.efficiency, yerr=[[low], [high]], color="k", capsize=4)
        gated = r.baseline_local_efficiency if r.gate == "local" else r.baseline_efficiency
        if r.baseline_efficiency is not None:
            ax.hlines(r.baseline_efficiency, x - 0.4, x + 0.4, color="k", lw=2)
        if r.local_efficiency is not None:  # the same-launch efficiency the gate decides on (docs/gate.md)
            ax.plot([x], [r.local_efficiency], "D", color="k", ms=6)
            if r.baseline_local_efficiency is not None:
                ax.hlines(r.baseline_local_efficiency, x - 0.4, x + 0.4, color="k", lw=1.5, ls=":")
        if gated is not None:
            tol = r.tolerance or 0.0
            ax.fill_between([x - 0.4, x + 0.4], gated * (1 - tol), gated, color="gray", alpha=0.3, lw=0)
    ax.axhline(1.0, color="k", ls="--", lw=1)
    ax.set_xticks(list(xs), [r.case_id for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set(
        ylabel="efficiency = speedup / W",
        title="Efficiency (bar, 95% CI; line: baseline) and local efficiency "
        "(diamond; dotted: baseline)\nshaded: the gated metric's "
        "detectable drop; red: regressed or failed, orange: noisy",
    )
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def memory_plot(cases: list[dict[str, Any]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(max(6.4, 0.9 * len(cases) + 2), 4.4))
    width = 0.8 / max([_world(c) for c in cases] + [1])
    labelled: set[int] = set()
    for i, case in enumerate(cases):
        peaks = [r.get("peak_memory_bytes", 0) / 2**20 for r in (case.get("result") or {}).get("ranks", [])]
        for rank, mib in enumerate(peaks):
            ax.bar(
                i - 0.4 + width * (rank + 0.5),
                mib,
                width,
                color=plt.cm.tab10(rank % 10),
                label=None if rank in labelled else f"rank {rank}",
            )
            labelled.add(rank)
    source = next((r.get("memory_source") for c in cases for r in (c.get("result") or {}).get("ranks", [])), "")
    ax.set_xticks(range(len(cases)), [c["case_id"] for c in cases], rotation=30, ha="right", fontsize=8)
    ax.set(ylabel=f"peak MiB ({source or 'memory'})", title="Peak memory per rank")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def bytes_plot(cases: list[dict[str, Any]], path: Path) -> Path | None:
    found = [(c["case_id"], _bytes(c)) for c in cases if _bytes(c) is not None]
    if not found:
        return None
    fig, ax = plt.subplots(figsize=(max(6.4, 0.9 * len(found) + 2), 4.4))
    ax.bar(range(len(found)), [b / 1e6 for _, b in found], color="tab:purple")
    ax.set_xticks(range(len(found)), [n for n, _ in found], rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="MB per step (whole job)", title="Bytes on the wire per step")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def mfu_plot(rows: list[compare.Row], path: Path) -> Path | None:
    """Achieved TFLOP/s per device (bar) and MFU (label) where the device's peak is known (harness/scalegate/figures/peaks.py)."""
    found = [r for r in rows if r.achieved_flops]
    if not found:
        return None
    fig, ax = plt.subplots(figsize=(max(6.4, 0.9 * len(found) + 2), 4.4))
    ax.bar(range(len(found)), [r.achieved_flops / 1e12 for r in found], color="tab:green")
    for x, r in enumerate(found):
        if r.mfu is not None:
            ax.annotate(f"{r.mfu:.1%}", (x, r.achieved_flops / 1e12), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(found)), [r.case_id for r in found], rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="achieved TFLOP/s per device", title="Model FLOPs per device (label: MFU against the peak)")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def breakdown_plot(cases: list[dict[str, Any]], path: Path) -> Path | None:
    """Per case and rank, a stacked bar: compute and exposed communication of the median step (harness/scalegate/figures/breakdown.py)."""
    bars = [
        (f"{c['case_id']} r{r['rank']}", r["compute_s"] * 1e3, r["exposed_comm_s"] * 1e3)
        for c in cases
        for r in ((c.get("resources") or {}).get("breakdown") or {}).get("per_rank", [])
    ]
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(max(6.4, 0.6 * len(bars) + 2), 4.4))
    x = range(len(bars))
    ax.bar(x, [b[1] for b in bars], color="tab:blue", label="compute (the local step)")
    ax.bar(x, [b[2] for b in bars], bottom=[b[1] for b in bars], color="tab:red", label="exposed communication")
    ax.set_xticks(list(x), [b[0] for b in bars], rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="ms per step (median of same-launch pairs)", title="Where each rank's step went")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def projection(cases: list[dict[str, Any]], link: extrapolate.Link) -> str:
    """The alpha-beta projection's table and its assumptions, as markdown (report.md and the interactive page)."""
    projections = [p for p in (extrapolate.from_case(c, link) for c in cases) if p is not None]
    doc = extrapolate.__doc__.strip().replace("\n    ", "\n") if extrapolate.__doc__ else ""
    return extrapolate.markdown(projections, link) + "\n\n" + doc


def write(
    cases: list[dict[str, Any]],
    out_dir: Path,
    run: str,
    baseline: BaselineFile | None,
    link: extrapolate.Link,
    rows: list[compare.Row] | None = None,
    against: str = "",
) -> Path:
    """Every plot and ``report.md``; returns the page's path. ``rows``: the verdicts when already judged (an A/B
    run's, against its base commit), else judged here against ``baseline``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = compare.compare(cases, baseline) if rows is None else rows
    plots = [
        speedup_plot(cases, out_dir / "speedup.png"),
        efficiency_plot(rows, out_dir / "efficiency.png"),
        memory_plot(cases, out_dir / "memory.png"),
        bytes_plot(cases, out_dir / "bytes.png"),
        mfu_plot(rows, out_dir / "mfu.png"),
        breakdown_plot(cases, out_dir / "breakdown.png"),
    ]
    page = [
        f"# scalegate report: {run}",
        "",
        f"Profile: {cases[0].get('profile', '?')} ({_cluster(cases[0])}); commit {cases[0].get('commit', '?')}; "
        f"baseline: {baseline.path if baseline else 'none'}.",
        "",
        compare.markdown(rows, f"verdicts against {against or 'the baseline'}"),
        "Interactive: [index.html](index.html) (the same figures to hover and filter).",
        "",
        "## Plots",
        "",
    ]
    page += [f"![{p.stem}]({p.name})" for p in plots if p is not None]
    page += ["", "## Projected efficiency at scale (alpha-beta model)", "", projection(cases, link)]
    return atomic.write_text(out_dir / "report.md", "\n".join(page) + "\n")


def _cluster(case: dict[str, Any]) -> str:
    return hostinfo.cluster_note(hostinfo.parse_profile(case.get("profile", "")).cluster)
