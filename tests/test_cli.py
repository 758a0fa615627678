"""The regression gate's commands on synthetic run directories in the session's result format.

``python -m scalegate compare|report|update-baselines`` through ``main()`` in this process (``cli``), and once each as
a real subprocess (``real_cli``: what a second interpreter adds, its exit code and its piped output, costs ~2 s of
importing torch a call); the verdict and the bootstrap are checked as properties with hypothesis.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalegate.cli.main import main
from scalegate.contract.errors import ScalegateError
from scalegate.figures import stats
from scalegate.judge import CaseRecord, LaunchRecord
from scalegate.judge import metric as V
from scalegate.record.baselines import Reference
from tests.runs import PROFILE, write_run

ROOT = Path(__file__).resolve().parents[1]


def _steps(median_s: float, n: int = 20, spread: float = 0.01) -> list[float]:
    return [median_s * (1 + spread * ((i * 7) % 5 - 2)) for i in range(n)]


def make_case(
    case_id: str = "ddp-cnn-1x2",
    *,
    step_s: float = 0.030,
    ref_step_s: float = 0.021,
    world: int = 2,
    status: str = "ok",
    problems: tuple[str, ...] = (),
    faults: dict | None = None,
    bytes_per_step: float | None = None,
    spread: float = 0.01,
    tolerances: dict | None = None,
) -> dict:
    """One results/<run>/<case_id>.json as harness/scalegate/session.py writes it."""
    strategy, model, topology = case_id.split("-")
    steps, ref_steps, batch = _steps(step_s, spread=spread), _steps(ref_step_s, spread=spread), 32
    throughput = batch * world / stats.median(steps)
    ref_tp = batch / stats.median(ref_steps)
    est = stats.efficiency_estimate(steps, batch * world, ref_steps, batch, world)
    ranks = [
        {
            "rank": r,
            "peak_memory_bytes": 400 * 2**20 + r * 2**20,
            "memory_source": "rss",
            "step_times_s": steps,
            "losses": [2.0] * len(steps),
        }
        for r in range(world)
    ]
    spec = {
        "strategy": strategy,
        "model": model,
        "preset": "tiny",
        "topology": topology,
        "micro_batch": batch,
        "steps": len(steps),
        "warmup": 5,
        "faults": {"delay_ms": 0.0, "grad_scale": 1.0, **(faults or {})},
    }
    wire = (
        {"bytes_per_step": bytes_per_step, "bytes_per_rank": bytes_per_step / world, "source": "netns-lo"}
        if bytes_per_step
        else {"bytes_per_step": None, "source": "unavailable"}
    )
    record = CaseRecord(
        case_id=case_id,
        key=f"{case_id}:tiny",
        profile=PROFILE,
        world_size=world,
        global_batch=batch * world,
        steps=len(steps),
        warmup=5,
        launches=(
            LaunchRecord(
                step_times_s=tuple(steps),
                final_loss=2.0,
                memory_source="rss",
                peak_memory_bytes=tuple(r["peak_memory_bytes"] for r in ranks),
                bytes_per_step=bytes_per_step,
                wire_source=wire["source"],
            ),
        ),
        reference_step_times_s=tuple(ref_steps),
        reference_global_batch=batch,
        reference_launches=1,
        problems=tuple(problems),
        tolerances=tolerances or {},
    )
    return {
        "case_id": case_id,
        "key": f"{case_id}:tiny",
        "status": status,
        "message": "\n".join(problems) or status,
        "record": record.to_dict(),
        "launches": 1,
        "problems": list(problems),
        "oversubscribed": False,
        "speedup": throughput / ref_tp,
        "efficiency": est.value,
        "efficiency_ci": [est.low, est.high],
        "noise_rel": 0.02,
        "reference_throughput": ref_tp,
        "reference_step_times_s": ref_steps,
        "baseline_efficiency": None,
        "tolerances": tolerances or {},
        "resources": {"wire": wire},
        "profile": PROFILE,
        "host": "vm",
        "commit": "abc123",
        "fingerprint": {"cpu_cores": 2},
        "spec": spec,
        "written": 1.0,
        "result": {
            "case_id": case_id,
            "throughput": throughput,
            "median_step_s": stats.median(steps),
            "step_times_s": steps,
            "losses": [2.0] * len(steps),
            "ranks": ranks,
        },
    }


def real_cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m scalegate ARGS`` in a subprocess, as a user or a CI job runs it."""
    return subprocess.run(
        [sys.executable, "-m", "scalegate", *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m scalegate ARGS`` in this process, from the repository's root: ``main()`` as ``__main__`` calls it,
    its output captured, and argparse's own exit (a usage error) taken as the exit code it would give."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.fixture
def baseline_dir(tmp_path: Path) -> Path:
    """Baselines recorded from a clean run through the real update-baselines command."""
    run = write_run(
        tmp_path / "clean-for-baseline", make_case(bytes_per_step=10e6), make_case("ddp-cnn-1x4", world=4, step_s=0.04)
    )
    done = cli("update-baselines", run, "--baseline-dir", tmp_path / "baselines", "--tolerance", "0.05")
    assert done.returncode == 0, done.stderr
    return tmp_path / "baselines"


def test_compare_passes_a_clean_run_with_a_markdown_table(tmp_path, baseline_dir):
    run = write_run(tmp_path / "run", make_case(bytes_per_step=10e6), make_case("ddp-cnn-1x4", world=4, step_s=0.04))
    done = real_cli("compare", run, "--baseline-dir", baseline_dir, "--json", tmp_path / "out.json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "**PASS**" in done.stdout
    assert "| `ddp-cnn-1x2:tiny` | 2 |" in done.stdout and "✅ ok |" in done.stdout
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["failed"] == 0 and {c["status"] for c in data["cases"]} == {"ok"}


def test_compare_fails_an_injected_regression_and_names_it(tmp_path, baseline_dir):
    run = write_run(tmp_path / "run", make_case(step_s=0.036), make_case("ddp-cnn-1x4", world=4, step_s=0.04))
    done = cli("compare", run, "--baseline-dir", baseline_dir)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "**FAIL**" in done.stdout and "❌ regressed" in done.stdout
    assert "efficiency 0.583 is below baseline 0.700 (tolerance 5%" in done.stdout
    assert "| `ddp-cnn-1x2:tiny` | 2 | 1777.8 | – | 0.583" in done.stdout and "| classic |" in done.stdout


def test_compare_fails_more_bytes_per_step_tightly(tmp_path, baseline_dir):
    path = baseline_dir / f"{PROFILE}.json"
    data = json.loads(path.read_text())  # recorded by update-baselines where the run counted bytes; set it here
    data["cases"]["ddp-cnn-1x2:tiny"]["bytes_per_step"] = {"value": 10e6, "tolerance": 0.05}
    path.write_text(json.dumps(data))
    run = write_run(tmp_path / "run", make_case(bytes_per_step=10.8e6))
    done = cli("compare", run, "--baseline-dir", baseline_dir)
    assert done.returncode == 1
    assert "bytes on the wire 10.800 MB/step are above baseline 10.000 MB/step" in done.stdout


def test_a_marker_tolerance_recorded_with_the_case_widens_the_gate(tmp_path, baseline_dir):
    run = write_run(tmp_path / "run", make_case(step_s=0.036, tolerances={"efficiency": 0.3}))
    assert cli("compare", run, "--baseline-dir", baseline_dir).returncode == 0


def test_noisy_is_reported_and_fails_only_when_strict(tmp_path, baseline_dir):
    run = write_run(tmp_path / "run", make_case(spread=0.2))
    loose = cli("compare", run, "--baseline-dir", baseline_dir)
    assert loose.returncode == 0 and "noisy" in loose.stdout, loose.stdout
    assert "**PASS, 1 UNDECIDED**" in loose.stdout  # not a clean pass
    assert cli("compare", run, "--baseline-dir", baseline_dir, "--strict").returncode == 1


def test_correctness_failure_fails_compare(tmp_path, baseline_dir):
    run = write_run(tmp_path / "run", make_case(status="failed", problems=("gradient agreement failed [ddp]",)))
    done = cli("compare", run, "--baseline-dir", baseline_dir)
    assert done.returncode == 1 and "gradient agreement failed" in done.stdout


def test_a_result_file_without_a_judge_record_is_bad_input(tmp_path):
    case = make_case()
    del case["record"]  # written by a scalegate before the one judge
    done = cli("compare", write_run(tmp_path / "run", case))
    assert done.returncode == 2 and "holds no usable judge record" in done.stderr
    assert "HINT: it was written by another scalegate version" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "setup, expected",
    [
        (lambda d: d / "missing", "does not exist"),
        (lambda d: (d / "run.json").write_text("{}") and d / "run.json", "is a file, not a run directory"),
        (lambda d: write_run(d / "empty"), "holds no case results"),
        (lambda d: (write_run(d / "bad") / "x.json").write_text("{nope") and d / "bad", "is malformed"),
    ],
)
def test_compare_bad_input_exits_2_with_one_line_and_a_hint(tmp_path, setup, expected):
    done = cli("compare", setup(tmp_path))
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and expected in done.stderr.splitlines()[0]
    assert "HINT:" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["compare", "RUN", "--baseline-dir", "FILE"],
        ["report", "RUN", "--baseline-dir", "FILE"],
        ["update-baselines", "RUN", "--baseline-dir", "FILE"],
        ["record-baselines", "--baseline-dir", "FILE"],
        ["record-baselines", "--results-dir", "FILE"],
        ["gate", "--base", "HEAD", "--results-dir", "FILE"],
        ["bisect", "HEAD~1", "HEAD", "-k", "ddp-cnn-1x2", "--results-dir", "FILE"],
        ["report", "RUN", "--out", "FILE"],
        ["history", "report", "--out", "FILE"],
    ],
)
def test_a_directory_option_given_a_file_is_a_usage_error_before_anything_runs(tmp_path, command):
    """A baseline or results directory that is a file was read as holding no baseline (compare, report) or failed
    only when the first result was written (record-baselines after its rounds)."""
    run = write_run(tmp_path / "run", make_case())
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a directory\n")
    done = cli(*[{"RUN": run, "FILE": a_file}.get(arg, arg) for arg in command])
    option = command[command.index("FILE") - 1]
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"{option} {a_file} is a file, not a directory" in done.stderr and "HINT: pass a directory" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "ten"])
def test_compare_tolerance_is_the_declared_option_a_fraction(tmp_path, value):
    """``compare --tolerance`` is ``--scaling-tolerance``'s declaration without the prefix: its help, and its check."""
    done = cli("compare", write_run(tmp_path / "run", make_case()), "--tolerance", value)
    assert done.returncode == 2 and "argument --tolerance: --tolerance=" in done.stderr
    assert "HINT: e.g. --tolerance 0.1 for 10%" in done.stderr and "Traceback" not in done.stderr
    assert cli("compare", write_run(tmp_path / "ok", make_case()), "--tolerance", "0.2").returncode == 0


@pytest.mark.parametrize(
    "command, said",
    [
        (["compare", "RUN", "--markdown", "DIR"], "--markdown DIR is a directory, not a file"),
        (
            ["compare", "RUN", "--json", "FILE/verdicts.json"],
            "--json FILE/verdicts.json lies under FILE, which is a file",
        ),
        (["gate", "--base", "HEAD", "--markdown", "DIR"], "--markdown DIR is a directory, not a file"),
        (
            ["gate", "--base", "HEAD", "--json", "FILE/x/v.json"],
            "--json FILE/x/v.json lies under FILE, which is a file",
        ),
        (["history", "check", "--json", "DIR"], "--json DIR is a directory, not a file"),
    ],
)
def test_an_output_file_that_cannot_be_written_is_a_usage_error_before_the_run(tmp_path, command, said):
    """Written when the command ends: a gate's PR comment failed with a traceback after its rounds."""
    run = write_run(tmp_path / "run", make_case())
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a directory\n")
    where = {"RUN": str(run), "DIR": str(tmp_path), "FILE": str(a_file)}
    done = cli(*[re.sub("RUN|DIR|FILE", lambda m: where[m.group()], arg) for arg in command])
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert re.sub("DIR|FILE", lambda m: where[m.group()], said) in done.stderr and "Traceback" not in done.stderr


def test_compare_makes_the_directories_above_its_markdown_and_json(tmp_path):
    run = write_run(tmp_path / "run", make_case())
    done = cli("compare", run, "--markdown", tmp_path / "pr" / "a" / "c.md", "--json", tmp_path / "pr" / "b" / "c.json")
    assert done.returncode in (0, 1), done.stderr
    assert (tmp_path / "pr" / "a" / "c.md").read_text() and json.loads((tmp_path / "pr" / "b" / "c.json").read_text())


@pytest.mark.parametrize("value", ["abc", "-5", "inf"])
def test_a_duration_in_the_environment_that_is_no_number_of_seconds_stops_with_one_line(value):
    """The settings the tests shorten (policy.py) are read at import: a bad one was a ValueError traceback."""
    env = {**os.environ, "SCALEGATE_DUET_TURN_S": value}
    done = subprocess.run(
        [sys.executable, "-m", "scalegate", "gate", "--base", "HEAD"], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith(f"error: SCALEGATE_DUET_TURN_S='{value}' is not a number of seconds\nHINT: unset it")


def test_compare_unusable_baseline_file_exits_2(tmp_path):
    run = write_run(tmp_path / "run", make_case())
    bad = tmp_path / f"{PROFILE}.json"
    bad.write_text("[]")
    done = cli("compare", run, "--baseline", bad)
    assert done.returncode == 2 and "top level is list" in done.stderr and "Traceback" not in done.stderr


def test_update_refuses_a_run_with_failing_correctness(tmp_path):
    run = write_run(
        tmp_path / "run",
        make_case(),
        make_case("ddp-cnn-1x4", world=4, status="failed", problems=("parameter agreement failed [ddp] rank 1",)),
    )
    done = cli("update-baselines", run, "--baseline-dir", tmp_path / "baselines")
    assert done.returncode == 2
    assert "refusing to update baselines: 1 case(s) failed correctness (ddp-cnn-1x4)" in done.stderr
    assert not (tmp_path / "baselines" / f"{PROFILE}.json").exists()


def test_update_refuses_an_injected_slowdown(tmp_path):
    run = write_run(tmp_path / "run", make_case(faults={"slowdown": 0.1}))
    done = cli("update-baselines", run, "--baseline-dir", tmp_path / "baselines")
    assert done.returncode == 2 and "injected fault(s) slowdown" in done.stderr


def test_update_writes_atomically_and_prints_a_diff(tmp_path, baseline_dir):
    path = baseline_dir / f"{PROFILE}.json"
    before = json.loads(path.read_text())
    assert before["cases"]["ddp-cnn-1x2:tiny"]["efficiency"] == {"value": 0.7, "tolerance": 0.05}
    assert before["cases"]["ddp-cnn-1x2:tiny"]["provenance"]["commit"] == "abc123"
    run = write_run(tmp_path / "again", make_case(step_s=0.035))
    done = real_cli("update-baselines", run, "--baseline-dir", baseline_dir)
    assert done.returncode == 0, done.stderr
    assert "~ ddp-cnn-1x2:tiny: efficiency 0.7 -> 0.6" in done.stdout
    assert sorted(p.name for p in baseline_dir.iterdir()) == [path.name, path.name + ".lock"]  # no temp left
    assert set(json.loads(path.read_text())["cases"]) == {"ddp-cnn-1x2:tiny", "ddp-cnn-1x4:tiny"}


def test_report_writes_plots_a_page_and_a_projection(tmp_path, baseline_dir):
    run = write_run(tmp_path / "run", make_case(bytes_per_step=10e6), make_case("ddp-cnn-1x4", world=4, step_s=0.04))
    done = real_cli("report", run, "--out", tmp_path / "report", "--baseline-dir", baseline_dir)
    assert done.returncode == 0, done.stderr
    pngs = sorted(p.name for p in (tmp_path / "report").glob("*.png"))
    assert pngs == ["bytes.png", "efficiency.png", "memory.png", "speedup.png"]
    assert all((tmp_path / "report" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    page = (tmp_path / "report" / "report.md").read_text()
    assert "![speedup](speedup.png)" in page and "| `ddp-cnn-1x2` | 21.0 | 5.00 (2) | measured" in page
    assert "Assumptions: link 100 Gbit/s per device" in page


# --- the verdict and the bootstrap, as properties ---------------------------------------------------------

fractions = st.floats(min_value=0.01, max_value=0.3)
values = st.floats(min_value=0.05, max_value=2.0)


@given(base=values, tol=fractions, where=st.floats(0, 1), half=st.floats(0, 0.5), bnoise=st.floats(0, 0.5))
def test_inside_tolerance_never_regresses(base, tol, where, half, bnoise):
    value = base * (1 - tol + 2 * tol * where)
    est = stats.Estimate(value=value, low=value * (1 - half), high=value * (1 + half))
    verdict = V.higher_is_better(est, Reference(value=base, tolerance=tol), "c", baseline_noise=bnoise)
    assert verdict.status in (V.OK, V.NOISY) and not verdict.failed


@given(base=values, tol=fractions, drop=st.floats(0.01, 0.9), share=st.floats(0, 0.99))
def test_outside_tolerance_and_noise_always_regresses(base, tol, drop, share):
    low = base * (1 - tol)
    value = low * (1 - drop)
    room = low / value - 1  # the widest band that still leaves value * (1 + band) below the limit
    est = stats.Estimate(value=value, low=value * (1 - share * room), high=value * (1 + share * room))
    verdict = V.higher_is_better(est, Reference(value=base, tolerance=tol), "c")
    assert verdict.status == V.REGRESSED and verdict.failed
    assert verdict.message.startswith(f"efficiency {value:.3f} is below baseline {base:.3f}")


@given(base=values, tol=fractions, where=st.floats(0, 1), half=st.floats(0.11, 5))
def test_huge_spread_inside_the_band_is_noisy(base, tol, where, half):
    value = base * (1 - tol + 2 * tol * where)
    est = stats.Estimate(value=value, low=value * (1 - min(half, 0.99)), high=value * (1 + half))
    verdict = V.higher_is_better(est, Reference(value=base, tolerance=tol), "c", noisy_limit=0.1)
    assert verdict.status == V.NOISY and not verdict.failed and verdict.failed_strict()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.001, 1.0), min_size=3, max_size=40))
def test_bootstrap_interval_holds_the_median_and_repeats(steps):
    est = stats.median_ci(steps, resamples=200)
    assert est.low <= est.value <= est.high and est.low >= min(steps) and est.high <= max(steps)
    assert est == stats.median_ci(steps, resamples=200)


@settings(max_examples=30, deadline=None)
@given(st.floats(0.01, 1.0), st.integers(3, 30), st.integers(1, 8))
def test_constant_steps_give_an_exact_efficiency(step, n, world):
    est = stats.efficiency_estimate([step] * n, 32 * world, [step] * n, 32, world, resamples=100)
    assert math.isclose(est.value, 1.0) and math.isclose(est.low, 1.0) and math.isclose(est.high, 1.0)


def test_too_few_steps_cannot_bound_themselves():
    assert stats.median_ci([1.0, 2.0]).half_width_rel == math.inf
    verdict = V.higher_is_better(stats.median_ci([1.0, 2.0]), Reference(value=1.5, tolerance=0.1), "c")
    assert verdict.status == V.NOISY


def test_tolerance_marker_is_validated():
    assert V.tolerance_overrides((), {"efficiency": 0.15}) == {"efficiency": 0.15}
    with pytest.raises(ScalegateError, match="unknown metric 'eficiency'"):
        V.tolerance_overrides((), {"eficiency": 0.15})
    with pytest.raises(ScalegateError, match="keywords only"):
        V.tolerance_overrides((0.1,), {})


def test_update_from_several_launches_records_their_spread_as_noise(tmp_path):
    runs = [write_run(tmp_path / f"launch{i}", make_case(step_s=s)) for i, s in enumerate((0.030, 0.033, 0.036))]
    done = cli("update-baselines", *runs, "--baseline-dir", tmp_path / "b", "--tolerance", "0.1")
    assert done.returncode == 0, done.stderr
    entry = json.loads((tmp_path / "b" / f"{PROFILE}.json").read_text())["cases"]["ddp-cnn-1x2:tiny"]
    middle = 0.021 / 0.033  # the median launch
    assert math.isclose(entry["efficiency"]["value"], middle, rel_tol=1e-3)
    spread = 1.96 * 1.4826 * (middle - 0.021 / 0.036) / middle  # MAD of the three efficiencies
    assert entry["noise_rel"] == pytest.approx(spread, rel=0.02)


def test_update_refuses_if_any_launch_failed_correctness(tmp_path):
    good = write_run(tmp_path / "good", make_case())
    bad = write_run(tmp_path / "bad", make_case(status="failed", problems=("gradient agreement failed",)))
    done = cli("update-baselines", good, bad, "--baseline-dir", tmp_path / "b")
    assert done.returncode == 2 and "failed correctness" in done.stderr


def test_record_baselines_refuses_bad_rounds_and_makes_one_launch_per_case_per_round(tmp_path):
    from scalegate.cli import record_baselines

    done = cli("record-baselines", "--rounds", "0", "--baseline-dir", tmp_path)
    assert done.returncode == 2 and "--rounds 0 is not in 1..100" in done.stderr and "HINT:" in done.stderr
    argv = record_baselines.round_argv(["-k", "ddp", "--scaling-launches", "10"], tmp_path / "r")
    # the round's own settings come last and win: relaunches would make the launches consecutive again
    assert argv[argv.index("-k") - 1] == "scaling_tests" and argv[-7:-1] == record_baselines.ROUND
    assert (
        record_baselines.round_argv(["tests/test_cli.py", "-k", "x"], tmp_path)[5] == "tests/test_cli.py"
    )  # no scaling_tests


def test_a_gate_whose_parity_cases_all_skip_goes_on_without_parity(tmp_path, capsys):
    """On one GPU the parity pair (1x2) skips with its reason, so its session opens no run: the gate goes on
    without parity. The first H100 run stopped there ("the gate's parity session wrote no run"). A real pytest
    session of a repository whose parity test only skips."""
    from scalegate.cli import gate
    from scalegate.gate import pairing
    from scalegate.gate.plan import GatePlan
    from scalegate.gate.project import PARITY_TEST, Project
    from scalegate.gate.sessions import Sessions

    root = tmp_path / "team"
    (root / "scaling_tests").mkdir(parents=True)
    (root / PARITY_TEST).write_text(
        "import pytest\n\n\ndef test_pair():\n    pytest.skip('topology 1x2 needs 2 GPUs per node, this node has 1')\n"
    )
    args, extra = gate.namespace()
    args.forward = extra
    plan = GatePlan.build(args, Project(root=root, parity=[PARITY_TEST]))
    assert pairing.parity(plan, root, tmp_path / "gate", sessions=Sessions()) == (None, 0)
    assert "gate: parity: every parity case was skipped here" in capsys.readouterr().out
