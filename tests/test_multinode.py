"""Emulated nodes for real: two torchrun agents in two network namespaces over a capped link."""

from __future__ import annotations

import os

import psutil
import pytest

from scalegate import workloads
from scalegate.contract import units
from scalegate.contract.errors import LaunchError, SpecError
from scalegate.contract.faults import Faults
from scalegate.contract.results import CaseResult
from scalegate.contract.spec import CaseSpec
from scalegate.launch import Settings, netns
from scalegate.launch.emulated import EmulatedLauncher

NO_NETNS = netns.available()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# these tests count this process's namespaces and worker processes: the session's warm agent (tests/conftest.py)
# is closed first
pytestmark = pytest.mark.usefixtures("without_agents")


def spec_2x1(**changes) -> CaseSpec:
    preset = workloads.preset("cnn", "tiny")
    base = dict(
        strategy="ddp",
        model="cnn",
        preset="tiny",
        topology="2x1",
        micro_batch=preset.micro_batch,
        steps=3,
        warmup=1,
        timeout_s=240.0,
    )
    return CaseSpec.of(**{**base, **changes})


def run_emulated(spec: CaseSpec, case_dir, link_rate: str = "1gbit") -> CaseResult:
    return EmulatedLauncher(Settings(link_rate=link_rate)).run(spec, case_dir)


def mine() -> list[str]:
    return [n for n in netns.list_namespaces() if n.startswith(f"sg-{os.getpid()}-")]


def no_workers_left() -> bool:
    return not any(
        "scalegate.worker" in " ".join(p.info["cmdline"] or [])
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"] and str(os.getpid()) != p.pid and _descends_from_me(p)
    )


def _descends_from_me(proc: psutil.Process) -> bool:
    try:
        return any(parent.pid == os.getpid() for parent in proc.parents())
    except psutil.NoSuchProcess:
        return False


@pytest.mark.skipif(NO_NETNS is not None, reason=f"emulated nodes need network namespaces: {NO_NETNS}")
@pytest.mark.slow  # several launches, or one of 15 s or more: the rest tier
def test_two_emulated_nodes_train_over_a_shaped_link_and_leave_nothing(tmp_path):
    result = run_emulated(spec_2x1(), tmp_path / "case", link_rate="200mbit")
    launch = result.launch
    assert launch["launcher"] == "emulated" and launch["shaped"] is True and launch["rate"] == "200mbit"
    assert launch["addresses"] == ["198.18.0.1", "198.18.0.2"]
    assert {r.node_rank for r in result.ranks} == {0, 1}
    assert result.ranks[0].grad_check and result.throughput > 0
    if launch["nodes"]:  # the wire counter reads eth0 in each node: DDP sends ~ its gradient bytes
        grad_bytes = sum(p.numel() * 4 for p in workloads.get("cnn")("tiny", 0, None).build_model().parameters())
        for node in launch["nodes"]:
            assert 0.9 * grad_bytes < node["tx_bytes_per_step"] < 1.5 * grad_bytes, (node, grad_bytes)
    assert mine() == [], "the case's namespaces must be removed"
    assert no_workers_left()


@pytest.mark.skipif(NO_NETNS is not None, reason=f"emulated nodes need network namespaces: {NO_NETNS}")
def test_a_timed_out_case_kills_every_agent_and_removes_its_namespaces(tmp_path):
    with pytest.raises(LaunchError) as info:  # injected fault: far too short a timeout
        run_emulated(spec_2x1(timeout_s=3.0), tmp_path / "case", link_rate="1gbit")
    assert "timed out after 3s" in str(info.value) and "HINT" in str(info.value)
    assert mine() == []
    assert no_workers_left()


@pytest.mark.slow
@pytest.mark.skipif(NO_NETNS is not None, reason=f"emulated nodes need network namespaces: {NO_NETNS}")
@pytest.mark.nightly  # nightly: a 30 s hang; the default launcher's hang is in the default tier
def test_a_hung_rank_on_emulated_nodes_is_named_before_everything_is_killed(tmp_path):
    with pytest.raises(LaunchError) as info:  # injected fault: rank 1 (node 1) stops at step 2
        run_emulated(
            spec_2x1(timeout_s=30.0, faults=Faults(hang_rank=1, hang_step=2)), tmp_path / "case", link_rate="1gbit"
        )
    message = str(info.value)
    assert "timed out after 30s" in message and "rank 1 is stuck" in message, message
    assert mine() == []
    assert no_workers_left()


@pytest.mark.skipif(NO_NETNS is not None, reason=f"emulated nodes need network namespaces: {NO_NETNS}")
def test_ctrl_c_during_a_case_removes_its_namespaces_and_processes(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    code = (
        "import sys; from pathlib import Path; from tests.test_multinode import run_emulated, spec_2x1;"
        "run_emulated(spec_2x1(), Path(sys.argv[1]))"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "case")], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(_of(child.pid)) < 3:  # hub + two nodes
            time.sleep(0.2)
        assert len(_of(child.pid)) == 3, netns.list_namespaces()
        time.sleep(2)  # agents started inside them
        child.send_signal(signal.SIGINT)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert _of(child.pid) == []
    leftover = [p.pid for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert leftover == []


def _of(pid: int) -> list[str]:
    return [n for n in netns.list_namespaces() if n.startswith(f"sg-{pid}-")]


def test_without_namespaces_nodes_run_on_loopback_and_say_links_not_shaped(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALEGATE_NO_NETNS", "1")  # what a non-root user or a box without iproute2 gets
    result = run_emulated(spec_2x1(), tmp_path / "case")
    assert result.launch["shaped"] is False
    assert result.launch["note"].startswith("links not shaped: network namespaces disabled")
    assert {r.node_rank for r in result.ranks} == {0, 1}


@pytest.mark.parametrize("text", ["1gbit", "200mbit", "2.5gbit", "100kbit"])
def test_link_rates_in_tc_syntax_parse(text):
    assert units.parse_rate(text) > 0


@pytest.mark.parametrize("text", ["fast", "1 gbit", "0mbit", "100MB", ""])
def test_a_bad_link_rate_names_the_option(text):
    with pytest.raises(SpecError) as info:
        units.parse_rate(text)
    assert "--scaling-link-rate" in str(info.value) and "HINT" in str(info.value)
