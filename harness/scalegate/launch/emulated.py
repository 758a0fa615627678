"""Emulated nodes: an ``NxG`` case with N >= 2 runs as N network namespaces on this machine.

Each node is a namespace with one interface ``eth0`` (address ``198.18.0.<i+1>/24``, from the
RFC 2544 benchmarking range, only ever configured inside these namespaces), joined by a bridge
that lives in a hub namespace of its own, so nothing is added to the root namespace. ``tc tbf``
caps every node's link in both directions at ``--scaling-link-rate``: node-to-node traffic is
slower than traffic between ranks of one node (which stays on that namespace's own stack), as on
a cluster. One torchrun agent runs per namespace with static rendezvous on node 0's address and
``GLOO_SOCKET_IFNAME=eth0``; the workers' wire counter reads ``eth0``, i.e. the bytes each node
sends across its link over the measured steps.

Where namespaces cannot be made (not root, no iproute2) the nodes run as N loopback agents and
the result says ``links not shaped`` with the reason: never a silent pretence.

    EmulatedLauncher(Settings(link_rate="1gbit")).run(spec, case_dir) -> CaseResult  # result.launch: link facts
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scalegate.contract import affinity
from scalegate.contract.errors import LaunchError
from scalegate.contract.results import CaseResult, RankResult
from scalegate.contract.spec import CaseSpec
from scalegate.contract.units import parse_rate
from scalegate.launch import hang, netns, process
from scalegate.launch.base import Job, Launcher, collect, first_failure, register_launcher

SUBNET = "198.18.0"  # RFC 2544 benchmarking range; lives only inside the case's namespaces
IFNAME = "eth0"
MASTER_PORT = 29500  # each case has namespaces of its own, so a fixed port cannot collide


def node_address(node: int) -> str:
    return f"{SUBNET}.{node + 1}"


@dataclass(frozen=True, kw_only=True)
class Fabric:
    """What was built for one case: node namespaces (index = node rank) and the hub."""

    hub: str
    nodes: tuple[str, ...]
    rate: str


def build_fabric(scope: netns.Scope, n_nodes: int, rate: str, case_tag: str) -> Fabric:
    """Hub namespace with bridge ``br0``; node i's ``eth0`` is veth-paired to hub port ``p<i>``."""
    bits = parse_rate(rate)
    burst = max(int(bits / 8 * 0.01), 32 * 1024)  # 10 ms of traffic: smooth, yet above one GSO packet
    hub = scope.create(f"{case_tag}-hub")
    netns.run_ip(["-n", hub, "link", "add", "br0", "type", "bridge"])
    netns.run_ip(["-n", hub, "link", "set", "br0", "up"])
    nodes = []
    for i in range(n_nodes):
        node = scope.create(f"{case_tag}-n{i}")
        port = f"p{i}"
        netns.run_ip(["-n", hub, "link", "add", port, "type", "veth", "peer", "name", IFNAME, "netns", node])
        netns.run_ip(["-n", hub, "link", "set", port, "master", "br0", "up"])
        netns.run_ip(["-n", node, "addr", "add", f"{node_address(i)}/24", "dev", IFNAME])
        netns.run_ip(["-n", node, "link", "set", IFNAME, "up"])
        for ns, dev in ((node, IFNAME), (hub, port)):  # node's uplink and its downlink
            netns.run_ip(
                [
                    "-n",
                    ns,
                    "qdisc",
                    "add",
                    "dev",
                    dev,
                    "root",
                    "tbf",
                    "rate",
                    rate,
                    "burst",
                    str(burst),
                    "latency",
                    "100ms",
                ],
                tool="tc",
            )
        nodes.append(node)
    return Fabric(hub=hub, nodes=tuple(nodes), rate=rate)


@dataclass(frozen=True)
class _Node:
    """How one emulated node's agent starts: the rendezvous address it dials, its namespace, its environment."""

    master_addr: str
    prefix: list[str]  # ``ip netns exec <node>``, or nothing for a loopback agent
    env: dict[str, str]


@register_launcher("emulated")
class EmulatedLauncher(Launcher):
    """A multi-node case on one machine: one cold torchrun agent per emulated node (``Settings.link_rate``)."""

    def command(self, job: Job) -> list[str]:
        return self.torchrun(job)  # ``run`` puts each node's agent in its namespace

    def run(self, spec: CaseSpec, case_dir: Path) -> CaseResult:
        """Run a multi-node case as emulated nodes; always remove what was built."""
        link_rate = self.settings.link_rate
        parse_rate(link_rate)
        case_dir.mkdir(parents=True, exist_ok=True)
        spec_path = spec.write(case_dir / "spec.json")
        reason = netns.available()
        netns.cleanup_stale()  # leftovers of a killed earlier session
        if reason is not None:
            env = {"SCALEGATE_WIRE_UNAVAILABLE": f"links not shaped: {reason}"}
            nodes = [_Node("127.0.0.1", [], {**env, affinity.ENV: cpus}) for cpus in _cpu_slices(spec)]
            result = self._run_agents(spec, case_dir, spec_path, nodes, process.free_port())
            return _with_link(
                result,
                {
                    "launcher": "emulated",
                    "shaped": False,
                    "rate": None,
                    "note": f"links not shaped: {reason}; nodes ran as loopback agents",
                },
            )
        with netns.Scope() as scope:
            fabric = build_fabric(scope, spec.topo.nodes, link_rate, spec.case_id.replace("-", "")[:24])
            # The wire counter (harness/scalegate/measure/wire.py) reads eth0: only what crosses the node's link.
            env = {"GLOO_SOCKET_IFNAME": IFNAME, "SCALEGATE_WIRE_IFACE": IFNAME}
            nodes = [
                _Node(node_address(0), netns.exec_prefix(ns), {**env, affinity.ENV: cpus})
                for ns, cpus in zip(fabric.nodes, _cpu_slices(spec))
            ]
            result = self._run_agents(spec, case_dir, spec_path, nodes, MASTER_PORT)
        return _with_link(
            result,
            {
                "launcher": "emulated",
                "shaped": True,
                "rate": link_rate,
                "addresses": [node_address(i) for i in range(spec.topo.nodes)],
                "nodes": link_bytes(result.ranks),
            },
        )

    def _run_agents(self, spec: CaseSpec, case_dir: Path, spec_path: Path, nodes: list[_Node], port: int) -> CaseResult:
        """Start one agent per node, wait for all; on failure or timeout kill every agent's tree."""
        out_dir = case_dir / "ranks"
        procs: list[subprocess.Popen] = []
        logs = []
        start = time.perf_counter()
        try:
            for node_rank, node in enumerate(nodes):
                job = Job(
                    spec=spec,
                    spec_path=spec_path,
                    out_dir=out_dir,
                    log_dir=case_dir / "logs" / f"node{node_rank}",
                    port=port,
                    node_rank=node_rank,
                    master_addr=node.master_addr,
                )
                log = open(case_dir / f"launcher-node{node_rank}.log", "ab")
                logs.append(log)
                procs.append(
                    subprocess.Popen(
                        node.prefix + self.command(job),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env={**self.environment(spec), **node.env},
                        start_new_session=True,
                    )
                )
            codes = _wait_all(procs, start + spec.execution.timeout_s)
            if codes is None:  # a hang: heartbeats and every node's rank stacks, before anything is killed
                diagnosis = [
                    hang.diagnose(p.pid, out_dir, spec.world_size, case_dir) for p in procs if p.poll() is None
                ]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    process.kill_tree(proc)
            for log in logs:
                log.close()
        wall = time.perf_counter() - start
        if codes is None:
            raise LaunchError(
                f"{spec.case_id} timed out after {spec.execution.timeout_s:.0f}s; every node's agent was killed\n"
                + "\n".join(diagnosis),
                f"raise --scaling-timeout or lower --scaling-link-rate's load; logs under {case_dir}",
            )
        failed = [(node, code) for node, code in enumerate(codes) if code != 0]
        if failed:
            node, code = failed[0]
            raise LaunchError(
                f"{spec.case_id} failed: node {node}'s torchrun agent exited with {code}\n" + _failure(case_dir, node),
                f"logs per node under {case_dir}",
            )
        return collect(spec, out_dir, wall)


def _cpu_slices(spec: CaseSpec) -> list[str]:
    """Emulated nodes share this machine's cores: each node's ranks bind within a slice of its own."""
    return affinity.node_slices(affinity.node_cpus(), spec.topo.nodes, spec.topo.per_node, spec.run.cpu_threads)


def link_bytes(ranks: list[RankResult]) -> list[dict[str, Any]]:
    """Per node, bytes per measured step it sent over its link (the wire counter on ``eth0``).

    Every rank of a node reads the same interface, so the node's first rank speaks for it.
    """
    per_node: dict[int, dict[str, Any]] = {}
    for rank in ranks:
        wire = getattr(rank, "wire", None) or {}
        if rank.node_rank in per_node or "bytes_per_step" not in wire:
            continue
        per_node[rank.node_rank] = {
            "node": rank.node_rank,
            "interface": IFNAME,
            "tx_bytes_per_step": wire["bytes_per_step"],
            "source": wire.get("source"),
        }
    return [per_node[n] for n in sorted(per_node)]


def _with_link(result: CaseResult, launch: dict[str, Any]) -> CaseResult:
    return replace(result, launch={**result.launch, **launch})


def _failure(case_dir: Path, node: int) -> str:
    found = first_failure(case_dir)
    if not found.startswith("launcher log tail"):
        return found
    log = case_dir / f"launcher-node{node}.log"
    lines = log.read_text(errors="replace").splitlines()[-30:] if log.exists() else []
    return f"node {node} launcher log tail:\n" + "\n".join(lines)


def _wait_all(procs: list[subprocess.Popen], deadline: float) -> list[int] | None:
    """Exit codes of all, or None at the deadline; the first failure ends the wait (others are killed)."""
    while time.perf_counter() < deadline:
        codes = [p.poll() for p in procs]
        if any(c not in (None, 0) for c in codes) or all(c is not None for c in codes):
            return [c if c is not None else -1 for c in codes]
        time.sleep(0.1)
    return None
