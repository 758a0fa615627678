"""The terminal table: case, samples/s, tokens/s (token workloads), ``comm exp`` (the step's share of exposed
communication, harness/scalegate/figures/breakdown.py), MFU (``n/a`` where the device has no known
peak or nothing was counted: the case JSON says why), speedup, both efficiencies, the gated one's baseline and delta, launches,
memory, bytes, verdict. ``efficiency`` is docs/concepts.md's (against the separate 1x1 launch); ``local eff`` is the
same-launch one (docs/gate.md); ``gated on`` says which one the verdict was decided on. ``ckpt s/GB`` (save + load
seconds per GB written, docs/checkpoints.md) appears only when a case ran ``--scaling-checkpoint``."""

from __future__ import annotations

from typing import Any

from scalegate.figures import ledger

HEADER = (
    "case",
    "preset",
    "W",
    "samples/s",
    "tokens/s",
    "MFU",
    "comm exp",
    "speedup",
    "efficiency",
    "local eff",
    "gated on",
    "baseline",
    "delta",
    "launches",
    "peak MiB/rank",
    "MB/step",
    "verdict",
)


CHECKPOINT = "ckpt s/GB"


def header(cases: list[dict[str, Any]]) -> tuple[str, ...]:
    """HEADER, with the checkpoint column before the verdict when any case has checkpoint figures."""
    if not any(_checkpoint(c) for c in cases):
        return HEADER
    return HEADER[:-1] + (CHECKPOINT, HEADER[-1])


def _checkpoint(case: dict[str, Any]) -> dict[str, Any] | None:
    return (case.get("resources") or {}).get("checkpoint")


def _ckpt(case: dict[str, Any]) -> str:
    """Seconds per GB of save + load; "n/a" where the strategy cannot checkpoint (the case JSON says why)."""
    found = _checkpoint(case)
    if not found:
        return "-"
    value = found.get("s_per_gb")
    return "n/a" if value is None else f"{value:.3g}"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _mb_per_step(case: dict[str, Any]) -> str:
    """MB the job's collectives send a step (figures/ledger.py ``bytes_per_step``); "n/a" where nothing counted."""
    sent = ledger.bytes_per_step(case.get("resources") or {})
    return "n/a" if sent is None else f"{sent / 1e6:.2f}"


def _exposed(case: dict[str, Any]) -> str:
    """The share of the step spent in communication the compute did not hide (harness/scalegate/figures/breakdown.py)."""
    share = ((case.get("resources") or {}).get("breakdown") or {}).get("exposed_share")
    return "-" if share is None else f"{share:.0%}"


def _mfu(case: dict[str, Any]) -> str:
    value = case.get("mfu")
    if value is not None:
        return f"{value:.1%}" if value >= 0.001 else f"{value:.2e}"
    return "n/a" if case.get("result") else "-"


def _throughput(result: dict[str, Any]) -> str:
    """samples/s; a training script that declared no batch is timed in optimizer steps/s (harness/scalegate/plan/script.py)."""
    ranks = result.get("ranks") or [{}]
    if (ranks[0].get("extra") or {}).get("throughput_unit") == "steps/s" and result.get("median_step_s"):
        return f"{1 / result['median_step_s']:.1f} steps/s"
    return _fmt(result.get("throughput"), ".1f")


def _verdict(case: dict[str, Any]) -> str:
    """The status; a training script's says its gradients were not compared (docs/your-script.md)."""
    return case["status"] + (", agreement n/a (script)" if (case.get("spec") or {}).get("script") else "")


def rows(cases: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    out = []
    checkpointed = len(header(cases)) > len(HEADER)
    for case in cases:
        result = case.get("result") or {}
        spec = case.get("spec", {})
        eff, local, gate = case.get("efficiency"), case.get("local_efficiency"), case.get("gate") or ""
        # baseline and delta of the efficiency the verdict was decided on (docs/gate.md)
        gated, base = (
            (local, case.get("baseline_local_efficiency"))
            if gate == "local"
            else (eff, case.get("baseline_efficiency"))
        )
        delta = None if gated is None or not base else (gated / base - 1) * 100
        peaks = [r.get("peak_memory_bytes", 0) for r in result.get("ranks", [])]
        world = len(result.get("ranks", [])) or None
        out.append(
            (
                case["case_id"],
                spec.get("preset", "?"),
                _fmt(world, "d"),
                _throughput(result),
                _fmt(case.get("tokens_per_s"), ".0f"),
                _mfu(case),
                _exposed(case),
                _fmt(case.get("speedup"), ".2f"),
                _fmt(eff, ".3f"),
                _fmt(local, ".3f"),
                gate or "-",
                _fmt(base, ".3f"),
                "-" if delta is None else f"{delta:+.1f}%",
                str(case.get("launches") or "-"),
                _fmt(max(peaks) / 2**20 if peaks else None, ".0f"),
                _mb_per_step(case),
                *((_ckpt(case),) if checkpointed else ()),
                _verdict(case),
            )
        )
    return out


def table(cases: list[dict[str, Any]]) -> str:
    body = [header(cases)] + rows(cases)
    widths = [max(len(r[i]) for r in body) for i in range(len(body[0]))]
    lines = [
        "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths))) for r in body
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
