"""The sharding gate: a strategy that promises to shard state holds only its share of it.

Each strategy declares what it shards (``Strategy.shards``, e.g. ``("optimizer",)`` for ZeRO-1), which
its ranks report (``RankResult.shards``: this side never imports strategy code), and each rank reports
the bytes it holds (``RankResult.state_bytes``, local shards only). The
reference is an unsharded DDP replica of the same model, computed analytically from the model
definition on the worker (``RankResult.full_state_bytes``: parameters, gradients, AdamW's two
moments). A DDP run would measure exactly these numbers (the DDP case records both, and
tests/test_memory.py checks they agree), so no extra DDP job is launched to judge a sharded case.

Expected: each rank of a shard group of S ranks (the world; HSDP: the ranks of one node) holds
about 1/S of each promised kind. Tolerance, documented:
- padding: +5% relative plus 4 KiB per tensor (FSDP2 pads dim 0 to a multiple of S, DeepSpeed pads
  its flat partitions for alignment);
- "tensor" granularity (ZeroRedundancyOptimizer assigns whole tensors to ranks): one rank may also
  hold the largest tensor's state, so the bound adds that tensor's bytes (times the state count).
Every rank is checked, and the total over all ranks must not exceed W/S full copies (no duplicates).
"""

from __future__ import annotations

from scalegate.contract.results import CaseResult

PAD_REL = 0.05
PAD_PER_TENSOR = 4096
KINDS = ("params", "grads", "optimizer")


def _mb(n: float) -> str:
    return f"{n / 1e6:.3f} MB ({int(n)} B)"


def promise(result: CaseResult) -> tuple[tuple[str, ...], str]:
    """What the case's strategy promises to shard, and at what granularity, as its ranks reported it."""
    first = result.ranks[0]
    return tuple(first.shards), first.shard_granularity


def limit(full: dict[str, int], kind: str, group: int, granularity: str) -> float:
    """The most one rank may hold of ``kind`` when it is sharded over ``group`` ranks."""
    copies = max(1, round(full[kind] / full["params"])) if full.get("params") else 1  # optimizer: 2 moments
    slack = PAD_PER_TENSOR * full.get("tensors", 0) * copies
    if granularity == "tensor":
        slack += full.get("largest_tensor", 0) * copies
    return full[kind] / group * (1 + PAD_REL) + slack


def check(result: CaseResult, promised: tuple[str, ...] | None = None, granularity: str | None = None) -> str | None:
    """None if every promised kind is sharded on every rank; else a message with the byte counts."""
    spec = result.spec
    declared, declared_granularity = promise(result)
    promised = declared if promised is None else promised
    granularity = granularity or declared_granularity
    if spec.world_size < 2:
        return None
    problems = _check_subset(result)
    if not promised:
        return "\n".join(problems) or None
    for kind in promised:
        problems += _check_kind(result, kind, granularity)
    return "\n".join(problems) or None


def _check_kind(result: CaseResult, kind: str, granularity: str) -> list[str]:
    spec = result.spec
    ranks = result.ranks
    full = ranks[0].full_state_bytes
    if kind not in full or not all(kind in r.state_bytes for r in ranks):
        return [f"{kind} sharding cannot be judged [{spec.case_id}]: ranks did not report {kind} bytes"]
    group = ranks[0].shard_group
    bound = limit(full, kind, group, granularity)
    where = f"[{spec.strategy} {spec.case_id}]"
    out = []
    for r in ranks:
        held = r.state_bytes[kind]
        if held > bound:
            out.append(
                f"{kind} state not sharded {where} rank {r.rank}: holds {_mb(held)}; an unsharded DDP replica "
                f"holds {_mb(full[kind])}; expected 1/{group} of it = {_mb(full[kind] / group)} "
                f"(limit {_mb(bound)} with {PAD_REL:.0%} + {PAD_PER_TENSOR} B/tensor padding"
                f"{', + the largest tensor (whole-tensor partitions)' if granularity == 'tensor' else ''})"
            )
    total = sum(r.state_bytes[kind] for r in ranks)
    copies = spec.world_size / group
    padding = limit(full, kind, group, "element") - full[kind] / group  # per rank, without granularity
    if not out and total > full[kind] * copies + padding * spec.world_size:
        out.append(
            f"{kind} state duplicated {where}: all ranks together hold {_mb(total)}, "
            f"{total / full[kind]:.2f} copies of the {_mb(full[kind])} a DDP replica holds; "
            f"expected {copies:g} copy(ies) (1/{group} per rank)"
        )
    return out


def _check_subset(result: CaseResult) -> list[str]:
    """Tensor parallelism promises 1/S of the parameters its plan shards (``extra["tp"]``, harness/scalegate/strategies/tp.py),
    not of the whole state: embeddings, norms and the head stay replicated. Each rank's share of that subset's
    parameters, gradients and AdamW moments is judged with the same padding allowance."""
    out = []
    for r in result.ranks:
        found = r.extra.get("tp")
        if not found:
            continue
        full = found["full_params_bytes"]
        group = r.shard_group
        subset = {"params": full, "grads": full, "optimizer": 2 * full, "tensors": found["sharded_params"]}
        for kind in KINDS:
            held, bound = found["held"].get(kind, 0), limit(subset, kind, group, "element")
            if held > bound:
                out.append(
                    f"{kind} of the tensor-parallel weights not sharded [{result.spec.strategy} "
                    f"{result.spec.case_id}] rank {r.rank}: holds {_mb(held)} of {_mb(subset[kind])}; expected "
                    f"1/{group} = {_mb(subset[kind] / group)} (limit {_mb(bound)})"
                )
    return out


def ratios(result: CaseResult) -> list[dict[str, float]]:
    """Per rank, held / DDP replica for every kind (for the report and the results table)."""
    out = []
    for r in result.ranks:
        full = r.full_state_bytes
        out.append({k: round(r.state_bytes.get(k, 0) / full[k], 4) for k in KINDS if full.get(k)})
    return out
