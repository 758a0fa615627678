"""``python -m scalegate record-baselines --duet-aa N [pytest args]``: the duet gate's sigma floor, recorded here.

    python -m scalegate record-baselines --duet-aa 10 -k "(ddp-cnn-1x2 or single-cnn-1x1) and not parity"

The duet gate (``gate --base REF``, docs/duet.md) decides on each round's efficiency log ratio with a sigma that is
never below the spread of that ratio between rounds of an A/A duet: what a round's own block means cannot see (a
resident process's own level). Without a recorded spread that floor is ``RECORDED_AA`` (scalegate/policy.py), fitted
on the project's 2-core VMs. This records the profile's own: N A/A duet rounds of the selection, the checkout against
itself with both sides resident and taking turns step by step, exactly as a gate round runs them (gate/rounds.py,
one coordinator for all rounds, back to back as a duet gate's rounds); per case the standard
deviation of ``round_estimate(...).efficiency_log`` over the rounds goes into the case's baseline entry as
``duet_aa`` = {"sigma", "sigma_step_w", "rounds", "provenance"} (``sigma_step_w``: the same rounds' spread of the step
time at W, the floor of ``--scaling-step-time-tolerance``'s test), the rest of the entry as it was.

A case with a round that was not a duet (a job that ran solo, too few pairs) is not recorded, and says why; a
correctness failure or an injected fault refuses the whole recording, as ``update-baselines`` does.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from scalegate.contract.errors import ScalegateError
from scalegate.gate import merge, pairing, rounds
from scalegate.gate.paired import Merged
from scalegate.gate.project import Project
from scalegate.gate.sessions import Sessions
from scalegate.gate.sides import Side
from scalegate.judge import duet_floors, duet_pairs
from scalegate.judge.evidence import CaseRecord
from scalegate.plan import hostinfo
from scalegate.record import baselines, update
from scalegate.report import compare

MAX_ROUNDS = 100


def spread(record: CaseRecord, base: CaseRecord) -> tuple[float, float, int, float] | str:
    """(stdev, mean, rounds, stdev of the step time at W) of the A/A duet rounds' efficiency log ratio of one case,
    or why it cannot be had."""
    if len(record.launches) != len(base.launches):
        return f"the head side ran {len(record.launches)} rounds, the base side {len(base.launches)}"
    found, at_w = [], []
    for n, (h, b) in enumerate(zip(record.launches, base.launches), 1):
        estimate = duet_pairs.round_estimate(h, b, duet_floors.trim_of(record))
        if estimate is None:
            return f"round {n} was not a duet ({duet_pairs.not_paired(h, b) or 'too few pairs'})"
        found.append(estimate.efficiency_log)
        at_w.append(estimate.at_w.mean)
    if len(found) < 2:
        return f"{len(found)} duet round(s) on both sides: a spread needs 2"
    for what, values in (("efficiency ratios", found), ("step times at W", at_w)):
        if statistics.stdev(values) >= 1:  # a baseline file refuses it (baselines.duet_aa_problem)
            return f"the rounds' {what} spread {statistics.stdev(values):.2f} in log: not a timing measurement"
    return statistics.stdev(found), statistics.fmean(found), len(found), statistics.stdev(at_w)


def entries(head: list[dict[str, Any]], base: list[dict[str, Any]], commit: str) -> tuple[dict[str, dict], list[str]]:
    """The ``duet_aa`` value of every case that both sides ran as a duet in every round; a line for each (a case's
    single-process reference is its own 1x1: it is left out; on one GPU, ddp at 1x1 against it is a case)."""
    theirs = {c["key"]: c for c in base}
    values, lines = {}, []
    for case in head:
        if not case.get("record") or not (theirs.get(case["key"]) or {}).get("record"):
            lines.append(f"- {case['key']}: not recorded: a side has no measurement ({case.get('status', '?')})")
            continue
        record = compare.record_of(case)
        if record.reference_itself:
            continue
        found = spread(record, compare.record_of(theirs[case["key"]]))
        if isinstance(found, str):
            lines.append(f"- {case['key']}: not recorded: {found}")
            continue
        sigma, mean, rounds, step_w = found
        values[case["key"]] = {
            "sigma": round(sigma, 5),
            "sigma_step_w": round(step_w, 5),
            "rounds": rounds,
            "provenance": baselines.provenance(
                case.get("commit") or commit,
                case.get("host", "?"),
                case.get("fingerprint", {}),
                case.get("host_id", ""),
            ),
        }
        lines.append(
            f"~ {case['key']}: A/A duet spread {sigma:.2%} over {rounds} rounds (mean {mean:+.2%}); "
            f"step time at W {step_w:.2%}"
        )
    return values, lines


def record(count: int, user_args: list[str], results_dir: Path, baseline_dir: Path) -> list[str]:
    """Run ``count`` A/A duet rounds of the selection and write each case's spread; the lines to print."""
    if not 2 <= count <= MAX_ROUNDS:
        raise ScalegateError(
            f"--duet-aa {count} is not in 2..{MAX_ROUNDS}", "one round has no spread; 10 give a steady one"
        )
    project = Project.find()
    gate_dir = (results_dir / time.strftime("duet-aa-%Y%m%d-%H%M%S")).resolve()
    # the checkout against itself: both sides run the working tree, as `gate --base-python` alone does
    empty = gate_dir / "no-baselines"
    sides = [Side(name=name, tree=project.root, project=project, baselines=empty) for name in ("base", "head")]

    def every_case(merged: Merged) -> list[str]:  # an A/A record runs all N rounds of every case
        return [f"[{c['case_id']}]" for c in merged["head"]]

    print(f"record-baselines: {count} A/A duet rounds of {project.root} against itself (docs/duet.md)", flush=True)
    with pairing.local(pairing.Chosen("duet", "")) as paired:
        each = rounds.Rounds(
            sides=sides,
            args=user_args,
            gate_dir=gate_dir,
            undecided=every_case,
            budgets=merge.Budgets(count),
            sessions=Sessions(),
            paired=paired,
            progress=rounds.counted("record-baselines", count),
        )
        merged = rounds.run(each).merged
    update.refuse_unsound([*merged["head"], *merged["base"]])
    values, lines = entries(merged["head"], merged["base"], hostinfo.commit(project.root))
    if not values:
        raise ScalegateError(
            "no case ran as a duet in every round: nothing to record" + ("\n" + "\n".join(lines) if lines else ""),
            "select scaling cases at W >= 2 with their 1x1 reference (e.g. -k '(ddp-cnn-1x2 or single-cnn-1x1) "
            "and not parity'); the rounds are under " + str(gate_dir),
        )
    by_profile: dict[str, dict[str, dict]] = {}
    for case in merged["head"]:
        if case["key"] in values:
            by_profile.setdefault(case["profile"], {})[case["key"]] = values[case["key"]]
    fingerprints = {c["profile"]: c.get("fingerprint", {}) for c in merged["head"]}
    written = [
        baselines.set_field(baseline_dir, profile, fingerprints[profile], baselines.DUET_AA, found)
        for profile, found in by_profile.items()
    ]
    return [f"baselines updated ({baselines.DUET_AA}): {path}" for path in written] + lines
