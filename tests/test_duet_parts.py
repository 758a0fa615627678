"""The coordinator's parts, each alone (launch/duet_jobs.py, duet_grants.py, duet_arbiter.py, duet_faults.py,
duet_nodes.py): ranks are socket pairs whose far ends the test reads, the clock is the test's. tests/test_duet.py runs
them together, through the coordinator's threads and the ranks' real client."""

from __future__ import annotations

import json
import queue
import socket

import pytest

from scalegate.launch import duet_faults
from scalegate.launch.duet_arbiter import Arbiter, Rules
from scalegate.launch.duet_grants import Grant, Host, Turns, WholeJobs, give
from scalegate.launch.duet_jobs import Hello, Job, Jobs
from scalegate.launch.duet_nodes import NodeRegistry


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _said(far: socket.socket) -> list[dict]:
    """Every message waiting at a rank's end of its connection."""
    far.setblocking(False)
    data = b""
    try:
        while chunk := far.recv(65536):
            data += chunk
    except BlockingIOError:
        pass
    return [json.loads(line) for line in data.splitlines()]


def _join(jobs: Jobs, side: str, name: str, world: int, at: float = 100.0, ranks=None) -> list[socket.socket]:
    """A job's ranks (all, or ``ranks``) say hello; their far ends, rank by rank."""
    far = []
    for rank in range(world) if ranks is None else ranks:
        near, end = socket.socketpair()
        jobs.hello(near, Hello(side=side, job=name, rank=rank, world=world), at)
        far.append(end)
    return far


def test_a_job_joins_with_its_world_and_a_later_rounds_launch_takes_its_name_again():
    jobs = Jobs()
    _join(jobs, "head", "ddp-cnn-1x2", 2, ranks=[0])
    assert not jobs.now[("head", "ddp-cnn-1x2")].ready  # one rank of two
    _join(jobs, "head", "ddp-cnn-1x2", 2, ranks=[1])
    job = jobs.partner(Job(side="base", name="ddp-cnn-1x2", world=2, since=0))
    assert job is not None and job.ready and not job.gone
    job.waiting.clear()  # granted
    for sock in list(jobs.owners):
        jobs.said(sock, {"op": "bye", "step": 9}, 101.0)
    assert job.gone and job.ended == 101.0 and job.last_step == {0: 9, 1: 9}
    _join(jobs, "head", "ddp-cnn-1x2", 2, at=200.0)  # round 2
    assert jobs.finished == [job] and jobs.now[("head", "ddp-cnn-1x2")].since == 200.0
    assert list(jobs.report(lambda t: t)) == ["0:head:ddp-cnn-1x2", "1:head:ddp-cnn-1x2"]


def test_a_connection_that_closes_before_its_bye_is_named_with_its_job_and_rank():
    jobs = Jobs()
    _join(jobs, "base", "x", 2)
    socks = list(jobs.owners)
    jobs.said(socks[1], {"op": "done", "step": 2}, 0)
    job, rank = jobs.closed(socks[1])
    assert (
        rank == 1 and duet_faults.exited(job, rank) == "the base side's rank 1 on node 0 exited mid-duet at step 3 (x)"
    )
    jobs.said(socks[0], {"op": "bye", "step": 4}, 0)
    assert jobs.closed(socks[0]) is None  # it left first


def test_a_hung_turn_names_the_ranks_in_it_and_the_one_stuck_outside_torch_and_stops_the_partner():
    jobs = Jobs()
    head, base = _join(jobs, "head", "y", 2), _join(jobs, "base", "y", 1)
    job = jobs.now[("head", "y")]
    job.waiting.clear()  # in its turn
    job.last_step.update({0: 1, 1: 2})
    job.where[0] = {"frame": "hang (faults.py:9)", "torch": False}
    job.where[1] = {"frame": "wait (futures.py:3)", "torch": True}
    why = duet_faults.hung(job, 1.0)
    assert why == (
        "the head side's job y did not give its turn back in 1 s: rank(s) 0 (node 0), 1 (node 0) still in the turn; "
        "last steps done: rank 0 1, rank 1 2; rank 0 (node 0) is stuck outside torch, in hang (faults.py:9)"
    )
    duet_faults.stop(job, jobs.partner(job), why)
    assert [m["op"] for end in head for m in _said(end)] == ["stop", "stop"]
    assert _said(base[0]) == [{"op": "stop", "why": why}] and jobs.now[("base", "y")].failed == f"stopped: {why}"


def test_a_grant_tells_the_waiting_ranks_a_turn_with_its_steps_and_swap_or_the_whole_job():
    jobs = Jobs()
    [end] = _join(jobs, "head", "z", 1)
    job = jobs.now[("head", "z")]
    turns = Turns(limit_s=600, steps=25, swap=True)
    give(job, Grant(op="go"), turns, 5.0)
    assert _said(end) == [{"op": "go", "turn": 1, "limit_s": 600, "steps": 1, "swap": True}]  # the setup: one step
    job.waiting.add(0)
    give(job, Grant(op="go"), turns, 6.0)
    assert _said(end)[0]["steps"] == 25 and job.first_turn == 5.0 and not job.waiting
    [other] = _join(jobs, "base", "z", 1)
    give(jobs.now[("base", "z")], Grant(op="alone", why="alternate pairing: before the head job"), turns, 7.0)
    assert _said(other) == [{"op": "alone", "why": "alternate pairing: before the head job"}]
    assert jobs.now[("base", "z")].alternate and jobs.now[("base", "z")].solo.startswith("alternate pairing")


def _host(**given) -> Host:
    return Host(
        **{"first": "head", "ended": frozenset(), "parked": frozenset(), "now": 10.0, "idle_since": 0.0, **given}
    )


def test_whole_jobs_go_in_the_rounds_order_only_while_the_other_side_is_parked():
    whole = WholeJobs(pair_wait_s=120, alternate=True)
    head, base = Job(side="head", name="c", world=1, since=5), Job(side="base", name="c", world=1, since=5)
    assert whole.decide(head, base, _host()) is None  # head is due first, the base's session is busy
    assert whole.decide(head, base, _host(parked=frozenset({"base"}))) == Grant(
        op="alone", why="alternate pairing: before the base job"
    )
    assert whole.decide(base, head, _host(parked=frozenset({"head"}))) is None  # its pair's first turn is the head's
    head.turns, head.failed = 1, "left"  # the head job ran and is gone
    assert whole.decide(base, head, _host(ended=frozenset({"head"}))) == Grant(
        op="alone", why="alternate pairing: after the head job"
    )
    whole.new_round({"d": "two resident jobs would not fit"})
    assert not WholeJobs(120, alternate=False).applies(Job(side="head", name="d", world=1, since=0))
    lonely = Job(side="base", name="d", world=1, since=0)
    assert whole.applies(lonely)
    assert whole.decide(lonely, None, _host(first="head", now=130.0)) == Grant(
        op="solo", why="no head job d joined in 130 s"
    )


def test_the_arbiter_grants_one_job_at_a_time_in_abba_order_and_stops_a_turn_held_too_long():
    clock, jobs = Clock(), Jobs()
    arbiter = Arbiter(Rules(pair_wait_s=30, turn_s=5), jobs, clock)
    ends = {"head": _join(jobs, "head", "c", 1), "base": _join(jobs, "base", "c", 1)}
    order = []
    for _ in range(6):
        arbiter.schedule()
        holder = arbiter.holder
        assert holder is not None and sum(bool(_said(e[0])) for e in ends.values()) == 1  # one job told, no more
        order.append(holder.side)
        holder.waiting.add(0)  # its rank gives the turn back
    assert order == ["head", "base", "base", "head", "head", "base"]
    arbiter.schedule()
    clock.t += 6  # the holder keeps its turn past turn_s
    arbiter.holder.waiting.clear()
    arbiter.schedule()
    assert arbiter.holder is None and all(j.failed for j in jobs)
    assert "did not give its turn back in 5 s" in jobs.now[("base", "c")].failed


def test_a_job_whose_partner_never_comes_runs_solo_once_the_wait_is_over_or_the_other_side_ended():
    clock, jobs = Clock(), Jobs()
    arbiter = Arbiter(Rules(pair_wait_s=30), jobs, clock)
    [end] = _join(jobs, "head", "only", 1, at=clock.t)
    arbiter.schedule()
    assert arbiter.holder is None
    arbiter.side_ended("base")
    arbiter.schedule()
    assert _said(end) == [{"op": "solo", "why": "no base job only joined in 0 s"}] and arbiter.holder is not None


def test_the_registry_keeps_each_following_node_and_what_it_said_in_order():
    registry = NodeRegistry()
    near, far = socket.socketpair()
    registry.follow(near, {"op": "follow", "v": 11, "node": 1})
    assert registry.joined == [1] and registry.owns(near)
    registry.heard(near, {"op": "ran", "n": 1})
    registry.heard(near, None)
    said = [registry.next(), registry.next(), registry.next(timeout=0.1)]
    assert [(s.node, s.message["op"]) for s in said] == [(1, "follow"), (1, "ran"), (1, "gone")]
    with pytest.raises(queue.Empty):
        registry.next()
    registry.send(1, {"op": "end", "code": 0})
    assert _said(far) == [{"op": "end", "code": 0}]
