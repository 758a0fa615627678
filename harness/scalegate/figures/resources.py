"""Memory and bytes on the wire, launch side: what a case used, the analytic volume, the budget gates.

Bytes on the wire come from the workers' counter readings (harness/scalegate/measure/wire.py): on one node the
private loopback counts every byte each rank sends once, so the node total over the local ranks is
the per-rank figure. The analytic volume per rank is ``Strategy.wire_factor * (W-1)/W * parameter
bytes`` (ring all-reduce: factor 2; all-gather fwd + bwd + reduce-scatter: factor 3; the ranks report the
factor for their backend in ``RankResult.wire_factor``, so this side imports no strategy); TCP/IP headers
add ~0.1% on loopback. The gates on them (docs/gate.md: peak memory per rank above baseline x (1 + tolerance),
bytes per step above baseline x (1 + tolerance)) are the judge's: harness/scalegate/judge/budgets.py.
"""

from __future__ import annotations

from typing import Any

from scalegate.contract.results import CaseResult
from scalegate.figures import breakdown, ledger

DEFAULT_MEMORY_TOLERANCE = 0.25  # RSS moves with the allocator and the Python heap
# The CUDA allocator's peak (``max_memory_allocated``) of a case repeats to the byte between runs of one commit; the
# 2% leaves room for what another node's libraries may add. docs/memory-and-wire.md#memory-from-the-allocator
ALLOCATOR_MEMORY_TOLERANCE = 0.02


def memory_tolerance(source: str) -> float:
    """The tolerance a new baseline's peak memory gets, by what measured it."""
    return ALLOCATOR_MEMORY_TOLERANCE if source.startswith("cuda allocator") else DEFAULT_MEMORY_TOLERANCE


DEFAULT_BYTES_TOLERANCE = 0.05  # byte counts repeat to ~0.1% on a private loopback


def analytic_bytes_per_rank(result: CaseResult) -> float | None:
    tensor_parallel = result.ranks[0].extra.get("tp")  # activations, not parameters (scalegate/strategies/tp.py)
    if tensor_parallel and tensor_parallel.get("analytic_bytes_per_rank") is not None:
        return float(tensor_parallel["analytic_bytes_per_rank"])
    factor = result.ranks[0].wire_factor  # the strategy's, for the ranks' backend (scalegate/worker/loop.py)
    world = result.spec.world_size
    full = result.ranks[0].full_state_bytes.get("params")
    if factor is None or not full:
        return None
    return factor * (world - 1) / world * full


def wire(result: CaseResult) -> dict[str, Any]:
    """Measured and analytic bytes per measured step: per node, per rank, for the whole job."""
    per_node: dict[int, int] = {}
    reasons = []
    for r in result.ranks:
        w = r.wire or {}
        if w.get("bytes_per_step") is None:
            reasons.append(w.get("unavailable") or "the worker recorded no counter reading")
            continue
        # every rank of a node reads the same counter; take the smallest (its barrier came last)
        per_node[r.node_rank] = min(per_node.get(r.node_rank, w["bytes_per_step"]), w["bytes_per_step"])
    analytic = analytic_bytes_per_rank(result)
    out: dict[str, Any] = {
        "analytic_bytes_per_rank": None if analytic is None else int(analytic),
        "analytic_bytes_per_step": None if analytic is None else int(analytic * result.spec.world_size),
    }
    if reasons or not per_node:
        out.update(source="unavailable", unavailable=reasons[0] if reasons else "no counter", bytes_per_step=None)
        return out
    total = sum(per_node.values())
    out.update(
        source=result.ranks[0].wire.get("source", "?"),
        bytes_per_step=total,
        bytes_per_node=[per_node[n] for n in sorted(per_node)],
        bytes_per_rank=total / result.spec.world_size,
        measured_over_analytic=round(total / (analytic * result.spec.world_size), 4) if analytic else None,
    )
    if result.spec.topo.nodes > 1:  # a node's link counter sees only inter-node bytes, not its loopback
        out.update(
            measured_over_analytic=None,
            note="per-node link counters: inter-node bytes only; the analytic volume counts every byte",
        )
    return out


def cpu_wait(result: CaseResult) -> dict[str, float]:
    """How much other work held the case's cores through its window (measure/contention.py): the most any rank's
    stepping thread waited for a core, over its measured steps' time; the host's steal over its cores' time. {} where
    the ranks did not measure it."""
    shares, steals = [], []
    for r in result.ranks:
        found = r.cpu_wait or {}
        busy = sum(r.step_times_s)
        if found.get("wait_s") is None or busy <= 0:
            return {}
        shares.append(found["wait_s"] / busy)
        if found.get("steal_share") is not None:
            steals.append(found["steal_share"])
    out = {"cpu_wait": round(max(shares), 4)} if shares else {}
    if steals:
        out["steal"] = round(max(steals), 4)
    return out


def memory_source(result: CaseResult) -> str:
    """What measured the peaks, and for RSS how the ranks were started: a rank forked by the warm agent counts
    ~50 MiB of shared-library pages where a cold torchrun rank counts ~105 (same anonymous memory, measured on
    ddp-cnn-1x2: 344 vs 404 MiB), so RSS from one launcher is never judged against the other's baseline."""
    source = result.ranks[0].memory_source
    launcher = result.launch.get("launcher")
    return f"{source} [{launcher} launcher]" if source.startswith("rss") and launcher else source


def checkpoint(result: CaseResult) -> dict[str, Any] | None:
    """--scaling-checkpoint (harness/scalegate/measure/checkpoint.py): the slowest rank's save and load seconds, bytes each rank
    wrote, and seconds per GB written: (save + load) / total bytes, one figure for the table and the baselines.
    None where the window did not run; ``unavailable`` with the strategy's reason where it cannot."""
    found = [r.extra.get("checkpoint") for r in result.ranks]
    if not any(found):
        return None
    why = next((f["unavailable"] for f in found if f and f.get("unavailable")), "")
    if why:
        return {"unavailable": why}
    save_s, load_s = max(f["save_s"] for f in found), max(f["load_s"] for f in found)
    per_rank = [f["bytes"] for f in found]
    total = sum(per_rank)
    return {
        "format": found[0].get("format", "?"),
        "save_s": round(save_s, 4),
        "load_s": round(load_s, 4),
        "bytes_per_rank": per_rank,
        "bytes": total,
        "save_s_per_gb": round(save_s / (total / 1e9), 4) if total else None,
        "load_s_per_gb": round(load_s / (total / 1e9), 4) if total else None,
        "s_per_gb": round((save_s + load_s) / (total / 1e9), 4) if total else None,
    }


def summary(result: CaseResult) -> dict[str, Any]:
    """What the result file, pytest-benchmark's extra_info and the baselines carry."""
    return {
        "peak_memory_bytes": [r.peak_memory_bytes for r in result.ranks],
        "memory_source": memory_source(result),
        **(
            {
                "device_peak_bytes": [r.device_peak_bytes for r in result.ranks],
                "device_peak_source": result.ranks[0].device_peak_source,
            }
            if any(r.device_peak_bytes for r in result.ranks)
            else {}
        ),
        "cuda_memory": [r.cuda_memory for r in result.ranks],
        "state_bytes": [r.state_bytes for r in result.ranks],
        "ddp_state_bytes": {k: result.ranks[0].full_state_bytes.get(k, 0) for k in ("params", "grads", "optimizer")},
        "cpu_s": [
            {"user": round(r.cpu_user_s, 3), "system": round(r.cpu_system_s, 3), "wall": round(r.wall_s, 3)}
            for r in result.ranks
        ],
        "wire": wire(result),
        "ledger": ledger.summarize(result),  # every collective of the measured steps (figures/ledger.py)
        # --scaling-compile: the slowest rank's first, compiling forward and backward (not in any step time)
        "compile_s": max((r.compile_s for r in result.ranks if r.compile_s is not None), default=None),
        "breakdown": breakdown.summary(
            result
        ),  # compute and exposed communication per rank (scalegate/figures/breakdown.py)
        "checkpoint": checkpoint(result),
    }
