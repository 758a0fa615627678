"""``history check``'s output: every change point, the version changes and what they were compared on, the totals,
and one alert per new regression with the commands to run next; the same as JSON for a bot (``--json``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scalegate.history import alerts, events
from scalegate.history.check import INSUFFICIENT, NO_CHANGE, REGRESSION, Change, SeriesVerdict, Settings, by_machine
from scalegate.history.events import Compared, Event
from scalegate.history.store import Run


@dataclass(frozen=True, kw_only=True)
class VersionChange:
    """One machine's version change, the cases it can be judged on, and the regressions attributed to it."""

    machine: str
    event: Event  # its index counts the machine's runs
    compared: Compared
    regressed: tuple[str, ...]  # "case metric" of each regression at it

    def line(self) -> str:
        c = self.compared
        said = f"version change [{self.machine}]: {self.event.describe()}; compared on the {len(c.both)} case(s) run "
        said += f"on both sides: {len(self.regressed)} series regressed at it"
        said += f" ({', '.join(self.regressed)})" if self.regressed else ""
        one_side = [f"{len(c.only_before)} only before" if c.only_before else ""]
        one_side.append(f"{len(c.only_after)} only after ({', '.join(c.only_after)})" if c.only_after else "")
        if any(one_side):
            said += f"; not compared: {', '.join(x for x in one_side if x)}"
        return said


def _at(change: Change, event: Event, index: dict[str, int]) -> bool:
    """A series' change point sits at a machine's version change: the same packages, and the change between the
    series' last good and first bad runs (a case may have skipped the night of the change)."""
    if change.event is None or change.event.changes != event.changes:
        return False
    return index[change.last_good.run_id] < event.index <= index[change.first_bad.run_id]


def version_changes(runs: list[Run], verdicts: list[SeriesVerdict]) -> list[VersionChange]:
    """Every machine's version changes, with the cases run on both sides and the regressions at each."""
    cases_of: dict[str, set[str]] = {}
    for v in verdicts:
        for p in v.points:
            cases_of.setdefault(p.run_id, set()).add(v.case_key)
    out = []
    for machine, machine_runs in by_machine(runs).items():
        index = {r.run_id: i for i, r in enumerate(machine_runs)}
        mine = [v for v in verdicts if v.machine == machine]
        for event in events.of_runs(machine_runs):
            regressed = sorted(
                f"{v.case_key} {v.metric}"
                for v in mine
                for c in v.changes
                if c.kind == REGRESSION and _at(c, event, index)
            )
            compared = events.compared(event, machine_runs, cases_of)
            out.append(VersionChange(machine=machine, event=event, compared=compared, regressed=tuple(regressed)))
    return out


def new_alerts(verdicts: list[SeriesVerdict]) -> list[alerts.Alert]:
    """One alert per case, machine and cause of the failing (new, unquarantined) regressions."""
    found = [
        (v.machine, v.case_id, v.metric, c.next_steps(v.case_id))
        for v in verdicts
        if v.failed
        for c in v.new_regressions
    ]
    return alerts.group(found)


def text(verdicts: list[SeriesVerdict], settings: Settings, runs: list[Run] | None = None) -> str:
    """The check's report: every change point and short series, the version changes (given ``runs``), one line of
    totals and the rule that keeps one odd night quiet, then each new regression's alert."""
    lines = []
    for v in verdicts:
        head = f"{v.case_key} {v.metric} [{v.machine}]"
        held = f" (quarantined, not failing: {v.quarantined})" if v.quarantined else ""
        if v.status == INSUFFICIENT:
            lines.append(f"{head}: {INSUFFICIENT} ({len(v.points)} runs, need {2 * settings.min_size})")
        for c in v.changes:
            lines.append(f"{head}: {c.describe(v.metric)}; min effect {v.min_effect:.0%}{held}")
    lines += [change.line() for change in version_changes(runs or [], verdicts)]
    failing = [v for v in verdicts if v.failed]
    quiet = sum(1 for v in verdicts if v.status == NO_CHANGE)
    lines.append(
        f"history check: {len(verdicts)} series, {sum(len(v.changes) for v in verdicts)} change points, "
        f"{quiet} without change; new regressions (first bad run among the last {settings.recent}): "
        f"{len(failing)}"
        + (f" in {', '.join(sorted({f'{v.case_key} {v.metric}' for v in failing}))}" if failing else "")
    )
    lines.append(
        f"  each side of a change point holds at least {settings.min_size} runs: a single outlier never raises "
        "an alert; a version change is judged on the cases run on both sides of it"
    )
    for alert in new_alerts(verdicts):
        lines += alert.lines()
    return "\n".join(lines) + "\n"


def _change(c: Change, case_id: str) -> dict:
    steps = c.next_steps(case_id)
    return {
        "index": c.index,
        "kind": c.kind,
        "effect": c.effect,
        "before": c.before,
        "after": c.after,
        "pvalue": c.pvalue,
        "new": c.new,
        "last_good": {"run": c.last_good.run_id, "commit": c.last_good.commit},
        "first_bad": {"run": c.first_bad.run_id, "commit": c.first_bad.commit},
        "event": c.event.to_dict() if c.event else None,
        "cause": steps.cause,
        "reproduce": steps.reproduce if c.kind == REGRESSION else "",
        "bisect": list(steps.bisect) if c.kind == REGRESSION else [],
    }


def to_json(verdicts: list[SeriesVerdict], settings: Settings, runs: list[Run] | None = None) -> dict:
    """The verdicts as data, for a dashboard or a bot: every series with its status, change points and version
    changes; the version changes with the cases they were compared on; the alerts."""
    return {
        "settings": dataclasses.asdict(settings),
        "failed": any(v.failed for v in verdicts),
        "alerts": [a.to_dict() for a in new_alerts(verdicts)],
        "version_changes": [
            {
                "machine": vc.machine,
                **vc.event.to_dict(),
                "compared": list(vc.compared.both),
                "only_before": list(vc.compared.only_before),
                "only_after": list(vc.compared.only_after),
                "regressed": list(vc.regressed),
            }
            for vc in version_changes(runs or [], verdicts)
        ],
        "series": [
            {
                "machine": v.machine,
                "cluster": v.cluster,
                "hardware": v.hardware,
                "profile": v.profile,
                "case": v.case_key,
                "metric": v.metric,
                "runs": len(v.points),
                "status": v.status,
                "min_effect": v.min_effect,
                "quarantined": v.quarantined,
                "failed": v.failed,
                "events": [e.to_dict() for e in v.events],
                "changes": [_change(c, v.case_id) for c in v.changes],
            }
            for v in verdicts
        ],
    }
