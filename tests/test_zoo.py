"""The zoo (examples/zoo): a small script per training stack, written the way that stack's docs write one, gated
unchanged through the real launchers (torchrun, 1x2 and each strategy's 1x1 reference) in a copy of the zoo project.

For every stack: the bootstrap counts exactly the script's training steps (optimizer steps, not micro-steps, not
the per-parameter-group calls DeepSpeed's ZeRO optimizers make under the HF Trainer), every rank's step times have
one peak, the loss is read through the marker's ``loss_pattern`` and falls, the ranks trained in one process group,
and an A/A gate (``python -m scalegate gate --base HEAD`` in the zoo as a team's repository) passes.

Default tier: one session of the stacks whose counting is most easily wrong (HF Trainer + DeepSpeed ZeRO-2, the
a naive hook's double count; Accelerate with gradient accumulation), plus the self-check's fault: the Accelerate
script without ``cpu=True``, whose ranks each train alone on a CPU-only machine. Nightly: every case of the zoo,
then the A/A gate over one case per stack.

The sessions run this checkout's scalegate (PYTHONPATH), not whatever the environment installed: what is under test
is the bootstrap and checks of this tree, in the team's project as in its ranks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scalegate.checks import script as script_checks

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "examples" / "zoo"
FEW = ("--scaling-steps", "10", "--scaling-warmup", "2")
STEPS = 12  # the markers in examples/zoo/scaling_tests/test_zoo.py pass {steps}: FEW's 2 warm-up + 10 measured

# case id -> (step calls of the counted optimizer, backward passes) on rank 0: what the bootstrap folded into the 12
FOLDED = {
    "ddp-hf_trainer-1x2": (12, 12),
    "zero2-hf_trainer-1x2": (24, 12),  # ZeRO-2 steps the Trainer's AdamW once per parameter group (decay, no decay)
    "zero3-hf_trainer-1x2": (24, 12),
    "ddp-accelerate-1x2": (12, 12),
    "ddp-accelerate_accum-1x2": (12, 48),  # 4 micro-batches a step: AcceleratedOptimizer skips the other 3 steps
    "ddp-lightning-1x2": (12, 12),  # the backward runs inside optimizer.step(), in Lightning's closure
    "zero2-deepspeed-1x2": (12, 24),  # ds_config_zero2.json: 2 micro-batches a step, engine.step() at the boundary
    "zero3-deepspeed-1x2": (12, 12),
    "ddp-nanogpt_accum-1x2-strong": (12, 48),  # 8 micro-batches a step in all, 4 on each rank
    "fsdp-titan-1x2": (12, 12),
}
DEFAULT_TIER = ("zero2-hf_trainer-1x2", "ddp-accelerate_accum-1x2")


def _zoo(tmp_path: Path) -> Path:
    project = tmp_path / "zoo"
    shutil.copytree(ZOO, project, ignore=shutil.ignore_patterns("__pycache__", "results", "baselines", "out"))
    return project


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SCALEGATE_RUN_ID", "PYTEST_ADDOPTS")}
    return {**env, "PYTHONPATH": str(ROOT / "harness"), **extra}


def _pytest(project: Path, *args: str, timeout: float = 900) -> tuple[str, dict[str, dict]]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *FEW, *args]
    run = subprocess.run(cmd, cwd=project, env=_env(), capture_output=True, text=True, timeout=timeout)
    runs = [p for p in sorted((project / "results").iterdir()) if p.is_dir() and p.name != "latest"]
    cases = {p.stem: json.loads(p.read_text()) for p in runs[-1].glob("*.json") if p.stem != "run"} if runs else {}
    return run.stdout + run.stderr, cases


def _selects(case_ids) -> str:
    return " or ".join(f"[{c}]" for c in case_ids)


def _measured_right(case: dict) -> None:
    """One stack's case: its training steps counted once, one peak, the loss read and falling, one process group."""
    case_id = case["case_id"]
    assert case["status"] == "no-baseline", f"{case_id}: {case['message']}"
    ranks = case["result"]["ranks"]
    rank0 = ranks[0]["extra"]
    assert rank0["optimizer_steps"] == STEPS, f"{case_id}: {rank0['optimizer_steps']} steps for the script's {STEPS}"
    assert (rank0["optimizer_step_calls"], rank0["backward_calls"]) == FOLDED[case_id], case_id
    for rank in ranks:
        assert len(rank["step_times_s"]) == STEPS - 2 and script_checks.two_peaks(rank["step_times_s"]) is None, case_id
        assert rank["extra"]["process_group_size"] == 2, case_id
    losses = [loss for _, loss in rank0["loss_curve"]]
    assert len(losses) == STEPS and losses[-1] < losses[0], f"{case_id}: loss read {losses}"
    assert "loss checks not run" not in case["message"] and "convergence not judged" not in case["message"]


ALONE = """
@pytest.mark.scaling_script(
    "accelerate_alone.py", "--max-train-steps={steps}", name="accelerate_alone", strategies=["ddp"], topologies=["1x2"],
    batch=32, loss_pattern=r"step (\\d+): loss ([0-9.eE+-]+)",
)
def test_accelerate_alone(scaling_case):
    scaling_case.check()
"""


@pytest.mark.nightly  # a whole user path of a minute or more: the nightly tier (docs/testing.md)
def test_the_hf_trainer_on_zero2_and_accelerate_accumulating_count_each_training_step_once(tmp_path):
    """The HF Trainer with TrainingArguments(deepspeed=ZeRO-2) steps its AdamW twice a training step (a naive count
    read 24 steps for the Trainer's max_steps=12, with two peaks of step times); Accelerate's accumulation steps the
    optimizer every 4th batch. And the fault: the Accelerate script as its docs write it, without cpu=True, run by
    torchrun on this CPU-only machine, trains each rank alone (DistributedType.NO): the case must fail saying so."""
    project = _zoo(tmp_path)
    source = (project / "accelerate_loop.py").read_text()
    alone = source.replace("cpu=not torch.cuda.is_available(), ", "")
    assert alone != source
    (project / "accelerate_alone.py").write_text(alone)
    (project / "scaling_tests" / "test_alone.py").write_text("import pytest\n" + textwrap.dedent(ALONE))
    out, cases = _pytest(project, "-k", f"{_selects(DEFAULT_TIER)} or accelerate_alone")
    assert "1 failed, 2 passed" in out.splitlines()[-1], out[-4000:]
    for case_id in DEFAULT_TIER:
        _measured_right(cases[case_id])
    message = cases["ddp-accelerate_alone-1x2"]["message"]
    assert "the 2 ranks trained alone: they sent" in message and "bytes a step between them (netns:lo)" in message
    assert "HINT: let the script join the job's process group" in message and "Accelerator(cpu=True)" in message


@pytest.mark.slow
@pytest.mark.nightly  # every stack of the zoo, 184 s here: the default tier runs the two most easily miscounted
def test_every_stack_in_the_zoo_counts_each_training_step_once_and_reads_its_loss(tmp_path):
    project = _zoo(tmp_path)
    out, cases = _pytest(project)
    assert "10 passed, 2 skipped" in out.splitlines()[-1], out[-4000:]
    for case_id in FOLDED:
        _measured_right(cases[case_id])
    # the strong-scaling case's curve was compared with its 1x1 run's (the same global batch: the same curve)
    assert "leaves the 1x1 run's" not in cases["ddp-nanogpt_accum-1x2-strong"]["message"]
    # where a library cannot run a strategy here, the skip says why in the library's words
    assert "Lightning refuses fsdp here: The strategy `fsdp` requires a GPU accelerator" in out
    assert "the HF Trainer's fsdp=True runs as DDP on CPU" in out


# one case per stack: what the A/A gate relaunches in rounds, both sides the same commit
AA_CASES = (
    "zero2-hf_trainer-1x2",
    "ddp-accelerate_accum-1x2",
    "ddp-lightning-1x2",
    "zero3-deepspeed-1x2",
    "ddp-nanogpt_accum-1x2-strong",
    "fsdp-titan-1x2",
)


@pytest.mark.slow
@pytest.mark.nightly  # two rounds of 6 cases a side: 425 s here (2 cores, load 1.2-1.9)
def test_the_ab_gate_passes_every_stack_against_itself(tmp_path):
    from tests.repos import git

    repo = _zoo(tmp_path)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the team's training scripts")
    cmd = [sys.executable, "-m", "scalegate", "gate", "--base", "HEAD", "-k", _selects(AA_CASES), "--json", "gate.json"]
    cmd += [*FEW, "--scaling-max-launches", "2"]  # two rounds: a verdict needs two, an undecided A/A passes
    # every stack's pairing, not timing: one launch of each case and of its 1x1 reference, not a duet's 4 and 4
    cmd += ["--scaling-launches", "1", "--scaling-reference-launches", "1"]
    run = subprocess.run(
        cmd, cwd=repo, env=_env(SCALEGATE_ROUND_GAP_S="5"), capture_output=True, text=True, timeout=1500
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    verdicts = {c["case_id"]: c["status"] for c in json.loads((repo / "gate.json").read_text())["cases"]}
    assert set(verdicts) == set(AA_CASES), verdicts
    assert not {c: s for c, s in verdicts.items() if s in ("regressed", "failed")}, verdicts
