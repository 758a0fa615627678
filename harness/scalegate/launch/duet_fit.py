"""Whether a case's two resident jobs fit in GPU memory (docs/duet.md, "When a duet cannot run").

In a duet both commits' jobs of a case are resident at once: on CUDA, rank r of each side keeps its whole footprint
(the CUDA context, the caching allocator's reserve) on GPU ``r % G`` while the other side takes its turn. Before each
round the gate reads every GPU's free memory (``free_bytes``, NVML: the gate makes no CUDA context of its own) and
each case's recorded peak per rank (``needs``: NVML's per-process reading, the previous round's launches of each
side where there are any, else the stored baseline's). A case whose two jobs' peaks on one GPU, plus ``MARGIN``,
exceed that GPU's free memory is refused (``refusals``): the coordinator runs its two jobs solo, one after the other,
as today's rounds do, and the verdict and the PR table say why. A case with no recorded peak is refused nothing: its
jobs run, and the round after knows their peaks.

On CPU there is nothing to check: a duet's two jobs take turns on the same cores, and host memory is not what a
refusal protects (one session ran every case's launches before the duet, back to back, in the same memory).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from scalegate.contract import nvml

# Above the recorded peaks: the NVML sampler reads every 50 ms (a peak between two readings is missed) and the
# measured window leaves set-up out; not measured on a GPU yet (docs/duet.md).
MARGIN = 0.15
GIB = 2**30


@dataclass(frozen=True, kw_only=True)
class Need:
    """What one case's two resident jobs hold on each GPU: both sides' peaks of the ranks on it, and from where."""

    case_id: str
    per_device: dict[int, int]
    source: str


def free_bytes() -> list[int] | None:
    """Free memory now of each GPU a rank sees, in CUDA's order (``CUDA_VISIBLE_DEVICES``, contract/nvml.py), from
    NVML; None where there is no NVIDIA driver or GPU (on CPU: nothing to check). Raises ``NvmlDeviceError`` where
    the GPUs ``CUDA_VISIBLE_DEVICES`` names cannot be matched to NVML's."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no pynvml, no driver (NVMLError_LibraryNotFound, _DriverNotLoaded): no GPU to share
        return None
    try:
        return [int(pynvml.nvmlDeviceGetMemoryInfo(handle).free) for handle in nvml.visible(pynvml)]
    finally:
        pynvml.nvmlShutdown()


def refusal(need: Need, free: Sequence[int], margin: float = MARGIN) -> str:
    """Why the case's two jobs cannot be resident at once ("" where they fit), naming the GPU, both sizes and the
    source of the peaks."""
    for device, held in sorted(need.per_device.items()):
        if device < len(free) and held * (1 + margin) > free[device]:
            return (
                f"two resident jobs would not fit in GPU memory: GPU {device} has {free[device] / GIB:.1f} GiB free, "
                f"the case's two jobs peak at {held / GIB:.1f} GiB (+{margin:.0%}) ({need.source})"
            )
    return ""


def refusals(needs: Iterable[Need], free: Sequence[int] | None) -> dict[str, str]:
    """{case id: why} for every case whose two jobs would not fit; nothing where ``free`` is None (no GPU)."""
    if free is None:
        return {}
    found = {need.case_id: refusal(need, free) for need in needs}
    return {case_id: why for case_id, why in found.items() if why}


def needs(sides: dict[str, list[dict[str, Any]]], baseline_cases: dict[str, dict[str, Any]]) -> list[Need]:
    """Every case's need from the rounds so far (``sides``: each side's merged result files) or, for a case no
    round has run yet, the stored baseline's ``peak_memory_bytes`` (``baseline_cases``: its "case id:preset" keys)."""
    recorded: dict[str, dict[str, list[int]]] = {}
    for side, cases in sides.items():
        for case in cases:
            peaks = _peaks(case)
            if peaks:
                recorded.setdefault(case["case_id"], {})[side] = peaks
    found = [
        _need(case_id, [by_side.get("base") or by_side["head"], by_side.get("head") or by_side["base"]], "last round")
        for case_id, by_side in recorded.items()
    ]
    for key, entry in baseline_cases.items():
        case_id = key.split(":", 1)[0]
        value = (entry.get("peak_memory_bytes") or {}).get("value")
        if case_id not in recorded and isinstance(value, list) and value:
            found.append(_need(case_id, [value, value], "the stored baseline"))
    return found


def _peaks(case: dict[str, Any]) -> list[int]:
    """Per rank, the largest GPU peak over the case's launches ([] where none was read by NVML)."""
    launches = [x for x in (case.get("record") or {}).get("launches", []) if x.get("memory_source") == "nvml"]
    per_rank = [x.get("peak_memory_bytes") or [] for x in launches]
    return [max(values) for values in zip(*per_rank)] if per_rank else []


def _need(case_id: str, sides: list[list[int]], source: str) -> Need:
    per_node = _per_node(case_id, max(len(peaks) for peaks in sides))
    per_device: dict[int, int] = {}
    for peaks in sides:
        for rank, peak in enumerate(peaks):
            per_device[rank % per_node] = per_device.get(rank % per_node, 0) + int(peak)
    return Need(case_id=case_id, per_device=per_device, source=f"peaks per rank from {source}")


def _per_node(case_id: str, ranks: int) -> int:
    """G of the case id's ``NxG`` (a rank's GPU is its local rank); every rank on a GPU of its own where the id has
    none."""
    found = re.search(r"-(\d+)x(\d+)(?:-|$)", case_id)
    return int(found.group(2)) if found else max(ranks, 1)
