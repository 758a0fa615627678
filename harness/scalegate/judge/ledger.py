"""The exact verdict: the head's collective ledger against the base commit's, or against the stored baseline's.

The same code issues the same collectives with the same bytes every step, so the ledger needs no noise model and
no second launch. It is judged before any timing (docs/gate.md#exact-before-timed):

- bytes a step that cross nodes, or that stay inside one, up by more than the ledger tolerance
  (``--scaling-ledger-tolerance``, 1% by default): ``regressed`` at once, each changed collective named;
- the same bytes in other calls (DDP's buckets, a fused collective): reported beside the timing verdict, which
  still decides the case; fewer bytes: reported as well;
- a ledger that varies from step to step, or between the launches of one side, or that a side did not record:
  no exact verdict, and the verdict says why; time alone decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from scalegate.figures.ledger import describe
from scalegate.judge import metric as V
from scalegate.judge.outcome import MetricVerdict

REGRESSED, CALLS, FEWER, SAME = "regressed", "calls changed", "fewer bytes", "same"
NOT_JUDGED, NONE = "not judged", "nothing to compare"
CLASSES = (("cross", "that cross nodes"), ("intra", "within a node"))


@dataclass(frozen=True)
class Exact:
    """The ledger's verdict: ``state`` one of the names above, ``lines`` naming each change (or why none was
    judged), and the bytes per link class on each side (``None`` where not judged)."""

    state: str
    lines: tuple[str, ...] = ()
    against: str = ""  # "the base commit" or "the baseline"
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics(self) -> list[MetricVerdict]:
        if self.state != REGRESSED:
            return []
        return [MetricVerdict(metric="collectives", status=V.REGRESSED, message="\n".join(self.lines))]

    @property
    def note(self) -> str:
        """What the verdict adds to a case's message when it did not decide it ("" when nothing changed)."""
        return "" if self.state in (REGRESSED, SAME, NONE) else "\n".join(self.lines)

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "lines": list(self.lines), "against": self.against, **self.figures}


def judge(
    head: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]], against: str, tolerance: float, where: str
) -> Exact:
    """``head`` and ``base``: each launch's ledger summary (figures/ledger.py), first launch first."""
    if not head or not base:
        return Exact(NONE, against=against)
    why = _unjudgeable(head, "this commit") or _unjudgeable(base, against)
    if why:
        return Exact(NOT_JUDGED, (f"collectives: not judged, time alone decides: {why} [{where}]",), against)
    new, old = head[0], base[0]
    figures = {
        side: {name: (led.get(name) or 0.0) for name, _ in CLASSES} for side, led in (("head", new), ("base", old))
    }
    rows = _changed_rows(new.get("rows", ()), old.get("rows", ()))
    grown = [
        f"bytes {words} {_mb(old.get(name) or 0.0)} -> {_mb(new.get(name) or 0.0)} MB a step "
        f"({_change(new.get(name) or 0.0, old.get(name) or 0.0)})"
        for name, words in CLASSES
        if (new.get(name) or 0.0) > (old.get(name) or 0.0) * (1 + tolerance) + 0.5
    ]
    if grown:
        head_line = f"collectives: {'; '.join(grown)} against {against}, over the {tolerance:.0%} tolerance [{where}]"
        return Exact(REGRESSED, (head_line, *rows), against, figures)
    if not rows:
        return Exact(SAME, (f"collectives: the same as {against} [{where}]",), against, figures)
    fewer = any((new.get(name) or 0.0) < (old.get(name) or 0.0) * (1 - tolerance) for name, _ in CLASSES)
    state = FEWER if fewer else CALLS
    lead = (
        f"collectives: fewer bytes than {against}"
        if fewer
        else f"collectives: the same bytes as {against} in other calls; time decides"
    )
    return Exact(state, (f"{lead} [{where}]", *rows), against, figures)


def _unjudgeable(ledgers: Sequence[dict[str, Any]], side: str) -> str:
    first = ledgers[0] or {"unavailable": "a scalegate without the ledger ran it"}
    if first.get("unavailable"):
        return f"{side} recorded no ledger ({first['unavailable']})"
    if not first.get("steady", False):
        return (
            f"{side}'s collectives vary from step to step ({first.get('varies', 'its rows differ')}; where only the first "
            "measured steps differ, more --scaling-warmup steps leave a one-off out)"
        )
    for i, other in enumerate(ledgers[1:], start=2):
        if not other or other.get("unavailable"):
            continue
        if _key(other) != _key(first):
            return f"{side}'s launch {i} issued other collectives than its launch 1"
    return ""


def _key(ledger: dict[str, Any]) -> list[tuple]:
    return sorted(
        (r["op"], r["dtype"], r["size"], r["span"], r["groups"], r["calls"], r["bytes"]) for r in ledger["rows"]
    )


def _changed_rows(new: Sequence[dict[str, Any]], old: Sequence[dict[str, Any]]) -> list[str]:
    """One line per collective whose calls or bytes a step differ, new ones and gone ones included."""
    index = {_shape(r): r for r in old}
    lines = []
    for row in new:
        before = index.pop(_shape(row), None)
        if before is None:
            lines.append(
                f"head: {describe(row)}: new, {_calls(row['calls'])} calls a step, {_mb(row['bytes'])} MB a step "
                f"(the base issues none)"
            )
        elif (row["calls"], row["bytes"]) != (before["calls"], before["bytes"]):
            lines.append(
                f"head: {describe(row)}: {_calls(before['calls'])} -> {_calls(row['calls'])} calls a step, "
                f"{_mb(before['bytes'])} -> {_mb(row['bytes'])} MB a step ({_change(row['bytes'], before['bytes'])})"
            )
    for row in index.values():
        lines.append(
            f"head: {describe(row)}: gone (the base issues {_calls(row['calls'])} calls a step, {_mb(row['bytes'])} MB)"
        )
    return lines


def _shape(row: dict[str, Any]) -> tuple:
    return (row["op"], row["dtype"], row["size"], row["span"], row["groups"])


def _mb(value: float) -> str:
    return f"{value / 1e6:.2f}" if value < 1e7 else f"{value / 1e6:.1f}"


def _calls(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.2f}"


def _change(new: float, old: float) -> str:
    return "new" if old <= 0 else f"{(new / old - 1) * 100:+.0f}%"
