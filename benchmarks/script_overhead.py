"""What the training-script bootstrap costs a step (goal: at most 1% of step time), as a same-run ratio.

One process runs the example script's own model, data and optimizer step (examples/train_script/train.py) in
rounds of three blocks of steps, back to back in rotating order: bare, with everything the bootstrap adds to a step
(the global optimizer step hook and its count, the step mark, the deferred heartbeat, the timed collectives'
wrappers, rank 0's loss lines read from its log file when the block ends, or with --wrapped through wrapped
streams), and bare again. Every step prints its loss line to fd 1, a file during the blocks as a rank's log is.
Each block is timed with the host clock; the overhead is the median of the rounds' ratios (instrumented / bare:
the host's own drift cancels within a round), printed beside the same ratio of the two bare blocks, the
benchmark's own floor. The window's memory sampler thread (a reading every 50 ms) runs throughout, as in a
measured window; no wire counter (no namespace).

    .venv/bin/python -m benchmarks.script_overhead                 # 600 rounds of 5 steps each kind, ~30 s
    .venv/bin/python -m benchmarks.script_overhead --wrapped       # the loss read through wrapped streams
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import re
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from scalegate.contract.script import ScriptSpec
from scalegate.contract.spec import CaseSpec
from scalegate.worker import script as bootstrap
from scalegate.worker import script_loss
from scalegate.worker.loop import rank_context

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_script" / "train.py"


def _example():
    """The example script as a module (its data and model), loaded from its file: it is no package."""
    spec = importlib.util.spec_from_file_location("train_script_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model(dim: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(dim, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    )
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def make_clock(out_dir: Path) -> bootstrap.StepClock:
    """The bootstrap's step clock as it runs a script (harness/scalegate/worker/script.py); its window opens at the first
    instrumented step and never closes, so every later step pays the in-window path."""
    from scalegate.contract import heartbeat

    spec = CaseSpec.of(
        strategy="ddp",
        model="mlp",
        preset="script",
        topology="1x1",
        micro_batch=32,
        steps=10**9,
        warmup=1,
        script=ScriptSpec(
            path=str(EXAMPLE),
            argv=(),
            cwd=str(ROOT),
            loss_pattern=r"step (\d+) loss ([0-9.eE+-]+)",
        ),
    )
    return bootstrap.StepClock(spec, rank_context(spec), out_dir, heartbeat.Writer(out_dir, 0).beat)


@contextlib.contextmanager
def instrumented(clock: bootstrap.StepClock, wrapped: bool):
    """What the bootstrap installs around a script, installed for one block: the step hook, the collectives'
    wrappers, and rank 0's loss reading (its log file, read when the block ends, or its wrapped streams)."""
    handle = register_optimizer_step_post_hook(clock.optimizer_hook)
    untime = bootstrap._time_collectives(clock)
    losses = script_loss.Losses(clock.spec.script.loss_pattern, clock.losses, files=not wrapped)  # type: ignore[union-attr]
    try:
        yield
    finally:
        losses.close()
        untime()
        handle.remove()
        assert clock.losses, "the instrumented block's loss lines were not read"  # the benchmark measures real work
        del clock.losses[:]  # a reading a step: keep the list short


def block(model, optimizer, data, steps: int) -> float:
    loss_fn = torch.nn.CrossEntropyLoss()
    start = time.perf_counter()
    for step in range(steps):
        inputs, labels = next(data)
        loss = loss_fn(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")  # to fd 1, a file during the blocks, as a rank's log
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=600, help="rounds of the three kinds of block")
    parser.add_argument("--steps", type=int, default=5, help="steps a block")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--wrapped", action="store_true", help="read the loss through wrapped streams, not the log")
    parser.add_argument("--out", default="results/script-overhead")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model, optimizer = _model(args.dim)
    data = _example().batches(0, 32, args.dim)
    clock = make_clock(out)
    with as_rank_log(out / "rank0.log"):  # stdout is a file during the blocks, as torchrun's --redirects make it
        with instrumented(clock, args.wrapped):  # opens the window (sampler thread) once, as a run does
            block(model, optimizer, data, args.steps)
        block(model, optimizer, data, args.steps)  # warm up
        runs: dict[str, list[float]] = {"bare": [], "timed": [], "bare again": []}
        orders = [("bare", "timed", "bare again"), ("timed", "bare again", "bare"), ("bare again", "bare", "timed")]
        for i in range(args.blocks):
            for kind in orders[i % 3]:  # each kind in each position equally often
                if kind == "timed":
                    with instrumented(clock, args.wrapped):
                        runs[kind].append(block(model, optimizer, data, args.steps))
                else:
                    runs[kind].append(block(model, optimizer, data, args.steps))
    print(parts(clock, model, optimizer))
    clock.window.sampler.__exit__(None, None, None)
    print(summary(runs, args))


@contextlib.contextmanager
def as_rank_log(path: Path):
    """fd 1 (and sys.stdout) on a file for the block, then back."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "w") as log:
        os.dup2(log.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def summary(runs: dict[str, list[float]], args: argparse.Namespace) -> str:
    """The overhead as the median of each round's ratio (instrumented / bare, blocks run back to back), beside the
    same ratio for two bare blocks (the benchmark's own floor: what a ratio of identical work spreads by here)."""
    bare, timed, again = runs["bare"], runs["timed"], runs["bare again"]
    ratio = [t / b - 1 for t, b in zip(timed, bare)]
    floor = [a / b - 1 for a, b in zip(again, bare)]
    b = statistics.median(bare)
    load = os.getloadavg()
    return (
        f"step: bare {b * 1e3:.3f} ms (IQR {_iqr(bare) * 1e3:.3f}), instrumented {statistics.median(timed) * 1e3:.3f} ms"
        f" (IQR {_iqr(timed) * 1e3:.3f}); overhead {statistics.median(ratio):+.2%} a step (IQR of the rounds' ratios "
        f"{_iqr(ratio):.2%}; {statistics.median(ratio) * b * 1e6:+.1f} us); bare against bare {statistics.median(floor):+.2%}"
        f" (IQR {_iqr(floor):.2%}); {args.blocks} rounds x {args.steps} steps each kind; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def parts(clock: bootstrap.StepClock, model, optimizer, n: int = 20000) -> str:
    """Each piece's cost a call, timed alone: the clock's step (count, heartbeat, mark), the loss reader a line, and
    torch's optimizer step with and without a global hook (the step's own work, AdamW on the example's model)."""
    start = time.perf_counter()
    for _ in range(n):
        clock.on_step()
    on_step = (time.perf_counter() - start) / n
    reader = script_loss.LossReader(io.StringIO(), re.compile(r"step (\d+) loss ([0-9.eE+-]+)"), [])
    start = time.perf_counter()
    for i in range(n):
        print(f"step {i} loss 1.2345", file=reader)
    line = (time.perf_counter() - start) / n
    for p in model.parameters():
        p.grad = torch.randn_like(p)

    def steps(k: int = 200) -> float:
        begin = time.perf_counter()
        for _ in range(k):
            optimizer.step()
        return (time.perf_counter() - begin) / k

    bare, hooked = [], []
    for i in range(40):
        for kind in ("bare", "hooked") if i % 2 else ("hooked", "bare"):
            handle = register_optimizer_step_post_hook(lambda o, a, kw: None) if kind == "hooked" else None
            (hooked if handle else bare).append(steps())
            if handle:
                handle.remove()
    return (
        f"parts: the clock's step {on_step * 1e6:.1f} us, the loss reader {line * 1e6:.1f} us a line, an AdamW step "
        f"{statistics.median(bare) * 1e6:.1f} us bare and {statistics.median(hooked) * 1e6:.1f} us with a global hook"
    )


def _iqr(values: list[float]) -> float:
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


if __name__ == "__main__":
    main()
