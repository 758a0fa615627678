"""Why a duet binds both sides' rank r to the same cores (harness/scalegate/contract/affinity.py).

    python -m experiments.duet_cores free,same0,same1,split 1      # variants, torch threads per process

Two resident processes take turns one training step at a time (the example script's MLP step; a token over
pipes, as the duet's coordinator passes one), 300 steps each; printed per variant: each process's median step time
(steps 50..299) and B/A. ``free``: the scheduler places them; ``same0``/``same1``: both bound to core 0 / 1;
``split``: A on core 0, B on core 1. ``REPS`` (default 3) rounds of every variant. Run it with nothing else on the
machine; the load average is printed first.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import time

import torch
from torch import nn

VARIANTS = {"free": (None, None), "same0": ({0}, {0}), "same1": ({1}, {1}), "split": ({0}, {1})}


def worker(name, recv, send, cpus, steps, threads, out) -> None:
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    dim = 256
    model = nn.Sequential(nn.Linear(dim, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.randn(32, dim), torch.randint(0, 10, (32,))
    times = []
    for _ in range(steps):
        recv.recv()  # the turn
        started = time.perf_counter()
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - started)
        send.send(1)  # given back
    out.put((name, times))


def run(variant: str, steps: int = 300, threads: int = 1) -> float:
    a_in, to_a = mp.Pipe(False)
    b_in, to_b = mp.Pipe(False)
    results: mp.Queue = mp.Queue()
    cpus = VARIANTS[variant]
    procs = [
        mp.Process(target=worker, args=("A", a_in, to_b, cpus[0], steps, threads, results)),
        mp.Process(target=worker, args=("B", b_in, to_a, cpus[1], steps, threads, results)),
    ]
    for p in procs:
        p.start()
    to_a.send(1)  # A goes first
    got = dict(results.get() for _ in procs)
    for p in procs:
        p.join()
    a, b = statistics.median(got["A"][50:]), statistics.median(got["B"][50:])
    print(f"{variant:6s} threads={threads} A {a * 1e3:.2f} ms B {b * 1e3:.2f} ms  B/A {b / a - 1:+.1%}", flush=True)
    return b / a - 1


if __name__ == "__main__":
    print("load", open("/proc/loadavg").read().strip())
    variants = (sys.argv[1] if len(sys.argv) > 1 else "free,same0,split").split(",")
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    for _ in range(int(os.environ.get("REPS", "3"))):
        for v in variants:
            run(v, threads=threads)
