"""Throwaway git repositories and outside slowdowns, shared by the gate's tests and its benchmarks.

A test of the PR gate needs a repository with history: this checkout's files copied into a fresh repository
(``checkout_repo``), a base commit, and heads that change one line (``commit_change``). ``SLOW_COMMIT`` is the
change the gate must catch: DDP's step waits on the host, as a synchronous check a PR could add would.
``SLOW_DDP`` is a slowdown from outside the project (a sitecustomize), not the harness's own fault injection.
``srun_gate_command`` is the A/B gate of a 2x1 canary across slurm/two-node-cluster.sh's two nodes.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from scalegate.gate import worktree

ROOT = Path(__file__).resolve().parents[1]

# (file, the line the change goes before, the change)
SLOW_COMMIT = (
    "harness/scalegate/strategies/ddp.py",
    "        loss = loss_fn(self.wrapped(inputs), targets)\n",
    "        __import__('time').sleep(0.012)  # the PR's synchronous host-side check\n",
)

# A change that slows the step across nodes and nowhere else: the PR all-reduces every gradient again after DDP's own
# all-reduce (a manual average left in beside DDP), so the bytes on the inter-node link double; a 1x1 run sends nothing.
INTER_NODE_COMMIT = (
    "harness/scalegate/strategies/ddp.py",
    "        return loss.detach()\n",
    "        for p in self.model.parameters():  # the PR's own gradient average, on top of DDP's\n"
    "            __import__('torch').distributed.all_reduce(p.grad)\n"
    "            p.grad.div_(__import__('torch').distributed.get_world_size())\n",
)

# The four code changes the collective ledger names (docs/memory-and-wire.md#four-changes-it-names), each as
# (file, the text it replaces, what replaces it): in a team's script (tests/assets/ledger_team/train.py) and in the
# canaries' strategies. A canary change whose base needs a line this checkout does not have comes as two edits: the
# base commit's, then the head's.
TEAM = ROOT / "tests" / "assets" / "ledger_team"
TEAM_CHANGES = {
    "extra_all_reduce": (
        "train.py",
        "        optimizer.step()\n",
        "        for p in model.parameters():  # the PR's own gradient average, left in beside DDP's\n"
        "            dist.all_reduce(p.grad) if distributed else None\n"
        "        optimizer.step()\n",
    ),
    "lost_no_sync": (
        "train.py",
        '            sync = model.no_sync() if distributed and args.strategy == "ddp" and not last else contextlib.nullcontext()\n',
        "            sync = contextlib.nullcontext()\n",
    ),
    "small_buckets": ("train.py", "bucket_cap_mb=25)", "bucket_cap_mb=1)"),
    "reshard_flip": ("train.py", "reshard_after_forward=False", "reshard_after_forward=True"),
}
DDP = "harness/scalegate/strategies/ddp.py"
FSDP = "harness/scalegate/strategies/fsdp.py"
ACCUMULATE = (  # DDP over 4 micro-batches a step, gradients synced on the last one only
    "        loss = loss_fn(self.wrapped(inputs), targets)\n        loss.backward()\n",
    "        import contextlib\n\n"
    "        losses = []\n"
    "        for i, (x, y) in enumerate(zip(inputs.chunk(4), targets.chunk(4))):\n"
    "            with self.wrapped.no_sync() if i < 3 else contextlib.nullcontext():\n"
    "                part = loss_fn(self.wrapped(x), y) / 4\n"
    "                part.backward()\n"
    "            losses.append(part.detach())\n"
    "        loss = sum(losses)\n",
)
# extra_all_reduce averages again what DDP averaged: the same gradients (the gradient check passes), twice the traffic
CANARY_CHANGES = {  # name: (base edits, head edits), each edit (file, old, new)
    "extra_all_reduce": (
        [],
        [(DDP, "        return loss.detach()\n",
          "        for p in self.model.parameters():  # the PR's own gradient average, left in beside DDP's\n"
          "            __import__('torch').distributed.all_reduce(p.grad)\n"
          "            p.grad.div_(__import__('torch').distributed.get_world_size())\n"
          "        return loss.detach()\n")],
    ),
    "lost_no_sync": ([(DDP, *ACCUMULATE)], [(DDP, "self.wrapped.no_sync() if i < 3 else ", "")]),
    "small_buckets": (
        [(DDP, "DistributedDataParallel(self.model, device_ids=device_ids)",
          "DistributedDataParallel(self.model, device_ids=device_ids, bucket_cap_mb=25)")],
        [(DDP, "bucket_cap_mb=25)", "bucket_cap_mb=1)")],
    ),
    "reshard_flip": (
        [(FSDP, "            fully_shard(block, **kwargs)\n        fully_shard(self.model, **kwargs)\n",
          "            fully_shard(block, reshard_after_forward=False, **kwargs)\n"
          "        fully_shard(self.model, reshard_after_forward=False, **kwargs)\n")],
        [(FSDP, "reshard_after_forward=False", "reshard_after_forward=True")],
    ),
}  # fmt: skip


def edit(repo: Path, edits: list[tuple[str, str, str]], message: str) -> str:
    """Each (file, old text, new text) replaced once, every occurrence of it, and committed; the commit's hash."""
    for path, old, new in edits:
        source = (repo / path).read_text()
        assert old in source, f"{path} changed: update the edit this test makes ({old[:40]!r})"
        (repo / path).write_text(source.replace(old, new))
    git(repo, "commit", "-qam", message)
    return git(repo, "rev-parse", "HEAD")


def team_repo(where: Path, change: str) -> Path:
    """The team's project (tests/assets/ledger_team) as a repository of two commits: the script, then ``change``."""
    import shutil

    shutil.copytree(TEAM, where, ignore=shutil.ignore_patterns("__pycache__", "results"))
    git(where, "init", "-q")
    git(where, "add", "-A")
    git(where, "commit", "-qm", "the team's training script")
    edit(where, [TEAM_CHANGES[change]], f"head: {change}")
    return where


def canary_repo(where: Path, change: str) -> Path:
    """This checkout as a repository whose last two commits are ``change``'s base and head (the base may be the
    checkout itself)."""
    checkout_repo(where)
    base, head = CANARY_CHANGES[change]
    if base:
        edit(where, base, f"base: what {change} changes")
    edit(where, head, f"head: {change}")
    return where


def ledger_gate(kind: str, change: str, repo: Path, out: Path, cluster: str | None = None) -> tuple[list[str], str]:
    """The A/B gate of ``change``'s head against its base (``team_repo`` or ``canary_repo``), and the case it names:
    on this node with no namespace counter (``SCALEGATE_NO_NETNS=1``: the command sets it), or, given ``cluster``
    (slurm/two-node-cluster.sh), under ``srun -N2`` with the case at 2x1. Its table goes to ``OUT.md``, its JSON to
    ``OUT.json``."""
    strategy = "fsdp" if change == "reshard_flip" else "ddp"
    topology = "2x1" if cluster else "1x2"
    if kind == "script":
        case = f"{strategy}-mlp-{topology}"
        selection = ["-k", case]
    else:
        case = f"{strategy}-cnn-{topology}"
        selection = ["-k", f"{case} or single-cnn-1x1", "--scaling-models", "cnn", "--scaling-strategies",
                     f"single,{strategy}", "--scaling-topologies", f"1x1,{topology}"]  # fmt: skip
    gate = [str(ROOT / ".venv/bin/python"), "-m", "scalegate", "gate", "--base", "HEAD~1", "--results-dir", str(out)]
    gate += ["--markdown", f"{out}.md", "--json", f"{out}.json", "--max-minutes", "5", *selection]
    gate += ["--scaling-steps", "20", "--scaling-warmup", "5"]
    if cluster is None:
        return ["env", "SCALEGATE_NO_NETNS=1", *gate], case
    wrapper = f"cd {shlex.quote(str(repo))} && exec srun -N2 --ntasks-per-node=1 -l {shlex.join(gate)}"
    return [cluster, "run", "bash", "-c", wrapper], case


# On PYTHONPATH as sitecustomize.py, with SLOW_DDP_MS set: every DDP forward sleeps that long.
SLOW_DDP = """
import os
if os.environ.get("SLOW_DDP_MS"):
    import time
    import torch.nn.parallel

    _forward = torch.nn.parallel.DistributedDataParallel.forward

    def forward(self, *args, **kwargs):
        time.sleep(float(os.environ["SLOW_DDP_MS"]) / 1000)
        return _forward(self, *args, **kwargs)

    torch.nn.parallel.DistributedDataParallel.forward = forward
"""


def example_project(where: Path) -> Path:
    """The example team project (examples/train_script) copied to ``where/project``, as a team's checkout."""
    import shutil

    project = where / "project"
    shutil.copytree(
        ROOT / "examples" / "train_script",
        project,
        ignore=shutil.ignore_patterns("__pycache__", "results", "baselines"),
    )
    return project


def git(repo: Path, *args: str) -> str:
    """git in ``repo`` with a throwaway identity; its stdout."""
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def base_trees_left(repo: Path) -> list[str]:
    """Base trees a gate left behind: worktrees registered in ``repo`` besides itself, directories beside it named as
    the gate names them (gate/worktree.place), and links in its run directories."""
    listed = git(repo, "worktree", "list", "--porcelain").splitlines()
    trees = [line.split(" ", 1)[1] for line in listed if line.startswith("worktree ")]
    beside = repo.parent.glob(worktree.PREFIX + "*")
    links = repo.parent.glob("**/gate-*/base-tree*")
    return [t for t in trees if Path(t).resolve() != repo.resolve()] + [str(p) for p in [*beside, *links]]


def checkout_repo(where: Path) -> str:
    """This checkout's files (tracked and untracked-but-not-ignored) as a fresh repository of one commit, "base";
    its hash."""
    worktree.copy_checkout(ROOT, where)
    git(where, "init", "-q")
    git(where, "add", "-A")
    git(where, "commit", "-qm", "base")
    return git(where, "rev-parse", "HEAD")


def commit_change(repo: Path, message: str, change: tuple[str, str, str] | None = None) -> str:
    """One more commit: ``change`` (file, line, text put before the line), or a README line; its hash."""
    if change is None:
        (repo / "README.md").write_text((repo / "README.md").read_text() + f"\n{message}\n")
    else:
        path, line, added = change
        source = (repo / path).read_text()
        assert line in source, f"{path} changed: update the change this test makes"
        (repo / path).write_text(source.replace(line, added + line))
    git(repo, "commit", "-qam", message)
    return git(repo, "rev-parse", "HEAD")


def slow_commit(sleep_ms: float) -> tuple[str, str, str]:
    """``SLOW_COMMIT`` with another wait."""
    path, line, _ = SLOW_COMMIT
    return (
        path,
        line,
        f"        __import__('time').sleep({sleep_ms / 1000!r})  # the PR's synchronous host-side check\n",
    )


def srun_gate_command(cluster: str, repo: Path, base: str, out: Path, steps: int | None = 40) -> list[str]:
    """``gate --base BASE`` of ddp-cnn-2x1 and its reference from ``repo``, one gate per node under ``srun -N2``
    inside ``cluster`` (slurm/two-node-cluster.sh); its table goes to ``OUT.md``. ``steps`` None: the gate's own."""
    gate = [str(ROOT / ".venv/bin/python"), "-m", "scalegate", "gate", "--base", base, "--results-dir", str(out)]
    gate += ["--markdown", f"{out}.md", "-k", "ddp-cnn-2x1 or single-cnn-1x1", "--scaling-models", "cnn"]
    gate += ["--scaling-strategies", "single,ddp", "--scaling-topologies", "1x1,2x1"]
    gate += ["--scaling-steps", str(steps)] if steps is not None else []
    wrapper = f"cd {shlex.quote(str(repo))} && exec srun -N2 --ntasks-per-node=1 -l {shlex.join(gate)}"
    return [cluster, "run", "bash", "-c", wrapper]


def outside_slurm_env() -> dict[str, str]:
    """This environment without a surrounding SLURM step's or pytest's variables: a job of its own."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SCALEGATE_RUN_ID", "PYTEST_"))}
