"""``--scaling-profile``: a torch profiler window after the measured steps, one Chrome trace per rank.

The window runs only when the spec asks for it (``profile_steps > 0``), after the measured steps
and after the memory sampler and the wire counter have closed their windows, so the profiler's
overhead never reaches a timed step, a memory peak or a byte count. It is one warm-up step (the
profiler's own start-up, not recorded) and then ``profile_steps`` recorded steps, each marked
``ProfilerStep#N``, with ``batch``, ``forward_backward`` and ``optimizer_step`` inside. CPU
activity always, CUDA kernels too where the rank's device is a GPU.

The trace is ``<profile_dir>/rank<R>.json.gz`` (chrome://tracing and https://ui.perfetto.dev open
it as it is), written through a temporary file and a rename, so a relaunch of the same case (or a
second pytest-xdist worker measuring the same reference) replaces it whole, never half-written.
Worker side: the launching side only reads the paths back from the rank results.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from scalegate.contract.errors import SpecError

WARMUP_STEPS = 1  # the first profiled step pays for the profiler's start-up; it is run, not recorded


def trace_path(profile_dir: str | Path, rank: int) -> Path:
    return Path(profile_dir) / f"rank{rank}.json.gz"


def activities(device: torch.device) -> list[ProfilerActivity]:
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])


def _export(path: Path, prof: profile) -> None:
    tmp = path.with_name(f".{path.name[: -len('.json.gz')]}.{os.getpid()}.tmp.json.gz")  # .gz: torch gzips
    try:
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def run_window(steps: int, profile_dir: str, rank: int, device: torch.device, step: Callable[[int], None]) -> Path:
    """Call ``step(i)`` for ``i`` in ``0 .. WARMUP_STEPS + steps - 1`` under the profiler; return the trace path.

    Every rank must call this with the same ``steps``: the steps run the strategy's collectives.
    """
    if steps < 1 or not profile_dir:
        raise SpecError(
            f"a profiler window needs profile_steps >= 1 and a profile_dir, got {steps} and {profile_dir!r}",
            "set both (the session does, from --scaling-profile), or neither",
        )
    path = trace_path(profile_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    with profile(
        activities=activities(device),
        schedule=schedule(wait=0, warmup=WARMUP_STEPS, active=steps, repeat=1),
        on_trace_ready=lambda prof: _export(path, prof),
    ) as prof:
        for i in range(WARMUP_STEPS + steps):
            step(i)
            prof.step()
    return path
