"""The interactive history page at nightly scale: its size, and how long it takes to open, in headless Chromium.

    .venv/bin/python -m benchmarks.dashboard_scale [--runs 1000] [--cases 50] [--repeat 3] [--out DIR] [--real-check]

A history of ``--runs`` nightlies of ``--cases`` cases x 6 metrics (300 series by default: efficiency, local
efficiency, throughput, MFU, peak memory, bytes per step), 3% noise, every 10th case 12% slower from two thirds in
and every 7th 15% heavier in the last 3 nights. By default the verdicts are built from the generated series with
their change points where they were injected: the page's cost does not depend on how the verdicts were found, and
the real check of 300 series of 1,000 runs takes minutes here (history_scale.py measures it). ``--real-check``
stores the runs in SQLite and runs ``history check``'s own code instead.

Measured: the time ``dashboard.write`` takes; the file's size; in a fresh headless Chromium each time (no cache,
no compiled-code cache: a reader's first open), the time from navigation start to the page's ``sg-ready`` mark
(its script ran and the first screen of figures is drawn) and to DOMContentLoaded; the same in an already
warm browser; a filter chip's click until the figures it shows are drawn; the JS heap. The same for a page of
plotly.js alone, the floor no data layout can go under. The load average is printed with the numbers: the machine
may be shared (docs/history.md keeps the figures).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import browser
from scalegate.history import check as C
from scalegate.history import dashboard, store
from scalegate.page import build

METRICS = ("efficiency", "local_efficiency", "throughput", "mfu", "peak_memory_bytes", "bytes_per_step")
LEVEL = {"efficiency": 0.8, "local_efficiency": 0.88, "throughput": 800.0, "mfu": 0.3, "peak_memory_bytes": 4e8}
STRATEGIES = ("ddp", "fsdp", "hsdp", "deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3", "fabric-ddp", "tp")
MODELS = ("cnn", "rnn_mnist", "resnet", "bert_qa", "gpt", "hf:gpt2", "hf:llama")
TOPOLOGIES = ("1x2", "1x4", "2x1", "2x2", "2x4")


def history(n_runs: int, n_cases: int) -> tuple[list[store.Run], dict[str, dict[str, np.ndarray]]]:
    rng = np.random.default_rng(0)
    runs = [
        store.Run(
            run_id=f"nightly-{i:04d}",
            commit=f"{rng.integers(16**11, 16**12):012x}",
            date=f"{np.datetime64('2024-01-01T02:00') + np.timedelta64(i, 'D')}:00+00:00",
            profile="gpu-8xh100-torch2.13.0",
        )
        for i in range(n_runs)
    ]
    cases = {}
    for k in range(n_cases):
        case_id = f"{STRATEGIES[k % len(STRATEGIES)]}-{MODELS[k // len(STRATEGIES) % len(MODELS)]}-"
        case_id += TOPOLOGIES[k // (len(STRATEGIES) * len(MODELS)) % len(TOPOLOGIES)]
        values = {}
        for m in METRICS:
            z = LEVEL.get(m, 9.8e6) * (1 + 0.03 * rng.standard_normal(n_runs))
            if k % 10 == 0 and m in ("efficiency", "local_efficiency", "throughput"):
                z[2 * n_runs // 3 :] *= 0.88
            if k % 7 == 0 and m == "peak_memory_bytes":
                z[-3:] *= 1.15
            values[m] = z
        cases[f"{case_id}:small"] = values
    return runs, cases


def verdicts(runs, cases, settings: C.Settings) -> list[C.SeriesVerdict]:
    """The series with their change points where history() put them, judged by check.py's own classify."""
    out = []
    for k, (key, values) in enumerate(cases.items()):
        for m, z in values.items():
            n = len(z)
            cut = 2 * n // 3 if k % 10 == 0 and m in METRICS[:3] else n - 3 if k % 7 == 0 and m == METRICS[4] else None
            points = tuple(
                store.Point(run_id=r.run_id, commit=r.commit, date=r.date, value=float(v)) for r, v in zip(runs, z)
            )
            changes: tuple[C.Change, ...] = ()
            if cut is not None:
                before, after = float(np.median(z[:cut])), float(np.median(z[cut:]))
                effect = after / before - 1
                kind = C.classify(m, effect, C.DEFAULT_MIN_EFFECT)
                changes = (
                    C.Change(index=cut, kind=kind, effect=effect, before=before, after=after,
                             last_good=points[cut - 1], first_bad=points[cut], pvalue=0.001,
                             new=cut >= n - settings.recent),
                )  # fmt: skip
            out.append(
                C.SeriesVerdict(
                    profile=runs[0].profile, case_key=key, case_id=key.rpartition(":")[0], metric=m, points=points,
                    changes=changes, status=changes[-1].kind if changes else C.NO_CHANGE,
                    min_effect=C.DEFAULT_MIN_EFFECT,
                )
            )  # fmt: skip
    return out


def real_check(runs, cases, work: Path, settings: C.Settings) -> list[C.SeriesVerdict]:
    with store.connect(work / "history.sqlite", create=True) as conn:
        for i, run in enumerate(runs):
            rows = [
                store.CaseRow(case_key=key, case_id=key.rpartition(":")[0], status="ok",
                              metrics={m: float(z[i]) for m, z in values.items()})
                for key, values in cases.items()
            ]  # fmt: skip
            store.add(conn, run, rows)
        return C.check(conn, baseline_dir=work / "no-baselines", settings=settings)


READY = "performance.getEntriesByName('sg-ready')[0].startTime"
DCL = "performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd"
CHIP = ".sg-facet[data-facet=metric] .sg-chip[data-value=peak_memory_bytes]"
CENTER = f"(() => {{ const r = document.querySelector({CHIP!r}).getBoundingClientRect(); return [r.left + 9, r.top + 9]; }})()"
DRAWN = "[...document.querySelectorAll('.sg-card:not([hidden]) .sg-plot')].slice(0, 2).every(n => n.querySelector('.main-svg'))"


def open_cold(path: str, page: Path, filter_chip: bool) -> dict[str, float]:
    with browser.Chromium(path, width=1280, height=1000, timeout_s=120) as tab:
        tab.open(page.as_uri())
        tab.wait_for("document.body.dataset.ready", timeout_s=120)
        cold = {
            "ready_ms": tab.js(READY),
            "dcl_ms": tab.js(DCL),
            "heap_mb": tab.js("performance.memory.usedJSHeapSize") / 1e6,
        }
        if filter_chip:
            start = time.perf_counter()
            tab.click(*tab.js(CENTER))
            tab.wait_for(DRAWN, timeout_s=60)
            cold["filter_ms"] = (time.perf_counter() - start) * 1e3
        tab.open(page.as_uri())  # the same browser again: its code cache holds plotly.js compiled
        tab.wait_for("document.body.dataset.ready", timeout_s=120)
        cold["warm_ready_ms"] = tab.js(READY)
        return cold


def screenshot(path: str, page: Path, png: Path) -> None:
    """The README's picture: the first screen with the first figure's point at two thirds hovered."""
    point = """(() => { const gd = document.querySelector('#series-0 .sg-plot'), t = gd._fullData[0], L = gd._fullLayout;
      const r = gd.getBoundingClientRect(), i = Math.floor(t.x.length * 0.7);
      return [L.xaxis.d2p(t.x[i]) + L._size.l + r.left, L.yaxis.d2p(t.y[i]) + L._size.t + r.top]; })()"""
    with browser.Chromium(path, width=1280, height=1000, timeout_s=120) as tab:
        tab.open(page.as_uri())
        tab.wait_for("document.body.dataset.ready", timeout_s=120)
        x, y = tab.js(point)
        tab.mouse_move(x - 3, y - 3)
        tab.mouse_move(x, y)
        tab.wait_for("!!document.querySelector('#series-0 .hoverlayer .hovertext')", timeout_s=10)
        tab.screenshot(png)
    print(f"screenshot: {png}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--cases", type=int, default=50, help="series = cases x 6 metrics (default: 50, so 300)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path, default=None, help="keep the page here (default: a temporary directory)")
    p.add_argument("--real-check", action="store_true", help="store the runs and run history check's code (slow)")
    p.add_argument("--screenshot", type=Path, help="also save the page's first screen, a point hovered (docs/img/)")
    args = p.parse_args()
    path = browser.find()
    if path is None:
        sys.exit("no headless browser: apt-get install -y chromium")
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    work = args.out or Path(tempfile.mkdtemp(prefix="dashboard-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    settings = C.Settings()
    runs, cases = history(args.runs, args.cases)
    start = time.perf_counter()
    judged = real_check(runs, cases, work, settings) if args.real_check else verdicts(runs, cases, settings)
    judged_s = time.perf_counter() - start
    start = time.perf_counter()
    page = dashboard.write(judged, work, Path("history.sqlite"), settings)  # the page names it: a short name
    (work / "ready.js").write_text("SG.ready();\n")
    write_s = time.perf_counter() - start
    size = page.stat().st_size
    print(f"{args.runs} runs x {len(judged)} series ({'real check' if args.real_check else 'injected verdicts'} "
          f"in {judged_s:.1f} s): page {size / 1e6:.2f} MB ({page}), written in {write_s:.2f} s")  # fmt: skip
    if args.screenshot:
        screenshot(path, page, args.screenshot)
    floor = build.write(work / "plotly-only.html", title="floor", data={}, script=work / "ready.js")  # ours: 0
    for name, target in (("plotly.js alone (the floor)", floor), ("the history page", page)):
        print(f"{name}: {target.stat().st_size / 1e6:.2f} MB, {args.repeat} fresh browsers")
        report([open_cold(path, target, filter_chip=target == page) for _ in range(args.repeat)])
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def report(results: list[dict[str, float]]) -> None:
    for key in ("ready_ms", "dcl_ms", "warm_ready_ms", "filter_ms", "heap_mb"):
        values = [r[key] for r in results if key in r]
        if values:
            print(f"  {key:14} median {statistics.median(values):8.1f}  (all: {', '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
