"""The collective ledger's own cost: the canaries' step time with and without it, and its cost a collective.

    .venv/bin/python -m benchmarks.ledger_overhead [--pairs 6] [--steps 40] [--strategies ddp fsdp deepspeed-zero2]

Two measurements, as for the memory sampler (benchmarks/sampler_overhead.py):

1. direct: one rank's collective with the ledger's kernel and without it, on a group of one (gloo, a 10-element
   all_reduce, so the collective itself costs little): the added microseconds a call; times each canary's
   collectives a step (its own ledger), over its median step, is the ledger's share of the step;
2. end to end: each canary launched in interleaved pairs, ledger on and off (``SCALEGATE_NO_LEDGER=1``), the median
   of the per-launch median step times and their ratio, with the launches' spread beside it.

Goal: at most 1% of step time on the canaries. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from scalegate.contract.spec import CaseSpec
from scalegate.figures import ledger as rows_of
from scalegate.launch import run_case

OFF = "SCALEGATE_NO_LEDGER"  # measure/ledger.py ENV_OFF: the launching side does not import the rank side
CANARIES = ("ddp", "fsdp", "deepspeed-zero2")


def per_call_us(calls: int = 20_000) -> tuple[float, float]:
    """(without, with) microseconds of one all_reduce on a one-rank gloo group, the ledger's kernel on the second."""
    import torch
    import torch.distributed as dist

    from scalegate.measure.ledger import Ledger

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=0, world_size=1)
    tensor = torch.ones(10)

    def timed() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(tensor)
        return (time.perf_counter() - start) / calls * 1e6

    off, on = [], []
    for _ in range(5):  # interleaved: the machine's drift hits both
        off.append(timed())
        counted = Ledger()
        counted.open()
        on.append(timed())
        counted.step()
        counted.close()
    dist.destroy_process_group()
    return statistics.median(off), statistics.median(on)


def launch(strategy: str, steps: int, root: Path, tag: str, ledger: bool) -> tuple[float, float]:
    """(median step s, collectives a step) of one cold launch of the canary."""
    spec = CaseSpec.of(strategy=strategy, model="cnn", preset="tiny", topology="1x2", micro_batch=32, steps=steps,
                    warmup=5, grad_check=False)  # fmt: skip
    if ledger:
        os.environ.pop(OFF, None)
    else:
        os.environ[OFF] = "1"
    try:
        result = run_case(spec, root / tag)
    finally:
        os.environ.pop(OFF, None)
    calls = rows_of.summarize(result).get("calls") or 0.0
    return result.median_step_s, calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--strategies", nargs="+", default=list(CANARIES))
    args = parser.parse_args(argv)
    print(f"load average at the start: {os.getloadavg()[0]:.2f}", flush=True)
    off_us, on_us = per_call_us()
    added = max(on_us - off_us, 0.0)
    print(
        f"direct: an all_reduce on a one-rank gloo group {off_us:.1f} us, {on_us:.1f} us with the ledger: +{added:.1f} us a call"
    )
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="ledger-overhead-") as tmp:
        for strategy in args.strategies:
            on, off, calls = [], [], 0.0
            for i in range(args.pairs):
                first, second = (True, False) if i % 2 == 0 else (False, True)  # ABBA: neither always goes first
                for ledger in (first, second):
                    step_s, counted = launch(strategy, args.steps, Path(tmp), f"{strategy}-{i}-{ledger}", ledger)
                    (on if ledger else off).append(step_s)
                    calls = max(calls, counted)
            m_on, m_off = statistics.median(on), statistics.median(off)
            spread = (max(on + off) - min(on + off)) / m_off
            share = added * 1e-6 * calls / m_off
            worst = max(worst, share)
            print(
                f"{strategy}-cnn-1x2: {calls:g} collectives a step; median step {m_off * 1e3:.2f} ms without the ledger, "
                f"{m_on * 1e3:.2f} ms with: {m_on / m_off - 1:+.2%} end to end (launches spread {spread:.1%}); "
                f"direct: {share:.3%} of the step",
                flush=True,
            )
    verdict = "meets" if worst <= 0.01 else "MISSES"
    print(f"ledger overhead: at most {worst:.3%} of a canary's step by direct cost ({verdict} the <= 1% goal); "
          f"load average at the end: {os.getloadavg()[0]:.2f}")  # fmt: skip
    return 0 if worst <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
