"""The duet (docs/duet.md): the coordinator (launch/duet.py) and the ranks' client (measure/turns.py) over a real
socket, with rank threads standing in for rank processes; the paired estimate (judge/duet_pairs.py, judge/duet.py) on built records.

What must hold: one job at a time (never two jobs' steps at once), turns in ABBA order, a job without a partner runs
solo and says why, a rank that dies stops the partner naming side, rank and step, a turn never given back stops
both naming every rank's last step.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
import time

import pytest

from benchmarks import duet_estimators, duet_timeline
from scalegate import policy
from scalegate.judge import duet as paired
from scalegate.judge import duet_floors, duet_pairs
from scalegate.judge.evidence import LaunchRecord
from scalegate.launch.duet import Coordinator
from scalegate.measure.turns import DuetStopped, Turns
from scalegate.measure.turns import where as turns_where


class Ranks:
    """A job's ranks as threads: each asks for a turn before each of ``steps`` steps, as the loop does."""

    def __init__(
        self, c: Coordinator, side: str, job: str, world: int, steps: int, log: list, step_s=0.002, most_steps=0
    ) -> None:
        self.most_steps = most_steps
        self.errors: list[BaseException] = []
        self.stopped_in_turn: list[tuple[float, int, str]] = []  # (when, rank, why): a real rank's process exits there
        self.summaries: list[dict] = []
        self.threads = [
            threading.Thread(target=self.rank, args=(c, side, job, r, world, steps, log, step_s), daemon=True)
            for r in range(world)
        ]

    def rank(self, c, side, job, rank, world, steps, log, step_s) -> None:
        try:

            def stopped(why: str) -> None:
                self.stopped_in_turn.append((time.monotonic(), rank, why))

            turns = Turns(c.address, side, job, rank, world, lambda: None, most_steps=self.most_steps, stopped=stopped)
            turns.turn(-1)  # the setup's turn
            for step in range(steps):
                turns.turn(step - 1)
                log.append((time.monotonic(), side, step, rank, "start"))
                if callable(step_s):
                    step_s(side, step, rank)
                else:
                    time.sleep(step_s)
                log.append((time.monotonic(), side, step, rank, "end"))
            self.summaries.append(turns.summary())
            turns.leave(steps)
        except BaseException as exc:  # noqa: BLE001 - the test reads what the rank raised
            self.errors.append(exc)
            if not isinstance(exc, DuetStopped):
                turns.sock.close()  # a rank process that dies closes its connection with it

    def start(self) -> "Ranks":
        for t in self.threads:
            t.start()
        return self

    def join(self) -> None:
        for t in self.threads:
            t.join(timeout=60)


def _runs(log: list) -> list[str]:
    """The sides in the order their steps ran, one entry per step (ranks of a step merged)."""
    order: list[str] = []
    for _, side, step, rank, what in sorted(log):
        if what == "start" and rank == 0:
            order.append(side)
    return order


def test_two_jobs_take_turns_one_at_a_time_in_abba_order():
    log: list = []
    with Coordinator(pair_wait_s=30, turn_s=30) as c:
        head = Ranks(c, "head", "ddp-cnn-1x2/launch", 2, 8, log).start()
        base = Ranks(c, "base", "ddp-cnn-1x2/launch", 2, 8, log).start()
        head.join(), base.join()
        assert c.settle(), c.report()  # the ranks' last byes are read by the coordinator's threads
    assert not head.errors and not base.errors, head.errors + base.errors
    # never two jobs inside a step at once
    running: dict[str, int] = {"head": 0, "base": 0}
    for _, side, _, _, what in sorted(log):
        running[side] += 1 if what == "start" else -1
        assert not (running["head"] and running["base"]), "both jobs ran a step at the same time"
    order = _runs(log)
    # the setup turns were pair 0 (head, base); the steps go on in the same ABBA order
    assert order[:8] == ["base", "head", "head", "base", "base", "head", "head", "base"]
    assert all(s["paired"] and s["turns"] == 9 for s in head.summaries + base.summaries)  # setup + 8 steps
    # the coordinator's timeline of each job: its hello, first turn, end, and its turns' time (duet_timeline.py)
    for job in c.report().values():
        assert 0 <= job["joined_s"] <= job["first_turn_s"] <= job["ended_s"], job
        assert 0 < job["held_s"] <= job["ended_s"] - job["first_turn_s"] + 0.01, job


def test_turns_of_several_steps_keep_one_job_at_a_time_and_the_abba_order():
    """``gate --turn-steps 3``: after each job's setup turn, a turn runs three steps; the pairs keep their ABBA
    order, and each rank's summary says the turn's length (the verdict names it)."""
    log: list = []
    with Coordinator(pair_wait_s=30, turn_s=30, turn_steps=3) as c:
        head = Ranks(c, "head", "ddp-cnn-1x2/launch", 2, 9, log).start()
        base = Ranks(c, "base", "ddp-cnn-1x2/launch", 2, 9, log).start()
        head.join(), base.join()
        assert c.settle(), c.report()
    assert not head.errors and not base.errors, head.errors + base.errors
    running: dict[str, int] = {"head": 0, "base": 0}
    for _, side, _, _, what in sorted(log):
        running[side] += 1 if what == "start" else -1
        assert not (running["head"] and running["base"]), "both jobs ran a step at the same time"
    assert _runs(log) == ["base"] * 3 + ["head"] * 6 + ["base"] * 6 + ["head"] * 3
    assert all(s["turns"] == 4 and s["turn_steps"] == 3 for s in head.summaries + base.summaries)  # setup + 3


def test_a_turn_never_spans_more_than_half_a_jobs_steps():
    """A turn as long as the whole job lets one side's job end while the other's runs all its steps, which loses what
    the pairing cancels (docs/evidence/swap.md, "Longer turns, measured"). The client takes at most half its job's
    steps a turn (``turns.start``: the spec's warmup and steps)."""
    log: list = []
    with Coordinator(pair_wait_s=30, turn_s=30, turn_steps=100) as c:
        head = Ranks(c, "head", "ddp-cnn-1x2/launch", 2, 6, log, most_steps=3).start()
        base = Ranks(c, "base", "ddp-cnn-1x2/launch", 2, 6, log, most_steps=3).start()
        head.join(), base.join()
        assert c.settle(), c.report()
    assert not head.errors and not base.errors, head.errors + base.errors
    assert _runs(log) == ["base"] * 3 + ["head"] * 6 + ["base"] * 3
    assert all(s["turn_steps"] == 3 for s in head.summaries + base.summaries)


def test_the_round_names_the_side_that_turns_first_so_neither_always_does():
    """The gate alternates it by round (gate/rounds.py): the side that set up and stepped first read 0.8% faster
    at 1x1 in A/A duets, whatever the pairs' order."""
    log: list = []
    with Coordinator(pair_wait_s=30, turn_s=30) as c:
        c.round_started(first="base")
        head = Ranks(c, "head", "ddp-cnn-1x2/launch", 2, 4, log).start()
        base = Ranks(c, "base", "ddp-cnn-1x2/launch", 2, 4, log).start()
        head.join(), base.join()
    assert not head.errors and not base.errors, head.errors + base.errors
    assert _runs(log) == ["head", "base", "base", "head", "head", "base", "base", "head"]
    assert len(c.timeline()["rounds_s"]) == 1


def test_a_job_whose_partner_never_comes_runs_solo_and_says_why():
    log: list = []
    with Coordinator(pair_wait_s=0.5, turn_s=30) as c:
        head = Ranks(c, "head", "only-here/launch", 2, 3, log).start()
        head.join()
        report = c.report()
    assert not head.errors, head.errors
    assert all(not s["paired"] and "no base job only-here/launch joined in" in s["why"] for s in head.summaries)
    assert report["0:head:only-here/launch"]["solo"].startswith("no base job")


def test_a_rank_that_dies_mid_duet_stops_the_other_side_naming_side_rank_and_step():
    log: list = []

    def crash(side, step, rank):
        if side == "base" and rank == 1 and step == 3:
            raise RuntimeError("injected crash")
        time.sleep(0.002)

    with Coordinator(pair_wait_s=30, turn_s=30) as c:
        head = Ranks(c, "head", "x/launch", 2, 8, log, step_s=crash).start()
        base = Ranks(c, "base", "x/launch", 2, 8, log, step_s=crash).start()
        # the crashed rank's thread ends; its socket closes only with the process in real life: close it here
        base.join(), head.join()
    stopped = [e for e in head.errors if isinstance(e, DuetStopped)]
    assert stopped, head.errors
    assert "the base side's rank 1 on node 0 exited mid-duet at step" in str(stopped[0]) and "(x/launch)" in str(
        stopped[0]
    )


def test_a_turn_never_given_back_stops_both_naming_every_ranks_last_step():
    log: list = []

    def hang(side, step, rank):
        time.sleep(3 if (side == "head" and rank == 0 and step == 2) else 0.002)

    with Coordinator(pair_wait_s=30, turn_s=1.0) as c:
        head = Ranks(c, "head", "y/launch", 2, 4, log, step_s=hang).start()
        base = Ranks(c, "base", "y/launch", 2, 4, log, step_s=hang).start()
        head.join(), base.join()
    message = str(next(e for e in base.errors if isinstance(e, DuetStopped)))
    assert (
        "the head side's job y/launch did not give its turn back in 1 s: rank(s) 0 (node 0) still in the turn"
        in message
    )
    assert "last steps done: rank 0 1, rank 1 2" in message
    # past half the limit the held rank said where it was: in this test's own code, not in torch
    assert "; rank 0 (node 0) is stuck outside torch, in hang (" in message and "test_duet.py:" in message
    # the stuck rank read the stop while still in its turn (a real rank's process exits there), not after its step
    ((when, rank, why),) = head.stopped_in_turn
    stuck_until = next(t for t, side, step, r, what in log if (side, step, r, what) == ("head", 2, 0, "end"))
    assert rank == 0 and when < stuck_until - 1.0, (when, stuck_until)
    assert why.startswith("the duet stopped this head job (y/launch, rank 0) in its turn: the head side's job")
    assert not base.stopped_in_turn  # the waiting side reads its stop at its turn boundary
    assert any(isinstance(e, DuetStopped) for e in head.errors)  # and the stuck rank's next turn() raises it too


def test_a_rank_stopped_in_its_turn_ends_its_process_at_once_and_says_why(tmp_path):
    """A real rank process holding its turn (stuck in its step) when the coordinator gives up on it exits within a
    second or two, with exit code 75, the why on its stderr and in torchrun's error file; it does not sit out the
    launch's time limit."""
    import json
    import os
    import subprocess

    from scalegate.measure.turns import STOPPED_EXIT

    rank = (
        "import sys, time\n"
        "from scalegate.measure.turns import Turns\n"
        "t = Turns(sys.argv[1], 'head', 'z/launch', 0, 1, lambda: None)\n"
        "t.turn(-1)\n"
        "print('in its turn', flush=True)\n"
        "time.sleep(60)\n"
    )
    error_file = tmp_path / "error.json"
    env = {**os.environ, "TORCHELASTIC_ERROR_FILE": str(error_file)}
    with Coordinator(pair_wait_s=30, turn_s=1.0) as c:
        proc = subprocess.Popen(
            [sys.executable, "-c", rank, c.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        base = Ranks(c, "base", "z/launch", 1, 4, []).start()  # its partner, a rank thread that waits its turn
        try:
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
        base.join()
    assert any(isinstance(e, DuetStopped) for e in base.errors)
    assert proc.returncode == STOPPED_EXIT, (proc.returncode, err[-2000:])
    assert "in its turn" in out
    said = "the duet stopped this head job (z/launch, rank 0) in its turn: the head side's job z/launch did not give"
    assert f"scalegate: {said}" in err and err.rstrip().endswith("; the rank exits"), err[-2000:]
    assert said in json.loads(error_file.read_text())["message"]["message"]


def _where_while(block, release) -> dict:
    """``where`` of a thread running ``block`` (a rank blocked there), read once it is inside; then ``release``."""
    inside = threading.Event()
    thread = threading.Thread(target=lambda: (inside.set(), block()), daemon=True)
    thread.start()
    inside.wait(5)
    time.sleep(0.2)
    found = turns_where(thread.ident)
    release()
    thread.join(5)
    return found


def test_where_tells_a_rank_waiting_inside_torch_from_one_stuck_in_its_own_code():
    """A rank in a collective or in backward waits inside torch's Python frames; a hung rank is elsewhere."""
    import torch

    future = torch.futures.Future()  # a rank blocked in torch, as in a collective its partner never joins
    inside = _where_while(future.wait, lambda: future.set_result(None))
    assert inside["torch"] and "wait (" in inside["frame"], inside

    def stuck() -> None:  # a rank hung in its own code (the injected hang sleeps in scalegate's worker)
        time.sleep(1.0)

    outside = _where_while(stuck, lambda: None)
    assert not outside["torch"] and outside["frame"].startswith("stuck (") and "test_duet.py:" in outside["frame"]


def _launch(steps, ref, duet="paired"):
    return LaunchRecord(step_times_s=tuple(steps), reference_step_times_s=tuple(ref), duet=duet, reference_duet=duet)


def test_the_paired_estimate_reads_the_efficiency_change_from_both_pairs():
    base = _launch([0.010 * (1 + 0.2 * (i % 3)) for i in range(20)], [0.006 * (1 + 0.2 * (i % 2)) for i in range(20)])
    head = _launch([t * 1.07 for t in base.step_times_s], [t * 1.01 for t in base.reference_step_times_s])
    found = duet_pairs.round_estimate(head, base)
    assert found.at_w.mean == pytest.approx(math.log(1.07)) and found.at_1.mean == pytest.approx(math.log(1.01))
    assert found.efficiency_log == pytest.approx(math.log(1.01 / 1.07))
    assert found.describe().startswith("step time +7.0% at W, +1.0% at 1x1, efficiency -5.6%")
    solo = _launch(head.step_times_s, head.reference_step_times_s, duet="solo: no base job x joined in 300 s")
    assert duet_pairs.round_estimate(solo, base) is None
    assert duet_pairs.not_paired(solo, base) == "the head commit's case ran solo: no base job x joined in 300 s"


def test_two_consecutive_pairs_compare_like_turns_with_like():
    """In the ABBA order a side's second turn in a row runs faster, so pair by pair the head reads faster in one
    parity and slower in the other: two modes, and a trimmed mean keeps the inner part of each, which reads the
    change only while the modes mirror each other. Here the head's faster turns are noisier: pair by pair misreads a
    5% slower head by 3.6%; two pairs hold one turn of each kind for both sides and read it."""
    warm, cold = 0.8, 1.0
    base = [0.004 * (warm if i % 2 else cold) for i in range(200)]
    head = [0.004 * 1.05 * (cold if i % 2 else warm * (1 + 0.15 * math.sin(7 * i))) for i in range(200)]
    found = duet_pairs.paired(head, base)
    assert found.pairs == 200 and found.mean == pytest.approx(math.log(1.05), abs=0.001)
    assert duet_pairs.paired(head, base, unit=1).mean - math.log(1.05) > 0.03


def test_pooled_reference_launches_pair_launch_by_launch():
    """--scaling-reference-launches pools a side's 1x1 launches; launch n of the head pairs with launch n of the
    base, so a launch that measured a step fewer shifts no later pair."""
    base = [0.004] * 10 + [0.008] * 10
    head = [0.004 * 1.02] * 9 + [0.008 * 1.02] * 10
    found = duet_pairs.paired(head, base, lengths=((9, 10), (10, 10)))
    assert found.mean == pytest.approx(math.log(1.02)) and found.pairs == 18 and found.se < 1e-9  # 4 + 5 units
    misread = duet_pairs.paired(head, base)  # by index alone: the base's second launch from one step early
    assert misread.se > 0.04  # a unit pairs a step of the head's second launch with one of the base's first
    launch = _launch([0.01] * 20, head, duet="paired")
    record = dataclasses.replace(launch, reference_lengths=(9, 10))
    other = dataclasses.replace(_launch([0.01] * 20, base), reference_lengths=(10, 10))
    assert duet_pairs.round_estimate(record, other).at_1.mean == pytest.approx(math.log(1.02))


def test_block_means_keep_what_neighbouring_pairs_share():
    drifting = [0.01 * (i // 4) for i in range(20)]  # a slow phase spanning 4 pairs at a time
    naive = (sum((x - sum(drifting) / 20) ** 2 for x in drifting) / 19) ** 0.5 / math.sqrt(20)
    assert duet_pairs.block_se(drifting) > 1.5 * naive


def test_a_later_rounds_launch_of_the_same_case_pairs_afresh():
    """The gate keeps one coordinator for all its rounds: round 2's jobs take the names round 1's had."""
    log: list = []
    with Coordinator(pair_wait_s=30, turn_s=30) as c:
        for _ in range(2):
            c.round_started()
            head = Ranks(c, "head", "ddp-mlp-1x2", 2, 4, log).start()
            time.sleep(0.3)  # the base's session comes later, its round-1 job long gone
            base = Ranks(c, "base", "ddp-mlp-1x2", 2, 4, log).start()
            head.join(), base.join()
            assert not head.errors and not base.errors, head.errors + base.errors
            assert all(s["paired"] and s["turns"] == 5 for s in head.summaries + base.summaries)
            c.side_ended("head"), c.side_ended("base")  # the round's sessions exit
        assert len(c.report()) == 4


def _records(head_factor_w: float, head_factor_1: float, rounds: int, step_time_tolerance=None):
    """A head and a base of ``rounds`` duet rounds; the head's steps slower by the factors at W and at 1x1, with a
    wobble the pairs share (as they share a host's phase) and a small one of their own."""
    from scalegate.judge.evidence import CaseRecord, Conduct

    def side(fw: float, f1: float, seed: int):
        launches = []
        for r in range(rounds):
            phase = [1 + 0.2 * math.sin(i + r) for i in range(40)]
            own = [1 + 0.004 * math.sin(7 * i + seed + r) for i in range(40)]
            launches.append(
                _launch(
                    [0.01 * fw * p * o for p, o in zip(phase, own)], [0.006 * f1 * p * o for p, o in zip(phase, own)]
                )
            )
        conduct = Conduct(max_launches=8, tolerance=0.1, step_time_tolerance=step_time_tolerance)
        return CaseRecord(
            case_id="ddp-cnn-1x2", key="ddp-cnn-1x2:tiny", profile="p", world_size=2, global_batch=64, steps=40,
            warmup=3, launches=tuple(launches), conduct=conduct,
        )  # fmt: skip

    return side(head_factor_w, head_factor_1, 1), side(1.0, 1.0, 2)


def test_a_slower_model_on_one_process_too_fails_only_where_the_step_time_is_judged():
    """A uniform 10% slower step keeps the efficiency: it passes on efficiency alone and fails on the step time."""
    from scalegate.judge import metric as V
    from scalegate.judge.outcome import Overrides

    head, base = _records(1.10, 1.10, rounds=3)
    found = paired.timing(head, base, None, Overrides())
    assert found.status == V.OK and "step speed" not in found.message, found.message
    head, base = _records(1.10, 1.10, rounds=3, step_time_tolerance=0.05)
    found = paired.timing(head, base, None, Overrides())
    assert found.status == V.REGRESSED, found.message
    assert found.message.startswith("step speed at W (base/head step time) 0.909 is "), found.message
    assert "34 A/A duet rounds of the cnn canaries' step time at W" in found.message  # RECORDED_AA_STEP_W
    assert "efficiency 1.000 within" in found.message  # the other decision, still said
    head, base = _records(1.0, 1.0, rounds=3, step_time_tolerance=0.05)
    assert paired.timing(head, base, None, Overrides()).status == V.OK


def test_an_older_base_falls_back_to_rounds_with_the_reason(tmp_path):
    """A base commit of scalegate itself runs its own duet client: one without any, or one of another protocol
    version (an older base reads its pairing from the environment, or launches a script's case once a round), runs
    rounds, and the gate says why."""
    from scalegate.contract import duet
    from scalegate.gate.sides import unpaired_base

    tree = tmp_path / "base"
    (tree / "harness" / "scalegate" / "measure").mkdir(parents=True)
    (tree / "harness" / "scalegate" / "contract").mkdir()
    (tree / "harness" / "scalegate" / "__init__.py").write_text("")
    python = sys.executable
    assert unpaired_base(tree, python).startswith("the base commit has no duet client (harness/scalegate/")
    (tree / duet.CLIENT_FILE).write_text("")
    (tree / duet.PROTOCOL_FILE).write_text("VERSION = 1\n")
    assert unpaired_base(tree, python) == (
        f"the base commit's duet client is not version {duet.VERSION} (harness/scalegate/contract/duet.py): an older base"
    )
    (tree / duet.PROTOCOL_FILE).write_text(f"VERSION = {duet.VERSION}\n")
    assert unpaired_base(tree, python) == ""


def _paired_options(*more: str):
    from scalegate.plan.options import from_argv

    return from_argv(list(more))


def test_a_scripts_reference_launches_four_times_in_a_paired_session_only():
    """The session knows it is paired from its options (--scaling-duet, set by the gate), never the environment."""
    alone, paired = _paired_options(), _paired_options("--scaling-duet=unix:/nowhere")
    assert alone.reference_launches(script=True) == 1
    assert paired.reference_launches(script=True) == policy.SCRIPT_REFERENCE_LAUNCHES == 4
    assert _paired_options("--scaling-duet=unix:/x", "--scaling-launches=2").reference_launches(script=False) == 2
    assert _paired_options("--scaling-duet=unix:/x", "--scaling-reference-launches=3").reference_launches(True) == 3


def test_a_scripts_reference_measures_half_the_cases_steps_when_paired_at_least_a_hundred():
    alone, paired = _paired_options(), _paired_options("--scaling-duet=unix:/nowhere")
    assert alone.reference_steps(script=True, steps=300) == 300  # not paired: the case's steps
    assert [paired.reference_steps(script=True, steps=n) for n in (300, 1001, 150, 40)] == [150, 501, 100, 40]
    assert paired.reference_steps(script=False, steps=300) == 300  # a workload's 1x1 case spreads far less


def test_a_scripts_case_launches_four_times_when_paired_unless_the_user_named_a_count():
    assert _paired_options().case_launches(script=True) == 1
    assert _paired_options("--scaling-duet=unix:/x").case_launches(script=True) == policy.SCRIPT_CASE_LAUNCHES == 4
    assert _paired_options("--scaling-duet=unix:/x", "--scaling-launches=1").case_launches(script=True) == 1
    assert _paired_options("--scaling-duet=unix:/x", "--scaling-launches=3").case_launches(script=False) == 3


def test_a_paired_launch_may_wait_for_its_partner_so_its_time_limit_grows():
    assert _paired_options("--scaling-timeout=100").timeout_s == 100
    assert _paired_options("--scaling-timeout=100", "--scaling-duet=unix:/x").timeout_s == 200 + policy.PAIR_WAIT_S


def test_a_scripts_paired_gate_decides_within_its_own_budget_unless_one_is_named(tmp_path):
    from scalegate.gate.plan import GatePlan
    from scalegate.gate.project import Project

    def plan(*argv: str) -> GatePlan:
        from scalegate.cli import gate

        args, extra = gate.namespace(["--base", "HEAD", *argv])
        args.forward = [*args.forward, *extra]
        return GatePlan.build(args, Project(root=tmp_path))

    assert (plan().budget, plan().script_budget) == (policy.GATE_MAX_LAUNCHES, policy.SCRIPT_ROUNDS)
    assert plan("--scaling-max-launches", "4").script_budget == 4  # never above the gate's
    assert plan("--scaling-max-launches=8").script_budget == 8  # named: the user's
    assert plan().alternate_budget == policy.ALTERNATE_ROUNDS and plan("--scaling-max-launches=6").alternate_budget == 6
    paired, alone = plan().budgets(paired=True), plan().budgets(paired=False)
    assert (paired.script, paired.alternate, paired.most) == (policy.SCRIPT_ROUNDS, *[policy.ALTERNATE_ROUNDS] * 2)
    assert (alone.script, alone.alternate, alone.most) == (None, None, policy.GATE_MAX_LAUNCHES)  # unpaired rounds
    assert plan().tolerance == policy.AB_GATE_TOLERANCE and plan("--scaling-tolerance", "0.1").tolerance == 0.1
    assert plan().turn_steps == 1 and plan("--turn-steps", "25").turn_steps == 25


def test_the_gates_turn_steps_reach_its_coordinator_and_its_first_line(tmp_path):
    """``gate --turn-steps 5``: the plan's turn length is the chosen pairing's, the coordinator's grants and the line
    the gate prints at its start (gate/pairing.py)."""
    from scalegate.cli import gate
    from scalegate.gate import pairing
    from scalegate.gate.plan import GatePlan
    from scalegate.gate.project import Project
    from tests.conftest import ROOT

    args, extra = gate.namespace(["--base", "HEAD", "--turn-steps", "5"])
    args.forward = [*args.forward, *extra]
    plan = GatePlan.build(args, Project(root=tmp_path))
    chosen = pairing.choose(plan, ROOT, sys.executable)  # this checkout as the base: it speaks this protocol
    assert chosen.pairing == "duet" and chosen.turn_steps == 5
    assert chosen.says == "duet: both commits' jobs of a case take turns 5 steps at a time"
    with pairing.coordinator(plan, chosen) as paired_rounds:
        assert paired_rounds.coordinator.turn_steps == 5
        assert pairing.report(chosen, paired_rounds)["turn_steps"] == 5


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--base", "HEAD", "--turn-steps", "0"], "--turn-steps 0: a turn runs at least one optimizer step"),
        (["--turn-steps", "5"], "--turn-steps 5 sets the length of a duet's turns, and this gate has one side"),
        (
            ["--base", "HEAD", "--pairing", "alternate", "--turn-steps", "5"],
            "--turn-steps 5 sets the length of a duet's turns, and --pairing alternate takes no turns of steps",
        ),
    ],
)
def test_turn_steps_that_no_duet_can_take_stop_the_gate_naming_the_option(tmp_path, argv, said):
    from scalegate.cli import gate
    from scalegate.contract.errors import ScalegateError
    from scalegate.gate.plan import GatePlan
    from scalegate.gate.project import Project

    args, extra = gate.namespace(argv)
    args.forward = [*args.forward, *extra]
    with pytest.raises(ScalegateError) as refused:
        GatePlan.build(args, Project(root=tmp_path))
    assert refused.value.message == said and "--turn-steps" in refused.value.hint


def _round_file(launches, reference=(0.004,) * 8):
    """One round's result file of a case, as a side's session writes it (the fields gate/merge.py reads)."""
    from scalegate.judge.evidence import CaseRecord

    record = CaseRecord(
        case_id="ddp-mlp-1x2", key="ddp-mlp-1x2:script", profile="p", world_size=2, global_batch=64, steps=10,
        warmup=3, launches=tuple(launches), reference_step_times_s=reference, reference_lengths=(len(reference),),
        reference_launches=1, reference_duet="paired",
    )  # fmt: skip
    return {"key": record.key, "case_id": record.case_id, "record": record.to_dict()}


def test_a_duet_rounds_launches_of_a_case_pool_into_one_round():
    """Two launches of a case in one duet round are one round for the judge, paired launch by launch (the head's
    first measured a step fewer), so the round's one 1x1 reference counts once; today's rounds keep them apart."""
    from scalegate.gate.merge import Budgets, merge
    from scalegate.judge.evidence import CaseRecord

    def launch(steps, duet="paired", peak=(1, 2)):
        return LaunchRecord(step_times_s=tuple(steps), duet=duet, peak_memory_bytes=peak)

    head = [launch([0.010 * 1.05] * 9, peak=(5, 1)), launch([0.020 * 1.05] * 10)]
    base = [launch([0.010] * 10), launch([0.020] * 10)]
    rounds = {
        side: CaseRecord.from_dict(merge([[_round_file(launches)], [_round_file(launches)]], Budgets(8))[0]["record"])
        for side, launches in (("head", head), ("base", base))
    }
    assert [len(r.launches) for r in rounds.values()] == [2, 2]  # one launch a round, each pooling two
    pooled = rounds["head"].launches[0]
    assert pooled.lengths == (9, 10) and len(pooled.step_times_s) == 19 and pooled.peak_memory_bytes == (5, 2)
    found = duet_pairs.round_estimate(pooled, rounds["base"].launches[0])
    assert found.at_w.mean == pytest.approx(math.log(1.05)) and found.at_w.pairs == 18 and found.at_w.se < 1e-9
    assert found.at_1.mean == pytest.approx(0.0)
    unpaired = [launch([0.01] * 10, duet=""), launch([0.01] * 10, duet="")]  # today's rounds: launches stay apart
    assert len(CaseRecord.from_dict(merge([[_round_file(unpaired)]], Budgets(8))[0]["record"]).launches) == 2
    half = [launch([0.01] * 10), launch([0.01] * 10, duet="solo: no head job joined in 120 s")]
    assert (
        CaseRecord.from_dict(merge([[_round_file(half)]], Budgets(8))[0]["record"]).launches[0].duet.startswith("solo")
    )


def test_a_scripts_duet_rounds_take_the_scripts_budget_and_todays_rounds_the_gates():
    from scalegate.gate.merge import Budgets, merge
    from scalegate.judge.evidence import CaseRecord

    def budget(duet, script_budget):
        launches = [LaunchRecord(step_times_s=(0.01,) * 10, duet=duet)]
        return CaseRecord.from_dict(
            merge([[_round_file(launches)]], Budgets(8, script_budget))[0]["record"]
        ).conduct.max_launches

    assert budget("paired", 6) == 6  # the case is a script's (_round_file: ...:script)
    assert budget("", 6) == 8  # no duet: today's rounds keep the gate's budget
    assert budget("paired", None) == 8


def test_a_scripts_round_trims_its_units_harder_and_its_se_is_the_trimmed_means():
    """A training script's 1x1 launch carries tails of its own: trimmed 40% (``SCRIPT_TRIM``), its round reads the
    middle that the launches agree on; the block SE is that of the same trimmed means, not of plain means."""
    from scalegate.judge.evidence import CaseRecord

    base = [0.004] * 200
    # the head 2% slower, but up to a third of its units in a block with a tail of +30% (a launch's own tail)
    tails = {u for u in range(100) if u % 5 == 0 or (u > 50 and u % 7 == 0)}
    head = [0.004 * (1.30 if i // 2 in tails and i % 2 else 1.02) for i in range(200)]
    plain = duet_pairs.paired(head, base)
    script = duet_pairs.paired(head, base, trim=policy.SCRIPT_TRIM)
    assert script.mean == pytest.approx(math.log(1.02), abs=1e-9) and script.se < 1e-9
    assert plain.mean > math.log(1.02) + 0.001 and plain.se > 0.001
    record = CaseRecord.from_dict(_round_file([LaunchRecord(step_times_s=(0.01,) * 10)])["record"])
    assert duet_floors.trim_of(record) == policy.SCRIPT_TRIM
    assert duet_floors.trim_of(dataclasses.replace(record, key="ddp-cnn-1x2:cpu")) == policy.TRIM


def test_the_timeline_splits_a_round_into_turns_waits_and_start_up():
    """benchmarks/duet_timeline.py reads the coordinator's report: a job that starts 0.3 s after its round began
    shows that start-up, and its partner's later start as a wait before its first turn."""
    log: list = []
    with Coordinator(pair_wait_s=30, turn_s=30) as c:
        c.round_started(first="head")
        time.sleep(0.3)
        head = Ranks(c, "head", "ddp-cnn-1x2", 2, 20, log, step_s=0.005).start()
        time.sleep(0.3)
        base = Ranks(c, "base", "ddp-cnn-1x2", 2, 20, log, step_s=0.005).start()
        head.join(), base.join()
        assert c.settle(), c.report()
        data = {"jobs": c.report(), **c.timeline()}
    assert not head.errors and not base.errors, head.errors + base.errors
    [round_] = duet_timeline.rounds(data)
    jobs = {j["side"]: j for j in round_["jobs"]}
    assert 0.25 < jobs["head"]["startup_s"] < jobs["base"]["startup_s"]
    assert jobs["head"]["first_turn_s"] - jobs["head"]["joined_s"] > 0.1  # it waited for the base to join
    turns = sum(j["held_s"] for j in round_["jobs"])
    assert 0.2 < turns <= round_["end"] - round_["start"]  # 2 x 20 steps of 5 ms at least


def test_the_estimators_replay_a_round_of_fewer_launches():
    """benchmarks/duet_estimators.py --launches W,1x1 keeps a round's first launches of each level, as a round of
    fewer launches would have measured them (docs/evidence/script.md, the twelfth set; its table:
    experiments/notes/duet-canaries.md, "fewer launches a round")."""
    levels = [1.00, 1.02, 1.04, 1.30]  # the fourth launch reads the head 30% slower: dropping it moves the estimate
    base = [0.01] * 40
    head = [0.01 * level for level in levels for _ in range(10)]
    row = {
        "head_step_times_s": head,
        "base_step_times_s": base,
        "head_lengths": [10] * 4,
        "base_lengths": [10] * 4,
        "head_reference_step_times_s": base[:20],
        "base_reference_step_times_s": base[:20],
        "head_reference_lengths": [10, 10],
        "base_reference_lengths": [10, 10],
    }
    assert len(duet_estimators.launches(row, False)) == 4
    kept = duet_estimators.launches(row, False, count=(3, 0))
    assert [round(math.exp(u[0]), 2) for u in kept] == levels[:3]
    assert len(duet_estimators.launches(row, True, count=(3, 1))) == 1


def test_the_duets_verdict_names_where_gloos_threads_ran_on_each_side():
    """A duet on CPU binds gloo's threads with the rank or leaves them free (contract/affinity.py): the verdict says
    which, and says so per side where they differ (a base commit from before the choice says nothing)."""
    from scalegate.judge.outcome import Overrides

    head, base = _records(1.0, 1.0, rounds=2)

    def said(record, threads: str):
        return dataclasses.replace(
            record, launches=tuple(dataclasses.replace(x, duet_threads=threads) for x in record.launches)
        )

    def verdict(h: str, b: str) -> str:
        return paired.timing(said(head, h), said(base, b), None, Overrides()).message

    assert "[ddp-cnn-1x2:tiny on p, duet against the base commit; gloo's threads bound with each rank]" in verdict(
        "bound", "bound"
    )
    free = "free: zero1-torch: its many small broadcasts queue behind the rank's compute"
    assert "duet against the base commit; gloo's threads free (zero1-torch)]" in verdict(free, free)
    script = "free: a team's script: bound, the example script's A/A duet rounds spread no less"
    assert "gloo's threads: head bound, base free (a team's script)]" in verdict("bound", script)
    assert "duet against the base commit; gloo's threads: head bound, base not said]" in verdict("bound", "")
    assert "duet against the base commit]" in verdict("", "")  # CUDA: nothing to say


def test_the_verdict_and_the_pairing_line_name_turns_of_several_steps():
    from scalegate.gate.verdict import pairing_markdown
    from scalegate.judge.outcome import Overrides

    head, base = _records(1.0, 1.0, rounds=2)
    longer = [
        dataclasses.replace(r, launches=tuple(dataclasses.replace(x, duet_turn_steps=25) for x in r.launches))
        for r in (head, base)
    ]
    assert (
        "[ddp-cnn-1x2:tiny on p, duet against the base commit]" in paired.timing(head, base, None, Overrides()).message
    )
    assert "duet against the base commit in turns of 25 steps]" in paired.timing(*longer, None, Overrides()).message
    found = {"duet": True, "pairing": "duet", "turn_steps": 25, "jobs": {}}
    assert "Paired: base and head took turns 25 steps at a time (0 jobs paired" in pairing_markdown(found)
    assert "took turns step by step" in pairing_markdown(found | {"turn_steps": 1})


def test_the_pairing_line_names_a_stopped_job_once_with_the_partner_it_stopped():
    """A hung job and the partner the coordinator stopped for it: one entry, after the jobs that ran alone."""
    from scalegate.gate.verdict import pairing_markdown

    why = "the base side's job ddp-cnn-2x1 did not give its turn back in 15 s: rank(s) 1 (node 1) still in the turn"
    jobs = {
        "0:base:ddp-cnn-2x1": {"side": "base", "job": "ddp-cnn-2x1", "solo": "", "failed": why},
        "0:head:ddp-cnn-2x1": {"side": "head", "job": "ddp-cnn-2x1", "solo": "", "failed": f"stopped: {why}"},
        "0:head:single-cnn-1x1": {"side": "head", "job": "single-cnn-1x1", "solo": "no base job joined", "failed": ""},
        "0:base:single-cnn-1x1": {"side": "base", "job": "single-cnn-1x1", "solo": "", "failed": ""},
    }
    line = pairing_markdown({"duet": True, "pairing": "duet", "turn_steps": 1, "jobs": jobs})
    assert "(1 jobs paired, docs/duet.md). Not paired: head single-cnn-1x1: no base job joined." in line
    assert f" Stopped by the duet: base ddp-cnn-2x1: {why} (and the head job with it).\n" in line
    assert line.count("did not give its turn back") == 1


def test_a_rounds_pooled_launches_say_bound_only_where_every_one_was():
    from scalegate.gate.merge import pooled

    def launch(threads: str) -> LaunchRecord:
        return LaunchRecord(step_times_s=(0.01,) * 4, duet="paired", duet_threads=threads)

    assert pooled([launch("bound"), launch("bound")])[0].duet_threads == "bound"
    assert pooled([launch("bound"), launch("free: why")])[0].duet_threads == "free: why"
    assert (
        pooled([launch("bound"), launch("")])[0].duet_threads == ""
    )  # one launch said nothing: neither does the round
