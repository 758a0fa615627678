"""Reliability: injected hangs, crashes and missing results are detected, reported and cleaned up;
an interrupted run is marked partial; results and baselines are written without collisions.

Real torchrun jobs, no mocks. Each launched case uses a short timeout (HANG_TIMEOUT_S) and the test
asserts that no process, namespace or listening port of it is left behind.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from scalegate import workloads
from scalegate.contract import cards, heartbeat
from scalegate.contract.cards import StrategyCard
from scalegate.contract.errors import LaunchError
from scalegate.contract.faults import Faults, parse_fault
from scalegate.contract.spec import CaseSpec
from scalegate.contract.topology import Topology
from scalegate.launch import hang, netns, run_case
from scalegate.launch.base import first_failure
from scalegate.plan import availability
from scalegate.record import baselines, run_status

ROOT = Path(__file__).resolve().parents[1]
HANG_TIMEOUT_S = 40.0
TOKEN_ENV = "SCALEGATE_TEST_TOKEN"


def _spec(fault: str, timeout_s: float = HANG_TIMEOUT_S) -> CaseSpec:
    return CaseSpec.of(
        strategy="ddp",
        model="cnn",
        preset="tiny",
        topology="1x2",
        micro_batch=workloads.preset("cnn", "tiny").micro_batch,
        steps=2,
        warmup=1,
        timeout_s=timeout_s,
        faults=Faults(**parse_fault(fault)),
    )


def _leftovers(token: str, creator_pid: int, ports: list[int]) -> list[str]:
    """Processes carrying ``token`` in their environment, namespaces the creator made, LISTEN ports."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.environ().get(TOKEN_ENV) == token:
                found.append(f"process {proc.pid}: {' '.join(proc.info['cmdline'] or [])[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    found += [f"namespace {n}" for n in netns.list_namespaces(f"{netns.PREFIX}{creator_pid}-")]
    listening = {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    found += [f"listening port {p}" for p in ports if p in listening]
    return found


def _master_ports(case_dir: Path) -> list[int]:
    text = "".join(p.read_text(errors="replace") for p in case_dir.parent.glob(f"{case_dir.name}*/launcher.log"))
    return [int(p) for p in re.findall(r"--master-port (\d+)", text)]


@pytest.fixture
def tagged(monkeypatch, without_agents):
    """Every process launched from here carries a unique token, so leftovers can be found; the session's warm agent
    (tests/conftest.py), whose namespace is named by this process too, is closed first."""
    token = uuid.uuid4().hex
    monkeypatch.setenv(TOKEN_ENV, token)
    return token


def _run_fault(fault: str, tmp_path: Path, token: str) -> tuple[str, float]:
    case_dir = tmp_path / "case"
    started = time.monotonic()
    # Only the hang should meet its timeout; the others get room for a loaded machine.
    timeout_s = HANG_TIMEOUT_S if fault.startswith("hang") else 240.0
    with pytest.raises(LaunchError) as info:
        run_case(_spec(fault, timeout_s), case_dir)
    took = time.monotonic() - started
    assert _leftovers(token, os.getpid(), _master_ports(case_dir)) == []
    assert "Traceback" not in info.value.message.split("traceback")[0]  # our message, not a crash of ours
    print(f"\n--- {fault} detected in {took:.1f}s ---\n{info.value}")
    return str(info.value), took


# --- faults, end to end -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.nightly  # nightly: the cold launcher's 40 s hang; the default (warm) launcher's is in the default tier (tests/test_warm.py)
def test_hang_is_diagnosed_with_heartbeats_and_stacks_then_killed(tmp_path, tagged):
    message, took = _run_fault("hang:rank=1,step=2", tmp_path, tagged)
    assert f"ddp-cnn-1x2 hung: no result after {HANG_TIMEOUT_S:.0f}s" in message
    assert "rank 1 is stuck outside torch, in inject_stop_fault" in message  # named from its stack
    assert "rank 1: step 2 (step)" in message  # and from its heartbeat
    stacks = (tmp_path / "case" / "stacks.txt").read_text()
    assert "--- rank 0" in stacks and "--- rank 1" in stacks
    assert took < HANG_TIMEOUT_S + 30  # diagnosis and kill take seconds, not another timeout


@pytest.mark.slow
def test_crash_reports_first_failing_rank_traceback_and_links_logs(tmp_path, tagged):
    message, _ = _run_fault("crash:rank=1,step=1", tmp_path, tagged)
    assert "failed (torchrun exit code 1)" in message
    assert "first failing rank (local 1) traceback" in message
    assert "RuntimeError: injected crash on rank 1 at step 1" in message
    assert re.search(r"rank logs:\n.*/0/stderr\.log", message)


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault, says",
    [
        ("no-result:rank=0", "rank0.json was not written"),
        ("bad-result:rank=1", "rank1.json is malformed"),
    ],
)
@pytest.mark.nightly  # nightly: cold launcher; the warm launcher's (the default's) are in the default tier
def test_exit_zero_without_a_usable_result_is_a_clear_failure(tmp_path, tagged, fault, says):
    message, _ = _run_fault(fault, tmp_path, tagged)
    assert "every rank exited 0, but rank result" in message and says in message
    assert "KeyError" not in message


@pytest.mark.slow
def test_sigterm_cleans_up_and_marks_the_run_partial(tmp_path, tagged):
    """SLURM's time limit: finished cases stay on disk, the hung job is killed, run.json says partial."""
    results = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if k not in ("SCALEGATE_RUN_ID", "PYTEST_ADDOPTS")}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "scaling_tests" / "test_scaling.py"),
        "-p",
        "no:cacheprovider",
        "-q",
        "--scaling-results-dir",
        str(results),
        "--scaling-strategies",
        "ddp",
        "--scaling-models",
        "cnn",
        "--scaling-topologies",
        "1x1,1x2",
        "--scaling-steps",
        "2",
        "--scaling-warmup",
        "1",
        "--scaling-timeout",
        "300",
        "--scaling-inject-fault",
        "hang:rank=1,step=1",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not list(results.glob("*/ddp-cnn-1x2/ranks/rank1.heartbeat")):
            time.sleep(0.5)
        assert list(results.glob("*/ddp-cnn-1x1.json")), "the 1x1 case should have finished first"
        time.sleep(3)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        while time.monotonic() - sent < 60 and [
            x for x in _leftovers(tagged, proc.pid, []) if not x.startswith(f"process {proc.pid}:")
        ]:
            time.sleep(0.2)
        cleaned = time.monotonic() - sent
        # pytest's own KeyboardInterrupt report (it parses source for the traceback) is slow on a loaded box
        out, _ = proc.communicate(timeout=180)
        stopped = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    run_dir = next(results.glob("*/run.json")).parent
    print(
        f"\nSIGTERM -> job tree gone in {cleaned:.1f}s, pytest exited in {stopped:.1f}s "
        f"(code {proc.returncode})\n{out[-1500:]}"
    )
    assert cleaned < 30  # inside SLURM's default KillWait
    assert run_status.read(run_dir) == "partial"
    assert (run_dir / "ddp-cnn-1x1.json").exists()
    assert _leftovers(tagged, proc.pid, _master_ports(run_dir / "ddp-cnn-1x2")) == []
    assert proc.returncode == pytest.ExitCode.INTERRUPTED


# --- heartbeats and diagnosis, without processes ---------------------------------------------------


def test_heartbeat_summary_names_the_rank_that_stopped_first(tmp_path):
    for rank, step in ((0, 5), (1, 3), (2, 5)):
        heartbeat.Writer(tmp_path, rank).beat(step, "step")
    text = heartbeat.summary(heartbeat.read_all(tmp_path, 4))
    assert text.splitlines()[0].startswith("stopped first: rank(s) 1 at step 3")
    assert "no heartbeat from rank(s) 3" in text


def test_innermost_frame_of_the_main_thread():
    dump = (
        'Process 1: python\nPython v3.11\n\nThread 7 (idle): "Thread-1"\n    run (threading.py:1)\n'
        'Thread 5 (idle): "MainThread"\n    inject_stop_fault (harness/scalegate/worker/faults.py:20)\n    train (x.py:1)\n'
    )
    assert hang._innermost(dump) == "inject_stop_fault (harness/scalegate/worker/faults.py:20)"


def test_first_failure_picks_the_earliest_error_file(tmp_path):
    for rank, stamp in ((0, 20), (1, 10)):
        path = tmp_path / "logs" / "run" / "attempt_0" / str(rank) / "error.json"
        path.parent.mkdir(parents=True)
        path.write_text(
            json.dumps({"message": {"extraInfo": {"py_callstack": f"trace of {rank}", "timestamp": str(stamp)}}})
        )
    assert "local 1" in first_failure(tmp_path) and "trace of 1" in first_failure(tmp_path)


# --- optional packages skip only their own cases ----------------------------------------------------


_NEEDS_MISSING = StrategyCard(
    name="needs_missing", impl="scalegate.strategies.ddp:DDP", packages=("scalegate_no_such_package_xyz",)
)


def test_missing_optional_package_skips_with_the_reason():
    reason = availability.strategy_unavailable(_NEEDS_MISSING, Topology.parse("1x2"), "cpu", 2)
    assert reason == "needs_missing needs the optional package 'scalegate_no_such_package_xyz', which is not installed"


def test_only_the_strategy_missing_a_package_skips(monkeypatch):
    from scalegate.plan import hostinfo, matrix
    from scalegate.plan.options import from_argv

    monkeypatch.setitem(cards.CARDS, "needs_missing", _NEEDS_MISSING)
    argv = ["--scaling-models=cnn", "--scaling-topologies=1x2", "--scaling-steps=3", "--scaling-warmup=1"]
    opts = from_argv(argv).replace(strategies=("ddp", "needs_missing"))
    skips = {c.id: c.skip for c in matrix.build(opts, hostinfo.detect())}
    assert skips["ddp-cnn-1x2"] is None
    assert "optional package 'scalegate_no_such_package_xyz'" in skips["needs_missing-cnn-1x2"]


# --- nothing lost, nothing collides ---------------------------------------------------------------


def _update_one(args: tuple[str, int]) -> None:
    directory, i = args
    for j in range(5):
        baselines.update(
            Path(directory),
            "cpu-test",
            {"cpu": "test"},
            {f"ddp-cnn-1x{i}-{j}:tiny": {"efficiency": {"value": 0.5 + i / 100, "tolerance": 0.1}}},
        )


def test_concurrent_baseline_writers_never_lose_or_tear_an_update(tmp_path):
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_update_one, [(str(tmp_path), i) for i in range(8)])
    loaded = baselines.load(tmp_path, "cpu-test")
    assert len(loaded.cases) == 8 * 5  # every writer's every update survived
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_run_state_marks_complete_and_partial(tmp_path):
    run_status.mark_running(tmp_path)
    assert run_status.read(tmp_path) == "running"
    (tmp_path / "ddp-cnn-1x2.json").write_text("{}")
    run_status.mark_finished(tmp_path, 2, interrupted=True)
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["status"] == "partial" and data["cases_written"] == 1


@pytest.mark.slow
@pytest.mark.nightly  # nightly: two xdist workers, a whole session
def test_xdist_workers_never_collide(tmp_path, tagged):
    """Two xdist workers each measure the 1x1 reference: separate case directories, one run, no leftovers."""
    results = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if k not in ("SCALEGATE_RUN_ID", "PYTEST_ADDOPTS")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "scaling_tests"),
            "-p",
            "no:cacheprovider",
            "-q",
            "-n",
            "2",
            "--scaling-results-dir",
            str(results),
            "--scaling-strategies",
            "ddp",
            "--scaling-models",
            "cnn",
            "--scaling-topologies",
            "1x1,1x2",
            "--scaling-steps",
            "2",
            "--scaling-warmup",
            "1",
            "--scaling-timeout",
            "240",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
    )
    print(done.stdout[-2000:])
    run_dirs = [p for p in results.iterdir() if p.is_dir() and not p.is_symlink()]
    assert len(run_dirs) == 1, run_dirs
    run_dir = run_dirs[0]
    assert sorted(p.name for p in run_dir.glob("ddp-*.json")) == ["ddp-cnn-1x1.json", "ddp-cnn-1x2.json"]
    for path in run_dir.glob("*.json"):
        json.loads(path.read_text())  # whole, never torn
    assert run_status.read(run_dir) == "complete"
    spec_files = list(run_dir.glob("*/spec.json"))
    assert len(spec_files) == len({p.parent for p in spec_files})
    ports = [p for d in run_dir.iterdir() if d.is_dir() for p in _master_ports(d)]
    assert _leftovers(tagged, 0, ports) == []
    assert done.returncode == 0, done.stdout[-3000:]


def test_faulthandler_fallback_when_py_spy_cannot_attach(tmp_path, monkeypatch):
    """Without py-spy (or without ptrace) the rank's own faulthandler, registered on SIGUSR1, gives the stack."""
    code = (
        "import faulthandler, signal, sys, time\n"
        f"faulthandler.register(signal.SIGUSR1, file=open({str(heartbeat.stack_path(tmp_path, 0))!r}, 'w'), "
        "all_threads=True)\n"
        "def stuck_here():\n    print('ready', flush=True)\n    time.sleep(120)\n"
        "stuck_here()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        monkeypatch.setattr(hang, "py_spy", lambda: None)
        text = hang.stack(proc.pid, tmp_path, 0)
    finally:
        proc.kill()
        proc.wait()
    assert text.startswith("(faulthandler)") and "stuck_here" in text
    assert "stuck_here" in hang._innermost(text)


def test_a_faulthandler_dump_is_read_at_the_main_thread_not_the_first_one_listed():
    """Where py-spy cannot attach (no ptrace in the container), the rank's own faulthandler dump is read: it names
    threads only by ident, and a sampler thread often comes first."""
    dump = (
        "(faulthandler)\n"
        "Thread 0x00007f00000000aa (most recent call first):\n"
        '  File "/x/harness/scalegate/measure/memory.py", line 80 in _run\n\n'
        "Current thread 0x00007f00000000bb (most recent call first):\n"
        '  File "/x/torch/distributed/distributed_c10d.py", line 2800 in all_reduce\n'
        '  File "/x/train.py", line 10 in step\n'
    )
    assert "distributed_c10d" in hang._innermost(dump, 0x7F00000000BB)  # the heartbeat's main thread
    assert "distributed_c10d" in hang._innermost(dump)  # else the thread that took the signal
    assert "memory.py" in hang._innermost(dump, 0x7F00000000AA)
