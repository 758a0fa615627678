"""SLURM agent mode: pure parsing and detection, then the real thing on the local cluster if it is up."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from scalegate.contract.errors import SpecError
from scalegate.contract.topology import Topology
from scalegate.launch import Settings, slurm
from scalegate.plan import cluster
from tests.repos import base_trees_left, outside_slurm_env, srun_gate_command

ROOT = Path(__file__).resolve().parents[1]

STEP = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "0",
    "SLURM_NODEID": "1",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_CPUS_ON_NODE": "16",
    "SLURM_GPUS_ON_NODE": "4",
}


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("vm", ["vm"]),
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("gpu[007-009,012],login-2", ["gpu007", "gpu008", "gpu009", "gpu012", "login-2"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("a[9-10]x", ["a9x", "a10x"]),
    ],
)
def test_nodelists_expand_like_scontrol_show_hostnames(text, hosts):
    assert cluster.expand_nodelist(text) == hosts


@pytest.mark.parametrize("text", ["", "node[1-", "node[a-b]", "node]1["])
def test_a_malformed_nodelist_is_an_error_with_a_hint(text):
    with pytest.raises(SpecError) as info:
        cluster.expand_nodelist(text)
    assert "HINT" in str(info.value)


def test_the_port_is_the_same_everywhere_differs_per_case_and_avoids_ephemeral_ports():
    a = slurm.case_port("4242", "0", "ddp-cnn-2x1")
    assert a == slurm.case_port("4242", "0", "ddp-cnn-2x1")
    ports = {slurm.case_port("4242", "0", f"ddp-cnn-{n}x1") for n in range(1, 40)}
    assert len(ports) >= 38 and all(12000 <= p < 28000 for p in ports | {a})


def test_detection_reads_the_step_environment():
    env = cluster.detect(STEP)
    assert env is not None and env.node_id == 1 and env.nodes == ("gpu07", "gpu08") and env.master == "gpu07"
    assert env.cpus_on_node == 16 and env.gpus_on_node == 4 and env.run_id == "slurm-4242.0"
    assert cluster.detect({}) is None
    assert cluster.detect({k: v for k, v in STEP.items() if k != "SLURM_STEP_ID"}) is None  # batch script, not srun


def test_more_than_one_task_per_node_is_refused_with_a_hint():
    with pytest.raises(SpecError) as info:
        cluster.detect({**STEP, "SLURM_STEP_NUM_TASKS": "8"})
    assert "--ntasks-per-node=1" in str(info.value)


def test_cases_beyond_the_allocation_skip_with_the_same_reason_on_every_node():
    envs = [cluster.detect({**STEP, "SLURM_NODEID": str(i)}) for i in range(2)]
    reasons = {cluster.skip_reason(Topology.parse("4x1"), "cpu", e) for e in envs}
    assert reasons == {"topology 4x1 needs 4 nodes, the SLURM allocation has 2"}
    assert cluster.skip_reason(Topology.parse("2x8"), "cuda", envs[0]).startswith("topology 2x8 needs 8 processes")
    assert cluster.skip_reason(Topology.parse("2x4"), "cuda", envs[0]) is None
    assert cluster.skip_reason(Topology.parse("9x9"), "cpu", None) is None  # not under srun: not SLURM's call


def test_the_agent_command_is_a_static_rendezvous_on_the_first_host(tmp_path):
    from scalegate import workloads
    from scalegate.contract.spec import CaseSpec

    spec = CaseSpec(
        strategy="ddp",
        model="cnn",
        preset="tiny",
        topology="2x4",
        micro_batch=workloads.preset("cnn", "tiny").micro_batch,
    )
    launcher = slurm.SlurmLauncher(Settings(slurm=cluster.detect(STEP)))
    argv = launcher.command(launcher.job(spec, tmp_path / "spec.json", tmp_path / "out", tmp_path / "logs"))
    joined = " ".join(argv)
    assert "--master-addr gpu07" in joined and "--node-rank 1" in joined and "--nnodes 2" in joined
    assert f"--master-port {slurm.case_port('4242', '0', 'ddp-cnn-2x4')}" in joined
    assert "--nproc-per-node 4" in joined and "--rdzv-conf" in argv


def _cluster_up() -> str | None:
    if shutil.which("sinfo") is None or shutil.which("srun") is None:
        return "SLURM is not installed (run slurm/local-cluster.sh start)"
    done = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
    if done.returncode != 0 or not any(s.startswith(("idle", "mix", "alloc")) for s in done.stdout.split()):
        return f"no SLURM node is up (sinfo: {done.stdout.strip() or done.stderr.strip()}); run slurm/local-cluster.sh start"
    return None


@pytest.mark.slow
@pytest.mark.nightly  # nightly: CI runs srun pytest itself (.ci/run); two agent nodes stay in the default tier
def test_srun_pytest_runs_a_ddp_case_as_the_node_agent(tmp_path):
    reason = _cluster_up()
    if reason:
        pytest.skip(reason)
    env = outside_slurm_env()
    cmd = [
        "srun",
        "-N1",
        "--time=10",
        str(ROOT / ".venv/bin/pytest"),
        "scaling_tests/test_scaling.py",
        "-p",
        "no:cacheprovider",
        "-k",
        "ddp and cnn and 1x2",
        "--scaling-models",
        "cnn",
        "--scaling-strategies",
        "ddp",
        "--scaling-topologies",
        "1x2",
        "--scaling-steps",
        "3",
        "--scaling-warmup",
        "1",
        "--scaling-results-dir",
        str(tmp_path / "results"),
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "ddp-cnn-1x2" in out and " passed" in out and " failed" not in out
    runs = list((tmp_path / "results").glob("slurm-*"))
    assert len(runs) == 1 and (runs[0] / "ddp-cnn-1x2.json").exists(), out[-2000:]
    assert (runs[0] / "ddp-cnn-1x2" / "launcher.log").exists()  # single-node cases: the local launcher


@pytest.mark.slow
def test_two_agent_nodes_run_a_2x1_case_and_only_node_0_reports(tmp_path):
    """Agent mode end to end without srun: two pytest 'nodes' on this machine with a step's environment."""
    job = str(900000 + os.getpid() % 90000)
    base = outside_slurm_env()
    base.update(
        SLURM_JOB_ID=job,
        SLURM_STEP_ID="0",
        SLURM_JOB_NODELIST="localhost,localhost",
        SLURM_STEP_NUM_TASKS="2",
        SLURM_STEP_NUM_NODES="2",
        SLURM_CPUS_ON_NODE="1",
    )
    cmd = [
        str(ROOT / ".venv/bin/pytest"),
        "scaling_tests/test_scaling.py",
        "-p",
        "no:cacheprovider",
        "--scaling-models",
        "cnn",
        "--scaling-strategies",
        "ddp",
        "--scaling-topologies",
        "1x2,2x1",
        "--scaling-steps",
        "3",
        "--scaling-warmup",
        "1",
        "--scaling-results-dir",
        str(tmp_path / "results"),
    ]
    nodes = [
        subprocess.Popen(
            cmd,
            cwd=ROOT,
            env={**base, "SLURM_NODEID": str(i)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    try:
        outs = [p.communicate(timeout=500)[0] for p in nodes]
    finally:
        for p in nodes:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in nodes] == [0, 0], "\n---\n".join(o[-2500:] for o in outs)
    for out in outs:  # 1x2 needs 2 processes per node and the 'allocation' has 1 CPU per node: same skip
        assert "topology 1x2 needs 2 processes per node, the allocation has 1 CPUs" in out or "1 skipped" in out
    assert "scaling results" in outs[0] and "scaling results" not in outs[1]
    run = tmp_path / "results" / f"slurm-{job}.0"
    import json

    written = json.loads((run / "ddp-cnn-2x1.json").read_text())
    assert written["result"]["launch"]["launcher"] == "slurm"
    assert {r["node_rank"] for r in written["result"]["ranks"]} == {0, 1}
    assert "ddp-cnn-2x1.json" in [p.name for p in run.glob("*.json")]
    assert (run / "ddp-cnn-2x1" / "node1" / "launcher.log").exists()


def _srun_gate(script: str, repo: Path, base: str, out: Path) -> subprocess.CompletedProcess:
    command = srun_gate_command(script, repo, base, out)
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=outside_slurm_env())


@pytest.mark.slow
@pytest.mark.nightly  # two whole A/B gates across two real SLURM nodes: ~3-6 minutes each here
def test_the_ab_gate_across_two_slurm_nodes_passes_a_commit_against_itself_and_fails_a_slower_link(two_nodes, tmp_path):
    """``srun -N2 --ntasks-per-node=1 python -m scalegate gate --base REF``: one gate per node, node 0 leading over
    tcp. A/A passes; a head that all-reduces every gradient again beside DDP's (twice the bytes between the nodes,
    nothing more at 1x1) fails in its first round on its collectives across nodes, which no counter of the SLURM
    launcher needs to see."""
    from tests.repos import INTER_NODE_COMMIT, checkout_repo, commit_change

    repo = tmp_path / "repo"
    checkout_repo(repo)
    same = _srun_gate(two_nodes, repo, "HEAD", tmp_path / "aa")
    assert same.returncode == 0, same.stdout[-4000:] + same.stderr[-3000:]
    assert "regressed" not in (tmp_path / "aa.md").read_text()
    commit_change(repo, "head: a manual gradient average beside DDP's", INTER_NODE_COMMIT)
    slow = _srun_gate(two_nodes, repo, "HEAD~1", tmp_path / "slow")
    assert slow.returncode == 1, slow.stdout[-4000:] + slow.stderr[-3000:]
    table = (tmp_path / "slow.md").read_text()
    assert "❌ regressed" in table and "on 2 node(s)" in table
    assert "head: all_reduce in a group of 2 ranks across nodes:" in table and "(+100%)" in table
    assert not base_trees_left(repo)


@pytest.mark.slow
@pytest.mark.nightly  # one two-node gate, cancelled in its first round: ~1-2 minutes here
def test_scancel_of_a_two_node_gate_mid_round_stops_both_nodes_and_leaves_nothing(two_nodes, tmp_path):
    """``scancel JOB`` while both nodes' gates are in round 1 (SLURM sends SIGTERM to the step's task on every node):
    each node's gate ends in one line naming the round, its sessions, ranks and base worktree removed, and nothing of
    the gate is left on either node."""
    from tests.repos import checkout_repo

    repo, out = tmp_path / "repo", tmp_path / "cut"
    checkout_repo(repo)
    command = srun_gate_command(two_nodes, repo, "HEAD", out, steps=400)
    gate = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=outside_slurm_env()
    )
    try:
        deadline = time.monotonic() + 300
        while not list(out.glob("gate-slurm-*/round-01/**/session.log")) and time.monotonic() < deadline:
            assert gate.poll() is None, gate.communicate()[0][-4000:]
            time.sleep(1)
        time.sleep(8)  # mid-round: the sessions' ranks are stepping on both nodes
        [run_dir] = out.glob("gate-slurm-*")
        job = re.fullmatch(r"gate-slurm-(\d+)\.\d+", run_dir.name).group(1)
        cancel = subprocess.run([two_nodes, "run", "scancel", job], capture_output=True, text=True, timeout=60)
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        said = gate.communicate(timeout=180)[0]
    finally:
        if gate.poll() is None:
            gate.kill()
    stopped = "gate: stopped by SIGTERM in round 1; its sessions, ranks and base worktree were removed"
    for node in (0, 1):
        assert f"{node}: {stopped}" in said, said[-4000:]
    assert "Traceback" not in said, said[-4000:]
    time.sleep(3)  # the sessions end with their gate (PR_SET_PDEATHSIG)
    procs = subprocess.run(["pgrep", "-af", str(tmp_path)], capture_output=True, text=True).stdout.splitlines()
    assert not [p for p in procs if "pgrep" not in p], procs
    assert not base_trees_left(repo) and not list(out.glob("gate-*/**/base-tree*"))


@pytest.mark.slow
@pytest.mark.nightly  # starts and stops the two SLURM nodes: ~20 s; skipped while a session's nodes are up
def test_the_two_node_cluster_stops_what_it_started_and_leaves_the_one_node_cluster_as_it_found_it():
    """two-node-cluster.sh start brings up the one-node cluster for its packages and munged where it was down; its
    stop takes that down again, and leaves one that was already running."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("slurmctld") is None:
        pytest.skip("two SLURM nodes on one machine need root, iproute2 and SLURM (slurm/two-node-cluster.sh)")
    two, one = str(ROOT / "slurm" / "two-node-cluster.sh"), str(ROOT / "slurm" / "local-cluster.sh")
    if subprocess.run([two, "status"], capture_output=True, timeout=60).returncode == 0:
        pytest.skip("the two SLURM nodes are in use by this session")

    def local_up() -> bool:
        return "slurmctld: running" in subprocess.run([one, "status"], capture_output=True, text=True).stdout

    before = local_up()
    started = subprocess.run([two, "start"], capture_output=True, text=True, timeout=600)
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        assert local_up()
    finally:
        subprocess.run([two, "stop"], capture_output=True, text=True, timeout=120)
    assert local_up() == before, "the two-node cluster's stop left the one-node cluster otherwise than it found it"
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "scalegate-" not in namespaces, namespaces
