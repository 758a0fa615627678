"""Running ``selftest --gpu``'s phases (cli/gpu_phases.py) and recording what they found: the raw JSON the GPU
acceptance page is made from (report/acceptance_page.py)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from scalegate.launch import process
from scalegate.plan import hostinfo
from scalegate.report import acceptance, acceptance_page

if TYPE_CHECKING:
    from scalegate.cli import gpu_phases


def run(
    phases: list[gpu_phases.Phase],
    settings: gpu_phases.Settings,
    host: hostinfo.HostInfo,
    root: Path,
    out: Path,
    raw_dir: Path | None = None,
) -> int:
    """Every phase in turn within the budget; the page in ``out``, its raw JSON in ``raw_dir`` (else beside it)."""
    started = time.monotonic()
    runs: list[acceptance.PhaseRun] = []
    rows: list[acceptance.CaseRow] = []
    for i, phase in enumerate(phases):
        if phase.skip:
            print(f"selftest: {phase.name}: not run here: {phase.skip}", flush=True)
            runs.append(acceptance.PhaseRun(name=phase.name, proves=phase.proves, argv=[], skip=phase.skip))
            continue
        left = settings.budget_s - (time.monotonic() - started)
        done = run_phase(phase, phase.timeout_for(phases[i + 1 :], left), root)
        runs.append(done)
        rows += rows_of(phase)
    report = record(host, settings, runs, rows, time.monotonic() - started)
    md, raw = acceptance_page.write(report, out, raw_dir)
    for item, text in acceptance_page.coverage(report):
        print(f"selftest: {item}: {text}")
    failed = acceptance_page.failures(report)
    for line in failed:
        print(f"selftest: FAILED {line}")
    print(f"selftest: {'FAILED' if failed else 'passed'}; report {md} (raw: {raw})")
    return 1 if failed else 0  # selftest's exit codes: 1 a failure, 0 every case passed or skipped with a reason


def run_phase(phase: gpu_phases.Phase, timeout_s: float, root: Path) -> acceptance.PhaseRun:
    """The phase's command in its own process group, its output in its log, stopped whole at ``timeout_s``."""
    phase.results_dir.mkdir(parents=True, exist_ok=True)
    log = phase.results_dir / "phase.log"
    print(f"selftest: {phase.name} ({timeout_s:.0f} s): {phase.proves}", flush=True)
    start, timed_out = time.monotonic(), False
    with log.open("w") as sink:
        proc = subprocess.Popen(phase.argv, cwd=root, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:  # the phase's group and every rank it started, TERM then KILL
            process.kill_tree(proc, grace_s=15)
            timed_out, code = True, proc.wait()
    wall = time.monotonic() - start
    print(f"selftest: {phase.name}: exit {code}{' (budget ran out)' if timed_out else ''} after {wall:.0f} s")
    done = acceptance.PhaseRun(
        name=phase.name,
        proves=phase.proves,
        argv=list(phase.argv),
        budget_s=timeout_s,
        wall_s=wall,
        exit_code=code,
        timed_out=timed_out,
        log=str(log),
    )
    if done.problem or code not in (0, 5):
        print("".join(log.read_text(errors="replace").splitlines(keepends=True)[-30:]), end="", flush=True)
    return done


def rows_of(phase: gpu_phases.Phase) -> list[acceptance.CaseRow]:
    if phase.gate_json is not None:
        return acceptance.gate_rows(phase.name, phase.gate_json, phase.results_dir)
    if phase.spread:
        return acceptance.spread_rows(phase.name, phase.results_dir)
    junit = phase.junit or phase.results_dir / "junit.xml"  # every other phase is a pytest session
    return acceptance.pytest_rows(phase.name, junit, phase.results_dir, compiled="--scaling-compile" in phase.argv)


def record(
    host: hostinfo.HostInfo,
    settings: gpu_phases.Settings,
    runs: list[acceptance.PhaseRun],
    rows: list[acceptance.CaseRow],
    wall_s: float,
) -> dict:
    """The raw JSON the page is made from (harness/scalegate/report/acceptance_page.py reads it back)."""
    fields = ("torch", "cuda", "nccl", "cpu_model", "cpu_cores")
    return {
        "schema": acceptance_page.SCHEMA,
        "device": host.device_name,
        "gpus": host.devices_per_node,
        "date": time.strftime("%Y-%m-%d"),
        "command": shlex.join(["python", "-m", "scalegate", *sys.argv[1:]]),
        "commit": hostinfo.commit(),
        "host": {**{k: getattr(host, k) for k in fields}, "driver": driver_version(), "profile": host.profile},
        "budget_s": settings.budget_s,
        "wall_s": wall_s,
        "settings": {"models": settings.models, "steps": settings.steps, "warmup": settings.warmup},
        "work_dir": str(settings.work_dir),
        "phases": [r.to_dict() for r in runs],
        "cases": [r.to_dict() for r in rows],
    }


def driver_version() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (done.stdout.strip().splitlines() or ["unknown"])[0]
