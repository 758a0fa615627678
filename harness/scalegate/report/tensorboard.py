"""``--scaling-tensorboard DIR``: every case's numbers as TensorBoard scalars, written by the pytest process.

One TensorBoard run per case and session, ``DIR/<run id>/<case id>``, so sessions never overwrite
(or, by restarting a step count, purge) each other's points and ``tensorboard --logdir DIR`` lists
``<run id>/<case id>`` runs to compare. Tags:

    loss                          global loss per measured step (x = measured step 0, 1, ...)
    step_time_s                   the slowest rank's time per measured step
    throughput_samples_per_s      global batch / median step time           } one point each, at x = 0
    speedup, efficiency           against the session's single 1x1 reference }
    step_time_median_s                                                      }
    peak_memory_mib/rank<R>       each rank's peak memory (its source: the case's result JSON)
    bytes_per_step                bytes on the wire per measured step, where they were counted

A case that produced no result (a crash, a hang) writes nothing. The workers never import this.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from scalegate.contract.errors import SpecError

if TYPE_CHECKING:
    from scalegate.judge import Outcome

HINT = (
    "pip install -e .[report] (or pip install 'tensorboard>=2.15') into the suite's environment, "
    "or drop --scaling-tensorboard"
)


def require() -> None:
    """Raise a ``SpecError`` with a HINT when ``torch.utils.tensorboard`` cannot be imported."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401  (it imports the tensorboard package)
    except ImportError as exc:
        raise SpecError(
            f"--scaling-tensorboard needs the tensorboard package, which cannot be imported ({exc})", HINT
        ) from None


def scalars(outcome: "Outcome") -> dict[str, list[tuple[int, float]]]:
    """``tag -> [(step, value)]`` for one case; values that were not measured are left out."""
    result = outcome.result
    if result is None:
        return {}
    points: dict[str, list[tuple[int, float]]] = {
        "loss": list(enumerate(result.losses)),
        "step_time_s": list(enumerate(result.step_times_s)),
        "throughput_samples_per_s": [(0, result.throughput)],
        "step_time_median_s": [(0, result.median_step_s)],
    }
    for tag, value in (
        ("speedup", outcome.speedup),
        ("efficiency", outcome.efficiency),
        ("local_efficiency", outcome.local_efficiency),
        ("bytes_per_step", ((outcome.resources or {}).get("wire") or {}).get("bytes_per_step")),
    ):
        if value is not None:
            points[tag] = [(0, value)]
    for rank in result.ranks:
        if rank.peak_memory_bytes:
            points[f"peak_memory_mib/rank{rank.rank}"] = [(0, rank.peak_memory_bytes / 2**20)]
    return {
        tag: [(s, float(v)) for s, v in series if v is not None and not math.isinf(v)] for tag, series in points.items()
    }


def write_case(log_root: Path, outcome: "Outcome") -> Path | None:
    """Write the case's scalars under ``log_root/<case id>``; return that directory (None: nothing to write)."""
    points = scalars(outcome)
    if not points:
        return None
    from torch.utils.tensorboard import SummaryWriter

    log_dir = Path(log_root) / outcome.case_id
    writer = SummaryWriter(log_dir=str(log_dir))
    try:
        for tag, series in points.items():
            for step, value in series:
                writer.add_scalar(tag, value, global_step=step)
    finally:
        writer.close()
    return log_dir
