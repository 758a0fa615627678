"""A finished run directory -> the history's ``Run`` and one ``CaseRow`` per case (the metrics the check reads).

Metrics, each where the run measured it: efficiency, local_efficiency, throughput (samples/s), mfu, peak
memory (the largest rank's, bytes), bytes on the wire per step, final loss, and from the collective ledger the
bytes sent across nodes a step and the collectives a step. A case that failed correctness
keeps its status but no metrics (a case that fails correctness reports no performance: docs/gate.md); an
oversubscribed case keeps its memory and bytes but no timing (its timing is not meaningful).

The run's cluster, hardware and torch (with CUDA and NCCL) come from its profile name (``plan/hostinfo.py``), the
other packages' versions from what the session recorded beside it (``versions``), where it did.
"""

from __future__ import annotations

import collections
import datetime as _dt
from pathlib import Path
from typing import Any

from scalegate.contract.errors import ScalegateError
from scalegate.history.store import CaseRow, Run
from scalegate.plan import hostinfo
from scalegate.record import run_status, runfiles

TIMING = ("efficiency", "local_efficiency", "throughput", "mfu")
NO_METRICS = ("failed", "error")


def metrics_of(case: dict[str, Any]) -> dict[str, float]:
    if case.get("status") in NO_METRICS:
        return {}
    result = case.get("result") or {}
    resources = case.get("resources") or {}
    peaks = [r.get("peak_memory_bytes") for r in result.get("ranks", []) if r.get("peak_memory_bytes")]
    losses = [v for v in result.get("losses") or [] if v == v]  # nan: no loss on that step
    found = {
        "efficiency": case.get("efficiency"),
        "local_efficiency": case.get("local_efficiency"),
        "throughput": result.get("throughput"),
        "mfu": case.get("mfu", resources.get("mfu")),  # where a run reports model FLOPs utilisation
        "peak_memory_bytes": max(peaks) if peaks else None,
        "bytes_per_step": (resources.get("wire") or {}).get("bytes_per_step"),
        **_ledger(resources.get("ledger") or {}),
        "checkpoint_s_per_gb": (resources.get("checkpoint") or {}).get("s_per_gb"),  # --scaling-checkpoint runs
        "final_loss": losses[-1] if losses else None,
    }
    if case.get("oversubscribed"):
        found = {k: v for k, v in found.items() if k not in TIMING}
    return {k: float(v) for k, v in found.items() if isinstance(v, (int, float)) and v == v}


def _ledger(found: dict[str, Any]) -> dict[str, Any]:
    """The collectives' series (figures/ledger.py), where the ledger was steady: a varying one has no one value."""
    if not found.get("steady") or found.get("unavailable"):
        return {}
    return {"cross_node_bytes_per_step": found.get("cross"), "collectives_per_step": found.get("calls")}


def _most_common(values: list[str], default: str) -> str:
    values = [v for v in values if v]
    return collections.Counter(values).most_common(1)[0][0] if values else default


def from_directory(
    run_dir: Path, *, commit: str | None = None, date: str | None = None, note: str = "", partial: bool = False
) -> tuple[Run, list[CaseRow]]:
    """``commit``/``date`` override what the run recorded (a backfill, or a synthetic series: say so in ``note``)."""
    state = run_status.read(Path(run_dir))
    if state in ("running", "partial") and not partial:
        raise ScalegateError(
            f"{run_dir} is a {state} run (its run.json): the history takes finished runs",
            "wait for it to finish, or pass --partial to add the cases it did finish",
        )
    cases = runfiles.load_run(run_dir)
    if not cases:
        raise ScalegateError(
            f"{run_dir} holds no case results (*.json with case_id and status)",
            "pass a finished run directory, e.g. results/nightly-123",
        )
    written = max(float(c.get("written") or 0) for c in cases)
    recorded = _dt.datetime.fromtimestamp(written, _dt.timezone.utc).isoformat(timespec="seconds")
    if date is not None:
        try:
            parsed = _dt.datetime.fromisoformat(date)
        except ValueError:
            raise ScalegateError(
                f"--date {date!r} is not an ISO date", "e.g. --date 2026-11-24T02:17:00+00:00"
            ) from None
        recorded = (parsed if parsed.tzinfo else parsed.replace(tzinfo=_dt.timezone.utc)).isoformat(timespec="seconds")
    profile = _most_common([c.get("profile") for c in cases], "unknown")
    parts = hostinfo.parse_profile(profile)
    recorded_versions = next((c["versions"] for c in cases if c.get("profile") == profile and c.get("versions")), {})
    run = Run(
        run_id=Path(run_dir).resolve().name,
        commit=commit or _most_common([c.get("commit") for c in cases], "unknown"),
        date=recorded,
        profile=profile,
        source=str(Path(run_dir).resolve()),
        note=note,
        cluster=parts.cluster,
        hardware=parts.hardware,
        versions={**{str(k): str(v) for k, v in recorded_versions.items()}, **parts.versions},
    )
    rows = [
        CaseRow(
            case_key=c.get("key") or c["case_id"], case_id=c["case_id"], status=str(c["status"]), metrics=metrics_of(c)
        )
        for c in cases
    ]
    return run, rows
