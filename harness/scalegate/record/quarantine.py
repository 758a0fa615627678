"""Quarantine: a case a team knows to be flaky runs and reports, but does not fail the gate, until a date.

    "cases": {"fsdp-resnet-1x2:tiny": {..., "quarantine": {"reason": "gloo all-gather stalls, #123",
                                                          "until": "2026-12-31"}}}

The verdict itself is untouched (the table still says ``regressed``); the case's ``Outcome.quarantined``
names the reason, ``Outcome.failed`` is then false, and every summary lists the quarantined cases, so a
quarantine is never silent. It needs a reason and an expiry date: on the day after ``until`` the case
gates again and its message says the quarantine ran out (Chromium's and Mozilla's flaky-test lists work
the same way). ``harness/scalegate/record/baselines.py`` validates the entry when the file is read, and keeps it when a
baseline update rewrites the case.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

KEY = "quarantine"


@dataclass(frozen=True, kw_only=True)
class Quarantine:
    reason: str
    until: str  # ISO date, inclusive

    def active(self, today: str) -> bool:
        return today <= self.until

    def describe(self) -> str:
        return f"{self.reason} (until {self.until})"


def problem(raw: Any) -> str:
    """Why a baseline entry's quarantine is unusable, or "" when it is fine."""
    if not isinstance(raw, dict) or not isinstance(raw.get("reason"), str) or not raw["reason"].strip():
        return f"needs {{'reason': 'why it is flaky', 'until': 'YYYY-MM-DD'}}, got {raw!r}"
    try:
        _dt.date.fromisoformat(str(raw.get("until")))
    except ValueError:
        return f"until {raw.get('until')!r} is not a date YYYY-MM-DD"
    return ""


def of(entry: dict[str, Any] | None) -> Quarantine | None:
    raw = (entry or {}).get(KEY)
    if raw is None or problem(raw):
        return None
    return Quarantine(reason=raw["reason"].strip(), until=_dt.date.fromisoformat(str(raw["until"])).isoformat())


def today() -> str:
    return _dt.date.today().isoformat()
