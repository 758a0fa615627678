"""A team's own training script as scaling cases (harness/scalegate/plan/script.py, harness/scalegate/worker/script.py).

The marker's bad inputs are refused at collection with the marker's test named. Real sessions, each in a copy of
examples/train_script outside this checkout: the example itself (ddp and fsdp on 1x2, efficiency, memory, bytes,
loss curve, ``--scaling-update-baselines`` there), and one session of scenario scripts that crash on one rank, stop
too early, never step an optimizer, mark their steps with ``scalegate.step()``, or print no loss the pattern matches.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scalegate.contract.errors import SpecError
from scalegate.plan import script as plan_script
from tests.repos import example_project

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_script"
FEW = ("--scaling-steps", "5", "--scaling-warmup", "2")


def _project(tmp_path: Path) -> Path:
    return example_project(tmp_path)


def _pytest(project: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SCALEGATE_RUN_ID", "PYTEST_ADDOPTS")}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *FEW, *args]
    return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)


def _cases(project: Path) -> dict[str, dict]:
    run = next(p for p in sorted((project / "results").iterdir()) if p.is_dir() and p.name != "latest")
    return {p.stem: json.loads(p.read_text()) for p in run.glob("*.json") if p.stem != "run"}


# --- the marker, refused before anything launches -----------------------------------------------------------
def test_a_script_marker_names_its_cases_by_the_scripts_own_strategy_words(tmp_path):
    (tmp_path / "train.py").write_text("")
    decl = plan_script.declared(
        ("train.py", "--mode={strategy}", "-n={world_size}"), {"strategies": ["zero", "dp"]}, tmp_path, "t.py::test"
    )
    assert decl.name == "train" and decl.strategies == ("zero", "dp")
    spec = plan_script.spec_for(decl, "zero", plan_script.Topology.parse("2x2"), _options(), tmp_path, "t")
    assert spec.case_id == "zero-train-2x2" and spec.script.argv == ("--mode=zero", "-n=4")
    assert spec.script.at("zero", plan_script.Topology.parse("1x1")).argv == ("--mode=zero", "-n=1")


def test_steps_placeholder_is_the_steps_the_case_needs_in_the_case_and_its_reference(tmp_path):
    (tmp_path / "train.py").write_text("")
    decl = plan_script.declared(("train.py", "--max-steps={steps}"), {"strategies": ["ddp"]}, tmp_path, "t")
    spec = plan_script.spec_for(decl, "ddp", plan_script.Topology.parse("1x2"), _options(), tmp_path, "t")
    assert spec.script.argv == ("--max-steps=7",)  # 2 warm-up + 5 measured (_options)
    assert spec.script.at("ddp", plan_script.Topology.parse("1x1")).argv == ("--max-steps=7",)


def test_reference_steps_give_the_1x1_reference_launch_its_own_measured_steps(tmp_path):

    from scalegate.plan import hostinfo
    from scalegate.session import ScalingSession

    (tmp_path / "train.py").write_text("")
    decl = plan_script.declared(("train.py", "--max-steps={steps}"), {"strategies": ["ddp"]}, tmp_path, "t")
    spec = plan_script.spec_for(decl, "ddp", plan_script.Topology.parse("1x2"), _options(), tmp_path, "t")
    host = hostinfo.detect()
    same = ScalingSession(options=_options(), host=host, run_dir=tmp_path / "run", baseline=None)
    assert same.reference_spec(spec).run.steps == 5 and same.reference_spec(spec).script.argv == ("--max-steps=7",)
    longer = _options("--scaling-reference-steps=12")
    ref = ScalingSession(options=longer, host=host, run_dir=tmp_path / "run", baseline=None).reference_spec(spec)
    assert (ref.topology, ref.run.steps, ref.script.argv) == ("1x1", 12, ("--max-steps=14",))  # 2 warm-up + 12
    assert spec.run.steps == 5 and spec.script.argv == ("--max-steps=7",)  # the case keeps its own


def test_a_scripts_reference_in_a_duet_runs_half_the_cases_steps(tmp_path):
    from scalegate.plan import hostinfo
    from scalegate.session import ScalingSession

    (tmp_path / "train.py").write_text("")
    decl = plan_script.declared(("train.py", "--max-steps={steps}"), {"strategies": ["ddp"]}, tmp_path, "t")
    options = _options("--scaling-steps=300", "--scaling-duet=unix:/nowhere")  # the gate tells a session it is paired
    spec = plan_script.spec_for(decl, "ddp", plan_script.Topology.parse("1x2"), options, tmp_path, "t")
    session = ScalingSession(options=options, host=hostinfo.detect(), run_dir=tmp_path / "run", baseline=None)
    ref = session.reference_spec(spec)
    assert (ref.run.steps, ref.script.argv) == (150, ("--max-steps=152",))  # 2 warm-up + 150: the script stops there
    assert spec.script.argv == ("--max-steps=302",)


def test_an_injected_slowdown_reaches_the_scripts_case(tmp_path):
    (tmp_path / "train.py").write_text("")
    decl = plan_script.declared(("train.py",), {"strategies": ["ddp"]}, tmp_path, "t")
    options = _options("--scaling-inject-slowdown=0.05")
    spec = plan_script.spec_for(decl, "ddp", plan_script.Topology.parse("1x2"), options, tmp_path, "t")
    assert spec.faults.slowdown == 0.05


@pytest.mark.parametrize(
    "args, kwargs, says",
    [
        (("train.py", "--x={ranks}"), {"strategies": ["ddp"]}, "names an unknown placeholder {ranks}"),
        (("train.py", "--x={"), {"strategies": ["ddp"]}, "argument '--x={'"),
        (("nope.py",), {"strategies": ["ddp"]}, "script 'nope.py' is not a file"),
        ((), {"strategies": ["ddp"]}, "needs the script's path first"),
        (("train.py",), {}, "must list the script's strategy words"),
        (("train.py",), {"strategies": "ddp"}, "must list the script's strategy words"),
        (("train.py",), {"strategies": ["ddp"], "scaling": "both"}, "scaling_script(scaling='both')"),
        (("train.py",), {"strategies": ["ddp"], "batch": 0}, "batch=0"),
        (("train.py",), {"strategies": ["ddp"], "loss": "x"}, "has no argument 'loss'"),
    ],
)
def test_a_bad_marker_is_refused_naming_the_test_and_the_fix(tmp_path, args, kwargs, says):
    (tmp_path / "train.py").write_text("")
    with pytest.raises(SpecError) as err:
        plan_script.declared(args, kwargs, tmp_path, "t.py::test")
    assert says in str(err.value) and "t.py::test" in str(err.value) and "HINT" in str(err.value)


@pytest.mark.parametrize(
    "argv, fixed",
    [
        (("--max-steps=40",), ("--max-steps=40", 40)),
        (("--strategy=ddp", "--max_steps", "40"), ("--max_steps 40", 40)),
        (("--max-train-steps=12", "--per-device-train-batch-size=8"), ("--max-train-steps=12", 12)),
        (("--max-iters=6",), ("--max-iters=6", 6)),
        (("--max-steps={steps}",), None),
        (("--gradient-accumulation-steps=4", "--lr=3"), None),  # not a step count
        ((), None),
    ],
)
def test_the_argument_that_fixes_a_scripts_steps_is_found(argv, fixed):
    assert plan_script.fixed_steps(argv) == fixed


def test_a_marker_that_fixes_fewer_steps_than_a_case_needs_is_refused_naming_steps(tmp_path):
    (tmp_path / "train.py").write_text("")
    decl = plan_script.declared(("train.py", "--max-steps=40"), {"strategies": ["ddp"]}, tmp_path, "t.py::test")
    plan_script.check_steps(decl, _options("--scaling-steps=38"), "t.py::test")  # 2 + 38: fits
    with pytest.raises(SpecError) as err:
        plan_script.check_steps(decl, _options("--scaling-steps=300"), "t.py::test")
    said = str(err.value)
    assert "t.py::test: scaling_script's argument '--max-steps=40' stops the script after 40 optimizer steps" in said
    assert "a case needs 302 (2 before the window, 300 measured" in said
    assert 'HINT: write "--max-steps={steps}" in the marker' in said
    longer_reference = _options("--scaling-steps=5", "--scaling-reference-steps=100")
    with pytest.raises(SpecError, match="a case needs 102"):
        plan_script.check_steps(decl, longer_reference, "t.py::test")


def test_pytest_stops_before_any_launch_when_the_marker_fixes_too_few_steps(tmp_path):
    """The example's marker as it was (``--max-steps=40``) under ``--scaling-steps 300``: a collection error naming
    ``{steps}``, no case run (no results directory)."""
    project = _project(tmp_path)
    marker = project / "scaling_tests" / "test_train.py"
    marker.write_text(marker.read_text().replace('"--max-steps={steps}"', '"--max-steps=40"'))
    run = _pytest(project, "--scaling-steps", "300", timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode != 0 and "stops the script after 40 optimizer steps; a case needs 302" in out, out[-3000:]
    assert 'write "--max-steps={steps}" in the marker' in out and "Traceback" not in out
    assert not any((project / "results").glob("*/*.json"))


def test_a_loss_pattern_needs_one_or_two_groups():
    from scalegate.contract.script import ScriptSpec

    with pytest.raises(SpecError, match="has 3 groups"):
        ScriptSpec(path="/x.py", argv=(), cwd="/", loss_pattern=r"(a)(b)(c)")
    with pytest.raises(SpecError, match="is not a regular expression"):
        ScriptSpec(path="/x.py", argv=(), cwd="/", loss_pattern=r"(")


def test_a_rank_that_returned_ends_quickly_but_runs_what_a_scripts_exit_runs(tmp_path):
    """A rank skips the interpreter's teardown (worker/ending.py ``quick_exit``), not a team's exit: its non-daemon
    threads finish, its atexit functions run, what it printed is flushed, and the exit code is the rank's; only the
    objects' teardown is skipped."""
    program = textwrap.dedent(
        f"""
        import atexit, sys, threading, time
        from scalegate.worker.ending import quick_exit

        def late():
            time.sleep(0.3)
            open({str(tmp_path / "thread")!r}, "w").write("done")

        class Torn:
            def __del__(self, open=open):  # bound here: by the teardown the builtins are gone
                open({str(tmp_path / "teardown")!r}, "w").write("ran")

        kept = Torn()  # a module's object: only the interpreter's teardown deletes it
        atexit.register(lambda: open({str(tmp_path / "atexit")!r}, "w").write("ran"))
        threading.Thread(target=late).start()
        sys.stdout = open({str(tmp_path / "out")!r}, "w", buffering=1 << 16)  # flushed only if someone flushes it
        print("the rank's last line")
        quick_exit(3)
        print("never")
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert (tmp_path / "thread").read_text() == "done" and (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "out").read_text() == "the rank's last line\n"
    assert not (tmp_path / "teardown").exists()  # the teardown was skipped (0.5-0.8 s of CPU with torch imported)


def _options(*more: str):
    from scalegate.plan.options import from_argv

    argv = ["--scaling-topologies=1x2", "--scaling-steps=5", "--scaling-warmup=2", "--scaling-timeout=60"]
    return from_argv([*argv, *more]).replace(strategies=(), models=())


# --- real sessions ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_example_script_is_gated_on_ddp_and_fsdp_from_its_own_directory(tmp_path):
    project = _project(tmp_path)
    run = _pytest(project, "--scaling-update-baselines")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert "ddp-mlp-1x2" in out and "fsdp-mlp-1x2" in out and "agreement n/a (script)" in out
    cases = _cases(project)
    for case_id in ("ddp-mlp-1x2", "fsdp-mlp-1x2"):
        case = cases[case_id]
        assert case["status"] == "no-baseline" and 0 < case["efficiency"] < 2
        rank0 = case["result"]["ranks"][0]
        # the marker's --max-steps={steps}: 2 warm-up + 5 measured, and the script ended there
        assert len(rank0["step_times_s"]) == 5 and rank0["extra"]["optimizer_steps"] == 7
        assert rank0["peak_memory_bytes"] > 0 and len(rank0["extra"]["loss_curve"]) == 7
        assert rank0["extra"]["loss_read_from"] == ["file", "file"]  # the rank logs, not wrapped streams
        assert case["resources"]["wire"]["bytes_per_step"] > 1e6  # ~1.6 MB of gradients a rank a step
        # through the session's warm agent, its ranks started as fresh interpreters (worker/agent.py ``fresh``)
        assert case["result"]["launch"] == {"launcher": "warm"}
        log = next((project / "results").glob(f"*/{case_id}/launcher.log")).read_text()
        assert "[warm agent] torchrun --nnodes" in log and "forkserver" not in log.splitlines()[0]
    written = json.loads(next((project / "baselines").glob("*.json")).read_text())
    assert {"ddp-mlp-1x2:script", "fsdp-mlp-1x2:script"} <= set(written["cases"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    added = subprocess.run(
        [sys.executable, "-m", "scalegate", "history", "add", "results/latest"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
    )
    assert added.returncode == 0 and "2 cases" in added.stdout, added.stdout + added.stderr  # the team's history
    assert (project / "results" / "history.sqlite").exists()


def _marker(project: Path, old: str, new: str) -> None:
    test = project / "scaling_tests" / "test_train.py"
    source = test.read_text()
    assert old in source
    test.write_text(source.replace(old, new))


@pytest.mark.slow
@pytest.mark.nightly  # nightly: emulated 2x1 runs in CI itself (.ci/run)
def test_the_example_script_runs_on_two_emulated_nodes_and_stops_after_its_window(tmp_path):
    """The emulated launcher (a torchrun agent per network namespace, a shaped link) runs a script as it runs a
    workload; ``stop_after_window`` ends the script on every rank at the window's last step, not at its own end."""
    project = _project(tmp_path)
    _marker(project, 'topologies=["1x2"],', 'topologies=["2x1"], stop_after_window=True,')
    _marker(project, '"--max-steps={steps}"', '"--max-steps=40"')  # the script would run 40: the window stops it
    run = _pytest(project, "-k", "ddp")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    case = _cases(project)["ddp-mlp-2x1"]
    assert case["status"] == "no-baseline", case["message"]
    for rank in case["result"]["ranks"]:
        assert rank["extra"]["optimizer_steps"] == 7 and len(rank["step_times_s"]) == 5  # 2 before, 5 measured
    assert {r["node_rank"] for r in case["result"]["ranks"]} == {0, 1}
    assert case["resources"]["wire"]["bytes_per_step"] > 1e6  # the gradients crossed the emulated link


@pytest.mark.slow
@pytest.mark.nightly  # nightly: srun runs in CI itself (.ci/run) and in tests/test_slurm.py
def test_srun_runs_the_example_script_with_the_nodes_own_agent(tmp_path):
    from tests.test_slurm import _cluster_up

    reason = _cluster_up()
    if reason:
        pytest.skip(reason)
    project = _project(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SCALEGATE_RUN_ID", "PYTEST_"))}
    env.pop("PYTHONPATH", None)
    cmd = [
        "srun",
        "-N1",
        "--time=10",
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        *FEW,
        "-k",
        "ddp",
    ]
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    runs = list((project / "results").glob("slurm-*"))
    assert len(runs) == 1, out[-2000:]
    case = json.loads((runs[0] / "ddp-mlp-1x2.json").read_text())
    assert case["status"] == "no-baseline" and len(case["result"]["ranks"][0]["step_times_s"]) == 5


SCENARIO = """
import argparse, os, sys, time
import torch, torch.distributed as dist
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=12)
p.add_argument("--few", action="store_true")  # 4 steps: a count the marker does not show (a fixed one is refused)
p.add_argument("--crash-rank", type=int, default=-1)
p.add_argument("--no-optimizer", action="store_true")
p.add_argument("--manual", action="store_true")
p.add_argument("--quiet", action="store_true")
a = p.parse_args()
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(64, 64); y = x.sum(1, keepdim=True) * 0.1
for step in range(4 if a.few else a.steps):
    if dist.get_rank() == a.crash_rank and step == 3:
        raise RuntimeError("the team's script broke at step 3")
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    if a.manual:
        with torch.no_grad():
            for q in model.parameters():
                q -= 0.05 * q.grad
                q.grad = None
        import scalegate; scalegate.step()
    elif not a.no_optimizer:
        opt.step(); opt.zero_grad()
    if dist.get_rank() == 0 and not a.quiet:
        print(f"it {step}: loss={loss.item():.5f}")
dist.destroy_process_group()
"""

SCENARIOS = """
import pytest

from tests.repos import example_project

def case(*argv, name):
    return pytest.mark.scaling_script("scenario.py", *argv, name=name, strategies=["ddp"], topologies=["1x2"],
                                      loss_pattern=r"it (\\d+): loss=([0-9.]+)")

@case("--crash-rank=1", name="crash")
def test_crash(scaling_case): scaling_case.check()

@case("--few", name="short")
def test_short(scaling_case): scaling_case.check()

@case("--no-optimizer", name="nostep")
def test_nostep(scaling_case): scaling_case.check()

@case("--manual", name="manual")
def test_manual(scaling_case): scaling_case.check()

@case("--quiet", name="quiet")
def test_quiet(scaling_case): scaling_case.check()
"""


@pytest.mark.slow
@pytest.mark.nightly  # nightly: a session of failing scripts; a crash's report is in the default tier (tests/test_reliability.py)
def test_a_scripts_failures_are_named_and_other_cases_keep_their_results(tmp_path):
    project = _project(tmp_path)
    (project / "scenario.py").write_text(textwrap.dedent(SCENARIO))
    (project / "scaling_tests" / "test_scenarios.py").write_text(textwrap.dedent(SCENARIOS))
    run = _pytest(project, "scaling_tests/test_scenarios.py", timeout=900)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-4000:]
    cases = _cases(project)
    assert "RuntimeError: the team's script broke at step 3" in cases["ddp-crash-1x2"]["message"]  # its traceback
    assert (
        "the script stopped after 4 optimizer steps; the case needs 7 (2 before the window, 5 measured)"
        in cases["ddp-short-1x2"]["message"]
    ) and "--max-steps={steps}" in cases["ddp-short-1x2"]["message"]
    assert "never called an optimizer step" in cases["ddp-nostep-1x2"]["message"]
    assert "scalegate.step()" in cases["ddp-nostep-1x2"]["message"]
    manual = cases["ddp-manual-1x2"]
    assert manual["status"] == "no-baseline", manual["message"]  # passed: steps marked by hand were timed
    assert manual["result"]["ranks"][0]["extra"]["steps_marked_by"] == "scalegate.step()"
    quiet = cases["ddp-quiet-1x2"]
    assert quiet["status"] == "no-baseline" and "matched nothing in rank 0's output" in quiet["message"]
    for line in (
        "FAILED scaling_tests/test_scenarios.py::test_crash",
        "FAILED scaling_tests/test_scenarios.py::test_short",
    ):
        assert line in out
    assert "passed" in out.splitlines()[-1] and "3 failed" in out.splitlines()[-1]


# --- the PR gate in the team's own repository ------------------------------------------------------------------
EXTRA_ALL_REDUCE = (
    "train.py",
    "        optimizer.step()\n",
    "        if distributed:  # a synchronous check a PR adds: one blocking all-reduce of 4 MB a step\n"
    "            dist.all_reduce(torch.ones(1 << 20, device=device))\n",
)


def _team_repo(tmp_path: Path) -> Path:
    """The example as a team's repository of two commits: the script, then a head with an extra all-reduce."""
    from tests.repos import git

    repo = _project(tmp_path)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the team's training script")
    path, line, added = EXTRA_ALL_REDUCE
    source = (repo / path).read_text()
    assert line in source
    (repo / path).write_text(source.replace(line, line + added))
    git(repo, "commit", "-qam", "head: an extra all-reduce a step")
    return repo


def _gate(repo: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SCALEGATE_RUN_ID", "PYTEST_ADDOPTS")}
    cmd = [sys.executable, "-m", "scalegate", "gate", *args, "--json", "gate.json", *FEW]
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.nightly  # nightly: the A/B gate on a script; the A/B gate's fault test is tests/test_gate.py (default)
def test_the_ab_gate_fails_a_head_that_adds_an_all_reduce_to_the_teams_script(tmp_path):
    repo = _team_repo(tmp_path)
    run = _gate(repo, "--base", "HEAD~1", "-k", "ddp")
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-4000:]
    data = json.loads((repo / "gate.json").read_text())
    [case] = data["cases"]
    assert case["case_id"] == "ddp-mlp-1x2" and case["status"] == "regressed" and case["gate"] == "a/b"
    assert any("bytes on the wire" in m and "above baseline" in m for m in case["messages"]), case["messages"]
    [gate_dir] = (repo / "results" / "gate").glob("gate-*")
    head = json.loads((gate_dir / "merged" / "ddp-mlp-1x2.json").read_text())
    base = json.loads((gate_dir / "merged" / "base" / "ddp-mlp-1x2.json").read_text())
    exposed = head["resources"]["breakdown"]["exposed_share"]  # the extra all-reduce, exposed in every step
    assert exposed > 0.05 and base["resources"]["breakdown"]["exposed_share"] < exposed / 2
    assert "ddp-mlp-1x2" in out and "FAIL" in out


@pytest.mark.nightly
def test_the_ab_gate_passes_the_teams_script_against_itself(tmp_path):
    from scalegate import policy

    repo = _team_repo(tmp_path)
    run = _gate(repo, "--base", "HEAD", "-k", "ddp")
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    # a script's case launches four times a round in a duet and its 1x1 reference four times with the case's steps,
    # each launch paired with its namesake; the judge reads a round's launches of a case as one (gate_rounds.pooled)
    [gate_dir] = (repo / "results" / "gate").glob("gate-*")
    jobs = json.loads((gate_dir / "merged" / "duet.json").read_text())["jobs"].values()
    assert not any(j["solo"] or j["failed"] for j in jobs), jobs
    references = {"ddp-mlp-1x1", "ddp-mlp-1x1~2", "ddp-mlp-1x1~3", "ddp-mlp-1x1~4"}
    assert {j["job"] for j in jobs} == {"ddp-mlp-1x2", "ddp-mlp-1x2~2", "ddp-mlp-1x2~3", "ddp-mlp-1x2~4", *references}
    merged = json.loads((gate_dir / "merged" / "ddp-mlp-1x2.json").read_text())
    record, rounds = merged["record"], merged["rounds"]
    assert len(record["launches"]) == rounds  # one pooled launch a round
    assert [len(launch["reference_lengths"]) for launch in record["launches"]] == [4] * rounds
    assert [len(launch["lengths"]) for launch in record["launches"]] == [4] * rounds
    # ... each reference launch with half the case's steps, at least a hundred (Options.reference_steps)
    steps = [max(r["lengths"]) for r in record["launches"]]
    want = [min(n, max(policy.SCRIPT_REFERENCE_MIN_STEPS, math.ceil(n * policy.SCRIPT_REFERENCE_SHARE))) for n in steps]
    assert [max(r["reference_lengths"]) for r in record["launches"]] == want
    assert record["conduct"]["max_launches"] == policy.SCRIPT_ROUNDS  # a script's own budget of duet rounds


@pytest.mark.slow
def test_a_repository_without_scaling_cases_gets_a_usage_error(tmp_path):
    from tests.repos import git

    repo = tmp_path / "empty"
    repo.mkdir()
    (repo / "pytest.ini").write_text("[pytest]\n")
    git(repo, "init", "-q")
    run = _gate(repo, timeout=300)
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "no scaling case was selected" in run.stderr and "@pytest.mark.scaling_script" in run.stderr
    assert "Traceback" not in run.stderr
