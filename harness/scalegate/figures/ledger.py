"""A launch's collective ledger as rows: what the job's collectives carry a step, and over which links (launching side).

Each rank's ledger (scalegate/measure/ledger.py) counts its own calls. Here every rank's are put together with the
node each rank ran on. A row is one collective, dtype and group shape: ``all_gather_into_tensor`` of float32 in 4
groups of 2 ranks across nodes. Per measured step a row holds:

- ``calls``: the job's collectives, each counted once for its group (a group of n ranks issues it n times), and
  each point-to-point send or receive once;
- ``bytes``: their payload, once per collective (an all-reduced tensor's bytes, a gathered output's, ...);
- ``intra`` and ``cross``: the bytes the job's ranks send under the backend's algorithm (measure/ledger.py
  ``sent_bytes``), split by where they go: to a rank on the same node, or to another node. A ring sends to the
  next rank of its group; an all_to_all, gather or scatter to every other rank alike; a send to its peer.

The ledger is ``steady`` when every measured step holds the same rows with the same calls and bytes; only then is
it judged exactly (judge/ledger.py). docs/memory-and-wire.md#the-collective-ledger defines the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scalegate.contract.results import CaseResult

SOURCE = "c10d dispatcher"  # measure/ledger.py's SOURCE: the launching side does not import the rank side
WITHIN, ACROSS = "within a node", "across nodes"
POINT_TO_POINT = {"send", "recv"}
RINGED = {  # sends go to the next rank of the group
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_coalesced",
    "all_gather_into_tensor_coalesced",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced",
    "broadcast",
    "reduce",
}


@dataclass
class _Row:
    op: str
    dtype: str
    size: int
    span: str
    steps: int
    groups: set[str] = field(default_factory=set)
    calls: list[float] = field(default_factory=list)
    bytes: list[float] = field(default_factory=list)
    intra: list[float] = field(default_factory=list)
    cross: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("calls", "bytes", "intra", "cross"):
            setattr(self, name, [0.0] * self.steps)

    def add(self, entry: dict[str, Any], weight: float, crossing: float) -> None:
        self.groups.add(str(entry["group"]))
        for i in range(self.steps):
            self.calls[i] += entry["calls"][i] * weight
            self.bytes[i] += entry["bytes"][i] * weight
            self.cross[i] += entry["sent"][i] * crossing
            self.intra[i] += entry["sent"][i] * (1 - crossing)

    def steady(self) -> bool:
        return all(_same(series) for series in (self.calls, self.bytes, self.intra, self.cross))

    def odd_steps(self) -> str:
        """Which measured steps differ from the most common one: ``step 1 of 4`` (counted from 1), ``3 of 20 steps``."""
        shapes = list(zip(self.calls, self.bytes))
        common = max(set(shapes), key=shapes.count)
        odd = [i + 1 for i, shape in enumerate(shapes) if shape != common]
        return (
            f"measured step {odd[0]} of {len(shapes)}"
            if len(odd) == 1
            else f"{len(odd)} of {len(shapes)} measured steps"
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "op": self.op,
            "dtype": self.dtype,
            "size": self.size,
            "span": self.span,
            "groups": len(self.groups),
            **{name: _mean(getattr(self, name)) for name in ("calls", "bytes", "intra", "cross")},
        }
        if not self.steady():
            out["calls_range"] = [min(self.calls), max(self.calls)]
            out["bytes_range"] = [min(self.bytes), max(self.bytes)]
        return out


def summarize(result: CaseResult) -> dict[str, Any]:
    """The launch's ledger: rows (largest cross-node bytes first), totals per step, whether every step was alike;
    ``{"unavailable": why}`` where a rank recorded none."""
    ledgers = [r.ledger or {} for r in result.ranks]
    missing = next(((r.rank, led) for r, led in zip(result.ranks, ledgers) if led.get("source") != SOURCE), None)
    if missing is not None:
        rank, led = missing
        return {"unavailable": f"rank {rank}: {led.get('unavailable') or 'its ranks recorded no ledger'}"}
    steps = min(int(led.get("steps") or 0) for led in ledgers)
    node_of = {r.rank: r.node_rank for r in result.ranks}
    one_node = len(set(node_of.values())) <= 1
    rows: dict[tuple, _Row] = {}
    for led in ledgers:
        for entry in led.get("entries", ()):
            members = entry.get("ranks")
            nodes = {node_of.get(m) for m in members} if members else set()
            span = WITHIN if one_node or len(nodes) == 1 else ACROSS
            key = (entry["op"], entry["dtype"], int(entry["size"]), span)
            row = rows.get(key) or rows.setdefault(key, _Row(*key, steps=steps))
            weight = 1.0 if entry["op"] in POINT_TO_POINT else 1.0 / max(int(entry["size"]), 1)
            row.add(_cut(entry, steps), weight, 0.0 if one_node else _crossing(entry, node_of))
    ordered = sorted(rows.values(), key=lambda r: (-_mean(r.cross), -_mean(r.intra), r.op, r.size, r.span))
    varying = [r for r in ordered if not r.steady()]
    out: dict[str, Any] = {
        "source": SOURCE,
        "steps": steps,
        "rows": [r.as_dict() for r in ordered],
        "calls": sum(_mean(r.calls) for r in ordered),
        "intra": sum(_mean(r.intra) for r in ordered),
        "cross": sum(_mean(r.cross) for r in ordered),
        "steady": not varying,
    }
    if varying:
        out["varies"] = f"{describe(varying[0].as_dict())} differs in {varying[0].odd_steps()}"
    problems = [led["error"] for led in ledgers if led.get("error")]
    if problems:
        out["error"] = problems[0]
    return out


def bytes_per_step(resources: dict[str, Any]) -> float | None:
    """The job's collective bytes sent a step for a table (``resources`` of a result file): the ledger's, across
    nodes and within them; a namespace counter's where no ledger was recorded; None where neither was."""
    found = resources.get("ledger") or {}
    if found.get("source") == SOURCE:
        return float(found.get("intra") or 0.0) + float(found.get("cross") or 0.0)
    return (resources.get("wire") or {}).get("bytes_per_step")


def pool(ledgers: list[dict[str, Any]]) -> dict[str, Any]:
    """Several launches' ledgers as one: the first, unless another issued other collectives (then not steady)."""
    first = ledgers[0] if ledgers else {}
    for i, other in enumerate(ledgers[1:], start=2):
        if other.get("rows") != first.get("rows"):
            return {**first, "steady": False, "varies": f"launch {i} issued other collectives than launch 1"}
    return first


def _cut(entry: dict[str, Any], steps: int) -> dict[str, Any]:
    """The entry's first ``steps`` steps (every rank's window has the same steps; a shorter one decides)."""
    return {**entry, **{k: list(entry[k])[:steps] for k in ("calls", "bytes", "sent")}}


def _crossing(entry: dict[str, Any], node_of: dict[int, int]) -> float:
    """The share of this rank's sent bytes that goes to another node: where its algorithm sends them."""
    members = entry.get("ranks")
    if not members:
        return 1.0  # a group torch.distributed could not name: on a multi-node job, counted as crossing
    index, size = int(entry["index"]), len(members)
    here = node_of.get(members[index])
    if entry["op"] in RINGED:
        targets = [members[(index + 1) % size]]
    elif entry["op"] == "send" and entry.get("peer") is not None:
        targets = [members[int(entry["peer"])]]
    else:  # all_to_all, gather, scatter: every other rank alike
        targets = [m for i, m in enumerate(members) if i != index]
    if not targets:
        return 0.0
    return sum(node_of.get(t) != here for t in targets) / len(targets)


def describe(row: dict[str, Any]) -> str:
    """``all_gather_into_tensor in 4 groups of 2 ranks across nodes`` (one group: ``in a group of 2 ranks``)."""
    groups, ranks = int(row.get("groups") or 1), f"{row['size']} rank{'' if row['size'] == 1 else 's'}"
    where = f"a group of {ranks}" if groups == 1 else f"{groups} groups of {ranks}"
    dtype = f" ({row['dtype']})" if row.get("dtype") not in (None, "-", "float32") else ""
    return f"{row['op']}{dtype} in {where} {row['span']}"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _same(values: list[float]) -> bool:
    return not values or max(values) - min(values) <= 1e-6 * max(1.0, abs(max(values)))
