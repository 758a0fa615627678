"""The SLURM cluster ``scalegate init`` writes a team's batch scripts for: its nodes and GPUs, and what only the team
knows (the partition, the account, the time limits, the line that activates the training environment in a job, the
results directory every node sees). From init's flags, else from a profile's ``[cluster]`` table (``init --profile
FILE``), else from the cases' topologies; nothing of scalegate's own checkout is ever written into them.

    [cluster]                    # every key optional; a profile in full: docs/ci.md
    nodes = 2
    gpus_per_node = 8            # 0: a CPU partition, no GPU asked
    partition = "gpu"
    setup = "source /shared/envs/train/bin/activate"

A cluster named by a flag or a profile makes the GitHub and GitLab jobs run on a SLURM login node and submit the PR
gate's batch script (``sbatch --wait``); without one they run the gate on a GPU machine of their own.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, fields
from pathlib import Path

import tomllib

from scalegate.contract.errors import ScalegateError
from scalegate.contract.topology import Topology

# SLURM's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
TIME = re.compile(r"^(?:\d+-\d+(?::\d+){0,2}|\d+(?::\d+){0,2})$")
WORD = re.compile(r"^[A-Za-z0-9_.:,+-]+$")  # a partition, an account, a GRES name: SLURM's words


@dataclass(frozen=True, kw_only=True)
class Cluster:
    nodes: int
    gpus_per_node: int
    gres: str = ""
    partition: str = ""
    account: str = ""
    time: str = "01:00:00"
    nightly_time: str = "04:00:00"
    setup: str = ""
    results_dir: str = "results"
    declared: bool = False  # named by a flag or a profile: the CI jobs submit from a login node

    def gpu_request(self) -> str:
        """The job's GPU request: none on a CPU partition."""
        if self.gpus_per_node == 0:
            return ""
        if self.gres:
            return f"--gres={self.gres}:{self.gpus_per_node}"
        return f"--gpus-per-node={self.gpus_per_node}"

    def sbatch_lines(self, job: str, time: str) -> str:
        """The ``#SBATCH`` lines of a job of this cluster: every node whole, one task (one gate or pytest) a node."""
        asked = [f"--job-name={job}", f"--nodes={self.nodes}", "--ntasks-per-node=1", self.gpu_request()]
        asked += ["--exclusive", f"--partition={self.partition}" if self.partition else ""]
        asked += [f"--account={self.account}" if self.account else "", f"--time={time}", f"--output={job}-%j.out"]
        return "\n".join(f"#SBATCH {a}" for a in asked if a)

    def minutes(self) -> int:
        """The PR job's time limit in whole minutes."""
        return minutes(self.time)


def minutes(limit: str) -> int:
    """A SLURM time limit (TIME's formats) in whole minutes."""
    days, _, rest = limit.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # D-H, D-H:M, D-H:M:S
        return int(days) * 1440 + parts[0] * 60 + (parts[1] if len(parts) > 1 else 0)
    if len(parts) == 3:  # H:M:S
        return parts[0] * 60 + parts[1]
    return parts[0]  # M, M:S


@dataclass(frozen=True, kw_only=True)
class Given:
    """What the team said of its cluster: flags over the profile; None where neither says."""

    values: dict[str, object]
    where: dict[str, str]  # each value's source, for errors: "--nodes" or "site.toml's nodes"

    @property
    def declared(self) -> bool:
        return bool(self.values)

    def topologies(self) -> list[str] | None:
        """The cases' topology a named cluster implies: all its nodes, a rank per GPU (one a node on CPU)."""
        if "nodes" not in self.values and "gpus_per_node" not in self.values:
            return None
        gpus = int(self.values.get("gpus_per_node", 1))  # type: ignore[arg-type]
        return [f"{self.values.get('nodes', 1)}x{max(gpus, 1)}"]

    def resolved(self, topologies: list[str]) -> Cluster:
        """The cluster, its nodes and GPUs from the topologies where the team named none; each topology must fit."""
        shapes = [Topology.parse(t) for t in topologies]
        nodes = int(self.values.get("nodes", max(s.nodes for s in shapes)))  # type: ignore[arg-type]
        gpus = int(self.values.get("gpus_per_node", max(s.per_node for s in shapes)))  # type: ignore[arg-type]
        for shape in shapes:
            if shape.nodes > nodes or (gpus and shape.per_node > gpus):
                raise ScalegateError(
                    f"--topologies {','.join(topologies)}: {shape} needs {shape.nodes} node(s) x {shape.per_node} "
                    f"GPU(s), and the jobs ask {nodes} node(s) x {gpus} GPU(s)",
                    f"name topologies within {nodes}x{gpus or 'G'}, or ask for more: --nodes, --gpus-per-node",
                )
        known = {f.name for f in fields(Cluster)} - {"nodes", "gpus_per_node", "declared"}
        rest = {k: v for k, v in self.values.items() if k in known}
        return Cluster(nodes=nodes, gpus_per_node=gpus, declared=self.declared, **rest)  # type: ignore[arg-type]


FLAGS = ("nodes", "gpus_per_node", "gres", "partition", "account", "time", "nightly_time", "setup", "results_dir")


def add_options(p: argparse.ArgumentParser) -> None:
    c = p.add_argument_group("the SLURM cluster (flags win over --profile's [cluster] table)")
    c.add_argument("--profile", metavar="FILE", help="a TOML file whose [cluster] table holds the keys below")
    c.add_argument("--nodes", type=int, metavar="N", help="the jobs' nodes, and the cases' (default: the topologies')")
    c.add_argument(
        "--gpus-per-node",
        type=int,
        metavar="G",
        help="GPUs each job asks a node for, one rank each; 0 for a CPU partition, one rank a node (default: the "
        "topologies' ranks per node)",
    )
    c.add_argument("--gres", metavar="NAME", help="ask GPUs as --gres=NAME:G, e.g. gpu or gpu:a100 (default: "
                   "--gpus-per-node=G)")  # fmt: skip
    c.add_argument("--partition", metavar="NAME", help="the jobs' partition (default: the cluster's default)")
    c.add_argument("--account", metavar="NAME", help="the account the jobs are charged to (default: yours)")
    c.add_argument("--time", metavar="LIMIT", help="the PR gate job's time limit (default: 01:00:00)")
    c.add_argument("--nightly-time", metavar="LIMIT", help="the nightly job's time limit (default: 04:00:00)")
    c.add_argument(
        "--setup",
        metavar="LINE",
        help="the shell line a job runs first to activate the training environment, e.g. 'source "
        "/shared/envs/train/bin/activate' (default: none, the environment sbatch exports from the submitting shell)",
    )
    c.add_argument(
        "--results-dir",
        metavar="DIR",
        help="where the jobs write results: on a filesystem every node sees (default: results, in the checkout)",
    )


def given(args: argparse.Namespace) -> Given:
    """The flags over the profile's ``[cluster]`` table, each value checked: one error naming it, with a HINT."""
    values: dict[str, object] = {}
    where: dict[str, str] = {}
    if args.profile:
        table = _profile(Path(args.profile))
        values.update(table)
        where.update({k: f"{args.profile}'s {k}" for k in table})
    for key in FLAGS:
        value = getattr(args, key, None)
        if value is not None:
            values[key], where[key] = value, "--" + key.replace("_", "-")
    for key, value in values.items():
        _check(key, value, where[key])
    return Given(values=values, where=where)


def _profile(path: Path) -> dict[str, object]:
    try:
        table = tomllib.loads(path.read_text()).get("cluster")
    except OSError as exc:
        raise ScalegateError(f"--profile {path}: {exc.strerror}", "give the path of a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScalegateError(f"--profile {path} is not TOML: {exc}", "fix the file, e.g. nodes = 2") from None
    if not isinstance(table, dict):
        raise ScalegateError(f"--profile {path} has no [cluster] table", f"add one with keys among {', '.join(FLAGS)}")
    unknown = sorted(set(table) - set(FLAGS))
    if unknown:
        raise ScalegateError(
            f"--profile {path}: [cluster] has no key {unknown[0]!r}", f"its keys are {', '.join(FLAGS)}"
        )
    return table


def _check(key: str, value: object, where: str) -> None:
    """One value, from a flag (``--nodes``) or a profile (``site.toml's nodes``): one error naming it, with a HINT."""
    flag = "--" + key.replace("_", "-")
    example = {"nodes": 2, "gpus_per_node": 8, "time": "01:00:00", "nightly_time": "04:00:00", "gres": "gpu"}
    fix = f"e.g. {flag} {example.get(key, 'NAME')}" if where == flag else f"e.g. {key} = {example.get(key, '...')!r}"
    if key in ("nodes", "gpus_per_node"):
        least = 1 if key == "nodes" else 0
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ScalegateError(f"{where} {value!r} is not a whole number >= {least}", fix)
        return
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise ScalegateError(f"{where} {value!r} is not one line of text", fix)
    if key in ("time", "nightly_time") and not (TIME.match(value) and minutes(value) >= 1):
        raise ScalegateError(
            f"{where} {value!r} is not a SLURM time limit of a minute or more", f"{fix} (MM, HH:MM:SS or D-HH:MM:SS)"
        )
    if key in ("partition", "account", "gres") and not WORD.match(value):
        raise ScalegateError(f"{where} {value!r} is not a SLURM name", f"letters, digits and _ . : , + - only; {fix}")
