"""Turning a finished run into baseline entries (``--scaling-update-baselines`` and the CLI)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from scalegate import policy
from scalegate.contract.errors import ScalegateError
from scalegate.contract.faults import Faults
from scalegate.figures import resources
from scalegate.plan.hostinfo import commit
from scalegate.record import baselines

WRITABLE = ("ok", "improved", "regressed", "no-baseline", "noisy")
# --scaling-checkpoint's s/GB: file-system time on a shared host moves by tens of % between runs (page cache,
# the other jobs' writes); the budget catches a save or load that became several times slower, not 20%
CHECKPOINT_TOLERANCE = 1.0


def local_entry(values: list[float], tolerance: float = policy.DETECT) -> dict[str, Any]:
    """The local efficiency as a baseline: the median launch, the spread of ln(value) between launches (the
    sequential test's sigma: sample deviation, which a stray launch widens rather than hides), their count."""
    logs = [math.log(v) for v in values if v > 0]
    sigma = None
    if len(logs) >= 3:
        mean = sum(logs) / len(logs)
        sigma = round(math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)), 4)
    ordered = sorted(values)
    return {
        "value": round(
            ordered[(len(ordered) - 1) // 2]
            if len(ordered) % 2
            else (ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2,
            4,
        ),
        "tolerance": tolerance,
        "sigma": sigma,
        "launches": len(values),
    }


def entries_from_run(
    cases: list[dict[str, Any]], tolerance: float, local_tolerance: float = policy.DETECT
) -> tuple[dict[str, dict], list[str]]:
    """Baseline entries for every case that passed correctness; notes for the ones left out."""
    entries, notes = {}, []
    for case in cases:
        if (
            case.get("spec", {}).get("faults", {}).get("delay_ms", 0)
            or case.get("spec", {}).get("faults", {}).get("grad_scale", 1.0) != 1.0
            or case.get("spec", {}).get("faults", {}).get("extra_allreduce", 0)
        ):
            raise ScalegateError(
                f"{case['case_id']} ran with an injected fault; refusing to record it as a baseline",
                "rerun without --scaling-inject-* options",
            )
        if case["status"] not in WRITABLE or not case.get("result"):
            notes.append(f"- {case['key']}: not written ({case['status']})")
            continue
        result = case["result"]
        peaks = [r["peak_memory_bytes"] for r in result["ranks"]]
        entries[case["key"]] = {
            **(
                {"efficiency": {"value": round(case["efficiency"], 4), "tolerance": tolerance}}
                if case.get("efficiency") is not None
                else {}
            ),
            **(
                {"local_efficiency": local_entry(case["launch_local_efficiencies"], local_tolerance)}
                if case.get("launch_local_efficiencies")
                else {}
            ),
            "throughput": {"value": round(result["throughput"], 2), "tolerance": tolerance, "unit": "samples/s"},
            **(
                {"mfu": {"value": case["mfu"], "tolerance": tolerance, "peak": case.get("peak_source", "")}}
                if case.get("mfu")
                else {}
            ),
            "final_loss": {"value": round(result["losses"][-1], 5), "tolerance": 0.25},
            "peak_memory_bytes": {
                "value": peaks,
                "tolerance": resources.memory_tolerance((case.get("resources") or {}).get("memory_source") or ""),
            },
            **_resource_entries(case.get("resources") or {}),
            "noise_rel": round(_noise(case), 4),
            "median_step_s": result["median_step_s"],
            "world_size": len(peaks),
            # the final loss depends on how many steps trained: it is compared only at the same counts
            "steps": case["spec"]["steps"],
            "warmup": case["spec"]["warmup"],
            "provenance": baselines.provenance(
                case.get("commit") or commit(),
                case.get("host", "?"),
                case.get("fingerprint", {}),
                case.get("host_id", ""),
            ),
        }
    return entries, notes


def _resource_entries(found: dict[str, Any]) -> dict[str, Any]:
    """Memory source, state bytes per rank and bytes on the wire per step, where they were measured."""
    out: dict[str, Any] = {}
    if found.get("memory_source"):
        out["memory_source"] = found["memory_source"]
    if found.get("state_bytes"):
        out["state_bytes"] = found["state_bytes"]
    per_gb = (found.get("checkpoint") or {}).get("s_per_gb")
    if per_gb is not None:
        out["checkpoint_s_per_gb"] = {
            "value": per_gb,
            "tolerance": CHECKPOINT_TOLERANCE,
            "unit": "s/GB",
            "format": found["checkpoint"].get("format", "?"),
        }
    collectives = ledger_entry(found.get("ledger") or {})
    if collectives is not None:  # the exact verdict's reference
        out["ledger"] = collectives
    sent = (found.get("wire") or {}).get("bytes_per_step")
    if sent is not None:
        out["bytes_per_step"] = {
            "value": sent,
            "tolerance": resources.DEFAULT_BYTES_TOLERANCE,
            "unit": "B/step",
            "source": found["wire"].get("source", "?"),
        }
    return out


def _noise(case: dict[str, Any]) -> float:
    """The efficiency interval's relative half-width: the baseline's own noise, used by later verdicts."""
    ci, eff = case.get("efficiency_ci"), case.get("efficiency")
    if ci and eff and all(isinstance(v, (int, float)) and math.isfinite(v) for v in ci):
        return max(eff - ci[0], ci[1] - eff) / eff
    return case.get("noise_rel") or 0.0


def refuse_unsound(cases: list[dict[str, Any]]) -> None:
    """A run with a correctness failure or an injected fault must not become anyone's baseline."""
    wrong = [c for c in cases if c.get("problems")]
    if wrong:
        first = wrong[0]["problems"][0].splitlines()[0]
        raise ScalegateError(
            f"refusing to update baselines: {len(wrong)} case(s) failed correctness "
            f"({', '.join(c['case_id'] for c in wrong)}); first: {first}",
            "fix the failing case and rerun the suite; baselines are written only from a "
            "run whose every case agrees with the single-process reference",
        )
    for case in cases:
        faults = case.get("spec", {}).get("faults", {})
        on = sorted(k for k, off in dataclasses.asdict(Faults()).items() if faults.get(k, off) != off)
        if on:
            raise ScalegateError(
                f"refusing to update baselines: {case['case_id']} ran with injected fault(s) {', '.join(on)}",
                "rerun without --scaling-inject-* options",
            )


def ledgers_from_run(cases: list[dict[str, Any]], directory: Path) -> list[str]:
    """``update-baselines --ledger-only``: each case's steady collective ledger written into its baseline entry, the
    rest of every entry as it was (a baseline recorded before the ledger gains one without re-recording its timing)."""
    if not cases:
        raise ScalegateError("the run has no case results to record", "run the suite first, then update")
    refuse_unsound(cases)
    lines, by_profile = [], {}
    for case in cases:
        found = ledger_entry((case.get("resources") or {}).get("ledger") or {})
        if found is None:
            lines.append(f"- {case['key']}: no ledger written (its ledger varied, or the run recorded none)")
            continue
        by_profile.setdefault(case["profile"], {})[case["key"]] = (found, case.get("fingerprint", {}))
    for profile, written in by_profile.items():
        fingerprint = next(iter(written.values()))[1]
        path = baselines.set_field(directory, profile, fingerprint, "ledger", {k: v[0] for k, v in written.items()})
        lines.insert(0, f"ledgers written into {path}: {len(written)} case(s)")
    return lines


def ledger_entry(found: dict[str, Any]) -> dict[str, Any] | None:
    """What a baseline keeps of a case's ledger (figures/ledger.py ``summarize``): a steady one's rows and totals."""
    if not found.get("steady") or found.get("unavailable"):
        return None
    return {k: found[k] for k in ("source", "rows", "calls", "intra", "cross", "steady")}


def update_from_run(
    cases: list[dict[str, Any]], directory: Path, tolerance: float, local_tolerance: float = policy.DETECT
) -> list[str]:
    if not cases:
        raise ScalegateError("the run has no case results to record", "run the suite first, then update")
    refuse_unsound(cases)
    by_profile: dict[str, list[dict]] = {}
    for case in cases:
        by_profile.setdefault(case["profile"], []).append(case)
    lines = []
    for profile, group in by_profile.items():
        entries, notes = entries_from_run(group, tolerance, local_tolerance)
        if entries:
            path, diff = baselines.update(directory, profile, group[0].get("fingerprint", {}), entries)
            lines += [f"baselines updated: {path}"] + diff
        lines += notes
    return lines
