"""The A/B gate across nodes, and a gate stopped by its cluster (gate/nodes.py, gate/life.py).

Two gate processes on this machine play two nodes of a SLURM step (its environment, one CPU per node; the nodes'
sessions are each their node's torchrun agent, as under ``srun``): node 0 leads, node 1 follows over tcp. The real
two-node SLURM cluster (slurm/two-node-cluster.sh) runs the same command in the nightly tier. Every test here also
checks that nothing is left behind: processes, the base worktrees, registered worktrees.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.repos import base_trees_left, checkout_repo, commit_change, slow_commit

pytestmark = pytest.mark.slow

CASE = [
    "-k",
    "ddp-cnn-2x1 or single-cnn-1x1",
    "--scaling-models",
    "cnn",
    "--scaling-strategies",
    "single,ddp",
    "--scaling-topologies",
    "1x1,2x1",
    "--scaling-warmup",
    "2",
]


def _step_env(job: str, node: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PYTEST_", "SCALEGATE_RUN_ID"))}
    return {
        **env,
        "SLURM_JOB_ID": job,
        "SLURM_STEP_ID": "0",
        "SLURM_NODEID": str(node),
        "SLURM_JOB_NODELIST": "localhost,localhost",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_CPUS_ON_NODE": "1",
        "SCALEGATE_ROUND_GAP_S": "1",
    }


def _nodes(repo: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> list[subprocess.Popen]:
    job = str(800000 + (os.getpid() + int(time.time())) % 90000)
    cmd = [sys.executable, "-m", "scalegate", "gate", "--results-dir", str(tmp_path / "results"), *args]
    return [
        subprocess.Popen(
            [*cmd, "--markdown", str(tmp_path / f"gate{node}.md")],
            cwd=repo,
            env={**_step_env(job, node), **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]


def _finish(nodes: list[subprocess.Popen], timeout_s: float) -> list[str]:
    """Both nodes' output; a node still running past ``timeout_s`` is killed, so no test leaves one behind."""
    try:
        return [p.communicate(timeout=timeout_s)[0] for p in nodes]
    finally:
        for p in nodes:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=60)


def _left_behind(repo: Path) -> list[str]:
    """Worker processes of this repository, or base worktrees still registered."""
    procs = subprocess.run(["pgrep", "-af", str(repo)], capture_output=True, text=True).stdout.splitlines()
    procs = [p for p in procs if "pgrep" not in p]
    return procs + base_trees_left(repo)


@pytest.mark.nightly  # ~3 min: the two-node path's verdict; the default tier runs the emulated 2x1 duet (test_gate.py)
def test_a_gate_on_two_nodes_pairs_across_them_and_fails_a_slower_head(tmp_path):
    """The head's DDP step waits 25 ms on each node (a synchronous check): node 0 judges, the table says both nodes
    took part, and node 1 exits with the gate."""
    repo = tmp_path / "repo"
    checkout_repo(repo)
    commit_change(repo, "head: a synchronous check in DDP's step", slow_commit(25))
    nodes = _nodes(repo, tmp_path, "--base", "HEAD~1", *CASE, "--scaling-steps", "20", "--scaling-max-launches", "4")
    outs = _finish(nodes, 900)
    assert [p.returncode for p in nodes] == [1, 0], "\n---\n".join(o[-3000:] for o in outs)
    table = (tmp_path / "gate0.md").read_text()
    assert "❌ regressed" in table and "`ddp-cnn-2x1:tiny`" in table and "duet against the base commit" in table
    assert "Cost: " in table and "on 2 node(s) x 1 CPU cores" in table
    assert not (tmp_path / "gate1.md").exists()  # node 0 alone judges and writes
    assert "gate: round 1 done" in outs[0] and "gate: round" not in outs[1]
    [run] = (tmp_path / "results").glob("gate-slurm-*")
    assert (run / "round-01" / "head" / "session-node1.log").is_file()  # node 1 ran its sessions of every round
    assert not list(run.glob("base-tree*")) and not _left_behind(repo)


@pytest.mark.nightly  # ~2 min
def test_a_node_whose_gate_is_killed_mid_round_stops_the_gate_naming_it(tmp_path):
    repo = tmp_path / "repo"
    checkout_repo(repo)
    nodes = _nodes(repo, tmp_path, "--base", "HEAD", *CASE, "--scaling-steps", "400")
    run = tmp_path / "results"
    deadline = time.monotonic() + 300
    while not list(run.glob("gate-slurm-*/round-01/*/session-node1.log")) and time.monotonic() < deadline:
        time.sleep(1)
    time.sleep(5)  # node 1's sessions are running their agents
    nodes[1].send_signal(signal.SIGKILL)
    out = _finish(nodes, 300)[0]
    assert nodes[0].returncode == 2, out[-3000:]
    assert "node 1's gate process ended in round 1: the gate stopped" in out and "Traceback" not in out
    time.sleep(3)  # node 1's sessions end with their gate (PR_SET_PDEATHSIG)
    assert not _left_behind(repo)


def test_a_gate_stopped_by_sigterm_ends_its_sessions_and_removes_its_base_worktree(tmp_path):
    """scancel and a CI timeout send SIGTERM; Ctrl-C sends SIGINT: either ends the gate in one line, its sessions,
    ranks and base worktree gone."""
    repo = tmp_path / "repo"
    checkout_repo(repo)
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        gate = subprocess.Popen(
            [sys.executable, "-m", "scalegate", "gate", "--results-dir", str(tmp_path / sig.name), "--base", "HEAD"]
            + ["-k", "(ddp-cnn-1x2 or single-cnn-1x1) and not parity", "--scaling-strategies", "single,ddp"]
            + ["--scaling-steps", "400"],
            cwd=repo,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 300
        while not list((tmp_path / sig.name).glob("gate-*/round-01/head/session.log")) and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(8)  # mid-round: the sessions' ranks are stepping
        gate.send_signal(sig)
        out, err = gate.communicate(timeout=120)
        assert gate.returncode == code, out[-2000:] + err[-2000:]
        assert f"gate: stopped by {sig.name} in round 1; its sessions, ranks and base worktree were removed" in err
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
        assert not list((tmp_path / sig.name).glob("gate-*/base-tree*")) and not _left_behind(repo)


@pytest.mark.nightly  # ~2 min
def test_a_rank_that_hangs_on_node_1_stops_the_gate_naming_node_side_and_rank(tmp_path):
    """Rank 1 (node 1) of the 2x1 job hangs at step 4 on both sides: the coordinator's turn limit (shortened here)
    stops both jobs, naming the side and every rank still in the turn with its node (rank 0 waits in the step's first
    collective, which rank 1 never joins), the last step each finished, and rank 1 as the one stuck outside torch
    (its own ``where``); both nodes end their sessions."""
    repo = tmp_path / "repo"
    checkout_repo(repo)
    fault = ["--scaling-inject-fault", "hang:rank=1,step=4", "--scaling-timeout", "60"]
    shortened = {"SCALEGATE_DUET_TURN_S": "15", "SCALEGATE_GATE_ROUND_GRACE_S": "10"}
    nodes = _nodes(repo, tmp_path, "--base", "HEAD", *CASE, "--scaling-steps", "10", *fault, env=shortened)
    outs = _finish(nodes, 600)
    assert nodes[0].returncode == 1, outs[0][-3000:]
    table = (tmp_path / "gate0.md").read_text()
    said = r"the (base|head) side's job ddp-cnn-2x1 did not give its turn back in 15 s: rank\(s\) 0 \(node 0\), 1 \(node 1\)"
    assert re.search(said + " still in the turn; last steps done: rank 0 3, rank 1 3", table), table[-3000:]
    # rank 0 waits inside torch for rank 1, which its own frame names as the one stuck (the injected hang)
    assert re.search(r"; rank 1 \(node 1\) is stuck outside torch, in \S+ \(\S+faults\.py:\d+\)", table), table[-3000:]
    assert "rank 0 (node 0) is stuck" not in table
    assert "❌ failed" in table
    assert not _left_behind(repo)
