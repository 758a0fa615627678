"""Helpers shared by the harness's own tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scalegate.launch import warm

ROOT = Path(__file__).resolve().parents[1]
# tests/assets holds teams' projects that the tests copy and run in their own sessions, not tests of this one
collect_ignore_glob = ["assets/*"]


def run_suite(tmp_path: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real scaling suite in a subprocess, as a user would, with its own results dir."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "scaling_tests"),
        "-p",
        "no:cacheprovider",
        "--scaling-results-dir",
        str(tmp_path / "results"),
        "-q",
        *args,
    ]
    env = dict(os.environ)
    env.pop("SCALEGATE_RUN_ID", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def suite(tmp_path):
    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return run_suite(tmp_path, *args, timeout=timeout)

    return run


class KeyedAgents:
    """The session's warm agents side by side, one product ``AgentPool`` per server key (plain torch, DeepSpeed,
    Lightning, transformers, no wire count). A suite session meets its strategies grouped and restarts its one
    server a few times; these tests alternate between keys test by test, and each change of key cost a restart
    (4-6 s). Only the keeping side by side is the tests' own; the pools and their servers are the product's."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.pools: dict[object, warm.AgentPool] = {}

    def run(self, spec, argv, **how):
        key = warm.key_for(spec)
        if key not in self.pools:
            self.pools[key] = warm.pool(log_dir=self.log_dir / f"key-{len(self.pools)}")
        return self.pools[key].run(spec, argv, **how)

    def close(self) -> None:
        for made in self.pools.values():
            made.close()


@pytest.fixture(scope="session")
def agents(tmp_path_factory):
    """The session's warm agents, as the suite launches through one by default (harness/scalegate/plugin.py): tests that
    call ``run_case(spec, case_dir, agents=agents)`` share its servers (~2 s a launch instead of a cold
    torchrun's ~5 s), one per set of preloaded modules (``KeyedAgents``), all closed at the end of the session.
    Tests of the cold torchrun itself launch without them."""
    pools = KeyedAgents(tmp_path_factory.mktemp("agents"))
    yield pools
    pools.close()


LIGHTNING_PROBE = """
import lightning.pytorch as pl
from lightning.fabric import Fabric

# the Trainer refuses FSDP when it is built, DeepSpeed when its strategy sets up (the start of fit)
for name in ("fsdp", "deepspeed"):
    try:
        pl.Trainer(accelerator="cpu", devices=1, strategy=name, logger=False).strategy.setup_environment()
    except (ValueError, RuntimeError) as exc:
        print("REFUSED trainer", exc)
for name in ("fsdp", "deepspeed"):
    try:
        Fabric(accelerator="cpu", devices=1, strategy=name).launch()
    except (ValueError, RuntimeError) as exc:
        print("REFUSED fabric", exc)
"""


@pytest.fixture(scope="session")
def lightning_refusals() -> dict[str, list[str]]:
    """What Lightning itself says when the Trainer and Fabric are asked for FSDP and DeepSpeed on CPU, in that order,
    by front end (``said``: the child's whole output). One child process for both front ends: Fabric.launch() sets
    distributed environment variables in its process, and importing Lightning costs seconds."""
    done = subprocess.run([sys.executable, "-c", LIGHTNING_PROBE], capture_output=True, text=True, timeout=180)
    found: dict[str, list[str]] = {"trainer": [], "fabric": []}
    for line in done.stdout.splitlines():
        if line.startswith("REFUSED "):
            front, said = line.removeprefix("REFUSED ").split(" ", 1)
            found[front].append(said)
    return {**found, "said": [done.stdout + done.stderr[-2000:]]}


def pytest_configure(config: pytest.Config) -> None:
    """In an xdist worker, its variables (``PYTEST_XDIST_WORKER``, ...) stay its own: a suite a test starts in a
    subprocess inherited them, took itself for a worker and turned its benchmarks off."""
    if hasattr(config, "workerinput"):
        for name in [n for n in os.environ if n.startswith("PYTEST_XDIST_")]:
            del os.environ[name]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that close the session's warm agents (``without_agents``) run after this directory's others, in their
    order: each closed the agents of every key, and the next test launching through them paid their start again (a
    DeepSpeed or Lightning server 5-10 s, plain torch 3-5 s). They still run before the scaling suite, whose own warm
    agent (the plugin's, named by this process too) lives until the session ends and would count as their leftover."""

    def order(item: pytest.Item) -> int:
        if "without_agents" in getattr(item, "fixturenames", ()):
            return 1
        return 0 if Path(item.path).is_relative_to(ROOT / "tests") else 2

    items.sort(key=order)


@pytest.fixture
def without_agents(agents):
    """For a test that counts what this process left behind (namespaces named by its pid, worker processes under
    it): the session's warm agent, if one runs, is closed first, with its namespace and its whole tree. It is
    not a leftover, but it would be counted as one; the next warm launch starts it again."""
    agents.close()


@pytest.fixture
def stand_in_gpus(monkeypatch):
    """For a test that hands a rank's NVML readers a stand-in NVML (no GPU here). On a machine with a GPU, torch would
    give its real GPU's UUID, which the stand-in does not know: here the readers find the stand-in's device through
    ``CUDA_VISIBLE_DEVICES``, unset unless the test sets it (contract/nvml.py)."""
    from scalegate.measure import gpu_state

    monkeypatch.setattr(gpu_state, "cuda_uuid", lambda index: None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture(scope="session")
def two_nodes():
    """slurm/two-node-cluster.sh's two SLURM nodes (network namespaces on this machine, capped links), started for the
    session and stopped after it where the session started them."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("two SLURM nodes on one machine need root and iproute2 (slurm/two-node-cluster.sh)")
    script = str(ROOT / "slurm" / "two-node-cluster.sh")
    up = subprocess.run([script, "status"], capture_output=True, text=True, timeout=60).returncode == 0
    if not up:
        started = subprocess.run([script, "start"], capture_output=True, text=True, timeout=600)
        assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
    yield script
    if not up:
        subprocess.run([script, "stop"], capture_output=True, text=True, timeout=120)


def _docs_files() -> dict[str, tuple[int, int]]:
    """Every file under docs/ with its size and modification time."""
    docs = ROOT / "docs"
    return {str(p.relative_to(docs)): (p.stat().st_size, p.stat().st_mtime_ns) for p in docs.rglob("*") if p.is_file()}


@pytest.fixture(scope="session", autouse=True)
def docs_left_alone():
    """No test writes under docs/: its pages are made by hand or by a command from a record (a GPU page from
    experiments/data/gpu), never by a test's fixture data. A file written there fails the session's last test."""
    before = _docs_files()
    yield
    after = _docs_files()
    touched = sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))
    if touched:
        pytest.fail(f"a test wrote under docs/: {', '.join(touched)}; write into tmp_path (e.g. selftest --out)")
