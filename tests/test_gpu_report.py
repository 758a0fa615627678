"""The GPU acceptance report on CPU: the rows a phase's files give (JUnit and case JSON, with the checks only a
GPU run passes), and the page written from a recorded JSON (tests/assets/gpu_acceptance/)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scalegate.cli.main import main
from scalegate.report import acceptance, acceptance_page
from scalegate.report.acceptance import FAILED, PASSED, SKIPPED

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "assets" / "gpu_acceptance" / "nvidia-h100-80gb-hbm3-2026-11-24.json"
MiB = 2**20


# --- the rows a phase's files give --------------------------------------------------------------------------------


def gpu_case(case_id: str, nvml_mib=(1450,), allocated_mib=(402,), **over) -> dict:
    """One <case>.json as harness/scalegate/session.py writes it on a GPU (the fields the rows read)."""
    strategy = over.pop("strategy", case_id.rsplit("-", 2)[0])
    case = {
        "case_id": case_id,
        "status": "no-baseline",
        "mfu": 0.0213,
        "mfu_unavailable": "",
        "peak_source": "NVIDIA H100 datasheet (SXM), dense: 67 TFLOP/s fp32",
        "local_efficiency": None,
        "spec": {"strategy": strategy, "topology": case_id.rsplit("-", 1)[1]},
        "record": {"world_size": len(nvml_mib)},
        "result": {"median_step_s": 0.00412, "throughput": 31067.9},
        "resources": {
            "memory_source": "nvml",
            "peak_memory_bytes": [m * MiB for m in nvml_mib],
            "cuda_memory": [{"max_allocated": a * MiB, "max_reserved": 2 * a * MiB} for a in allocated_mib],
            "wire": {"bytes_per_step": 0, "source": "netns:lo"},
            "compile_s": None,
            "ledger": {},
        },
    }
    for key, value in over.items():
        target = case["resources"] if key in case["resources"] else case
        target[key] = value
    return case


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="scaling_tests.test_scaling" name="test_scaling[single-cnn-1x1]" time="4.1" />
<testcase classname="scaling_tests.test_scaling" name="test_scaling[fsdp1-cnn-1x1]" time="5.0" />
<testcase classname="scaling_tests.test_scaling" name="test_scaling[ddp-cnn-1x2]" time="0.0">
<skipped type="pytest.skip" message="topology 1x2 needs 2 GPUs per node, this node has 1">skip</skipped></testcase>
<testcase classname="scaling_tests.test_scaling" name="test_scaling[fabric-fsdp-cnn-1x1]" time="0.0">
<skipped type="pytest.skip" message="fabric-fsdp: Lightning refuses CPU: &quot;You selected the FSDP strategy&quot;">s</skipped>
</testcase>
<testcase classname="scaling_tests.test_scaling" name="test_scaling[deepspeed-zero1-cnn-1x1]" time="3.0">
<failure message="AssertionError: gradients disagree: worst fc1.weight rel 3e-2&#10;second line">tb</failure></testcase>
</testsuite></testsuites>"""


def _phase_dir(tmp_path: Path, cases: list[dict], junit: str | None = JUNIT) -> Path:
    run = tmp_path / "phase" / "20261124-120000-1"
    run.mkdir(parents=True)
    (tmp_path / "phase" / "latest").symlink_to(run.name)
    for case in cases:
        (run / f"{case['case_id']}.json").write_text(json.dumps(case))
    if junit is not None:
        (tmp_path / "phase" / "junit.xml").write_text(junit)
    return tmp_path / "phase"


def test_rows_join_junit_outcomes_with_the_case_files_and_the_gpu_checks(tmp_path):
    cases = [gpu_case("single-cnn-1x1"), gpu_case("fsdp1-cnn-1x1", nvml_mib=(300,), allocated_mib=(410,))]
    phase = _phase_dir(tmp_path, cases)
    rows = {r.case_id: r for r in acceptance.pytest_rows("matrix-1x1", phase / "junit.xml", phase, compiled=False)}
    single = rows["single-cnn-1x1"]
    assert (single.outcome, single.step_s, single.mfu, single.problems) == (PASSED, 0.00412, 0.0213, [])
    assert (single.nvml_peak_bytes, single.allocator_peak_bytes) == ([1450 * MiB], [402 * MiB])
    assert rows["fsdp1-cnn-1x1"].outcome == FAILED
    assert rows["fsdp1-cnn-1x1"].problems == [
        "rank 0: NVML peak 300 MiB is below the allocator's max_memory_allocated 410 MiB"
    ]
    assert (rows["ddp-cnn-1x2"].outcome, rows["ddp-cnn-1x2"].world_size) == (SKIPPED, 2)
    assert rows["ddp-cnn-1x2"].reason == "topology 1x2 needs 2 GPUs per node, this node has 1"
    # a CPU refusal on a CUDA machine means the run did not see its GPU
    assert rows["fabric-fsdp-cnn-1x1"].outcome == FAILED and rows["fabric-fsdp-cnn-1x1"].strategy == "fabric-fsdp"
    assert rows["fabric-fsdp-cnn-1x1"].problems[0].startswith("skipped as on a CPU, on a CUDA machine")
    failed = rows["deepspeed-zero1-cnn-1x1"]
    assert failed.outcome == FAILED and failed.reason == "AssertionError: gradients disagree: worst fc1.weight rel 3e-2"


@pytest.mark.parametrize(
    "over, problem",
    [
        ({"memory_source": "rss (nvml unavailable: NVMLError_LibraryNotFound)"}, "not NVML"),
        ({"cuda_memory": [{}]}, "no torch.cuda.max_memory_allocated recorded"),
        ({"mfu": None, "peak_source": "", "mfu_unavailable": "n/a: 'NVIDIA X9' is not in the peak table"}, "MFU None"),
        ({"peak_source": "measured: best 512x512 fp32 matmul"}, "MFU is not against a datasheet peak"),
        ({"ledger": {"unavailable": "rank 0: no process group"}}, "no collective ledger: rank 0: no process group"),
    ],
)
def test_a_passed_case_without_what_a_gpu_shows_fails_naming_it(tmp_path, over, problem):
    phase = _phase_dir(tmp_path, [gpu_case("single-cnn-1x1", **over)], junit=JUNIT)
    row = next(
        r for r in acceptance.pytest_rows("m", phase / "junit.xml", phase, False) if r.case_id.startswith("single")
    )
    assert row.outcome == FAILED and any(problem in p for p in row.problems), row.problems


def test_a_compiled_case_must_record_its_compile_time(tmp_path):
    phase = _phase_dir(tmp_path, [gpu_case("single-cnn-1x1")])
    row = next(
        r for r in acceptance.pytest_rows("compile", phase / "junit.xml", phase, True) if r.case_id.startswith("single")
    )
    assert row.problems == ["compile time None: --scaling-compile left no compile_s"]


def test_a_session_killed_at_its_budget_leaves_its_finished_cases_as_failed_rows(tmp_path):
    phase = _phase_dir(tmp_path, [gpu_case("single-cnn-1x1")], junit=None)
    (row,) = acceptance.pytest_rows("matrix-1x1", phase / "junit.xml", phase, False)
    assert (row.case_id, row.outcome, row.reason) == ("single-cnn-1x1", FAILED, "its session did not finish")


def test_the_gate_phases_rows_carry_its_verdicts(tmp_path):
    phase = _phase_dir(tmp_path, [gpu_case("single-cnn-1x1"), gpu_case("ddp-cnn-1x2", (900, 910), (300, 300))], None)
    verdicts = {
        "parity": [{"case_id": "parity-fabric-ddp-vs-ddp-cnn-1x2", "problems": [], "status": "ok", "ratio": 1.01}],
        "cases": [
            {"case_id": "single-cnn-1x1", "status": "ok", "failed": False, "messages": []},
            {"case_id": "ddp-cnn-1x2", "status": "regressed", "failed": True, "messages": ["A/B: -14% (tol 10%)"]},
        ],
    }
    (phase / "gate.json").write_text(json.dumps(verdicts))
    rows = {r.case_id: r for r in acceptance.gate_rows("ab-gate", phase / "gate.json", phase)}
    assert (rows["single-cnn-1x1"].outcome, rows["single-cnn-1x1"].verdict) == (PASSED, "ok")
    assert (rows["ddp-cnn-1x2"].outcome, rows["ddp-cnn-1x2"].reason) == (FAILED, "A/B: -14% (tol 10%)")
    assert rows["parity-fabric-ddp-vs-ddp-cnn-1x2"].outcome == PASSED


# --- the report, from a recorded JSON -----------------------------------------------------------------------------


def test_the_page_from_a_recorded_json_has_every_case_with_its_figures():
    page = acceptance_page.markdown(acceptance_page.load(RECORDED))
    assert page.startswith("# GPU acceptance: NVIDIA H100 80GB HBM3 x1, 2026-11-24\n\n**FAILED** (2 failure(s), below)")
    header = "| phase | case | result | step ms | samples/s | MFU | peak MiB NVML / allocator | MB/step | local eff"
    assert header in page
    assert "| matrix-1x1 | single-cnn-1x1 | passed | 4.12 | 31067.9 | 2.1% | 1450/402 | 0.00 | - | - |  |" in page
    assert (
        "| matrix-1x1 | dp-cnn-1x1 | skipped | - | - | - | - | - | - | - | dp (nn.DataParallel) needs >= 2 CUDA "
        "devices in one process; this node has 1 CUDA device |"
    ) in page
    assert "| compile | ddp-cnn-1x1 | passed | 2.98 | 42953.0 | 2.9% | 1540/388 | - | - | 21.4 |  |" in page
    assert "| matrix-1x2-nccl | the default matrix on 1x2 over NCCL | - | - | not run: needs 2 GPUs" in page


def test_the_page_says_what_was_verified_and_what_was_not_and_lists_the_failures():
    report = acceptance_page.load(RECORDED)
    said = dict(acceptance_page.coverage(report))
    assert said["torch.compile on CUDA for ddp and fsdp"].startswith("verified: 2 case(s)")
    assert said["NVML peak memory per rank, at or above torch.cuda.max_memory_allocated"] == "**failed**: fsdp1-cnn-1x1"
    assert said["FSDP1 (FullyShardedDataParallel)"].startswith("not verified: fsdp1-cnn-1x1 failed another check")
    assert said["NCCL across 2 ranks"] == (
        "not verified: phase matrix-1x2-nccl did not run (needs 2 GPUs on one node, this node has 1)"
    )
    assert said["Lightning Fabric fsdp and deepspeed"] == "not verified: no case of this run exercised it"
    assert acceptance_page.failures(report) == [
        "matrix-1x1: fsdp1-cnn-1x1: rank 0: NVML peak 300 MiB is below the allocator's max_memory_allocated 410 MiB",
        "ab-gate ran past its budget of 60 s and was stopped (log: results/gpu-acceptance/x/ab-gate/phase.log)",
    ]


def test_the_report_is_written_as_device_date_md_and_json_and_rendered_again_by_the_command(tmp_path, capsys):
    """The page goes to docs/gpu, its raw JSON beside the lab's other data (experiments/data/gpu): --render makes the
    page again from the JSON, into the pages' folder."""
    report = acceptance_page.load(RECORDED)
    md, raw = acceptance_page.write(report, tmp_path / "pages", tmp_path / "data")
    assert (md.parent.name, raw.parent.name) == ("pages", "data")
    assert (md.name, raw.name) == ("nvidia-h100-80gb-hbm3-2026-11-24.md", "nvidia-h100-80gb-hbm3-2026-11-24.json")
    assert json.loads(raw.read_text()) == report
    md.unlink()
    assert main(["selftest", "--render", str(raw), "--out", str(tmp_path / "pages")]) == 0
    assert md.read_text() == acceptance_page.markdown(report)


def test_a_second_run_on_the_same_device_and_day_gets_its_own_page_not_the_first_ones(tmp_path):
    first = acceptance_page.load(RECORDED)
    second = first | {"work_dir": "results/gpu-acceptance/later", "commit": "later"}
    md1, raw1 = acceptance_page.write(first, tmp_path)
    md2, raw2 = acceptance_page.write(second, tmp_path)
    assert (md2.name, raw2.name) == ("nvidia-h100-80gb-hbm3-2026-11-24-2.md", "nvidia-h100-80gb-hbm3-2026-11-24-2.json")
    assert json.loads(raw1.read_text()) == first and json.loads(raw2.read_text()) == second
    assert acceptance_page.paths(tmp_path, second) == (md2, raw2)  # --render finds a run's own page again


def test_a_recorded_json_that_is_not_a_report_is_refused_with_a_hint(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"schema": 1, "device": "NVIDIA H100"}))
    assert main(["selftest", "--render", str(bad), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "lacks date, phases, cases" in err and "HINT: " in err


def test_the_gpu_pages_table_gives_each_runs_commit_and_result_as_its_record_does():
    """docs/verified-on-gpu.md's table of runs: a row per page, its commit and its result (FAILED where the record
    lists a failure) as the record has them."""
    text = (ROOT / "docs" / "verified-on-gpu.md").read_text()
    rows = re.findall(r"^\| \[([\w.-]+)\]\(gpu/\1\.md\) \| [^|]+ \| (\S+) \| [^|]+ \| (\w+) \|", text, flags=re.M)
    pages = sorted(p.stem for p in (ROOT / "docs" / "gpu").glob("*.md"))
    assert sorted(r[0] for r in rows) == pages, "verified-on-gpu.md's table has a row per page under docs/gpu"
    for stem, commit, result in rows:
        report = acceptance_page.load(ROOT / "experiments" / "data" / "gpu" / f"{stem}.json")
        recorded = "FAILED" if acceptance_page.failures(report) else "passed"
        assert (commit, result) == (report["commit"], recorded), f"{stem}: the table says {commit} {result}"


def test_every_gpu_page_is_its_record_rendered_with_its_notes_and_no_record_is_test_data():
    """A page under docs/gpu is ``selftest --render`` of its record in experiments/data/gpu (and of the notes written
    by hand beside it), to the byte: an edited page, a renderer changed without rendering the pages again, or a page
    rendered from a test's fixture fails here."""
    pages = sorted((ROOT / "docs" / "gpu").glob("*.md"))
    assert pages
    for page in pages:
        raw = ROOT / "experiments" / "data" / "gpu" / f"{page.stem}.json"
        assert raw.is_file(), f"docs/gpu/{page.name} has no record {raw.relative_to(ROOT)}"
        assert "fixture" not in acceptance_page.load(raw), f"{raw.name} is a test's fixture, not a run"
        render = f"python -m scalegate selftest --render {raw.relative_to(ROOT)}"
        assert page.read_text() == acceptance_page.page(raw), f"docs/gpu/{page.name} is not its record's: {render}"


def test_a_pages_notes_by_hand_come_after_the_generated_page(tmp_path):
    raw = tmp_path / RECORDED.name
    raw.write_text(RECORDED.read_text())
    assert acceptance_page.page(raw) == acceptance_page.markdown(acceptance_page.load(raw))
    acceptance_page.notes_path(raw).write_text("## Notes by hand\n\nRerun by hand: passed.\n")
    md, _ = acceptance_page.write(acceptance_page.load(raw), tmp_path / "pages", tmp_path)
    generated = acceptance_page.markdown(acceptance_page.load(raw))
    assert md.read_text() == generated + "\n## Notes by hand\n\nRerun by hand: passed.\n"


def test_the_page_shows_each_launchs_gpu_state_where_the_cases_recorded_one():
    """A gate phase's case on a GPU (made-up NVML readings: no GPU here) shows its clocks and what capped them, round
    by round; a page of cases without any (this CPU's) has no such section."""
    state = {"sm_clock_mhz": [1410, 1980], "mem_clock_mhz": [2619, 2619], "temperature_c_max": 71, "power_w_max": 690}
    capped = {**state, "capped": ["sw_power_cap"], "persistence": True, "clocks_locked": False, "found_by": "UUID"}
    case = {"record": {"launches": [{"gpu_state": {**state, "capped": []}}, {"gpu_state": capped}]}}
    row = acceptance.judged("ab-gate", "ddp-resnet-1x1", acceptance.PASSED, "", case, compiled=False)
    lines = "\n".join(acceptance_page.gpu_state_lines([row]))
    assert (
        "| ab-gate | `ddp-resnet-1x1` | 2 | 1410–1980 | 2619–2619 | 71 | 690 | sw_power_cap | yes | no | UUID |"
        in lines
    )
    assert "| 1 | 1410–1980 |" in lines and "| nothing |" in lines
    assert (
        acceptance_page.gpu_state_lines([acceptance.judged("x", "ddp-cnn-1x2", acceptance.PASSED, "", {}, False)]) == []
    )


def test_the_ledger_under_nccl_is_shown_per_case_and_counts_as_verified(tmp_path):
    """A case file as a GPU session writes it today: the allocator's peak judged, NVML's beside it, and the ledger."""
    ledger = {"source": "c10d dispatcher", "steady": True, "intra": 0.0, "cross": 0.0, "calls": 1.0, "rows": [
        {"op": "all_reduce", "dtype": "float32", "size": 1, "span": "within a node", "groups": 1, "calls": 1.0,
         "bytes": 4_909_096.0, "intra": 0.0, "cross": 0.0}]}  # fmt: skip
    case = gpu_case("ddp-cnn-1x1", memory_source="cuda allocator (max_memory_allocated)", ledger=ledger)
    case["resources"].update(device_peak_bytes=[1450 * MiB], device_peak_source="nvml")
    junit = '<testsuites><testsuite><testcase name="test_scaling[ddp-cnn-1x1]" time="4" /></testsuite></testsuites>'
    phase = _phase_dir(tmp_path, [case], junit=junit)
    [row] = acceptance.pytest_rows("matrix-1x1", phase / "junit.xml", phase, False)
    assert row.problems == [] and row.memory_source == "nvml" and row.nvml_peak_bytes == [1450 * MiB]
    assert row.collectives == "1 x all_reduce in a group of 1 rank within a node (4.91 MB)"
    report = {"schema": 1, "device": "NVIDIA H200", "date": "2026-11-29", "phases": [], "cases": [row.to_dict()]}
    page = acceptance_page.markdown(report)
    assert "| matrix-1x1 | `ddp-cnn-1x1` | 1 x all_reduce in a group of 1 rank within a node (4.91 MB) |" in page
    assert (
        "| the collective ledger under NCCL: each case's collectives, counted from the dispatcher | verified: 1 case(s) (ddp-cnn-1x1) |"
        in page
    )
