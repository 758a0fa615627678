"""``python -m harness compare RUN``: a finished run against its baselines, as a markdown table and JSON.

Every case is judged again from its result file, so a run can be compared with baselines newer than
itself: efficiency with its bootstrap interval (noise-aware, ``harness.verdict.judge``), peak memory
per rank and bytes per step tightly (``judge_upper``: they are near-deterministic). A case that failed
correctness stays ``failed``; an oversubscribed one stays ``not-meaningful``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness import baselines, stats
from harness import verdict as V
from harness.baselines import BaselineFile, Reference
from harness.errors import BaselineError

# worst first: the row's verdict is the worst of its metrics
SEVERITY = (V.FAILED, V.REGRESSED, V.NOISY, V.IMPROVED, V.OK, V.NO_BASELINE, V.NOT_MEANINGFUL)


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
    messages: list[str] = field(default_factory=list)

    @property
    def delta(self) -> float | None:
        if self.efficiency is None or not self.baseline_efficiency:
            return None
        return self.efficiency / self.baseline_efficiency - 1

    def failed(self, strict: bool = False) -> bool:
        return self.status in (V.REGRESSED, V.FAILED) or (strict and self.status == V.NOISY)


def load_baseline_file(path: Path) -> BaselineFile:
    """``--baseline FILE``: the file names its profile (baselines/<profile>.json)."""
    path = Path(path)
    if not path.is_file():
        raise BaselineError(f"baseline file {path} does not exist",
                            "pass a file such as baselines/<profile>.json, or leave --baseline out")
    found = baselines.load(path.parent, path.stem)
    assert found is not None  # the file exists
    return found


def efficiency_estimate(case: dict[str, Any]) -> stats.Estimate | None:
    """Redo the bootstrap from the stored step times; fall back to the stored interval."""
    eff, result, spec = case.get("efficiency"), case.get("result") or {}, case.get("spec") or {}
    if eff is None:
        return None
    ref_steps, steps = case.get("reference_step_times_s") or [], result.get("step_times_s") or []
    pooled = len(case.get("launch_efficiencies") or ()) > 1  # --scaling-launches: only the stored interval pools them
    if ref_steps and steps and case.get("reference_throughput") and not pooled:
        ref_batch = case["reference_throughput"] * stats.median(ref_steps)  # global batch of the reference
        world = len(result.get("ranks", [])) or 1
        batch = result["throughput"] * stats.median(steps)
        return stats.efficiency_estimate(steps, round(batch), ref_steps, round(ref_batch), world)
    ci = case.get("efficiency_ci")
    if ci:
        return stats.Estimate(value=eff, low=min(ci[0], eff), high=max(ci[1], eff))
    noise = case.get("noise_rel") or 0.0
    return stats.Estimate(value=eff, low=eff * (1 - noise), high=eff * (1 + noise))


def _reference(baseline: BaselineFile | None, key: str, metric: str, override: float | None) -> Reference | None:
    ref = baseline.reference(key, metric) if baseline else None
    if ref is not None and override is not None:
        ref = Reference(value=ref.value, tolerance=override)
    return ref


def _bytes(case: dict[str, Any]) -> float | None:
    return ((case.get("resources") or {}).get("wire") or {}).get("bytes_per_step")


def _peaks(case: dict[str, Any]) -> list[float]:
    return [r.get("peak_memory_bytes", 0) for r in (case.get("result") or {}).get("ranks", [])]


def judge_case(case: dict[str, Any], baseline: BaselineFile | None, tolerance: float | None = None,
               noisy_limit: float = V.DEFAULT_NOISY_LIMIT) -> Row:
    key, where = case["key"], f"{case['key']} on {case.get('profile', '?')}"
    marks = case.get("tolerances") or {}
    def tol(metric: str) -> float | None:  # the command line wins over the test's marker, then the baseline
        return tolerance if tolerance is not None and metric == "efficiency" else marks.get(metric)
    est = efficiency_estimate(case)
    eff_ref = _reference(baseline, key, "efficiency", tol("efficiency"))
    verdicts: list[V.Verdict] = []
    if case["status"] == V.FAILED or case.get("problems"):
        verdicts.append(V.Verdict(status=V.FAILED, message=case.get("message", "failed")))
    elif case.get("oversubscribed") or case["status"] == V.NOT_MEANINGFUL:
        verdicts.append(V.Verdict(status=V.NOT_MEANINGFUL, message=case.get("message", "")))
    elif est is not None:
        noise = (baseline.cases.get(key, {}).get("noise_rel", 0.0) if baseline else 0.0) or 0.0
        verdicts.append(V.judge(est, eff_ref, where, baseline_noise=noise, noisy_limit=noisy_limit))
    if case["status"] != V.FAILED:  # memory and bytes mean something even when timing does not
        peaks, mem_ref = _peaks(case), _reference(baseline, key, "peak_memory_bytes", tol("peak_memory_bytes"))
        if peaks and mem_ref is not None:
            base = mem_ref.value if isinstance(mem_ref.value, list) else [mem_ref.value] * len(peaks)
            for rank, (value, ref) in enumerate(zip(peaks, base)):
                verdicts.append(V.judge_upper(value / 2**20, Reference(value=ref / 2**20, tolerance=mem_ref.tolerance),
                                              f"peak memory rank {rank}", where, " MiB"))
        sent, wire_ref = _bytes(case), _reference(baseline, key, "bytes_per_step", tol("bytes_per_step"))
        if sent is not None and wire_ref is not None:
            verdicts.append(V.judge_upper(sent / 1e6, Reference(value=wire_ref.value / 1e6,
                                                                tolerance=wire_ref.tolerance),
                                          "bytes per step", where, " MB"))
    worst = min((v.status for v in verdicts), key=SEVERITY.index, default=V.NO_BASELINE)
    result, peaks = case.get("result") or {}, _peaks(case)
    return Row(case_id=case["case_id"], key=key, world_size=len(result.get("ranks", [])) or None,
               throughput=result.get("throughput"), efficiency=est.value if est else None,
               efficiency_low=est.low if est else None,
               efficiency_high=est.high if est and math.isfinite(est.high) else None,
               baseline_efficiency=eff_ref.value if eff_ref else None,
               tolerance=eff_ref.tolerance if eff_ref else None,
               peak_mib=max(peaks) / 2**20 if peaks else None, bytes_per_step=_bytes(case), status=worst,
               messages=[v.message for v in verdicts if v.status not in (V.OK, V.NO_BASELINE) and v.message]
               or ([verdicts[0].message] if verdicts and worst == V.NO_BASELINE else []))


def compare(cases: list[dict[str, Any]], baseline: BaselineFile | None, tolerance: float | None = None,
            noisy_limit: float = V.DEFAULT_NOISY_LIMIT) -> list[Row]:
    return [judge_case(c, baseline, tolerance, noisy_limit) for c in cases]


def _fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "–" if value is None else format(value * scale if scale != 1.0 else value, spec)


ICON = {V.OK: "✅", V.REGRESSED: "❌", V.FAILED: "❌", V.NOISY: "⚠️", V.IMPROVED: "🚀",
        V.NO_BASELINE: "➖", V.NOT_MEANINGFUL: "➖"}


def markdown(rows: list[Row], title: str, strict: bool = False) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    failed = sum(r.failed(strict) for r in rows)
    head = f"### scalegate: {title}\n\n**{'FAIL' if failed else 'PASS'}** — " + ", ".join(
        f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: SEVERITY.index(kv[0])))
    lines = [head, "", "| case | W | samples/s | efficiency (95% CI) | baseline | delta | peak MiB/rank | MB/step | verdict |",
             "|---|--:|--:|--:|--:|--:|--:|--:|---|"]
    for r in rows:
        ci = "" if r.efficiency_low is None else (
            f" ({r.efficiency_low:.3f}–{_fmt(r.efficiency_high, '.3f')})")
        base = "–" if r.baseline_efficiency is None else f"{r.baseline_efficiency:.3f} ±{r.tolerance:.0%}"
        lines.append(f"| `{r.key}` | {_fmt(r.world_size, 'd')} | {_fmt(r.throughput, '.1f')} | "
                     f"{_fmt(r.efficiency, '.3f')}{ci} | {base} | {_fmt(r.delta, '+.1%')} | {_fmt(r.peak_mib, '.0f')} | "
                     f"{_fmt(r.bytes_per_step, '.2f', 1e-6)} | {ICON.get(r.status, '')} {r.status} |")
    notes = [f"- `{r.case_id}`: {m.splitlines()[0]}" for r in rows if r.status != V.OK for m in r.messages]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def to_json(rows: list[Row], run: str, baseline: BaselineFile | None, strict: bool = False) -> dict[str, Any]:
    return {"run": run, "baseline": str(baseline.path) if baseline else None, "strict": strict,
            "failed": sum(r.failed(strict) for r in rows),
            "cases": [dict(asdict(r), delta=r.delta, failed=r.failed(strict)) for r in rows]}
