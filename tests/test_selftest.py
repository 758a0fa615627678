"""``python -m scalegate selftest --gpu`` on a CPU machine: what can be checked without a GPU.

The refusal without CUDA (one line, exit 2), the arguments, the phases' commands and budgets, and the command's
glue with phases that only write files (the report itself: tests/test_gpu_report.py). What needs a GPU (the phases
themselves) is listed in docs/verified-on-gpu.md, "Verified on GPU".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from scalegate.cli import gpu_gate_phases, gpu_phases, selftest
from scalegate.cli.main import main
from scalegate.judge.evidence import RECORD_VERSION
from scalegate.report import acceptance, acceptance_page, acceptance_run
from scalegate.report.acceptance import FAILED, PASSED
from tests.test_gpu_report import gpu_case

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


# --- without a GPU ----------------------------------------------------------------------------------------------


def test_without_cuda_the_command_says_so_in_one_line_and_exits_2():
    done = _run(sys.executable, "-m", "scalegate", "selftest", "--gpu")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert "no CUDA device here" in done.stderr and "torch.cuda.is_available() is False" in done.stderr


def test_the_fresh_clone_entry_point_without_nvidia_smi_says_so_in_one_line_and_exits_2(tmp_path):
    env_path = f"{tmp_path}:/usr/bin:/bin"  # no nvidia-smi on this PATH, whatever the machine has
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_acceptance", "--no-setup"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": env_path},
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "gpu_acceptance: no GPU here (nvidia-smi is not installed); nothing to verify"


# --- arguments ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, expected",
    [
        (["selftest"], "selftest needs --gpu"),
        (["selftest", "--gpu", "--gpus", "2"], "--gpus 2 only plans (with --dry-run)"),
        (["selftest", "--gpu", "--render", "x.json"], "--render rewrites a recorded page"),
    ],
)
def test_a_combination_argparse_cannot_refuse_is_one_error_and_a_hint(capsys, args, expected):
    assert main(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: {expected}") and err[1].startswith("HINT: ")


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--budget-s", "5"], "--budget-s=5.0 is not in 60..3600 seconds"),
        (["--steps", "0"], "--steps=0 is not in 1..1000"),
        (["--gpus", "two", "--dry-run"], "--gpus='two' is not a whole number"),
        (["--models", "hf:gpt2"], "--models='hf:gpt2' is not 'all' or comma-separated workload names"),
        (["--phases", "ab-gate,gate"], "--phases='ab-gate,gate': 'gate' is not a phase"),
        (["--aa-rounds", "1"], "--aa-rounds=1 is not in 2..20"),
    ],
)
def test_a_bad_value_is_refused_naming_the_option_with_a_hint(capsys, args, expected):
    with pytest.raises(SystemExit) as caught:
        main(["selftest", "--gpu", *args])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and "HINT: " in err


def test_a_dry_run_prints_each_phases_command_without_a_gpu(capsys):
    assert main(["selftest", "--gpu", "--dry-run", "--gpus", "1", "--models", "cnn"]) == 0
    out = capsys.readouterr().out
    assert "matrix-1x2-nccl: not run here: needs 2 GPUs on one node, this node has 1" in out
    assert "matrix-1x1 (" in out and "--scaling-matrix full --scaling-topologies 1x1" in out
    assert "--scaling-models all -k 'single or cnn'" in out  # every strategy on cnn, every workload's reference
    assert "gate --base HEAD" in out and "benchmarks/gpu_script_cases.py" in out


# --- the phases ---------------------------------------------------------------------------------------------------


def _settings(tmp_path: Path) -> gpu_phases.Settings:
    return gpu_phases.Settings(work_dir=tmp_path, python="python")


def test_one_gpu_runs_every_strategy_at_1x1_and_says_why_not_1x2(tmp_path):
    phases = {p.name: p for p in gpu_phases.plan(1, _settings(tmp_path))}
    assert list(phases) == ["matrix-1x1", "matrix-1x2-nccl", "compile", "script", "ab-gate", "swap", "aa-rounds"]
    aa = list(phases["aa-rounds"].argv)  # a step of 20 ms or more: resnet at 1x1, A/A duet rounds
    assert aa[aa.index("--duet-aa") + 1] == "6" and aa[aa.index("--scaling-models") + 1] == "resnet"
    assert phases["matrix-1x2-nccl"].skip == "needs 2 GPUs on one node, this node has 1"
    matrix = phases["matrix-1x1"].argv
    strategies = matrix[matrix.index("--scaling-strategies") + 1].split(",")
    assert {"fsdp1", "dp", "deepspeed-zero3", "fabric-deepspeed", "lightning-fsdp", "lightning-deepspeed"} <= set(
        strategies
    )
    assert f"--junitxml={tmp_path / 'matrix-1x1' / 'junit.xml'}" in matrix
    compile_ = phases["compile"].argv
    assert "--scaling-compile" in compile_ and compile_[compile_.index("--scaling-topologies") + 1] == "1x1"
    assert compile_[compile_.index("--scaling-strategies") + 1] == "single,ddp,fsdp"


def test_two_gpus_add_the_nccl_matrix_and_1x2_to_compile_script_and_gate(tmp_path):
    phases = {p.name: p for p in gpu_phases.plan(2, _settings(tmp_path))}
    assert not any(p.skip for p in phases.values())
    nccl = phases["matrix-1x2-nccl"].argv
    assert "--scaling-local-steps" in nccl and nccl[nccl.index("-k") + 1] == "(single and 1x1) or (cnn and 1x2)"
    for name in ("compile", "script", "ab-gate"):
        argv = phases[name].argv
        assert argv[argv.index("--scaling-topologies") + 1] == "1x1,1x2", name


@pytest.mark.parametrize(
    "models, topology, expected",
    [
        ("cnn", "", ["-k", "single or cnn"]),
        ("cnn,bert_qa", "1x2", ["-k", "(single and 1x1) or (cnn and 1x2) or (bert_qa and 1x2)"]),
        ("all", "", []),
        ("all", "1x2", ["-k", "(single and 1x1) or 1x2"]),
    ],
)
def test_the_matrix_phases_select_every_strategy_on_the_models_and_every_reference(models, topology, expected):
    settings = gpu_phases.Settings(models=models)
    assert gpu_phases.selection(settings, topology) == ["--scaling-models", "all", *expected]


def test_outside_git_the_gate_phase_says_why_it_does_not_run(tmp_path):
    phases = {p.name: p for p in gpu_phases.plan(1, _settings(tmp_path), in_git=False)}
    assert "not a git checkout" in phases["ab-gate"].skip
    assert phases["aa-rounds"].skip == phases["swap"].skip == phases["ab-gate"].skip


def test_phases_chosen_run_alone_and_the_page_names_the_others(tmp_path, capsys):
    settings = replace(_settings(tmp_path), phases=("ab-gate", "aa-rounds"), aa_rounds=4)
    phases = {p.name: p for p in gpu_phases.plan(2, settings)}
    assert [n for n, p in phases.items() if not p.skip] == ["ab-gate", "aa-rounds"]
    assert phases["matrix-1x1"].skip == "not chosen (--phases ab-gate,aa-rounds)"
    aa = list(phases["aa-rounds"].argv)
    assert aa[aa.index("--duet-aa") + 1] == "4"
    # the first phase that runs states its share of the whole budget
    assert main(["selftest", "--gpu", "--dry-run", "--gpus", "1", "--phases", "aa-rounds", "--budget-s", "300"]) == 0
    assert "aa-rounds (300 s): 6 A/A duet rounds" in capsys.readouterr().out


def test_each_phase_gets_its_weights_share_of_the_time_left(tmp_path):
    phases = gpu_phases.plan(1, _settings(tmp_path))
    total = sum(p.weight for p in phases if not p.skip)
    assert phases[0].timeout_for(phases[1:], 480.0) == pytest.approx(480.0 * phases[0].weight / total)
    # the last phase gets all that is left: the time a fast phase leaves goes to those after it
    assert phases[-1].timeout_for([], 100.0) == pytest.approx(100.0)


def test_a_phase_past_its_budget_is_stopped_whole_and_reported(tmp_path, capsys):
    phase = gpu_phases.Phase(
        name="sleepy",
        proves="nothing",
        argv=(sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"),
        weight=1.0,
        results_dir=tmp_path / "sleepy",
    )
    done = acceptance_run.run_phase(phase, 2.0, ROOT)
    assert done.timed_out and done.wall_s < 30
    assert done.problem.startswith("sleepy ran past its budget of 2 s and was stopped")
    assert "started" in (tmp_path / "sleepy" / "phase.log").read_text()


# --- the whole command's glue, with phases that only write what a real one would ------------------------------


def _writer_phase(tmp_path: Path, name: str, case: dict, junit: str) -> gpu_phases.Phase:
    results = tmp_path / "work" / name
    code = (
        "import json, pathlib, sys; r = pathlib.Path(sys.argv[1]); run = r / 'run1'; run.mkdir(parents=True); "
        "(r / 'latest').symlink_to('run1'); (run / (sys.argv[2] + '.json')).write_text(sys.argv[3]); "
        "(r / 'junit.xml').write_text(sys.argv[4])"
    )
    return gpu_phases.Phase(
        name=name,
        proves="writes a recorded phase",
        argv=(sys.executable, "-c", code, str(results), case["case_id"], json.dumps(case), junit),
        weight=1.0,
        results_dir=results,
        junit=results / "junit.xml",
    )


def test_the_command_writes_the_page_and_json_and_exits_1_on_a_failed_case(tmp_path, capsys):
    passed = '<testsuites><testcase name="test_scaling[single-cnn-1x1]" /></testsuites>'
    failed = (
        '<testsuites><testcase name="test_scaling[fsdp1-cnn-1x1]"><failure message="boom" /></testcase></testsuites>'
    )
    phases = [
        _writer_phase(tmp_path, "matrix-1x1", gpu_case("single-cnn-1x1"), passed),
        _writer_phase(tmp_path, "compile", gpu_case("fsdp1-cnn-1x1"), failed),
    ]
    host = selftest.hostinfo.HostInfo(
        device="cuda",
        device_name="NVIDIA H100 80GB HBM3",
        devices_per_node=1,
        cpu_model="x",
        cpu_cores=16,
        torch="2.13.0",
        cuda="12.8",
        nccl="2.27.3",
        hostname="h",
    )
    settings = gpu_phases.Settings(budget_s=120, work_dir=tmp_path / "work")
    assert acceptance_run.run(phases, settings, host, ROOT, tmp_path / "docs") == 1
    (md,) = (tmp_path / "docs").glob("nvidia-h100-80gb-hbm3-*.md")
    report = json.loads(md.with_suffix(".json").read_text())
    assert [(c["case_id"], c["outcome"]) for c in report["cases"]] == [
        ("single-cnn-1x1", PASSED),
        ("fsdp1-cnn-1x1", FAILED),
    ]
    assert [p["exit_code"] for p in report["phases"]] == [0, 0]
    assert md.read_text() == acceptance_page.markdown(report)
    out = capsys.readouterr().out
    assert "selftest: FAILED compile: fsdp1-cnn-1x1: boom" in out and f"report {md}" in out


def test_the_script_phases_file_declares_its_cases_at_1x1_and_1x2():
    done = _run(
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--collect-only", gpu_phases.SCRIPT_CASES
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for case in ("ddp-mlp-1x1", "fsdp-mlp-1x1", "ddp-mlp-1x2", "fsdp-mlp-1x2"):
        assert f"test_train[{case}]" in done.stdout


def test_the_gpu_gate_phase_runs_enough_pairs_to_decide_an_aa_duet():
    """20 pairs of the cnn's 2-3 ms steps left the H200's A/A ddp-cnn-1x1 noisy after its 2 rounds; the gate phase
    runs GATE_STEPS pairs a round while the other phases keep --steps."""
    from scalegate.cli import gpu_phases

    phases = {p.name: p for p in gpu_phases.plan(1, gpu_phases.Settings())}
    gate, matrix = list(phases["ab-gate"].argv), list(phases["matrix-1x1"].argv)
    assert gate[gate.index("--scaling-steps") + 1] == str(gpu_gate_phases.GATE_STEPS) == "200"
    assert matrix[matrix.index("--scaling-steps") + 1] == "20"


def test_the_aa_rounds_phase_reads_each_cases_spread_and_every_rounds_gpu_state(tmp_path):
    """What ``record-baselines --duet-aa`` leaves (a baseline file with the spread; each round's head result, here
    with a made-up GPU state: no GPU on this machine) becomes the phase's rows."""
    base = tmp_path / "baselines"
    base.mkdir()
    entry = {"duet_aa": {"sigma": 0.021, "sigma_step_w": 0.012, "rounds": 6}}
    (base / "cuda-x.json").write_text(json.dumps({"cases": {"ddp-resnet-1x1:small": entry}}))
    for n in (1, 2):
        where = tmp_path / "duet-aa-1" / f"round-0{n}" / "head" / "latest"
        where.mkdir(parents=True)
        state = {"sm_clock_mhz": [1980, 1980], "capped": ["sw_power_cap"] if n == 2 else []}
        (where / "ddp-resnet-1x1.json").write_text(json.dumps({"record": {"launches": [{"gpu_state": state}]}}))
    [row] = acceptance.spread_rows("aa-rounds", tmp_path)
    assert row.case_id == "ddp-resnet-1x1" and row.reason.startswith("A/A duet spread 2.10% over 6 rounds")
    assert [s["capped"] for s in row.gpu_rounds] == [[], ["sw_power_cap"]]


def test_the_swap_phase_gates_the_resnet_in_turns_and_its_rows_say_what_a_swap_moved_and_what_stayed(tmp_path):
    """``selftest --gpu --phases swap``: an A/A gate in the swap pairing on a step of 20 ms or more; its row takes
    the swap's figures from the merged record (made up here, as a GPU's rank would write them: no GPU on this
    machine), and the page's coverage names the pairing verified only where a swap freed what it moved."""
    phase = next(p for p in gpu_phases.plan(1, _settings(tmp_path)) if p.name == "swap")
    argv = list(phase.argv)
    assert argv[argv.index("--pairing") + 1] == "swap" and argv[argv.index("--scaling-models") + 1] == "resnet"
    assert argv[argv.index("--scaling-steps") + 1] == str(gpu_gate_phases.GATE_STEPS)
    assert argv[argv.index("--json") + 1] == str(tmp_path / "swap" / "gate.json") and phase.gate_json
    launch = {"step_times_s": [0.02] * 4, "duet": "paired", "duet_turn_steps": 25, "duet_swap_bytes": 300 * 2**20}
    launch |= {"duet_swap_s": 0.05, "duet_swap_freed": True, "duet_swap_idle_bytes": 40 * 2**20}
    launch |= {"duet_swap_idle_device_bytes": 700 * 2**20}
    record = {"case_id": "ddp-resnet-1x1", "key": "ddp-resnet-1x1:small", "profile": "cuda-x", "world_size": 1}
    record |= {"global_batch": 32, "steps": 200, "warmup": 3, "launches": [launch], "version": RECORD_VERSION}
    run = tmp_path / "swap" / "gate-1"
    run.mkdir(parents=True)
    (tmp_path / "swap" / "latest").symlink_to(run)
    case = gpu_case("ddp-resnet-1x1", record=record, status="ok")
    (run / "ddp-resnet-1x1.json").write_text(json.dumps(case))
    (tmp_path / "swap" / "gate.json").write_text(json.dumps({"cases": [{"case_id": "ddp-resnet-1x1", "status": "ok"}]}))
    [row] = acceptance.gate_rows("swap", phase.gate_json, phase.results_dir)
    said = "the idle job swapped out (300.0 MiB a rank, 50.0 ms out and back; 40.0 MiB stayed in its allocator, "
    said += "700.0 MiB in its whole process (NVML))"
    assert row.outcome == acceptance.PASSED and row.swap == said
    report = {"device": "a GPU", "date": "today", "cases": [row.to_dict()], "phases": []}
    page = acceptance_page.markdown(report)
    assert said in page
    assert "| the swap pairing: each rank's training state off the GPU between its turns | verified: 1 case" in page
    # a CPU's swap (copied and kept, nothing freed) is no GPU swap: the item is not verified by it
    kept = replace(row, swap="the idle job's state copied out and back, kept in host memory (3.0 MiB a rank, 1.0 ms)")
    page = acceptance_page.markdown(report | {"cases": [kept.to_dict()]})
    assert "| the swap pairing: each rank's training state off the GPU between its turns | not verified" in page
