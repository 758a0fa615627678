"""The exact section of a PR table: each case's collectives against the base commit's or the baseline's, above the
timed table (judge/ledger.py decides; this only writes it down)."""

from __future__ import annotations

from typing import Any, Sequence

ICON = {"regressed": "❌", "calls changed": "ℹ️", "fewer bytes": "🚀", "same": "✅", "not judged": "➖"}


def markdown(rows: Sequence[Any]) -> list[str]:
    """Lines for the cases whose ledger was compared (``Row.collectives``); none where no case's was."""
    judged = [r for r in rows if (r.collectives or {}).get("state") not in (None, "", "nothing to compare")]
    if not judged:
        return []
    lines = [
        "#### Exact: the collectives a step",
        "",
        "| case | against | MB across nodes | MB within a node | collectives |",
        "|---|---|--:|--:|---|",
    ]
    for r in judged:
        found = r.collectives
        lines.append(
            f"| `{r.key}` | {found.get('against') or '–'} | {_pair(found, 'cross')} | {_pair(found, 'intra')} | "
            f"{ICON.get(found['state'], '')} {found['state']} |"
        )
    notes = [
        f"- `{r.case_id}`: " + "\n  ".join(r.collectives["lines"])
        for r in judged
        if r.collectives["state"] != "same" and r.collectives.get("lines")
    ]
    return [*lines, *([""] + notes if notes else []), "", "#### Timed: the efficiency", ""]


def _pair(found: dict[str, Any], name: str) -> str:
    base, head = ((found.get(side) or {}).get(name) for side in ("base", "head"))
    if base is None or head is None:
        return "–"
    change = "" if base == head or not base else f" ({(head / base - 1) * 100:+.0f}%)"
    return f"{base / 1e6:.2f} → {head / 1e6:.2f}{change}"
