"""What a verdict is measured against, resolved in one place: the baseline's value and the tolerance that applies.

The efficiency tolerance, in order of precedence: the caller's override (``compare --tolerance``), the run's own
``--scaling-tolerance`` (the PR gate passes 0.1), the test's ``@pytest.mark.scaling_tolerance``, the baseline
entry's own tolerance, and last the sequential test's default drop (``sequential.Design().detect``). The same
efficiency tolerance is the drop the local and A/B gates must catch. Other metrics (memory, bytes, final loss,
throughput, MFU, checkpoint s/GB) take the test's marker, else the baseline's own. Every caller (the stored gate,
A/B, the classic efficiency, budgets, ``compare``'s table) asks here, and the ``Outcome`` carries what was used.
"""

from __future__ import annotations

from typing import Any

from scalegate.judge import sequential
from scalegate.judge.evidence import CaseRecord
from scalegate.judge.outcome import Overrides
from scalegate.record.baselines import BaselineFile, Reference

EFFICIENCIES = ("efficiency", "local_efficiency")
# Between hosts of one profile a case's local efficiency has a level of its own (the spread between two 2-core VMs:
# docs/evidence/detection.md#each-vm-has-its-own-level). A baseline recorded on another host (or before a
# reboot) is judged with this spread added, shared by every launch; an entry's own "host_sigma" (measured on a
# team's nodes) replaces it.
HOST_SPREAD = 0.095


def _given(record: CaseRecord, overrides: Overrides | None, metric: str) -> float | None:
    """The tolerance someone asked for (override, the run's option, the test's marker), or None."""
    if metric in EFFICIENCIES:
        for value in (overrides.tolerance if overrides else None, record.conduct.tolerance):
            if value is not None:
                return value
        return record.tolerances.get("efficiency")
    return record.tolerances.get(metric)


def reference(
    baseline: BaselineFile | None, record: CaseRecord, metric: str, overrides: Overrides | None = None
) -> Reference | None:
    """The baseline's value for ``metric`` with the tolerance that applies, or None without a baseline entry."""
    ref = baseline.reference(record.key, metric) if baseline else None
    if ref is None:
        return None
    given = _given(record, overrides, metric)
    return ref if given is None else Reference(value=ref.value, tolerance=given)


def efficiency_tolerance(
    record: CaseRecord, overrides: Overrides | None, baseline: BaselineFile | None, metric: str = "local_efficiency"
) -> float:
    """The drop the timing gate must catch: as ``reference``, else the sequential test's default."""
    given = _given(record, overrides, metric)
    if given is None:
        ref = baseline.reference(record.key, metric) if baseline else None
        given = ref.tolerance if ref is not None else None
    return given if given is not None and 0 < given < 1 else sequential.Design().detect


def host_spread(baseline: BaselineFile, record: CaseRecord) -> tuple[float, str]:
    """The spread between hosts to add, and where the baseline was recorded; (0, host) on the recording host."""
    case: dict[str, Any] = baseline.cases.get(record.key, {})
    recorded = str((case.get("provenance") or {}).get("host_id") or "")
    if not record.host or recorded == record.host:
        return 0.0, recorded
    entry = case.get("local_efficiency") or {}
    return float(
        entry.get("host_sigma") or HOST_SPREAD
    ), recorded or f"{(case.get('provenance') or {}).get('hostname', '?')} (no host id)"
