"""A team's training script as the GPU acceptance run times it: examples/train_script/train.py, unchanged.

Run by ``python -m scalegate selftest --gpu`` (its ``script`` phase, harness/scalegate/cli/gpu_phases.py), which passes this
file to pytest by path; its name keeps it out of the default test run. On CUDA a script's steps are timed by CUDA
events at its optimizer steps (harness/scalegate/worker/script.py), a path no CPU run takes: 1x1 runs on one GPU, 1x2 on two.

    .venv/bin/pytest benchmarks/gpu_script_cases.py --scaling-topologies 1x1     # also runs on CPU (gloo, clocks)
"""

import pytest


@pytest.mark.scaling_script(
    "examples/train_script/train.py",
    "--strategy={strategy}",
    "--max-steps={steps}",
    name="mlp",
    strategies=["ddp", "fsdp"],
    topologies=["1x1", "1x2"],
    batch=32,
    loss_pattern=r"step (\d+) loss ([0-9.eE+-]+)",
)
def test_train(scaling_case, benchmark):
    scaling_case.check(benchmark)
