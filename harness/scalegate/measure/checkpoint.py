"""``--scaling-checkpoint``: save and load a checkpoint after every other window, timed, with round-trip parity.

Worker side. The window runs on every rank after the measured steps, the same-launch pairs and the profiler
window, so it costs none of them anything. In order:

1. save model and optimizer state into ``spec.windows.checkpoint_dir`` (``Strategy.save_checkpoint``:
   ``torch.distributed.checkpoint`` for DDP, FSDP2, HSDP and TP; DeepSpeed's own ``save_checkpoint`` for ZeRO),
   timed between barriers, so ``save_s`` is the slowest rank's;
2. step A: one more optimizer step on the next global batch; its loss and full parameters are recorded;
3. load the checkpoint back (timed like the save): the state is the one before step A again;
4. step B: the same step on the same batch; a correct round trip gives the loss and parameters of step A.

Bytes per rank are the sizes of the files that rank wrote (DCP: ``__<rank>_*.distcp``; DeepSpeed:
``zero_pp_rank_<rank>_*``); files no rank's name claims (DCP's ``.metadata``, DeepSpeed's ``mp_rank_00_model_states.pt``)
count for rank 0, which writes them. The launching side judges parity (``harness/scalegate/checks/agreement.py``) and reports
seconds per GB (``harness/scalegate/figures/resources.py``). docs/checkpoints.md has what is saved and what is not supported.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import torch

from scalegate.contract.errors import SpecError
from scalegate.measure import gradcheck

# DCP names a rank's data files __<rank>_<n>.distcp; DeepSpeed zero_pp_rank_<rank>_mp_rank_00_*.pt
_RANK_FILE = re.compile(r"^__(\d+)_\d+\.distcp$|^zero_pp_rank_(\d+)_")


UNINTERRUPTED = "uninterrupted.pt"  # checkpoint_keep: step A's batch index and full parameters, beside the files


def file_rank(name: str) -> int | None:
    """The rank a checkpoint file belongs to, from its name; None for shared files (metadata, rank 0's)."""
    found = _RANK_FILE.search(name)
    if found is None:
        return None
    return int(found.group(1) if found.group(1) is not None else found.group(2))


def bytes_written(directory: Path, rank: int) -> int:
    """Bytes of the files this rank wrote under ``directory`` (shared files count for rank 0)."""
    total = 0
    for path in directory.rglob("*"):
        if path.is_file():
            owner = file_rank(path.name)
            if owner == rank or (owner is None and rank == 0):
                total += path.stat().st_size
    return total


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _timed(action: Callable[[], None], sync: Callable[[], None]) -> float:
    """Seconds of a collective action between barriers: the slowest rank's time on every rank."""
    sync()
    _barrier()
    t0 = time.perf_counter()
    action()
    sync()
    _barrier()
    return time.perf_counter() - t0


def _snapshot(strategy) -> dict[str, torch.Tensor]:
    return {n: t.detach().to("cpu", copy=True) for n, t in strategy.full_parameters().items()}


def _clear(directory: Path, rank: int) -> None:
    """Rank 0 empties the directory (a relaunch of the case replaces the checkpoint); the others wait."""
    if rank == 0:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, exist_ok=True)
    _barrier()


def run_window(
    spec, rank: int, strategy, step: Callable[[int], float], batch: int, sync: Callable[[], None]
) -> dict[str, Any]:
    """The checkpoint window; ``step(i)`` runs one optimizer step on global batch ``i`` and returns this rank's
    loss. Returns ``{"checkpoint": {...}}`` for the rank's ``extra`` results, or nothing when the option is off."""
    if not spec.windows.checkpoint:
        return {}
    if strategy.checkpoint_unavailable:
        return {"checkpoint": {"unavailable": strategy.checkpoint_unavailable}}
    if not spec.windows.checkpoint_dir:
        raise SpecError(
            f"{spec.case_id}: --scaling-checkpoint needs a checkpoint_dir",
            "set checkpoint_dir in the spec (the session sets <case dir>/checkpoint)",
        )
    directory = Path(spec.windows.checkpoint_dir)
    _clear(directory, rank)
    save_s = _timed(lambda: strategy.save_checkpoint(str(directory)), sync)
    written = bytes_written(directory, rank)
    loss_a = step(batch)
    params_a = _snapshot(strategy)
    restore_optimizer = not spec.faults.checkpoint_skip_optimizer
    load_s = _timed(lambda: strategy.load_checkpoint(str(directory), optimizer=restore_optimizer), sync)
    loss_b = step(batch)
    compared = gradcheck.compare(strategy.full_parameters(), params_a)  # compared as gathered: no second copy
    _barrier()
    if rank == 0 and spec.windows.checkpoint_keep:  # what a resume at another world size must reproduce (tests)
        torch.save({"batch": batch, "params": params_a}, directory / UNINTERRUPTED)
    elif rank == 0:
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "checkpoint": {
            "save_s": save_s,
            "load_s": load_s,
            "bytes": written,
            "directory": str(directory),
            "batch": batch,
            "format": strategy.checkpoint_format,
            "loss_uninterrupted": loss_a,
            "loss_resumed": loss_b,
            "params": {k: compared[k] for k in ("worst", "missing")}
            | {"error": compared["errors"].get(compared["worst"]) if compared["worst"] else None},
        }
    }
