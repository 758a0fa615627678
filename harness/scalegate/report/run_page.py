"""``python -m scalegate report RUN``: ``index.html`` beside ``report.md``, the run's figures to hover and filter.

The same figures as the PNGs of plots.py (speedup against world size, efficiency with its interval against the
baseline, peak memory per rank, bytes per step, achieved FLOP/s and MFU, where each rank's step went) and the
verdict table, A/B against the base commit when the run is a gate's (RUN/base), and each case's collective ledger:
its collectives a step, their bytes within a node and across nodes, and the exact verdict on them. One offline file built by
page/build.py, as the history page: chips filter the table and every figure by strategy, model, topology and
verdict; hovering names the case, the rank and the value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scalegate.contract import cards
from scalegate.figures import ledger
from scalegate.page import build
from scalegate.page.facets import split_case_id
from scalegate.plan import hostinfo
from scalegate.report import compare

SCRIPT = Path(__file__).with_name("run_page.js")


def _ms(value: Any) -> float | None:
    return value * 1e3 if isinstance(value, (int, float)) else None


def case_data(case: dict[str, Any], row: compare.Row, known: list[str]) -> dict[str, Any]:
    """One case's line of the table and its points in every figure."""
    spec = case.get("spec") or {}
    ranks = (case.get("result") or {}).get("ranks") or []
    resources = case.get("resources") or {}
    parts = split_case_id(row.case_id, known)
    return {
        "case": row.case_id,
        "key": row.key,
        "strategy": spec.get("strategy") or parts["strategy"],
        "model": spec.get("model") or parts["model"],
        "topology": spec.get("topology") or parts["topology"],
        "preset": spec.get("preset") or row.key.rpartition(":")[2] or "?",
        "verdict": row.status,
        "failed": row.failed(),
        "quarantined": row.quarantined,
        "world": row.world_size,
        "throughput": row.throughput,
        "tokens_per_s": row.tokens_per_s,
        "speedup": case.get("speedup"),
        "efficiency": row.efficiency,
        "low": row.efficiency_low,
        "high": row.efficiency_high,
        "baseline": row.baseline_efficiency,
        "local": row.local_efficiency,
        "baseline_local": row.baseline_local_efficiency,
        "gate": row.gate,
        "tolerance": row.tolerance,
        "delta": row.delta,
        "launches": row.launches,
        "peak_mib": row.peak_mib,
        "mb_per_step": row.bytes_per_step / 1e6 if row.bytes_per_step is not None else None,
        "mfu": row.mfu,
        "tflops": row.achieved_flops / 1e12 if row.achieved_flops else None,
        "message": row.messages[0].splitlines()[0] if row.messages else "",
        "ranks_mib": [(r.get("peak_memory_bytes") or 0) / 2**20 for r in ranks],
        "memory_source": next((r.get("memory_source") for r in ranks if r.get("memory_source")), ""),
        # the collective ledger's rows (figures/ledger.py) and the exact verdict on them (judge/ledger.py)
        "ledger": [{**r, "what": ledger.describe(r)} for r in (resources.get("ledger") or {}).get("rows") or []],
        "ledger_note": (resources.get("ledger") or {}).get("varies")
        or (resources.get("ledger") or {}).get("unavailable", ""),
        "collectives": row.collectives,
        "breakdown": [
            [r.get("rank", i), _ms(r.get("compute_s")), _ms(r.get("exposed_comm_s"))]
            for i, r in enumerate((resources.get("breakdown") or {}).get("per_rank") or [])
        ],
    }


def data(cases: list[dict[str, Any]], rows: list[compare.Row], *, run: str, against: str, notes: str) -> dict[str, Any]:
    known = [*cards.names(), "single"]
    return {
        "title": f"scalegate report: {run}",
        "run": run,
        "against": against,
        "profile": cases[0].get("profile", "?") if cases else "?",
        "cluster": hostinfo.cluster_note(hostinfo.parse_profile(cases[0].get("profile", "")).cluster) if cases else "",
        "commit": cases[0].get("commit", "?") if cases else "?",
        "verdicts": list(compare.SEVERITY),
        "cases": [case_data(c, r, known) for c, r in zip(cases, rows)],
        "notes": notes,
    }


def write(
    out_dir: Path, cases: list[dict[str, Any]], rows: list[compare.Row], *, run: str, against: str, notes: str = ""
) -> Path:
    """``out_dir/index.html``; its path. ``notes``: text shown under the figures (the alpha-beta projection)."""
    page = data(cases, rows, run=run, against=against, notes=notes)
    return build.write(Path(out_dir) / "index.html", title=page["title"], data=page, script=SCRIPT)
