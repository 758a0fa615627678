"""``python -m scalegate compare RUN``: a finished run against its baselines, as a markdown table and JSON.

Every case is judged again from the judge record in its result file by the same ``scalegate.judge.judge``
the pytest session called, so a run can be compared with baselines newer than itself and the verdicts
cannot disagree with the test that ran: the same launches, the same sequential test, the same memory,
bytes and final-loss budgets, the same tolerance markers of the test.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scalegate import policy
from scalegate.contract.errors import BaselineError
from scalegate.contract.results import CaseResult
from scalegate.figures import ledger
from scalegate.judge import AB, LOCAL, SEVERITY, CaseRecord, Outcome, Overrides, judge, parity, sequential
from scalegate.judge import metric as V
from scalegate.record import baselines
from scalegate.record.baselines import BaselineFile
from scalegate.report import exact

__all__ = [
    "SEVERITY",
    "Row",
    "compare",
    "judge_case",
    "load_baseline_file",
    "markdown",
    "parity_markdown",
    "parity_rows",
    "to_json",
]


@dataclass(frozen=True, kw_only=True)
class Row:
    case_id: str
    key: str
    world_size: int | None
    throughput: float | None
    efficiency: float | None
    efficiency_low: float | None
    efficiency_high: float | None
    baseline_efficiency: float | None
    tolerance: float | None
    peak_mib: float | None
    bytes_per_step: float | None
    status: str
    local_efficiency: float | None = None
    baseline_local_efficiency: float | None = None
    gate: str = ""
    launches: int = 0
    messages: list[str] = field(default_factory=list)
    quarantined: str = ""  # the baseline's quarantine (reason, until): reported, never failing
    tokens_per_s: float | None = None
    mfu: float | None = None  # model FLOPs utilization against one device's peak (harness/scalegate/figures/peaks.py)
    achieved_flops: float | None = None  # per device, FLOP/s
    collectives: dict[str, Any] = field(default_factory=dict)  # the exact verdict on the ledger (judge/ledger.py)

    @property
    def delta(self) -> float | None:
        """Change of the efficiency the verdict was decided on (local where the gate is local)."""
        value, base = (
            (self.local_efficiency, self.baseline_local_efficiency)
            if self.gate in (LOCAL, AB)
            else (self.efficiency, self.baseline_efficiency)
        )
        if value is None or not base:
            return None
        return value / base - 1

    def failed(self, strict: bool = False) -> bool:
        return not self.quarantined and (self.status in (V.REGRESSED, V.FAILED) or (strict and self.status == V.NOISY))


def load_baseline_file(path: Path) -> BaselineFile:
    """``--baseline FILE``: the file names its profile (baselines/<profile>.json)."""
    path = Path(path)
    if not path.is_file():
        raise BaselineError(
            f"baseline file {path} does not exist",
            "pass a file such as baselines/<profile>.json, or leave --baseline out",
        )
    found = baselines.load(path.parent, path.stem)
    assert found is not None  # the file exists
    return found


def record_of(case: dict[str, Any]) -> CaseRecord:
    return CaseRecord.from_dict(case.get("record") or {}, f"result file of {case.get('case_id', '?')}")


def outcome_of(
    case: dict[str, Any],
    baseline: BaselineFile | None,
    overrides: Overrides = Overrides(),
    base: CaseRecord | None = None,
) -> Outcome:
    """The verdict of one result file, from its judge record (against the base commit's record in an A/B run)."""
    return judge(record_of(case), baseline, overrides, base=base)


def base_records(cases: list[dict[str, Any]], base_cases: list[dict[str, Any]]) -> dict[str, CaseRecord]:
    """Every case's record on the base commit of an A/B run; one the base did not produce is a failed record
    (the judge calls that no-baseline: nothing to compare with)."""
    theirs = {c["key"]: record_of(c) for c in base_cases if "key" in c}
    return {
        c["key"]: theirs.get(c["key"])
        or dataclasses.replace(record_of(c), launches=(), failure="the base commit produced no result for this case")
        for c in cases
    }


def base_info(base_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((Path(base_dir) / "commit.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def base_name(base_dir: Path) -> str:
    info = base_info(base_dir)
    if info.get("commit"):
        return f"{info.get('ref', 'base')} ({info['commit'][:12]})"
    return str(base_dir)


def judge_case(
    case: dict[str, Any],
    baseline: BaselineFile | None,
    tolerance: float | None = None,
    noisy_limit: float = V.DEFAULT_NOISY_LIMIT,
    strict: bool = False,
    require_baseline: bool = False,
    base: CaseRecord | None = None,
) -> Row:
    outcome = outcome_of(
        case,
        baseline,
        Overrides(tolerance=tolerance, noisy_limit=noisy_limit, strict=strict, require_baseline=require_baseline),
        base,
    )
    result = case.get("result") or {}
    peaks = [r.get("peak_memory_bytes", 0) for r in result.get("ranks", [])]
    ci = outcome.efficiency_ci
    ref_metric = next((m for m in outcome.metrics if m.metric in ("efficiency", "local_efficiency")), None)
    return Row(
        case_id=outcome.case_id,
        key=outcome.key,
        world_size=len(result.get("ranks", [])) or None,
        throughput=result.get("throughput"),
        efficiency=outcome.efficiency,
        efficiency_low=ci[0] if ci else None,
        efficiency_high=ci[1] if ci and math.isfinite(ci[1]) else None,
        baseline_efficiency=outcome.baseline_efficiency,
        tolerance=outcome.tolerance,  # what the judge used (harness/scalegate/judge/references.py)
        peak_mib=max(peaks) / 2**20 if peaks else None,
        bytes_per_step=ledger.bytes_per_step(case.get("resources") or {}),
        status=outcome.status,
        local_efficiency=outcome.local_efficiency,
        baseline_local_efficiency=outcome.baseline_local_efficiency,
        gate=outcome.gate,
        launches=outcome.launches,
        quarantined=outcome.quarantined,
        tokens_per_s=outcome.tokens_per_s,
        mfu=outcome.mfu,
        achieved_flops=outcome.achieved_flops,
        collectives=outcome.collectives,
        messages=[_kept(outcome.message)]
        if outcome.status != V.OK and outcome.message
        else ([ref_metric.message] if ref_metric and outcome.status == V.NO_BASELINE else []),
    )


def compare(
    cases: list[dict[str, Any]],
    baseline: BaselineFile | None,
    tolerance: float | None = None,
    noisy_limit: float = V.DEFAULT_NOISY_LIMIT,
    strict: bool = False,
    require_baseline: bool = False,
    base: list[dict[str, Any]] | None = None,
) -> list[Row]:
    """Every case judged against ``baseline``, or, given ``base`` (an A/B run's base-commit cases), against those."""
    theirs = base_records(cases, base) if base is not None else {}
    return [
        judge_case(c, baseline, tolerance, noisy_limit, strict, require_baseline, theirs.get(c.get("key", "")))
        for c in cases
    ]


def _kept(message: str) -> str:
    """What the table and its JSON keep of a verdict: its first line (a crash's traceback stays in the logs) and its
    HINT lines."""
    first, *rest = message.splitlines() or [""]
    return "\n".join([first, *(line for line in rest if line.startswith("HINT:"))])


def _fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "–" if value is None else format(value * scale if scale != 1.0 else value, spec)


ICON = {
    V.OK: "✅",
    V.REGRESSED: "❌",
    V.FAILED: "❌",
    V.NOISY: "⚠️",
    V.IMPROVED: "🚀",
    V.NO_BASELINE: "➖",
    V.NOT_MEANINGFUL: "➖",
}


def markdown(rows: list[Row], title: str, strict: bool = False) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    failed = sum(r.failed(strict) for r in rows)
    undecided = counts.get(V.NOISY, 0)  # a pass that decided nothing on them must not read as a clean pass
    verdict = "FAIL" if failed else (f"PASS, {undecided} UNDECIDED" if undecided else "PASS")
    head = f"### scalegate: {title}\n\n**{verdict}** — " + ", ".join(
        f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: SEVERITY.index(kv[0]))
    )
    lines = [
        head,
        "",
        *exact.markdown(rows),
        "| case | W | samples/s | MFU | efficiency (95% CI) | local eff | gated on | baseline | delta "
        "| launches | peak MiB/rank | MB/step | verdict |",
        "|---|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|---|",
    ]
    for r in rows:
        ci = "" if r.efficiency_low is None else (f" ({r.efficiency_low:.3f}–{_fmt(r.efficiency_high, '.3f')})")
        gated = r.baseline_local_efficiency if r.gate in (LOCAL, AB) else r.baseline_efficiency
        base = (
            "–"
            if gated is None
            else f"{gated:.3f}"
            + ("" if r.tolerance is None else f" ±{r.tolerance:.0%}")
            + (" (base commit)" if r.gate == AB else "")
        )
        lines.append(
            f"| `{r.key}` | {_fmt(r.world_size, 'd')} | {_fmt(r.throughput, '.1f')} | {_fmt(r.mfu, '.1%')} | "
            f"{_fmt(r.efficiency, '.3f')}{ci} | {_fmt(r.local_efficiency, '.3f')} | {r.gate or '–'} | {base} | "
            f"{_fmt(r.delta, '+.1%')} | {r.launches} | {_fmt(r.peak_mib, '.0f')} | "
            f"{_fmt(r.bytes_per_step, '.2f', 1e-6)} | {ICON.get(r.status, '')} {r.status}"
            f"{' 🔇 quarantined' if r.quarantined else ''} |"
        )
    # a kept message's HINT lines (``_kept``), each on a line of its own within the case's bullet
    notes = [f"- `{r.case_id}`: " + "\n  ".join(m.splitlines()) for r in rows if r.status != V.OK for m in r.messages]
    if notes:
        lines += ["", *notes]
    held = [f"- `{r.key}`: {r.quarantined}" for r in rows if r.quarantined]
    if held:
        lines += ["", "Quarantined in the baseline file (reported, not failing):", *held]
    return "\n".join(lines) + "\n"


def to_json(rows: list[Row], run: str, baseline: BaselineFile | None, strict: bool = False) -> dict[str, Any]:
    return {
        "run": run,
        "baseline": str(baseline.path) if baseline else None,
        "strict": strict,
        "failed": sum(r.failed(strict) for r in rows),
        "cases": [dict(asdict(r), delta=r.delta, failed=r.failed(strict)) for r in rows],
    }


def parity_rows(run_dir: Path, strict: bool = False, tolerance: float | None = None) -> list[dict[str, Any]]:
    """Every parity case of a run, judged again by ``judge/parity.py`` from the launches its file keeps (a file
    without them, or whose case never launched, is read as written)."""
    rows = []
    for path in sorted((run_dir / "parity").glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(data, dict) or "case_id" not in data:
            continue
        launches = data.get("launch_results") or []
        if launches:
            call = parity.ParityCall(
                case_id=data["case_id"],
                candidate=data["candidate"],
                baseline=data["baseline"],
                topology=(data.get("spec") or {}).get("topology", ""),
                tolerance=tolerance if tolerance is not None else data.get("tolerance", policy.PARITY_TOLERANCE),
                design=sequential.Design(**(data.get("design") or {})),
                oversubscribed=bool(data.get("oversubscribed")),
                strict=strict,
            )
            outcome, _ = parity.verdict(call, [CaseResult.from_dict(r) for r in launches])
            data = {**data, **asdict(outcome), "failed": outcome.failed, "launches": len(outcome.launch_ratios)}
        rows.append(data)
    return rows


def parity_markdown(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    lines = ["", "| parity | ratio | launches | verdict |", "|---|--:|--:|---|"]
    for row in rows:
        problems = row.get("problems") or []
        status = row.get("status") or ("failed" if problems else "ok")
        icon = {"ok": "✅", "noisy": "⚠️"}.get(status, "❌" if problems else "➖")
        text = problems[0].splitlines()[0] if problems else status
        ratio = f"{row['ratio']:.3f}" if isinstance(row.get("ratio"), (int, float)) else "–"
        lines.append(f"| `{row['case_id']}` | {ratio} | {row.get('launches', 1)} | {icon} {text} |")
    return "\n".join(lines) + "\n"
