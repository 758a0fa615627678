"""The gate's verdict on a finished run: the one judge (report/compare.py), the markdown table, its JSON, its cost.

``judge`` reads the merged run exactly as ``python -m scalegate compare`` does, so the table on the PR and a
re-judged run cannot disagree; under the table it says how the two sides were paired, what the gate did that the
verdicts do not say (a time budget's stop), and what the gate cost: its wall and its device-minutes.
"""

from __future__ import annotations

import json
from pathlib import Path

from scalegate.contract import duet
from scalegate.contract.errors import ScalegateError
from scalegate.record import baselines, runfiles
from scalegate.report import compare
from scalegate.report import environments as env_report

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2
DUET_FILE = "duet.json"  # an A/B run's pairing: which, or why none, each job's turns, each round's start
NOTES_FILE = "gate-notes.json"  # what the gate did that the verdicts do not say
COST_FILE = "gate-cost.json"  # the gate's wall and device-minutes


def judge(run_dir: Path, baseline_dir: Path, base_dir: Path | None = None) -> tuple[int, str, dict]:
    """(exit code, markdown, json) for a finished run; ``base_dir``: the base commit's merged cases of an A/B run,
    which the run is judged against (the stored baseline then lends its spreads)."""
    cases = runfiles.load_run(run_dir)
    parity = compare.parity_rows(run_dir)
    if not cases and not parity:
        raise ScalegateError(f"{run_dir} holds no case results", "check the selection (-k, --scaling-*) selects cases")
    profile = (cases[0].get("profile") if cases else None) or "?"
    baseline = baselines.load(baseline_dir, profile)
    if base_dir is None:
        rows = compare.compare(cases, baseline, require_baseline=True)
        title = f"PR gate: {run_dir.name} vs {baseline.path if baseline else 'no baseline for ' + profile}"
    else:
        rows = compare.compare(cases, baseline, base=runfiles.load_run(base_dir))
        title = f"PR gate (A/B): {run_dir.parent.name} against {compare.base_name(base_dir)}, measured in the same run"
    text = compare.markdown(rows, title) + compare.parity_markdown(parity)
    failed = any(r.failed() for r in rows) or any(p.get("problems") for p in parity)
    data = compare.to_json(rows, str(run_dir), baseline)
    data["parity"] = [
        {
            "case_id": p["case_id"],
            "problems": p.get("problems") or [],
            "status": p.get("status"),
            "ratio": p.get("ratio"),
            "launches": p.get("launches", 1),
        }
        for p in parity
    ]
    if base_dir is not None:
        data["base"] = compare.base_info(base_dir)
        base_env, head_env = env_report.read(base_dir), env_report.read(run_dir)
        text += env_report.markdown(base_env, head_env)
        data["environments"] = {"base": base_env, "head": head_env}
        if (run_dir / DUET_FILE).is_file():
            data["duet"] = json.loads((run_dir / DUET_FILE).read_text())
            text += pairing_markdown(data["duet"])
    for name, key, words in ((NOTES_FILE, "notes", notes_markdown), (COST_FILE, "cost", cost_markdown)):
        if (run_dir / name).is_file():
            data[key] = json.loads((run_dir / name).read_text())
            text += words(data[key])
    return (EXIT_REGRESSION if failed else EXIT_OK), text, data


def pairing_markdown(found: dict) -> str:
    """One line under the A/B table: how base and head took turns, the jobs that ran alone, and the jobs the
    coordinator stopped (a hang, a rank that died, their partners) with why."""
    if not found.get("duet"):
        return f"\nNot paired ({found.get('why_not')}): each round ran the base's session, then the head's.\n"
    jobs = found["jobs"].values()
    alone = [
        f"{j['side']} {j['job']}: {j['solo']}" for j in jobs if j["solo"] and not j.get("alternate") and not j["failed"]
    ]
    stopped = _stopped(list(jobs))
    paired = sum(1 for j in jobs if not j["failed"] and (j.get("alternate") or not j["solo"]))
    how = {
        "duet": f"took turns {duet.turn_length(int(found.get('turn_steps') or 1))}",
        "swap": f"took turns {duet.turn_length(int(found.get('turn_steps') or 1))}, the idle job's training state "
        "swapped out between its turns",
        "alternate": "took turns one whole job at a time, one resident at once",
    }.get(found.get("pairing", "duet"), "took turns")
    line = f"\nPaired: base and head {how} ({paired} jobs paired, docs/duet.md)."
    line += "" if not alone else " Not paired: " + "; ".join(alone) + "."
    return line + ("" if not stopped else " Stopped by the duet: " + "; ".join(stopped) + ".") + "\n"


def _stopped(jobs: list[dict]) -> list[str]:
    """Each job the coordinator failed, with why; a partner stopped for that job's failure (the coordinator's
    ``stopped: WHY``) is named with it rather than with the why again."""
    failed = [j for j in jobs if j["failed"]]
    causes = {(j["job"], j["failed"]) for j in failed}
    said = []
    for j in failed:
        why = j["failed"].removeprefix("stopped: ")
        if why != j["failed"] and (j["job"], why) in causes:
            continue  # named with the job whose failure stopped it
        partner = next((k["side"] for k in failed if (k["job"], k["failed"]) == (j["job"], f"stopped: {why}")), "")
        said.append(f"{j['side']} {j['job']}: {j['failed']}" + (f" (and the {partner} job with it)" if partner else ""))
    return said


def notes_markdown(notes: list[str]) -> str:
    return "".join(f"\nNote: {note}.\n" for note in notes)


def cost_markdown(cost: dict) -> str:
    """The gate's cost on the PR: its wall, and nodes x devices x wall."""
    return (
        f"\nCost: {cost['wall_s'] / 60:.1f} min of wall on {cost['nodes']} node(s) x {cost['devices']} "
        f"{cost['device']} = {cost['device_minutes']:.1f} device-minutes.\n"
    )
