"""Verdicts on what does not need a noise model: peak memory, bytes on the wire, checkpoint s/GB, final loss; and throughput
when a test opts in; MFU where the baseline has it. Memory and bytes are judged on the first launch: they repeat to ~0.1% (bytes) and
a few % (RSS), so a relaunch confirms nothing (docs/memory-and-wire.md)."""

from __future__ import annotations

import math

from scalegate.figures.stats import Estimate
from scalegate.judge import metric as V
from scalegate.judge.evidence import CaseRecord, LaunchRecord
from scalegate.judge.outcome import MetricVerdict, Overrides
from scalegate.judge.references import host_spread, reference
from scalegate.record.baselines import BaselineFile


def memory(record: CaseRecord, launch: LaunchRecord, baseline: BaselineFile | None) -> list[MetricVerdict]:
    ref = reference(baseline, record, "peak_memory_bytes")
    if ref is None or not launch.peak_memory_bytes:
        return []
    source = baseline.cases.get(record.key, {}).get("memory_source") if baseline else None
    if source is not None and source != launch.memory_source:  # RSS against NVML says nothing
        return [
            MetricVerdict(
                metric="peak_memory_bytes",
                status=V.OK,
                message=f"peak memory not compared: measured by {launch.memory_source}, the baseline by "
                f"{source} [{record.where}]",
            )
        ]
    values = ref.value if isinstance(ref.value, list) else [ref.value] * len(launch.peak_memory_bytes)
    out = []
    for rank, (got, base) in enumerate(zip(launch.peak_memory_bytes, values)):
        limit = base * (1 + ref.tolerance)
        status = V.REGRESSED if got > limit else V.OK
        verb = "is above" if status == V.REGRESSED else "within"
        out.append(
            MetricVerdict(
                metric="peak_memory_bytes",
                status=status,
                message=f"peak memory of rank {rank} {got / 2**20:.1f} MiB {verb} baseline "
                f"{base / 2**20:.1f} MiB (tolerance {ref.tolerance:.0%}, source "
                f"{launch.memory_source}) [{record.where}]",
            )
        )
    return out


def wire(record: CaseRecord, launch: LaunchRecord, baseline: BaselineFile | None) -> list[MetricVerdict]:
    ref = reference(baseline, record, "bytes_per_step")
    if ref is None or launch.bytes_per_step is None:
        return []
    got = launch.bytes_per_step
    analytic = "-" if launch.analytic_bytes_per_step is None else f"{launch.analytic_bytes_per_step / 1e6:.3f}"
    status = V.REGRESSED if got > ref.value * (1 + ref.tolerance) else V.OK
    verb = "are above" if status == V.REGRESSED else "within"
    return [
        MetricVerdict(
            metric="bytes_per_step",
            status=status,
            message=f"bytes on the wire {got / 1e6:.3f} MB/step {verb} baseline {ref.value / 1e6:.3f} "
            f"MB/step (tolerance {ref.tolerance:.0%}; analytic {analytic} MB/step, "
            f"{launch.wire_source}) [{record.where}]",
        )
    ]


def checkpoint(record: CaseRecord, launch: LaunchRecord, baseline: BaselineFile | None) -> list[MetricVerdict]:
    """--scaling-checkpoint: (save + load) seconds per GB written, an upper bound like memory and bytes."""
    ref = reference(baseline, record, "checkpoint_s_per_gb")
    if ref is None or launch.checkpoint_s_per_gb is None:
        return []
    got, limit = launch.checkpoint_s_per_gb, ref.value * (1 + ref.tolerance)
    status = V.REGRESSED if got > limit else V.OK
    verb = "is above" if status == V.REGRESSED else "within"
    return [
        MetricVerdict(
            metric="checkpoint_s_per_gb",
            status=status,
            message=f"checkpoint save + load {got:.3g} s/GB {verb} baseline {ref.value:.3g} s/GB "
            f"(tolerance {ref.tolerance:.0%}) [{record.where}]",
        )
    ]


def final_loss(record: CaseRecord, baseline: BaselineFile | None) -> list[str]:
    """Problems: a final loss worse than the baseline's beyond tolerance trains a different model. Compared
    only at the baseline's own step counts (a loss after other steps says nothing about this run)."""
    ref = reference(baseline, record, "final_loss")
    entry = baseline.cases.get(record.key, {}) if baseline else {}
    if ref is None or (entry.get("steps"), entry.get("warmup")) != (record.steps, record.warmup):
        return []
    out = []
    for launch in record.launches:
        got = launch.final_loss
        if got is not None and not got <= ref.value * (1 + ref.tolerance):
            out.append(
                f"final loss {got:.4g} is above baseline {ref.value:.4g} (tolerance {ref.tolerance:.0%}) "
                f"[{record.where}]"
            )
    return list(dict.fromkeys(out))


def throughput(
    record: CaseRecord, estimate: Estimate | None, baseline: BaselineFile | None, overrides: Overrides
) -> list[MetricVerdict]:
    """Opt-in (``@pytest.mark.scaling_tolerance(throughput=0.2)``): samples/s against the baseline's, noise-aware.
    Off by default: the host's own speed moves raw throughput between sessions, efficiency cancels it."""
    if "throughput" not in record.tolerances or estimate is None:
        return []
    ref = reference(baseline, record, "throughput")
    found = V.higher_is_better(estimate, ref, record.where, noisy_limit=overrides.noisy_limit, metric="throughput")
    return [MetricVerdict(metric="throughput", status=found.status, message=found.message)]


def mfu(
    record: CaseRecord, estimate: Estimate | None, baseline: BaselineFile | None, overrides: Overrides
) -> list[MetricVerdict]:
    """MFU against the baseline's, where it has one: noise-aware like the classic efficiency (the baseline's own
    noise, and the spread between hosts when it was recorded on another). MFU is throughput over a fixed count
    and the device's peak. Judged by default where the peak is a datasheet figure (a GPU: harness/scalegate/figures/peaks.py);
    against a peak *measured* on a shared CPU host only where the test opts in
    (``@pytest.mark.scaling_tolerance(mfu=0.2)``), as raw throughput: the peak and the steps are measured at
    different moments, and a host's load between them moves MFU as it moves throughput, which the efficiency's
    same-session reference cancels and MFU cannot."""
    ref = reference(baseline, record, "mfu")
    measured = record.peak_source.startswith("measured")
    if ref is None or estimate is None or baseline is None or (measured and "mfu" not in record.tolerances):
        return []
    noise = float(baseline.cases.get(record.key, {}).get("noise_rel", 0.0) or 0.0)
    spread, recorded = host_spread(baseline, record)
    found = V.higher_is_better(
        estimate,
        ref,
        record.where,
        baseline_noise=math.hypot(noise, spread),
        noisy_limit=max(overrides.noisy_limit, math.hypot(overrides.noisy_limit, spread)),
        metric="MFU",
    )
    peak = f" (peak: {record.peak_source})" if found.status in (V.REGRESSED, V.IMPROVED) else ""
    other = f" (baseline recorded on another host, {recorded}: hosts' levels spread ±{spread:.1%})" if spread else ""
    return [MetricVerdict(metric="mfu", status=found.status, message=found.message + peak + other)]
