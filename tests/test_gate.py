"""The efficiency gate, end to end, as a user runs it: record a baseline, inject a slowdown, fail.

Also shows the pytest-benchmark integration: each scaling case is a benchmark whose rounds are the
measured steps, so --benchmark-json/--benchmark-autosave/--benchmark-compare-fail work.
"""

import json
import os
import subprocess
import sys

import pytest

from scalegate.launch import netns
from tests.conftest import ROOT
from tests.repos import SLOW_COMMIT, SLOW_DDP, base_trees_left, checkout_repo, commit_change, slow_commit

pytestmark = pytest.mark.slow

CASE = [
    "-k",
    "ddp-cnn-1x2 and not parity",  # parity's pair matches the id too; its gate has its own tests (test_parity_gate)
    "--scaling-models",
    "cnn",
    "--scaling-strategies",
    "single,ddp",
    "--scaling-topologies",
    "1x1,1x2",
    "--scaling-steps",
    "15",
    "--scaling-warmup",
    "3",
    "--scaling-tolerance",
    "0.25",
]


def _record(tmp_path, suite) -> list[str]:
    """Record a baseline for ddp-cnn-1x2 as a user does; the arguments of later runs against it."""
    baselines, storage = tmp_path / "baselines", tmp_path / "bench"
    common = CASE + ["--scaling-baseline-dir", str(baselines), "--benchmark-storage", str(storage)]
    first = suite(
        *common, "--scaling-update-baselines", "--benchmark-autosave", "--benchmark-json", str(tmp_path / "bench.json")
    )
    assert first.returncode == 0, first.stdout + first.stderr
    assert "no baseline for" in first.stdout
    assert "baselines updated:" in first.stdout and "+ ddp-cnn-1x2:tiny: efficiency" in first.stdout
    (profile_file,) = baselines.glob("*.json")
    entry = json.loads(profile_file.read_text())["cases"]["ddp-cnn-1x2:tiny"]
    assert entry["efficiency"]["value"] > 0 and entry["provenance"]["schema_version"] == 1

    (bench,) = json.loads((tmp_path / "bench.json").read_text())["benchmarks"]
    assert bench["param"] == "ddp-cnn-1x2" and bench["stats"]["rounds"] == 15
    assert {"speedup", "efficiency", "world_size", "topology", "strategy", "model", "preset"} <= set(
        bench["extra_info"]
    )
    assert bench["extra_info"]["world_size"] == 2
    return common


@pytest.mark.timing
def test_baseline_then_injected_delay_fails(tmp_path, suite, monkeypatch):
    monkeypatch.setenv("SCALEGATE_CONFIRM_PAUSE_S", "1")  # the injected delay is far beyond a slow phase of the host
    common = _record(tmp_path, suite)
    # ~40 ms of extra "communication" on every step of a ~30 ms step: efficiency drops well past 25%.
    slow = suite(
        *common, "--scaling-inject-delay-ms", "40", "--benchmark-compare", "--benchmark-compare-fail=median:30%"
    )
    assert slow.returncode == 1, slow.stdout + slow.stderr
    # the local (same-launch) efficiency decides; a regression needs a second launch (docs/gate.md)
    assert "ddp-cnn-1x2: local efficiency" in slow.stdout and "below baseline" in slow.stdout
    assert "over 2 launches (" in slow.stdout and "[ddp-cnn-1x2:tiny on " in slow.stdout
    assert "a 25% drop explains it better than no change" in slow.stdout  # --scaling-tolerance is the drop to catch
    assert "Performance has regressed" in slow.stdout + slow.stderr


@pytest.mark.nightly  # nightly: the false-alarm side; clean verdicts on recorded numbers: tests/test_judge.py, tests/test_ab_replay.py
def test_a_clean_run_passes_against_the_baseline_it_recorded(tmp_path, suite):
    common = _record(tmp_path, suite)
    clean = suite(*common)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "regressed" not in clean.stdout  # ok, or improved if the machine was busier while recording


@pytest.mark.nightly  # nightly: the classic gate over several launches; its verdicts on recorded numbers: tests/test_judge.py
def test_several_launches_are_judged_together(tmp_path, suite):
    # the classic gate (no same-launch pairs): several launches against the session's reference launches
    run = suite(
        "-k",
        "ddp-cnn-1x2",
        "--scaling-models",
        "cnn",
        "--scaling-strategies",
        "ddp",
        "--scaling-topologies",
        "1x2",
        "--scaling-steps",
        "5",
        "--scaling-warmup",
        "1",
        "--scaling-launches",
        "2",
        "--scaling-local-steps",
        "0",
        "--scaling-tolerance",
        "0.5",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    case = tmp_path / "results" / "latest" / "ddp-cnn-1x2.json"
    data = json.loads(case.read_text())
    assert len(data["launch_efficiencies"]) == 2 and data["efficiency"] == pytest.approx(
        sum(data["launch_efficiencies"]) / 2
    )  # the median of two launches
    assert len(data["record"]["reference_step_times_s"]) == 10  # two reference launches of 5 steps, pooled
    assert data["gate"] == "classic" and data["launches"] == 2
    assert "(median of 2 launches: " in data["message"]
    assert len(list(case.parent.glob("ddp-cnn-1x2*/spec.json"))) == 2


def test_require_baseline_fails_a_machine_without_one(tmp_path, suite):
    run = suite(
        "-k",
        "single-cnn-1x1",
        "--scaling-models",
        "cnn",
        "--scaling-strategies",
        "single",
        "--scaling-steps",
        "3",
        "--scaling-warmup",
        "1",
        "--scaling-baseline-dir",
        str(tmp_path / "empty"),
        "--scaling-require-baseline",
    )
    assert run.returncode == 1
    assert "no baseline for single-cnn-1x1:tiny on" in run.stdout


GATE_CASE = [
    "-k",
    "(ddp-cnn-1x2 or single-cnn-1x1) and not parity",  # the gate's parity session then has nothing to run
    "--scaling-strategies",
    "single,ddp",
    "--scaling-steps",
    "10",
    "--scaling-warmup",
    "2",
]


def gate(tmp_path, *args: str, env: dict | None = None, cwd=ROOT):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "scalegate",
            "gate",
            "--results-dir",
            str(tmp_path / "gate"),
            "--markdown",
            str(tmp_path / "gate.md"),
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.nightly
def test_the_gate_command_fails_a_slowdown_applied_from_outside(tmp_path, suite):
    bases = tmp_path / "baselines"
    recorded = suite(
        "--scaling-models",
        "cnn",
        *GATE_CASE,
        "--scaling-baseline-dir",
        str(bases),
        "--scaling-update-baselines",
        "--scaling-launches",
        "4",
    )
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_DDP)
    slow = gate(
        tmp_path, *GATE_CASE, "--scaling-baseline-dir", str(bases), env={"PYTHONPATH": str(site), "SLOW_DDP_MS": "12"}
    )
    assert slow.returncode == 1, slow.stdout + slow.stderr
    table = (tmp_path / "gate.md").read_text()
    assert table.startswith("### scalegate: PR gate:") and "**FAIL**" in table
    assert "| `ddp-cnn-1x2:tiny` | 2 |" in table and "❌ regressed" in table and "| local |" in table
    assert "local efficiency" in table and "below baseline" in table
    # the confirmation came from a later round: one launch per undecided case per round, a fresh session each
    assert "gate: round 1 done" in slow.stdout and "undecided: [ddp-cnn-1x2]" in slow.stdout
    assert "gate: round 2 done" in slow.stdout
    merged = json.loads((tmp_path / "gate" / "latest" / "ddp-cnn-1x2.json").read_text())
    assert merged["launches"] >= 2 and merged["rounds"] == merged["launches"]
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "scalegate",
            "compare",
            str(tmp_path / "gate" / "latest"),
            "--baseline-dir",
            str(bases),
            "--require-baseline",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 1 and "❌ regressed" in again.stdout  # compare re-judges the gate's merged record


def throwaway_repo(where):
    """This checkout as a fresh repository of two commits: the base, and a head that slows DDP's step."""
    checkout_repo(where)
    commit_change(where, "head: a synchronous check in DDP's step", SLOW_COMMIT)
    return where


AB_ARGS = [*GATE_CASE, "--scaling-local-steps", "20"]


def _ab(repo, tmp_path, base: str, *extra: str, gap_s: str = "30") -> subprocess.CompletedProcess:
    return gate(tmp_path, "--base", base, *AB_ARGS, *extra, env={"SCALEGATE_ROUND_GAP_S": gap_s}, cwd=repo)


def _assert_ab_gate_failed(run, tmp_path, repo, case_id: str) -> str:
    """What a user reads of an A/B gate that failed a slower head in a duet: the table's header, rows and paired
    verdict, the cost line, the bound threads, the second round, both sides' launches, the base tree removed, and
    ``compare`` re-judging the merged run the same way. The table."""
    assert run.returncode == 1, run.stdout[-4000:] + run.stderr[-4000:]
    table = (tmp_path / "gate.md").read_text()
    assert table.startswith("### scalegate: PR gate (A/B):") and "against HEAD~1 (" in table and "**FAIL**" in table
    assert "| a/b |" in table and "(base commit)" in table and "❌ regressed" in table
    # base and head took turns step by step (docs/duet.md): the verdict is the duet's paired efficiency ratio
    assert "below 1.000 (the base commit, step by step)" in table and "a 5% drop explains it better" in table
    assert "duet against the base commit" in table and "Paired: base and head took turns step by step" in table
    assert "Cost: " in table and "device-minutes" in table  # the gate's wall and nodes x devices x wall
    assert "gloo's threads bound with each rank" in table  # contract/affinity.py: --scaling-duet-threads auto
    assert "gate: A/B," in run.stdout and "gate: round 2 done" in run.stdout  # a drop is confirmed by a second round
    # both commits ran in every round; the base's checkout is gone afterwards
    latest = tmp_path / "gate" / "latest"
    assert (
        json.loads((latest / f"{case_id}.json").read_text())["launches"]
        == len(json.loads((latest / "base" / f"{case_id}.json").read_text())["record"]["launches"])
        >= 2
    )
    assert not base_trees_left(repo)
    again = subprocess.run(
        [sys.executable, "-m", "scalegate", "compare", str(latest), "--base-run", str(latest / "base")],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 1 and "❌ regressed" in again.stdout and "(A/B)" in again.stdout  # the same judge
    return table


@pytest.mark.nightly  # the default tier's A/B gate is the emulated 2x1 one below, asserting the same table and files
def test_the_ab_gate_fails_a_commit_that_slows_ddp(tmp_path):
    """A/B on one node's 1x2: the smallest case, few steps, rounds 5 s apart (the injected drop is far beyond the
    host's slow phases). The A/B verdicts' statistics replay recorded rounds (tests/test_ab_replay.py); the A/A run of
    the whole command is nightly (below)."""
    repo = throwaway_repo(tmp_path / "repo")
    table = _assert_ab_gate_failed(_ab(repo, tmp_path, "HEAD~1", gap_s="5"), tmp_path, repo, "ddp-cnn-1x2")
    assert "`ddp-cnn-1x2:tiny`" in table


def test_a_time_budget_stops_the_gate_and_says_why_in_the_table(tmp_path):
    """``--max-minutes``: no round starts that would end past the budget. An A/B case needs two rounds for either
    verdict (policy.py MIN_ROUNDS), so a budget shorter than one round stops the gate after its first: the case
    is judged on that round (noisy, not failing) and the table says why, as the JSON does."""
    repo = tmp_path / "repo"
    checkout_repo(repo)
    cut = _ab(repo, tmp_path, "HEAD", "--max-minutes", "0.01", "--json", str(tmp_path / "gate.json"), gap_s="5")
    assert cut.returncode == 0, cut.stdout[-4000:] + cut.stderr[-4000:]
    said = "the gate stopped after round 1: another round (up to "
    assert f"gate: {said}" in cut.stdout and "gate: round 2" not in cut.stdout
    table = (tmp_path / "gate.md").read_text()
    assert f"Note: {said}" in table and "ended past its time budget (--max-minutes); [ddp-cnn-1x2] judged on 1" in table
    assert "regressed" not in table and "noisy" in table
    notes = json.loads((tmp_path / "gate.json").read_text())["notes"]
    assert len(notes) == 1 and notes[0].startswith(said)
    bad = gate(tmp_path, "--max-minutes", "0", cwd=repo)
    assert bad.returncode == 2 and "--max-minutes 0: the gate's time budget must be more than 0" in bad.stderr
    assert "HINT: " in bad.stderr and "Traceback" not in bad.stderr
    # a multi-node allocation relaunches inside one session: refused, not silently unbounded
    step = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "n[1-2]"}
    multi = gate(tmp_path, "--max-minutes", "5", env=step, cwd=repo)
    assert multi.returncode == 2 and "--max-minutes stops the gate between rounds" in multi.stderr
    assert "HINT: bound the job with sbatch --time" in multi.stderr


@pytest.mark.nightly
def test_the_ab_gate_passes_a_commit_against_itself(tmp_path):
    """A/A with the shipped 30 s between rounds, within a short budget."""
    repo = throwaway_repo(tmp_path / "repo")
    same = _ab(repo, tmp_path, "HEAD", "--scaling-max-launches", "3")
    assert same.returncode == 0, same.stdout[-4000:] + same.stderr[-4000:]
    assert "regressed" not in (tmp_path / "gate.md").read_text()


def test_the_ab_gate_refuses_an_unknown_base(tmp_path):
    bad = gate(tmp_path, "--base", "no-such-ref")
    assert (
        bad.returncode == 2
        and "--base 'no-such-ref' is not a commit of" in bad.stderr
        and "HINT: fetch it" in bad.stderr
    )
    assert "Traceback" not in bad.stderr


def test_the_gate_command_exits_2_on_bad_input(tmp_path):
    bad = gate(tmp_path, "--scaling-models", "nosuch")
    assert bad.returncode == 2 and "unknown name(s) 'nosuch'" in bad.stdout + bad.stderr
    assert "the scaling suite could not run (pytest exit code 4" in bad.stderr and "Traceback" not in bad.stderr
    nothing = gate(tmp_path, "-k", "no-such-case-id")
    assert nothing.returncode == 2


@pytest.mark.nightly  # nightly: record-baselines end to end; its merging is unit-tested in tests/test_cli.py
def test_record_baselines_merges_rounds_of_single_launches(tmp_path):
    """Two rounds of ddp-cnn-1x2 (and its reference): one baseline entry from both rounds' launches."""
    bases = tmp_path / "baselines"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scalegate",
            "record-baselines",
            "--rounds",
            "2",
            "--results-dir",
            str(tmp_path / "results"),
            "--baseline-dir",
            str(bases),
            "--local-tolerance",
            "0.2",
            "scaling_tests/test_scaling.py",
            "-k",
            "ddp-cnn-1x2 or single-cnn-1x1",
            "--scaling-models",
            "cnn",
            "--scaling-strategies",
            "single,ddp",
            "--scaling-steps",
            "5",
            "--scaling-warmup",
            "1",
            "--scaling-local-steps",
            "10",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "record-baselines: round 1/2 done" in done.stdout and "record-baselines: round 2/2 done" in done.stdout
    rounds_made = sorted(p.name for p in (tmp_path / "results").glob("record-*/round-*"))
    assert rounds_made == ["round-01", "round-02"]
    entry = json.loads(next(bases.glob("*.json")).read_text())["cases"]["ddp-cnn-1x2:tiny"]
    assert entry["local_efficiency"]["launches"] == 2 and entry["local_efficiency"]["tolerance"] == 0.2


EMULATED_CASE = [
    "-k",
    "(ddp-cnn-2x1 or single-cnn-1x1) and not parity",
    "--scaling-strategies",
    "single,ddp",
    "--scaling-topologies",
    "1x1,2x1",
    "--scaling-steps",
    "10",
    "--scaling-warmup",
    "2",
    "--scaling-local-steps",
    "20",
    "--scaling-max-launches",
    "4",
]


@pytest.mark.skipif(
    netns.available() is not None, reason=f"emulated nodes need network namespaces: {netns.available()}"
)
@pytest.mark.nightly  # a minute of paired rounds across emulated nodes; the two-node gate: tests/test_ledger.py
@pytest.mark.timing
def test_an_ab_gate_on_emulated_nodes_pairs_across_them_and_fails_a_slower_head(tmp_path):
    """The default tier's end-to-end A/B gate. Emulated 2x1 (two network namespaces on this machine, a capped link
    between them) in a real duet: the head's DDP step waits 25 ms on the host in every rank (a synchronous check). The
    ranks inside the namespaces reach the gate's coordinator at its unix socket path, both sides' fabrics run side by
    side, every launch took turns, and the duet's timing verdict fails the case (a head that doubles the bytes between
    the nodes fails it on its bytes first: tests/test_gate_nodes.py). The A/B verdicts' statistics replay recorded
    rounds (tests/test_ab_replay.py); the same gate on one node's 1x2 and the A/A run of the command are nightly."""
    repo = tmp_path / "repo"
    checkout_repo(repo)
    commit_change(repo, "head: a synchronous check in DDP's step", slow_commit(25))
    run = gate(tmp_path, "--base", "HEAD~1", *EMULATED_CASE, env={"SCALEGATE_ROUND_GAP_S": "1"}, cwd=repo)
    table = _assert_ab_gate_failed(run, tmp_path, repo, "ddp-cnn-2x1")
    assert "`ddp-cnn-2x1:tiny`" in table, table
    latest = tmp_path / "gate" / "latest"
    duet = json.loads((latest / "duet.json").read_text())
    assert duet["duet"] and not any(j["solo"] or j["failed"] for j in duet["jobs"].values()), duet
    assert {j["job"] for j in duet["jobs"].values()} == {"ddp-cnn-2x1", "single-cnn-1x1"}
    sides = (latest, latest / "base")
    for case in (json.loads((d / "ddp-cnn-2x1.json").read_text()) for d in sides):
        assert case["result"]["launch"]["shaped"] and case["result"]["launch"]["launcher"] == "emulated"
        assert {launch["duet"] for launch in case["record"]["launches"]} == {"paired"}, case["record"]
    assert not [n for n in netns.list_namespaces() if "ddpcnn2x1" in n]  # both sides' fabrics removed


@pytest.mark.nightly  # two to four swap rounds of ddp-cnn-1x2 and its reference: ~2 min here
def test_the_swap_pairing_swaps_each_job_out_between_its_turns_and_fails_a_slower_head(tmp_path):
    """``--pairing swap`` (a model that cannot be resident twice, paired in turns): both sides' jobs take turns of 10
    steps, each rank's state copied out when it gives its turn back and home when it takes the next; the verdict and
    the PR line name the pairing, every rank says what it swapped, and a head whose DDP step waits 25 ms fails."""
    repo = tmp_path / "repo"
    checkout_repo(repo)
    commit_change(repo, "head: a synchronous check in DDP's step", slow_commit(25))
    run = _ab(repo, tmp_path, "HEAD~1", "--pairing", "swap", "--turn-steps", "10", "--scaling-steps", "40", gap_s="1")
    assert run.returncode == 1, run.stdout[-4000:] + run.stderr[-4000:]
    table = (tmp_path / "gate.md").read_text()
    assert "❌ regressed" in table and "in turns of 10 steps, the idle job's state copied out and back" in table
    assert "Paired: base and head took turns 10 steps at a time, the idle job's training state swapped out" in table
    latest = tmp_path / "gate" / "latest"
    for rank in (latest / "base").glob("**/ddp-cnn-1x2/ranks/rank*.json"):
        swap = json.loads(rank.read_text())["extra"]["duet"]["swap"]
        assert swap["swaps"] >= 2 and swap["swap_bytes"] > 0 and not swap["freed"], swap  # on CPU: copied, kept


@pytest.mark.nightly  # three to five alternate rounds of ddp-cnn-1x2 and its reference: ~3 min here
def test_the_alternate_pairing_keeps_one_job_resident_and_fails_a_slower_head(tmp_path):
    """``--pairing alternate`` (a model that cannot be resident twice): the two sides' whole jobs of a case run one at
    a time, back to back in ABBA order; the verdict names the pairing that ran, and a head whose DDP step waits 25 ms
    on the host fails."""
    repo = tmp_path / "repo"
    checkout_repo(repo)
    commit_change(repo, "head: a synchronous check in DDP's step", slow_commit(25))
    run = _ab(repo, tmp_path, "HEAD~1", "--pairing", "alternate", "--scaling-steps", "40", gap_s="1")
    assert run.returncode == 1, run.stdout[-4000:] + run.stderr[-4000:]
    table = (tmp_path / "gate.md").read_text()
    assert "❌ regressed" in table and "whole jobs alternating with the base commit's" in table
    assert "Paired: base and head took turns one whole job at a time, one resident at once" in table
    jobs = json.loads((tmp_path / "gate" / "latest" / "duet.json").read_text())["jobs"].values()
    spans = sorted((j["first_turn_s"], j["ended_s"]) for j in jobs)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), spans  # never two jobs at work
