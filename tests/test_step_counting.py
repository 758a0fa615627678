"""One training step, one count, whatever wraps the optimizer (harness/scalegate/worker/script.py), and the self-check
that fails a script case whose measurement looks wrong (harness/scalegate/checks/script.py ``measurement``).

The unit tests judge results built as the ranks write them. The launch tests run real scripts through torchrun in a
copy of examples/train_script: a plain torch loop stepping its optimizer once per parameter group (what DeepSpeed's
ZeRO optimizers do under the HF Trainer: a naive hook's double count) with gradient accumulation, and the self-check's
fault test: a script that steps a second, empty optimizer after the real one, counted the naive way
(``--scaling-inject-fault count-every-step``), must fail naming the cause and the fix.
"""

from __future__ import annotations

import textwrap

import pytest

from scalegate.checks import script as script_checks
from scalegate.contract.results import RankResult, aggregate
from scalegate.contract.script import ScriptSpec
from scalegate.contract.spec import CaseSpec
from tests.test_scripts import _cases, _project, _pytest

PATTERN = r"step (\d+) loss ([0-9.eE+-]+)"


def _result(times: list[float], steps: int, curve: list, marked: str = "optimizer.step()", **extra) -> object:
    spec = CaseSpec.of(
        strategy="ddp",
        model="train",
        preset="script",
        topology="1x2",
        micro_batch=8,
        steps=len(times),
        warmup=2,
        script=ScriptSpec(path="/r/train.py", argv=(), cwd="/r", loss_pattern=PATTERN),
    )
    ranks = [
        RankResult(
            rank=r,
            world_size=2,
            node_rank=0,
            host="h",
            device="cpu",
            step_times_s=times,
            losses=[],
            warmup_losses=[],
            loss_weight=0.0,
            extra={
                "script": True,
                "optimizer_steps": steps,
                "steps_marked_by": marked,
                "optimizer_step_calls": steps,
                "counted_optimizer": "AdamW",
                "backward_calls": steps,
                "loss_curve": curve if r == 0 else [],
                **extra,
            },
        )
        for r in range(2)
    ]
    return aggregate(spec, ranks)


def test_one_peak_of_steps_that_match_the_scripts_log_passes():
    times = [0.020 + 0.002 * (i % 3) for i in range(20)]
    assert script_checks.measurement(_result(times, 40, [[s, 1.0] for s in range(0, 40, 5)])) == []


def test_a_double_count_fails_on_its_two_peaks_and_on_the_scripts_own_step_numbers():
    """Today's HF Trainer + DeepSpeed shape: 0.3 ms, 27 ms, 0.4 ms, 34 ms ... and 120 steps for the Trainer's 60."""
    times = [0.0003, 0.027, 0.0004, 0.034] * 5
    found = script_checks.measurement(_result(times, 120, [[s, 1.0] for s in range(0, 60, 5)]))
    assert len(found) == 2, found
    assert found[0].startswith(
        "rank 0's step times have two peaks: 10 of 20 are under a tenth of the others (0.35 ms vs 30.5 ms): the "
        "bootstrap counted 120 training steps of AdamW"
    )
    assert found[1].startswith("120 optimizer steps were counted where the script's own log numbers 56")
    assert all("[ddp-train-1x2] HINT: mark each training step with scalegate.step()" in f for f in found)


def test_steps_marked_twice_by_hand_fail_naming_the_mark():
    times = [0.00005, 0.02] * 10
    [found] = script_checks.measurement(_result(times, 24, [], marked="scalegate.step()"))
    assert "have two peaks" in found and "is it called more than once per step?" in found


def test_a_few_long_steps_are_no_second_peak():
    """An evaluation or a checkpoint inside the window makes a few steps long; that is the script's, not a miscount."""
    assert script_checks.measurement(_result([0.001] * 14 + [0.2] * 2, 16, [])) == []


SCRIPT = """
import argparse
import torch, torch.distributed as dist
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=12)
p.add_argument("--accumulate", type=int, default=1)
p.add_argument("--per-group", action="store_true")
p.add_argument("--empty-optimizer", action="store_true")
a = p.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 1)))
decay, no_decay = [q for q in model.parameters() if q.dim() > 1], [q for q in model.parameters() if q.dim() == 1]
opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
empty = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
x = torch.randn(512, 256); y = x[:, :1] * 0.5
for step in range(a.steps):
    for micro in range(a.accumulate):
        loss = ((model(x) - y) ** 2).mean() / a.accumulate
        loss.backward()
    if a.per_group:  # as DeepSpeed's ZeRO optimizers step their torch optimizer: once per parameter group
        groups = opt.param_groups
        for group in groups:
            opt.param_groups = [group]
            opt.step()
        opt.param_groups = groups
    else:
        opt.step()
    if a.empty_optimizer:
        empty.step()
    opt.zero_grad()
    if dist.get_rank() == 0:
        print(f"step {step} loss {loss.item() * a.accumulate:.5f}")
dist.destroy_process_group()
"""

TESTS = """
import pytest

def case(*argv, name):
    return pytest.mark.scaling_script("counted.py", *argv, name=name, strategies=["ddp"], topologies=["1x2"],
                                      loss_pattern=r"step (\\d+) loss ([0-9.]+)")

@case("--per-group", "--accumulate=2", name="pergroup")
def test_pergroup(scaling_case): scaling_case.check()

@case("--empty-optimizer", name="empty")
def test_empty(scaling_case): scaling_case.check()
"""


def _session(tmp_path, *args: str) -> tuple[str, dict]:
    project = _project(tmp_path)
    (project / "counted.py").write_text(textwrap.dedent(SCRIPT))
    (project / "scaling_tests" / "test_counted.py").write_text(textwrap.dedent(TESTS))
    run = _pytest(project, "scaling_tests/test_counted.py", *args, timeout=600)
    return run.stdout + run.stderr, _cases(project)


@pytest.mark.nightly  # a whole user path of a minute or more: the nightly tier (docs/testing.md)
def test_steps_per_parameter_group_and_accumulated_micro_steps_count_once_and_a_naive_count_fails(tmp_path):
    out, cases = _session(tmp_path / "a", "-k", "pergroup or empty")
    assert "2 passed" in out.splitlines()[-1], out[-3000:]
    for case_id, calls, backwards in (("ddp-pergroup-1x2", 24, 24), ("ddp-empty-1x2", 12, 12)):
        rank0 = cases[case_id]["result"]["ranks"][0]
        assert rank0["extra"]["optimizer_steps"] == 12, case_id  # the script's 12 training steps
        assert (rank0["extra"]["optimizer_step_calls"], rank0["extra"]["backward_calls"]) == (calls, backwards)
        assert script_checks._two_peaks(sorted(rank0["step_times_s"])) is None  # one peak
    # the self-check's fault test: the empty optimizer's steps counted as training steps
    out, cases = _session(tmp_path / "b", "-k", "empty", "--scaling-inject-fault", "count-every-step")
    assert "1 failed" in out.splitlines()[-1], out[-3000:]
    case = cases["ddp-empty-1x2"]
    assert case["result"]["ranks"][0]["extra"]["optimizer_steps"] == 24
    assert "step times have two peaks" in case["message"], case["message"]
    assert "24 optimizer steps were counted where the script's own log numbers 12" in case["message"]
    assert "HINT: mark each training step with scalegate.step()" in case["message"]
