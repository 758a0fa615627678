"""What the GPUs' own state says of a gate's rounds (measure/gpu_state.py): which rounds ran with capped clocks, and
why, for the verdict; and a HINT where the GPUs were left to drift (persistence off, clocks not locked).

A capped round is named in the verdict with its side and reasons, never passed as evidence silently; pairing cancels
a cap both sides shared, so the verdict stands and says so. A launch's state is its ranks' pooled: the reasons any
rank saw, the lowest and highest SM clock, the hottest reading.
"""

from __future__ import annotations

from typing import Any, Sequence

NO_STATE: dict[str, Any] = {}


def pool(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several ranks' (or launches') states as one; {} where none has any (CPU, or a base from before the record)."""
    found = [s for s in states if s and "unavailable" not in s]
    if not found:
        why = next((s["unavailable"] for s in states if s and "unavailable" in s), "")
        return {"unavailable": why} if why else {}
    clocks = [c for s in found for c in (s.get("sm_clock_mhz") or [])]
    memory = [c for s in found for c in (s.get("mem_clock_mhz") or [])]
    return {
        "capped": sorted({r for s in found for r in s.get("capped") or ()}),
        "reasons": sorted({r for s in found for r in s.get("reasons") or ()}),
        "sm_clock_mhz": [min(clocks), max(clocks)] if clocks else None,
        "mem_clock_mhz": [min(memory), max(memory)] if memory else None,
        "temperature_c_max": max((s["temperature_c_max"] for s in found if s.get("temperature_c_max")), default=None),
        "power_w_max": max((s["power_w_max"] for s in found if s.get("power_w_max")), default=None),
        "persistence": _all(s.get("persistence") for s in found),
        "clocks_locked": _all(s.get("clocks_locked") for s in found),
    }


def _all(values) -> bool | None:
    said = [v for v in values if v is not None]
    return all(said) if said else None


def capped_rounds(head: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]]) -> str:
    """The rounds whose clocks were capped, with side and reasons, for the verdict ("" where none was)."""
    named = []
    for n, (h, b) in enumerate(zip(head, base), 1):
        sides = [f"{side}: {', '.join(s['capped'])}" for side, s in (("head", h), ("base", b)) if s.get("capped")]
        if sides:
            named.append(f"round {n} ({'; '.join(sides)})")
    if not named:
        return ""
    return "; GPU clocks capped in " + ", ".join(named) + " (a cap both sides shared cancels in the pairs)"


def hint(states: Sequence[dict[str, Any]]) -> str:
    """A HINT where the GPUs were left to drift: persistence mode off, application clocks at their defaults."""
    pooled = pool(states)
    fixes = []
    if pooled.get("persistence") is False:
        fixes.append("persistence mode is off, so clocks idle low between launches (nvidia-smi -pm 1)")
    if pooled.get("clocks_locked") is False:
        fixes.append("clocks are not locked, so boost and power capping move them (nvidia-smi -lgc <mhz>)")
    return "HINT: " + "; ".join(fixes) if fixes else ""
