"""The terminal table: case, samples/s, speedup, efficiency, baseline, delta, verdict."""

from __future__ import annotations

from typing import Any

HEADER = ("case", "preset", "W", "samples/s", "speedup", "efficiency", "baseline", "delta", "peak MiB/rank", "MB/step", "verdict")


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _mb_per_step(case: dict[str, Any]) -> str:
    """Measured MB sent per step (whole job); "n/a" where the job had no private namespace."""
    wire = (case.get("resources") or {}).get("wire") or {}
    sent = wire.get("bytes_per_step")
    return "n/a" if sent is None else f"{sent / 1e6:.2f}"


def rows(cases: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    out = []
    for case in cases:
        result = case.get("result") or {}
        spec = case.get("spec", {})
        eff, base = case.get("efficiency"), case.get("baseline_efficiency")
        delta = None if eff is None or not base else (eff / base - 1) * 100
        peaks = [r.get("peak_memory_bytes", 0) for r in result.get("ranks", [])]
        world = len(result.get("ranks", [])) or None
        out.append((
            case["case_id"], spec.get("preset", "?"), _fmt(world, "d"), _fmt(result.get("throughput"), ".1f"),
            _fmt(case.get("speedup"), ".2f"), _fmt(eff, ".3f"), _fmt(base, ".3f"),
            "-" if delta is None else f"{delta:+.1f}%",
            _fmt(max(peaks) / 2**20 if peaks else None, ".0f"), _mb_per_step(case), case["status"],
        ))
    return out


def table(cases: list[dict[str, Any]]) -> str:
    body = [HEADER] + rows(cases)
    widths = [max(len(r[i]) for r in body) for i in range(len(HEADER))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
