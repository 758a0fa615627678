"""The GPU acceptance run's rows: what each phase's files say about each case, and what the GPU path must show.

A pytest phase leaves a JUnit file (passed, failed, skipped with its reason) and the session's results directory
(``<phase dir>/latest/<case>.json``: step time, throughput, MFU, memory per rank with its source, bytes per
step); the gate phase leaves its verdicts JSON and the same case files. ``rows`` joins them into one ``CaseRow``
per case; ``problems`` holds what a case that pytest passed must still show on a GPU (memory sampled by NVML, at
or above the allocator's peak on every rank; MFU against a datasheet peak; compile time under
``--scaling-compile``), and a skip that says the machine is a CPU, or a package the setup should have installed,
fails too. The page is harness/scalegate/report/acceptance_page.py; the phases are harness/scalegate/cli/gpu_phases.py.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from scalegate.contract import cards
from scalegate.contract.errors import ScalegateError
from scalegate.figures import ledger
from scalegate.judge.duet import swap_said
from scalegate.judge.evidence import CaseRecord
from scalegate.record import runfiles

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
# skip reasons that mean the run did not see its GPU, or its setup left out a package (harness/scalegate/contract/cards.py)
CPU_SKIPS = ("refuses CPU", "on CUDA only", "no CUDA device", "non-CPU accelerator")
MISSING_PACKAGE = "which is not installed"


@dataclass(frozen=True, kw_only=True)
class CaseRow:
    phase: str
    case_id: str
    outcome: str  # passed, failed, skipped
    reason: str = ""  # a skip's reason, or what failed
    strategy: str = ""
    world_size: int | None = None
    verdict: str = ""  # the judge's status (ok, no-baseline, noisy, regressed, ...)
    step_s: float | None = None  # median step, the slowest rank's
    throughput: float | None = None  # samples/s
    mfu: float | None = None
    peak_source: str = ""
    memory_source: str = ""
    nvml_peak_bytes: list[int] = field(default_factory=list)  # per rank, the sampler's peak
    allocator_peak_bytes: list[int] = field(default_factory=list)  # per rank, torch.cuda.max_memory_allocated
    bytes_per_step: float | None = None
    wire_source: str = ""
    local_efficiency: float | None = None
    compile_s: float | None = None
    problems: list[str] = field(default_factory=list)
    gpu_rounds: list[dict[str, Any]] = field(default_factory=list)  # each launch's (a gate's: round's) GPU state
    swap: str = ""  # the swap pairing's cost, as the verdict says it (judge/duet.py ``swap_said``); "" without
    collectives: str = ""  # the collective ledger's rows in a few words (``ledger_said``); "" from a run without it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CaseRow":
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def junit_outcomes(path: Path) -> dict[str, tuple[str, str]]:
    """{case id: (outcome, reason)} from pytest's JUnit XML; the case id is the test's parameter id."""
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        if not name:  # a session stopped mid-case leaves a nameless entry; its phase's row says it was stopped
            continue
        case_id = name[name.find("[") + 1 : -1] if name.endswith("]") else name
        outcome, reason = PASSED, ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = SKIPPED if tag == "skipped" else FAILED
                reason = _first_line(found.get("message") or found.text or tag)
                break
        if outcome == SKIPPED and reason.startswith("Skipped: "):
            reason = reason[len("Skipped: ") :]
        out[case_id] = (outcome, reason)
    return out


def case_files(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The case results a session wrote (``run_dir`` is its results directory; the session's run is ``latest``,
    absent when a phase was stopped before its first case)."""
    latest = run_dir / "latest"
    return {case["case_id"]: case for case in runfiles.load_run(latest)} if latest.is_dir() else {}


def measures(case: dict[str, Any]) -> dict[str, Any]:
    """The figures a row shows, from one case result file (harness/scalegate/session.py's format)."""
    result = case.get("result") or {}
    resources = case.get("resources") or {}
    wire = resources.get("wire") or {}
    spec = case.get("spec") or result.get("spec") or {}
    allocated = [int((m or {}).get("max_allocated", 0)) for m in resources.get("cuda_memory") or []]
    return dict(
        strategy=spec.get("strategy", ""),
        world_size=(case.get("record") or {}).get("world_size"),
        verdict=case.get("status", ""),
        step_s=result.get("median_step_s"),
        throughput=result.get("throughput"),
        mfu=case.get("mfu"),
        peak_source=case.get("peak_source") or case.get("mfu_unavailable") or "",
        # NVML's reading: beside the allocator's judged peak, or (a record before that) the judged peak itself
        memory_source=resources.get("device_peak_source") or resources.get("memory_source", ""),
        nvml_peak_bytes=[
            int(b) for b in resources.get("device_peak_bytes") or resources.get("peak_memory_bytes") or []
        ],
        allocator_peak_bytes=allocated if any(allocated) else [],
        bytes_per_step=wire.get("bytes_per_step"),
        wire_source=wire.get("source", ""),
        local_efficiency=case.get("local_efficiency"),
        compile_s=resources.get("compile_s"),
        swap=swap_of(case),
        collectives=ledger_said(resources.get("ledger") or {}),
    )


def ledger_said(found: dict[str, Any]) -> str:
    """``2 x all_reduce in a group of 1 rank within a node (4.91 MB)``, one per row; ``none`` where the ranks issued
    no collective; ``unavailable: why``; "" where the run recorded no ledger."""
    if not found:
        return ""
    if found.get("unavailable"):
        return f"unavailable: {found['unavailable']}"
    rows = [f"{r['calls']:g} x {ledger.describe(r)} ({r['bytes'] / 1e6:.2f} MB)" for r in found.get("rows") or []]
    return "; ".join(rows) or "none"


def swap_of(case: dict[str, Any]) -> str:
    """What a gate case's swaps moved and took, and what stayed of a rank on its GPU (the swap pairing's figures on
    a GPU); "" where nothing was swapped or the record cannot be read."""
    if not any((launch or {}).get("duet_swap_bytes") for launch in (case.get("record") or {}).get("launches") or []):
        return ""
    try:
        record = CaseRecord.from_dict(case["record"])
    except ScalegateError:
        return ""
    return swap_said(record.launches).removeprefix(", ")


def problems(row: CaseRow, case: dict[str, Any] | None, compiled: bool) -> list[str]:
    """What a case that ran must show on a GPU, as sentences naming the value and the limit."""
    if case is None:
        return ["no result file: the session wrote no <case>.json for it"]
    found = []
    if row.collectives.startswith("unavailable"):
        found.append(f"no collective ledger: {row.collectives.removeprefix('unavailable: ')}")
    if not row.memory_source.startswith("nvml"):
        found.append(f"memory sampled by {row.memory_source or 'nothing'!r}, not NVML")
    if not row.allocator_peak_bytes:
        found.append("no torch.cuda.max_memory_allocated recorded beside the NVML peak (cuda_memory is empty)")
    for rank, (nvml, allocated) in enumerate(zip(row.nvml_peak_bytes, row.allocator_peak_bytes)):
        if nvml < allocated:
            found.append(
                f"rank {rank}: NVML peak {nvml / 2**20:.0f} MiB is below the allocator's max_memory_allocated "
                f"{allocated / 2**20:.0f} MiB"
            )
    scripted = bool((case.get("spec") or {}).get("script"))
    if not scripted and not (isinstance(row.mfu, (int, float)) and 0 < row.mfu <= 1):
        found.append(f"MFU {row.mfu!r} is not in (0, 1]: {row.peak_source or 'no peak'}")
    elif not scripted and not row.peak_source.startswith(("NVIDIA", "AMD")):
        found.append(f"MFU is not against a datasheet peak: {row.peak_source}")
    if compiled and not (isinstance(row.compile_s, (int, float)) and row.compile_s > 0):
        found.append(f"compile time {row.compile_s!r}: --scaling-compile left no compile_s")
    return found


def skip_problem(reason: str) -> list[str]:
    if any(text in reason for text in CPU_SKIPS):
        return [f"skipped as on a CPU, on a CUDA machine: {reason}"]
    if MISSING_PACKAGE in reason:
        return [f"skipped for a package the setup should have installed: {reason}"]
    return []


def judged(phase: str, case_id: str, outcome: str, reason: str, case: dict[str, Any] | None, compiled: bool) -> CaseRow:
    """One row: pytest's outcome, the case file's figures, and the GPU checks (which fail a passed case)."""
    figures = measures(case) if case else {}
    figures["gpu_rounds"] = [
        launch.get("gpu_state") or {} for launch in ((case or {}).get("record") or {}).get("launches", [])
    ]
    figures["strategy"] = figures.get("strategy") or strategy_of(case_id)
    figures["world_size"] = figures.get("world_size") or world_of(case_id)
    row = CaseRow(phase=phase, case_id=case_id, outcome=outcome, reason=reason, **figures)
    found = skip_problem(reason) if outcome == SKIPPED else problems(row, case, compiled) if outcome == PASSED else []
    if found:
        return replace(row, outcome=FAILED, problems=found, reason=row.reason or found[0])
    return row


def pytest_rows(phase: str, junit: Path, results_dir: Path, compiled: bool) -> list[CaseRow]:
    """A pytest phase's rows; without its JUnit file (killed at its budget) the case files it left, as failed."""
    cases = case_files(results_dir)
    if junit.is_file():
        outcomes = junit_outcomes(junit)
        return [judged(phase, cid, out, why, cases.get(cid), compiled) for cid, (out, why) in outcomes.items()]
    return [
        replace(judged(phase, cid, PASSED, "", case, compiled), outcome=FAILED, reason="its session did not finish")
        for cid, case in cases.items()
    ]


def gate_rows(phase: str, verdicts: Path, results_dir: Path) -> list[CaseRow]:
    """The gate phase's rows: its parity verdicts, then its judge's verdict per case (a failed verdict fails the row)
    with the merged figures."""
    if not verdicts.is_file():
        return []
    cases = case_files(results_dir)
    data = json.loads(verdicts.read_text())
    rows = [
        CaseRow(
            phase=phase,
            case_id=p.get("case_id", "?"),
            outcome=FAILED if p.get("problems") else PASSED,
            reason="; ".join(p.get("problems") or []),
            strategy="parity",
            verdict=p.get("status") or "",
        )
        for p in data.get("parity", [])
    ]
    for item in data.get("cases", []):
        cid = item.get("case_id", "?")
        failed = bool(item.get("failed"))
        reason = "; ".join(item.get("messages") or []) if failed else ""
        row = judged(phase, cid, FAILED if failed else PASSED, reason, cases.get(cid), compiled=False)
        rows.append(replace(row, verdict=item.get("status", row.verdict)))
    return rows


def spread_rows(phase: str, results_dir: Path) -> list[CaseRow]:
    """A/A duet rounds' phase (``record-baselines --duet-aa``): a row per case it recorded, its spread from the
    baseline file it wrote, and the GPU's state in every round (the head side's launch of each round)."""
    rows = []
    for path in sorted((results_dir / "baselines").glob("*.json")):
        for key, entry in (json.loads(path.read_text()).get("cases") or {}).items():
            aa = entry.get("duet_aa") or {}
            if not aa:
                continue
            case_id = key.split(":")[0]
            rounds = sorted(results_dir.glob(f"duet-aa-*/round-*/head/latest/{case_id}.json"))
            states = [
                (launch.get("gpu_state") or {})
                for r in rounds
                for launch in (json.loads(r.read_text()).get("record") or {}).get("launches", [])[:1]
            ]
            said = (
                f"A/A duet spread {aa['sigma']:.2%} over {aa['rounds']} rounds; step time at W "
                f"{aa.get('sigma_step_w', float('nan')):.2%}"
            )
            rows.append(
                CaseRow(
                    phase=phase,
                    case_id=case_id,
                    outcome=PASSED,
                    reason=said,
                    strategy=strategy_of(case_id),
                    world_size=world_of(case_id),
                    verdict="recorded",
                    gpu_rounds=states,
                )
            )
    return rows


def strategy_of(case_id: str) -> str:
    """The strategy of a case id (``fabric-ddp-cnn-1x2`` -> ``fabric-ddp``): the longest card name it starts with,
    else its first word (a script's own strategy word, ``parity``)."""
    known = [name for name in cards.names() if case_id.startswith(name + "-")]
    return max(known, key=len) if known else case_id.split("-")[0]


def world_of(case_id: str) -> int | None:
    """The world size of a case id's ``NxG`` topology (``ddp-cnn-1x2`` -> 2), None where it has none."""
    match = re.search(r"-(\d+)x(\d+)(?:-|$)", case_id)
    return int(match.group(1)) * int(match.group(2)) if match else None


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


@dataclass(frozen=True, kw_only=True)
class PhaseRun:
    """One phase as it ran: its command, its budget and time, how it ended (or why it did not run here)."""

    name: str
    proves: str
    argv: list[str]
    budget_s: float = 0.0
    wall_s: float = 0.0
    exit_code: int | None = None
    timed_out: bool = False
    skip: str = ""
    log: str = ""

    @property
    def problem(self) -> str:
        """Why the phase itself failed, beyond its cases' rows ("" when it did not)."""
        if self.skip:
            return ""
        if self.timed_out:
            return f"{self.name} ran past its budget of {self.budget_s:.0f} s and was stopped (log: {self.log})"
        if self.exit_code == 5:
            return f"{self.name} selected no case (pytest exit code 5; log: {self.log})"
        if self.exit_code not in (0, 1):
            return f"{self.name} exited {self.exit_code} (log: {self.log})"
        return ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PhaseRun":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
