"""The GPU acceptance report: ``docs/gpu/<device>-<date>.md`` and the raw JSON it is made from
(``experiments/data/gpu/<device>-<date>.json``).

The JSON is the record (``schema``, the host, the phases as run, one row per case: harness/scalegate/report/acceptance.py);
the page is a pure function of it and of the notes written by hand after the run, kept beside it
(``<device>-<date>.notes.md``, the page's last section), so ``python -m scalegate selftest --render
experiments/data/gpu/<file>.json`` writes the page again from a recorded run, and the tests check every page under
docs/gpu against its record without a GPU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from scalegate.contract.errors import ScalegateError
from scalegate.report.acceptance import FAILED, PASSED, CaseRow, PhaseRun

SCHEMA = 1
MiB = 2**20

# The GPU path, item by item: which passed rows verify it, and the phase whose absence explains none.
Check = Callable[[CaseRow], bool]
TWO_GPUS = "matrix-1x2-nccl"
COVERAGE: tuple[tuple[str, str, Check], ...] = (
    ("NVML peak memory per rank, at or above torch.cuda.max_memory_allocated", "", lambda r: bool(r.nvml_peak_bytes)),
    ("MFU against the datasheet peak of this GPU", "", lambda r: r.mfu is not None or "MFU" in " ".join(r.problems)),
    (
        "the collective ledger under NCCL: each case's collectives, counted from the dispatcher",
        "",
        lambda r: bool(r.collectives) and not r.collectives.startswith("unavailable"),
    ),
    ("DeepSpeed ZeRO-1/2/3", "", lambda r: r.strategy.startswith("deepspeed-zero")),
    ("FSDP1 (FullyShardedDataParallel)", "", lambda r: r.strategy == "fsdp1"),
    ("Lightning Fabric fsdp and deepspeed", "", lambda r: r.strategy in ("fabric-fsdp", "fabric-deepspeed")),
    ("Lightning Trainer fsdp and deepspeed", "", lambda r: r.strategy in ("lightning-fsdp", "lightning-deepspeed")),
    ("DataParallel (dp: 2+ GPUs in one process)", TWO_GPUS, lambda r: r.strategy == "dp"),
    ("NCCL across 2 ranks", TWO_GPUS, lambda r: (r.world_size or 0) >= 2 and r.phase == TWO_GPUS),
    ("local efficiency (same-launch pairs)", TWO_GPUS, lambda r: r.local_efficiency is not None),
    (
        "torch.compile on CUDA for ddp and fsdp",
        "compile",
        lambda r: r.phase == "compile" and r.strategy in ("ddp", "fsdp"),
    ),
    ("CUDA-event step timing (a team's script)", "script", lambda r: r.phase == "script"),
    ("the A/B gate (gate --base HEAD, an A/A)", "ab-gate", lambda r: r.phase == "ab-gate"),
    (
        "the swap pairing: each rank's training state off the GPU between its turns",
        "swap",
        lambda r: r.phase == "swap" and "swapped out" in r.swap,
    ),
    (
        "a round's A/A spread on a step of 20 ms or more, with the GPU's clocks and throttle reasons per round",
        "aa-rounds",
        lambda r: r.phase == "aa-rounds" and bool(r.gpu_rounds),
    ),
)


def slug(device: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': the report's file name."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "unknown-gpu"


def paths(out_dir: Path, report: dict[str, Any], raw_dir: Path | None = None) -> tuple[Path, Path]:
    """The device and the date name a run's page (in ``out_dir``) and its raw JSON (in ``raw_dir``, else beside the
    page); a second run on the same device and day takes the next free ``-2``, ``-3``: a page whose JSON records
    this run's own work_dir is this run's, written again."""
    base = f"{slug(report['device'])}-{report['date']}"
    raw_dir = raw_dir or out_dir
    for n in range(1, 100):
        stem = base if n == 1 else f"{base}-{n}"
        raw = raw_dir / f"{stem}.json"
        if not raw.exists() or _same_run(raw, report):
            return out_dir / f"{stem}.md", raw
    raise ScalegateError(f"{raw_dir}: 99 acceptance reports for {base}", "move older reports out of that folder")


def _same_run(raw: Path, report: dict[str, Any]) -> bool:
    try:
        return json.loads(raw.read_text()).get("work_dir") == report.get("work_dir")
    except (OSError, ValueError, AttributeError):
        return False


def rows_of(report: dict[str, Any]) -> list[CaseRow]:
    return [CaseRow.from_dict(c) for c in report.get("cases", [])]


def phases_of(report: dict[str, Any]) -> list[PhaseRun]:
    return [PhaseRun.from_dict(p) for p in report.get("phases", [])]


def failures(report: dict[str, Any]) -> list[str]:
    """Every failure of the run: failed cases, then phases that failed beyond their rows."""
    rows = rows_of(report)
    found = [
        f"{r.phase}: {r.case_id}: {'; '.join(r.problems) or r.reason or 'failed'}" for r in rows if r.outcome == FAILED
    ]
    for phase in phases_of(report):
        failed_rows = any(r.phase == phase.name and r.outcome == FAILED for r in rows)
        if phase.problem:
            found.append(phase.problem)
        elif phase.exit_code == 1 and not failed_rows and not phase.skip:
            found.append(f"{phase.name} exited 1 with no failed case in its rows (log: {phase.log})")
    return found


def coverage(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(item, what the run says of it): verified by which passed cases, or why it was not."""
    rows = rows_of(report)
    skipped_phases = {p.name: p.skip for p in phases_of(report) if p.skip}
    out = []
    for item, phase, check in COVERAGE:
        mine = [r for r in rows if check(r)]
        passed = [r for r in mine if r.outcome == PASSED]
        # a case failed for another item's reason (its MFU, say) does not fail this one
        failed = [r for r in mine if r.outcome == FAILED and _fails(item, r)]
        if failed:
            text = f"**failed**: {', '.join(_ids(failed))}"
        elif passed:
            text = f"verified: {len(passed)} case(s) ({', '.join(_ids(passed))})"
        elif any(r.outcome == FAILED for r in mine):
            other = next(r for r in mine if r.outcome == FAILED)
            text = f"not verified: {other.case_id} failed another check ({_cell('; '.join(other.problems))})"
        elif mine:
            text = f"not verified: {mine[0].case_id} skipped: {mine[0].reason}"
        elif phase in skipped_phases:
            text = f"not verified: phase {phase} did not run ({skipped_phases[phase]})"
        else:
            text = "not verified: no case of this run exercised it"
        out.append((item, text))
    return out


TOPICS = ("NVML", "MFU")  # the GPU checks' own items: a case failed on one of them fails that item alone


def _fails(item: str, row: CaseRow) -> bool:
    """Whether ``row``'s failure is one of ``item``'s: pytest's own failure is every item's."""
    if not row.problems:
        return True
    topic = next((t for t in TOPICS if item.startswith(t)), "")
    if topic:
        return any(topic in p for p in row.problems)
    return any(not any(t in p for t in TOPICS) for p in row.problems)


def _ids(rows: list[CaseRow], most: int = 4) -> list[str]:
    ids = [f"{r.case_id} [{r.phase}]" if r.phase in ("compile", "ab-gate", "swap") else r.case_id for r in rows]
    return ids[:most] + ([f"+{len(ids) - most} more"] if len(ids) > most else [])


def markdown(report: dict[str, Any]) -> str:
    """The page: the verdict, what was verified, the phases, every case, the failures."""
    failed = failures(report)
    host = report.get("host") or {}
    lines = [
        f"# GPU acceptance: {report['device']} x{report.get('gpus', '?')}, {report['date']}",
        "",
        f"**{'FAILED' if failed else 'passed'}**" + (f" ({len(failed)} failure(s), below)" if failed else "") + ": "
        f"`{report.get('command', 'python -m scalegate selftest --gpu')}` at commit {report.get('commit', '?')}, "
        f"torch {host.get('torch', '?')} (CUDA {host.get('cuda', '?')}, NCCL {host.get('nccl', '?')}), "
        f"driver {host.get('driver', '?')}; {report.get('wall_s', 0):.0f} s of a {report.get('budget_s', 0):.0f} s "
        "budget. Raw record: the JSON file of the same name.",
        "",
        "## What this run verified",
        "",
        "| path | this run |",
        "|---|---|",
        *(f"| {item} | {text} |" for item, text in coverage(report)),
        "",
        "## Phases",
        "",
        "| phase | proves | budget s | wall s | result |",
        "|---|---|---:|---:|---|",
        *(_phase_line(p) for p in phases_of(report)),
        "",
        "## Cases",
        "",
        "Peak memory per rank: NVML's sampled peak / `torch.cuda.max_memory_allocated`; MB/step: bytes on the wire "
        "per step where they were counted.",
        "",
        "| phase | case | result | step ms | samples/s | MFU | peak MiB NVML / allocator | MB/step | local eff "
        "| compile s | reason |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---|",
        *(_case_line(r) for r in rows_of(report)),
        "",
        *ledger_lines(rows_of(report)),
    ]
    lines += gpu_state_lines(rows_of(report))
    if failed:
        lines += ["## Failures", "", *(f"- {_cell(f)}" for f in failed), ""]
    return "\n".join(lines)


def ledger_lines(rows: list[CaseRow]) -> list[str]:
    """Each case's collectives a step, where the run recorded its ledger (harness/scalegate/measure/ledger.py)."""
    found = [r for r in rows if r.collectives]
    if not found:
        return []
    lines = [
        "## Collectives",
        "",
        "Each case's collectives a step, from its ledger.",
        "",
        "| phase | case | collectives a step |",
    ]
    return [*lines, "|---|---|---|", *(f"| {r.phase} | `{r.case_id}` | {_cell(r.collectives)} |" for r in found), ""]


def gpu_state_lines(rows: list[CaseRow]) -> list[str]:
    """Each case's GPU state, launch by launch (a gate's: round by round): what drives a GPU's step time besides
    the code (measure/gpu_state.py); nothing where no case recorded any."""
    found = [(r, n, s) for r in rows for n, s in enumerate(r.gpu_rounds, 1) if s and "unavailable" not in s]
    if not found:
        return []
    lines = [
        "## GPU state",
        "",
        "Per launch (a gate's cases: per round, the head side's), from NVML through the measured window.",
        "",
        "| phase | case | launch | SM MHz | memory MHz | max °C | max W | capped by | persistence | clocks locked "
        "| GPU found by |",
        "|---|---|--:|---|---|--:|--:|---|---|---|---|",
    ]
    for row, n, s in found:
        span = "–".join(str(v) for v in s.get("sm_clock_mhz") or []) or "–"
        mem = "–".join(str(v) for v in s.get("mem_clock_mhz") or []) or "–"
        lines.append(
            f"| {row.phase} | `{row.case_id}` | {n} | {span} | {mem} | {s.get('temperature_c_max') or '–'} | "
            f"{s.get('power_w_max') or '–'} | {', '.join(s.get('capped') or []) or 'nothing'} | "
            f"{_yes(s.get('persistence'))} | {_yes(s.get('clocks_locked'))} | {s.get('found_by') or '–'} |"
        )
    return [*lines, ""]


def _yes(value: Any) -> str:
    return "–" if value is None else ("yes" if value else "no")


def _phase_line(p: PhaseRun) -> str:
    if p.skip:
        return f"| {p.name} | {p.proves} | - | - | not run: {_cell(p.skip)} |"
    result = p.problem or ("failed cases (below)" if p.exit_code == 1 else "ok" if p.exit_code == 0 else "")
    return f"| {p.name} | {p.proves} | {p.budget_s:.0f} | {p.wall_s:.0f} | {_cell(result)} |"


def _case_line(r: CaseRow) -> str:
    memory = " ".join(
        f"{n / MiB:.0f}/{a / MiB:.0f}" if a else f"{n / MiB:.0f}/-"
        for n, a in zip(r.nvml_peak_bytes, r.allocator_peak_bytes or [0] * len(r.nvml_peak_bytes))
    )
    reason = "; ".join(r.problems) if r.problems else r.reason or r.swap
    return (
        f"| {r.phase} | {r.case_id} | {r.outcome} | {_num(r.step_s, 1e3, '.2f')} | {_num(r.throughput, 1, '.1f')} "
        f"| {_num(r.mfu, 100, '.1f', '%')} | {memory or '-'} | {_num(r.bytes_per_step, 1e-6, '.2f')} "
        f"| {_num(r.local_efficiency, 1, '.3f')} | {_num(r.compile_s, 1, '.1f')} | {_cell(reason)} |"
    )


def _num(value: Any, scale: float, fmt: str, unit: str = "") -> str:
    return f"{value * scale:{fmt}}{unit}" if isinstance(value, (int, float)) else "-"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def notes_path(raw: Path) -> Path:
    """Where the notes written by hand after a run lie: beside its raw JSON."""
    return raw.with_name(f"{raw.stem}.notes.md")


def page(raw: Path) -> str:
    """A recorded run's page: the page of its JSON, then its notes by hand where it has any."""
    notes = notes_path(raw)
    text = markdown(load(raw))
    return text + "\n" + notes.read_text() if notes.is_file() else text


def write(report: dict[str, Any], out_dir: Path, raw_dir: Path | None = None) -> tuple[Path, Path]:
    """The page under ``out_dir`` and its raw JSON under ``raw_dir`` (else beside it), named after the device and the
    date."""
    md, raw = paths(out_dir, report, raw_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(report, indent=1) + "\n")
    md.write_text(page(raw))
    return md, raw


def load(path: Path) -> dict[str, Any]:
    """A recorded report, checked enough to render: its schema, device, date, phases and cases."""
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ScalegateError(
            f"report {path} cannot be read: {exc}", "pass an experiments/data/gpu/<device>-<date>.json"
        ) from None
    missing = [
        k for k in ("schema", "device", "date", "phases", "cases") if not isinstance(report, dict) or k not in report
    ]
    if missing:
        raise ScalegateError(
            f"report {path} lacks {', '.join(missing)}",
            "pass the JSON that `python -m scalegate selftest --gpu` wrote beside its page",
        )
    if report["schema"] != SCHEMA:
        raise ScalegateError(f"report {path} has schema {report['schema']}, this scalegate reads {SCHEMA}", "")
    return report
