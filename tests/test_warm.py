"""The warm launcher is as trustworthy as a cold torchrun: same correctness and bytes on the wire, the
same reports of crashes and hangs, nothing left behind however a launch or its owner ends, and a cold
launch (said so in the result) when the warm agent cannot start.

Real launches of ddp-cnn-1x2 (tiny preset, a few steps) on one pool per module, no mocks except the
module list that makes a server fail to start. Leftovers are found by a token in the environment of
every process the pools start (server, forkserver, ranks) and by this process's namespace prefix.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import psutil
import pytest

from scalegate import workloads
from scalegate.checks import agreement
from scalegate.contract import cards, heartbeat
from scalegate.contract.errors import LaunchError
from scalegate.contract.faults import Faults
from scalegate.contract.spec import CaseSpec
from scalegate.contract.topology import Topology
from scalegate.figures import resources
from scalegate.launch import hang, netns, run_case, warm
from scalegate.launch.base import Job
from scalegate.launch.wirecount import ENV_DISABLE
from scalegate.plan import availability

ROOT = Path(__file__).resolve().parents[1]
TOKEN_ENV = "SCALEGATE_TEST_WARM_TOKEN"
HANG_TIMEOUT_S = 20.0
GONE_WITHIN_S = 60.0  # a bound on waiting for the kernel to reap, not a timing under test

needs_netns = pytest.mark.skipif(netns.available() is not None, reason=f"no network namespaces: {netns.available()}")
# leftovers include this process's namespaces: the session's warm agent (tests/conftest.py) is closed first
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("without_agents")]


def spec(strategy: str = "ddp", timeout_s: float = 240.0, **faults) -> CaseSpec:
    return CaseSpec.of(
        strategy=strategy,
        model="cnn",
        preset="tiny",
        topology="1x2",
        micro_batch=workloads.preset("cnn", "tiny").micro_batch,
        steps=5,
        warmup=1,
        timeout_s=timeout_s,
        faults=Faults(**faults),
    )


@pytest.fixture(scope="module")
def token() -> str:
    return uuid.uuid4().hex


def new_pool(token: str, log_dir: Path) -> warm.AgentPool:
    return warm.AgentPool(env={**warm.server_environment(), TOKEN_ENV: token}, log_dir=log_dir)


@pytest.fixture(scope="module")
def pool(token, tmp_path_factory):
    made = new_pool(token, tmp_path_factory.mktemp("agents"))
    yield made
    made.close()


def leftovers(token: str, creator_pid: int | None = None, namespaces: bool = True) -> list[str]:
    """Live processes carrying ``token`` (server, forkserver, ranks), and namespaces ``creator_pid`` made."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.environ().get(TOKEN_ENV) == token:
                found.append(f"process {proc.pid}: {' '.join(proc.info['cmdline'] or [])[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    if namespaces:
        found += [f"namespace {n}" for n in netns.list_namespaces(f"{netns.PREFIX}{creator_pid or os.getpid()}-")]
    return found


def eventually_none(token: str, creator_pid: int | None = None, namespaces: bool = True) -> list[str]:
    """Leftovers once the kernel has had time to deliver death signals and reap (empty when clean)."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while (found := leftovers(token, creator_pid, namespaces)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def forkserver_cmdline(pool: warm.AgentPool, wait_s: float = 5.0) -> str:
    """The command line of the server's forkserver: it lists the modules every rank is forked with. Looked for under
    the server's whole tree (a namespace's exec wrapper may sit between) for up to ``wait_s``: on a loaded machine the
    forkserver's process may not be listed yet the moment the server says it is ready."""
    assert pool.server is not None
    deadline = time.monotonic() + wait_s
    while True:
        for child in psutil.Process(pool.server.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                line = " ".join(child.cmdline())
                if "multiprocessing.forkserver" in line:
                    return line
        if time.monotonic() >= deadline:
            raise AssertionError("the server has no forkserver")
        time.sleep(0.1)


# --- the same measurements as a cold launch --------------------------------------------------------


@needs_netns
@pytest.mark.nightly  # nightly: bytes: tests/test_comm.py (fast tier)
def test_warm_launch_checks_gradients_and_counts_the_bytes_a_cold_launch_counts(pool, tmp_path):
    hot = run_case(spec(), tmp_path / "warm", agents=pool)
    cold = run_case(spec(), tmp_path / "cold")
    assert hot.launch == {"launcher": "warm"} and cold.launch == {"launcher": "torchrun"}
    assert agreement.agreement(hot) is None and agreement.loss_curve(hot) is None
    sent, expected = resources.wire(hot), resources.wire(cold)
    assert sent["source"] == expected["source"] == "netns:lo"  # both exact loopback counts
    assert abs(sent["bytes_per_step"] / expected["bytes_per_step"] - 1) < 0.01, (sent, expected)


@pytest.mark.nightly  # nightly: the tests' own launches go through one warm agent
def test_a_server_serves_launches_in_a_row_and_restarts_for_other_modules(pool, tmp_path):
    first = run_case(spec(), tmp_path / "one", agents=pool)
    pid = pool.server.proc.pid
    second = run_case(spec(), tmp_path / "two", agents=pool)
    assert pool.server.proc.pid == pid  # reused
    assert first.launch["launcher"] == second.launch["launcher"] == "warm"
    assert "deepspeed" not in forkserver_cmdline(pool)
    if availability.strategy_unavailable(cards.card("deepspeed-zero2"), Topology.parse("1x2"), "cpu", 2):
        pytest.skip("deepspeed-zero2 cannot run here")
    zero2 = run_case(spec("deepspeed-zero2"), tmp_path / "zero2", agents=pool)
    assert zero2.launch["launcher"] == "warm" and pool.server.proc.pid != pid
    assert pool.server.key.modules == {"deepspeed"} and "'deepspeed'" in forkserver_cmdline(pool)
    zero2_pid = pool.server.proc.pid
    run_case(spec(), tmp_path / "three", agents=pool)
    # a DDP rank's memory must not depend on what ran before it: DeepSpeed is gone from its forkserver
    assert pool.server.proc.pid not in (pid, zero2_pid) and pool.server.key.modules == frozenset()
    assert "deepspeed" not in forkserver_cmdline(pool)


# --- faults: reported as on the cold path (tests/test_reliability.py) -------------------------------


def test_crash_reports_the_first_failing_ranks_traceback_and_the_server_lives_on(pool, tmp_path, token):
    run_case(spec(), tmp_path / "before", agents=pool)
    pid = pool.server.proc.pid
    with pytest.raises(LaunchError) as info:
        run_case(spec(crash_rank=1, crash_step=2), tmp_path / "case", agents=pool)
    message = info.value.message
    assert "ddp-cnn-1x2 failed (torchrun exit code 1)" in message
    assert "first failing rank (local 1) traceback" in message
    assert "RuntimeError: injected crash on rank 1 at step 2" in message
    assert re.search(r"rank logs:\n.*/0/stderr\.log", message)
    assert "Traceback" not in message.split("traceback")[0]  # our message, not a crash of ours
    # the case failed, not the agent: same server, and no rank of the failed launch is left
    assert pool.server.alive() and pool.server.proc.pid == pid
    assert hang.worker_pids(pid) == []


@pytest.mark.parametrize(
    "fault, says",
    [
        ({"no_result_rank": 0}, "rank0.json was not written"),
        ({"bad_result_rank": 1}, "rank1.json is malformed"),
    ],
)
def test_exit_zero_without_a_usable_result_is_a_clear_failure(pool, tmp_path, fault, says):
    with pytest.raises(LaunchError) as info:
        run_case(spec(**fault), tmp_path / "case", agents=pool)
    assert "every rank exited 0, but rank result" in info.value.message and says in info.value.message
    assert "KeyError" not in info.value.message


def test_hang_is_diagnosed_then_the_tree_is_killed_and_the_next_launch_starts_afresh(pool, tmp_path, token):
    run_case(spec(), tmp_path / "before", agents=pool)
    pid = pool.server.proc.pid
    with pytest.raises(LaunchError) as info:
        run_case(spec(timeout_s=HANG_TIMEOUT_S, hang_rank=1, hang_step=2), tmp_path / "case", agents=pool)
    message = info.value.message
    assert f"ddp-cnn-1x2 hung: no result after {HANG_TIMEOUT_S:.0f}s" in message
    assert "rank 1 is stuck outside torch, in inject_stop_fault" in message  # named from its stack
    assert "rank 1: step 2 (step)" in message  # and from its heartbeat
    stacks = (tmp_path / "case" / "stacks.txt").read_text()
    assert "--- rank 0" in stacks and "--- rank 1" in stacks
    assert pool.server is None and eventually_none(token) == []  # server, forkserver, ranks, namespace
    after = run_case(spec(), tmp_path / "after", agents=pool)
    assert after.launch["launcher"] == "warm" and pool.server.proc.pid != pid


def wait_until_hung(out_dir: Path, alive: Callable[[], bool] = lambda: True) -> None:
    """Until both ranks of a launch with ``hang_rank=1, hang_step=2`` are at step 2."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and alive():
        beats = [heartbeat.read(out_dir, r) for r in (0, 1)]
        if all(b is not None and b.step >= 2 for b in beats):
            return
        time.sleep(0.1)


def test_ctrl_c_while_waiting_kills_the_whole_tree(pool, tmp_path, token):
    def interrupt_when_hung() -> None:
        wait_until_hung(tmp_path / "case" / "ranks")
        os.kill(os.getpid(), signal.SIGINT)

    # Ctrl-C as an interactive shell delivers it: a pytest started as a background job of a non-interactive shell
    # (`bash .ci/run &`) inherits SIGINT ignored, and the interrupt would never come (the case then ran to its
    # 600 s timeout in a CI rehearsal started that way)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_when_hung, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            run_case(spec(timeout_s=120, hang_rank=1, hang_step=2), tmp_path / "case", agents=pool)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert pool.server is None and eventually_none(token) == []


def test_a_server_killed_mid_launch_is_reported_and_its_ranks_do_not_survive(pool, tmp_path, token):
    """The OOM killer picks the agent: the launch fails with the agent named, and its orphaned forkserver
    and ranks (no longer the server's descendants) are killed too."""
    run_case(spec(), tmp_path / "before", agents=pool)
    server = pool.server.proc.pid

    def kill_server_when_hung() -> None:
        wait_until_hung(tmp_path / "case" / "ranks")
        os.kill(server, signal.SIGKILL)

    threading.Thread(target=kill_server_when_hung, daemon=True).start()
    with pytest.raises(LaunchError) as info:
        run_case(spec(timeout_s=600, hang_rank=1, hang_step=2), tmp_path / "case", agents=pool)
    assert info.value.message.startswith(
        "ddp-cnn-1x2: the warm torchrun agent exited during the launch "
        "(killed by signal 9), so every process of the job was killed; its log: "
    )
    assert "--scaling-launcher torchrun" in info.value.hint
    assert pool.server is None and eventually_none(token) == []


def script_case(where: Path, source: str) -> CaseSpec:
    """A team's script ``train.py`` (``source``) in ``where``, declared for ddp on 1x2."""
    from scalegate.plan import script as plan_script
    from tests.test_scripts import _options

    (where / "train.py").write_text(source)
    decl = plan_script.declared(("train.py",), {"strategies": ["ddp"]}, where, "t")
    return plan_script.spec_for(decl, "ddp", Topology.parse("1x2"), _options(), where, "t")


def test_a_scripts_fresh_ranks_die_with_a_server_killed_from_outside(pool, tmp_path):
    """A team's script's ranks start as fresh interpreters in sessions of their own (torchelastic's), so the pool's
    kill of the dead server's tree no longer reaches them: they die of their own death signal (worker/entry.py
    ``die_with``). Without it they slept on."""
    case = script_case(tmp_path, "import time\ntime.sleep(600)\n")
    server = pool._server_for(case).proc.pid  # the script's own server (fresh-only), started before the launch
    ranks: list[psutil.Process] = []

    def kill_server_when_the_ranks_sleep() -> None:
        deadline = time.monotonic() + 120
        while len(pids := hang.worker_pids(server)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        ranks.extend(psutil.Process(pid) for pid in pids)
        os.kill(server, signal.SIGKILL)

    threading.Thread(target=kill_server_when_the_ranks_sleep, daemon=True).start()
    with pytest.raises(LaunchError, match="the warm torchrun agent exited during the launch"):
        run_case(case, tmp_path / "case", agents=pool)
    assert len(ranks) == 2
    gone, alive = psutil.wait_procs(ranks, timeout=GONE_WITHIN_S)
    for rank in alive:  # a failing run leaves nothing behind either
        rank.kill()
    assert alive == [], f"ranks {[p.pid for p in alive]} outlived their server"


def test_a_scripts_server_imports_torchruns_agent_alone_and_starts_no_forkserver(pool, tmp_path):
    """A team's script's ranks start fresh, so its server preloads nothing and starts no forkserver (their imports
    ran beside the session's first ranks for nothing); a built-in case after it gets its own, preloaded server."""
    from scalegate.worker import agent

    case = script_case(tmp_path, "print('never launched here')\n")
    server = pool._server_for(case)
    assert server.key.fresh
    with pytest.raises(AssertionError, match="no forkserver"):
        forkserver_cmdline(pool, wait_s=0.0)
    ready = [line for line in server.log.read_text().splitlines() if line.startswith("agentserver ready:")][-1]
    assert json.loads(ready.split(":", 1)[1])["modules"] == list(agent.FRESH_PRELOAD)
    built_in = pool._server_for(spec())
    assert built_in.proc.pid != server.proc.pid and not built_in.key.fresh
    assert "'torch'" in forkserver_cmdline(pool)


@pytest.mark.parametrize("victims", ["owner", "owner and server"])
@pytest.mark.nightly  # nightly: the server killed mid-launch stays in the default tier
def test_sigkill_of_the_owner_takes_server_forkserver_and_ranks_down(tmp_path, victims):
    """pytest SIGKILLed mid-launch: the server's death signal (its agent stops the ranks), or with the server
    SIGKILLed too, the forkserver's exit and the ranks' own death signal, end everything. The namespace is
    left for the next pool's cleanup_stale()."""
    token = uuid.uuid4().hex
    case_dir = tmp_path / "case"
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(ROOT / "tests")!r})
        from pathlib import Path
        from test_warm import spec
        from scalegate.launch import run_case, warm
        run_case(spec(timeout_s=600, hang_rank=1, hang_step=2), Path({str(case_dir)!r}),
                 agents=warm.AgentPool(log_dir=Path({str(tmp_path)!r})))
    """)
    owner = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, TOKEN_ENV: token})
    try:
        wait_until_hung(case_dir / "ranks", alive=lambda: owner.poll() is None)
        assert owner.poll() is None, "the owner ended before its launch hung"
        servers = [p for p in psutil.Process(owner.pid).children() if "scalegate.worker.agent" in p.cmdline()]
        assert len(servers) == 1 and len(hang.worker_pids(servers[0].pid)) == 2
        if victims == "owner and server":  # the server first: its death signal must not stop the ranks for it
            servers[0].kill()
        owner.kill()
        owner.wait()
        assert eventually_none(token, owner.pid, namespaces=False) == []
    finally:
        if owner.poll() is None:
            owner.kill()
        netns.cleanup_stale()  # the namespace of the killed owner


# --- the pool's own life ----------------------------------------------------------------------------


@pytest.mark.nightly  # nightly: every warm test checks leftovers
def test_close_leaves_nothing(tmp_path):
    token = uuid.uuid4().hex
    others = set(leftovers(token))  # the namespace of a pool alive around this test (the module's), not this one's
    mine = new_pool(token, tmp_path)
    try:
        run_case(spec(), tmp_path / "case", agents=mine)
        assert set(leftovers(token)) - others  # server and forkserver wait for the next launch
    finally:
        mine.close()
    assert set(leftovers(token)) - others == set()  # close() waits for its server's tree and deletes its namespace


@pytest.mark.nightly  # nightly: falls back to cold launches
def test_a_server_that_cannot_start_says_why_and_its_cases_launch_cold(tmp_path, monkeypatch):
    token = uuid.uuid4().hex
    others = set(leftovers(token))  # the namespace of a pool alive around this test (the module's), not this one's
    broken = new_pool(token, tmp_path)
    monkeypatch.setattr(warm, "modules_for", lambda _spec: frozenset({"scalegate_no_such_module"}))
    job = Job(
        spec=spec(), spec_path=tmp_path / "spec.json", out_dir=tmp_path / "out", log_dir=tmp_path / "logs", port=29500
    )
    args = warm.WarmLauncher().command(job)
    with pytest.raises(warm.AgentUnavailable) as info:
        broken.run(spec(), args, log_path=tmp_path / "launcher.log", timeout_s=60, env={})
    why = info.value.message
    assert why.startswith(
        "the warm torchrun agent did not start: ModuleNotFoundError: "
        "No module named 'scalegate_no_such_module' (its log: "
    ), why
    assert "Traceback" not in why and "--scaling-launcher torchrun" in info.value.hint
    assert "HINT: " in str(info.value)
    assert broken.server is None and set(leftovers(token)) - others == set()
    # run_case launches the case cold instead, and says so; the pool does not try that server again
    result = run_case(spec(), tmp_path / "case", agents=broken)
    assert result.launch == {"launcher": "torchrun", "note": f"launched with a cold torchrun: {why}"}
    assert agreement.agreement(result) is None
    log = (tmp_path / f"agentserver-{os.getpid()}.log").read_text()
    assert log.count("No module named 'scalegate_no_such_module'") == 1
    broken.close()
    assert set(leftovers(token)) - others == set()


@pytest.mark.nightly  # nightly: bytes unavailable: tests/test_comm.py (fast tier)
def test_without_a_namespace_the_warm_launch_says_why_bytes_are_unavailable(pool, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_DISABLE, "1")
    result = run_case(spec(), tmp_path / "case", agents=pool)
    assert result.launch["launcher"] == "warm"
    wire = resources.wire(result)
    assert wire["bytes_per_step"] is None and wire["source"] == "unavailable"
    assert wire["unavailable"] == f"{ENV_DISABLE}=1: the job ran in the root network namespace"
    assert netns.list_namespaces(f"{netns.PREFIX}{os.getpid()}-") == []  # this server runs in the root namespace
