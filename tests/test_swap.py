"""The swap pairing (docs/duet.md, "One resident job in turns of steps"): a rank's training state leaves its device's
memory between its turns and comes home before the next (measure/swap.py), over the real coordinator and clients.

What must hold: between its turns a job's parameters, gradients and optimizer state hold no device memory; a
swapped job trains bit for bit as one never swapped (tied weights and views included); a storage it cannot free is
counted as kept, not lost; the verdict and the PR line name the pairing and what a swap moved. A CPU job's swap
copies and keeps its storages (freeing would gain nothing there), so the tests that check the freeing set
``Swap.FREE_ON_CPU``, the device path run on host memory; the device-only rule is checked where CUDA exists.
"""

from __future__ import annotations

import copy
import dataclasses
import time

import numpy as np
import pytest
import torch

from scalegate.gate.verdict import pairing_markdown
from scalegate.judge import duet as paired
from scalegate.judge.outcome import Overrides
from scalegate.launch.duet import Coordinator
from scalegate.measure.swap import Swap
from tests.test_duet import Ranks, _records, _runs


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32))
    model[2].weight = model[0].weight  # tied: one storage for two parameters
    return model


def _train(model: torch.nn.Module, steps: int, between=lambda: None) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        loss = model(torch.randn(8, 32, generator=data)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        between()
    return losses


@pytest.fixture
def freed(monkeypatch):
    """The device path on CPU: the swap frees what it copies out."""
    monkeypatch.setattr(Swap, "FREE_ON_CPU", True)


def test_a_swapped_job_holds_no_state_between_turns_and_trains_bit_for_bit_as_one_never_swapped(freed):
    model, untouched = _model(), _model()
    swap = Swap()
    emptied = []

    def between() -> None:
        swap.out()
        emptied.append(all(p.untyped_storage().nbytes() == 0 for p in model.parameters()))
        swap.back()

    try:
        assert _train(model, 6, between) == _train(untouched, 6)
    finally:
        swap.close()
    assert all(emptied) and len(emptied) == 6
    params = list(model.parameters())  # the tied weight once
    moved = 4 * sum(p.numel() * 4 for p in params) + 4 * len(params)  # parameters, gradients, two moments; steps
    assert swap.summary()["swap_bytes"] == moved
    assert swap.summary()["swaps"] == 6 and swap.summary()["kept_bytes"] == 0 and swap.summary()["freed"]


def test_a_cpu_jobs_swap_copies_its_state_out_and_back_and_keeps_it():
    model, untouched = _model(), _model()
    swap = Swap()
    kept = []

    def between() -> None:
        swap.out()
        kept.append(all(p.untyped_storage().nbytes() > 0 for p in model.parameters()))
        swap.back()

    try:
        assert _train(model, 4, between) == _train(untouched, 4)
    finally:
        swap.close()
    assert all(kept) and swap.summary()["swaps"] == 4 and swap.summary()["swap_bytes"] > 0
    assert not swap.summary()["freed"]
    assert swap.summary()["idle_reserved_bytes"] is None  # no CUDA allocator to read on CPU


def test_an_optimizer_named_before_its_first_step_is_swapped_from_the_next_turn(freed):
    """A workload names its optimizer after its setup (worker/loop.py), so its setup's turn ends swapped out."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    swap = Swap()
    try:
        swap.follow(optimizer)
        swap.out()
        assert all(p.untyped_storage().nbytes() == 0 for p in model.parameters())
        swap.back()
    finally:
        swap.close()
    assert all(p.untyped_storage().nbytes() > 0 for p in model.parameters())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: a device job's host storages stay")
def test_a_device_jobs_host_storages_stay_where_they_are():
    model = torch.nn.Linear(64, 64).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 64, device="cuda")).sum().backward()
    optimizer.step()  # Adam's step counters are host tensors
    swap = Swap()
    try:
        swap.follow(optimizer)
        assert {s.device.type for s in swap.storages()} == {"cuda"}
        swap.out()
        assert all(p.untyped_storage().nbytes() == 0 for p in model.parameters())
        # what stayed in the allocator while out: its reserve after empty_cache, counted; the whole process by NVML
        # holds that and its CUDA context (None where NVML does not list this pid)
        summary = swap.summary()
        assert summary["idle_reserved_bytes"] == torch.cuda.memory_reserved()
        held = summary["idle_device_bytes"]
        assert held is None or held > summary["idle_reserved_bytes"], summary
        swap.back()
        optimizer.step()
    finally:
        swap.close()


def test_a_storage_that_cannot_be_freed_stays_resident_and_is_counted(freed):
    """A parameter over memory it does not own (numpy's) cannot be resized: the swap keeps it and says how much."""
    model = torch.nn.Linear(4, 4)
    model.weight = torch.nn.Parameter(torch.from_numpy(np.ones((4, 4), dtype=np.float32)))
    swap = Swap()
    try:
        _train_once(model)
        swap.out()
        assert model.weight.untyped_storage().nbytes() == 64  # still there
        assert model.bias.untyped_storage().nbytes() == 0
        swap.back()
        _train_once(model)
    finally:
        swap.close()
    assert swap.summary()["kept_bytes"] == 64


def _train_once(model: torch.nn.Module) -> None:
    optimizer = getattr(model, "_optimizer", None) or torch.optim.SGD(model.parameters(), lr=0.1)
    model._optimizer = optimizer
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()


def test_the_swap_pairing_swaps_each_job_out_for_its_partners_turns(freed):
    """``gate --pairing swap``: the coordinator's ``go`` says swap; during one side's turn of steps the other side's
    state holds no memory, both sides train as an unswapped job does, and each rank's summary says what it moved."""
    log: list = []
    jobs: dict[tuple[str, int], tuple[torch.nn.Module, torch.optim.Optimizer, torch.Generator]] = {}
    partner_empty: list[bool] = []
    losses: dict[str, list[float]] = {"head": [], "base": []}

    def step(side: str, step_no: int, rank: int) -> None:
        if (side, rank) not in jobs:
            model = _model()
            jobs[side, rank] = (model, torch.optim.AdamW(model.parameters(), lr=1e-2), torch.Generator().manual_seed(1))
        model, optimizer, data = jobs[side, rank]
        other = jobs.get(("base" if side == "head" else "head", rank))
        if other is not None and other[1].state:  # the partner has stepped: between its turns, swapped out
            partner_empty.append(all(p.untyped_storage().nbytes() == 0 for p in other[0].parameters()))
        loss = model(torch.randn(8, 32, generator=data)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0:
            losses[side].append(loss.item())
        time.sleep(0.001)

    with Coordinator(pair_wait_s=30, turn_s=30, turn_steps=3, swap=True) as c:
        head = Ranks(c, "head", "ddp-cnn-1x1/launch", 1, 9, log, step_s=step).start()
        base = Ranks(c, "base", "ddp-cnn-1x1/launch", 1, 9, log, step_s=step).start()
        head.join(), base.join()
        assert c.settle(), c.report()
    assert not head.errors and not base.errors, head.errors + base.errors
    assert _runs(log) == ["base"] * 3 + ["head"] * 6 + ["base"] * 6 + ["head"] * 3
    assert partner_empty and all(partner_empty)
    assert losses["head"] == losses["base"] == _train(copy.deepcopy(_model()), 9)
    for summary in head.summaries + base.summaries:
        assert summary["swap"]["swaps"] >= 2 and summary["swap"]["swap_bytes"] > 0, summary


def test_the_verdict_and_the_pairing_line_name_the_swap_and_what_it_moved():
    head, base = _records(1.0, 1.0, rounds=2)
    swapped = [
        dataclasses.replace(
            r,
            launches=tuple(
                dataclasses.replace(
                    x,
                    duet_turn_steps=25,
                    duet_swap_bytes=3 * 2**20,
                    duet_swap_s=0.004,
                    duet_swap_freed=True,
                    duet_swap_idle_bytes=2**20,
                    duet_swap_idle_device_bytes=600 * 2**20,
                )
                for x in r.launches
            ),
        )
        for r in (head, base)
    ]
    message = paired.timing(*swapped, None, Overrides()).message
    said = "duet against the base commit in turns of 25 steps, the idle job swapped out (3.0 MiB a rank, 4.0 ms"
    assert said + " out and back; 1.0 MiB stayed in its allocator, 600.0 MiB in its whole process (NVML))" in message
    # its sigma's floor is the swap pairing's recorded A/A spread, not the duet's
    assert "A/A swap rounds of ddp-cnn-1x2" in message
    assert "A/A swap rounds" not in paired.timing(head, base, None, Overrides()).message
    on_cpu = [
        dataclasses.replace(r, launches=tuple(dataclasses.replace(x, duet_swap_freed=False) for x in r.launches))
        for r in swapped
    ]
    kept = "in turns of 25 steps, the idle job's state copied out and back, kept in host memory (3.0 MiB a rank"
    assert kept in paired.timing(*on_cpu, None, Overrides()).message
    found = {"duet": True, "pairing": "swap", "turn_steps": 25, "jobs": {}}
    assert "took turns 25 steps at a time, the idle job's training state swapped out between its turns" in (
        pairing_markdown(found)
    )


def test_the_gates_swap_pairing_reaches_its_coordinator_its_sessions_and_its_first_line(tmp_path):
    """``gate --pairing swap``: turns of 25 steps unless ``--turn-steps`` names others, the coordinator's grants say
    swap, each side's session runs as a duet's, and the gate's first line names the pairing (gate/pairing.py)."""
    import sys

    from scalegate import policy
    from scalegate.cli import gate
    from scalegate.gate import pairing
    from scalegate.gate.plan import GatePlan
    from scalegate.gate.project import Project
    from tests.conftest import ROOT

    def plan(*argv: str) -> GatePlan:
        args, extra = gate.namespace(["--base", "HEAD", *argv])
        args.forward = [*args.forward, *extra]
        return GatePlan.build(args, Project(root=tmp_path))

    assert plan("--pairing", "swap").turn_steps == policy.SWAP_TURN_STEPS
    assert plan("--pairing", "swap", "--turn-steps", "1").turn_steps == 1  # named: the user's
    chosen = pairing.choose(plan("--pairing", "swap", "--turn-steps", "10"), ROOT, sys.executable)
    assert (chosen.pairing, chosen.turn_steps) == ("swap", 10)
    assert chosen.says == (
        "swap: both commits' jobs of a case take turns 10 steps at a time, the idle job's training state swapped out "
        "between its turns"
    )
    with pairing.coordinator(plan("--pairing", "swap"), chosen) as paired_rounds:
        assert paired_rounds.coordinator.swap and paired_rounds.coordinator.turn_steps == 10
        assert "--scaling-duet-pairing=duet" in paired_rounds.args("head")
        assert pairing.report(chosen, paired_rounds)["pairing"] == "swap"


def test_a_swap_gate_whose_jobs_took_few_turns_says_how_many_steps_would_give_the_recorded_ones():
    """Tried as a user: the example script's init marker (20 steps, +5 warm-up) in the swap pairing took 3 turns of 12
    a job (the cap of half a job), and its A/A rounds spread ±16.6%. The verdict names the steps that give a script
    the six turns of 25 its figures were recorded with; a workload's canary was recorded with four."""
    head, base = _records(1.0, 1.0, rounds=2)

    def swapped(record, steps: int, warmup: int, turn: int, key: str = "train-1x2:script"):
        launches = tuple(dataclasses.replace(x, duet_turn_steps=turn, duet_swap_bytes=2**20) for x in record.launches)
        return dataclasses.replace(record, key=key, steps=steps, warmup=warmup, launches=launches)

    short = swapped(head, 20, 5, 12)
    hint = "HINT: each job of 25 steps took 3 turns of 12 steps; the swap pairing's figures were measured with 6 turns"
    assert hint in paired.few_turns(short) and "--scaling-steps 145 or more" in paired.few_turns(short)
    assert hint in paired.timing(short, swapped(base, 20, 5, 12), None, Overrides()).message
    assert paired.few_turns(swapped(head, 150, 3, 25)) == ""  # the script as recorded: six turns a job
    assert paired.few_turns(swapped(head, 100, 3, 25, "ddp-cnn-1x2:small")) == ""  # the canary as recorded: four
    assert "measured with 4 turns" in paired.few_turns(swapped(head, 20, 5, 12, "ddp-cnn-1x2:small"))
    assert paired.few_turns(swapped(head, 20, 5, 4)) == ""  # --turn-steps 4: seven turns
    assert paired.few_turns(head) == ""  # no swap, no turns to count


def test_the_pr_tables_note_keeps_a_verdicts_hint_lines_and_leaves_the_rest_to_the_logs():
    """The PR table and its JSON keep a case's verdict's first line and the HINT lines under it (the few turns' here,
    the GPU's clocks'), each within the case's bullet; the rest of a message (a crash's traceback) stays in the
    logs. Tried as a user, the table had kept the first line alone, and no HINT reached a PR."""
    from scalegate.report import compare

    head, base = _records(1.0, 1.0, rounds=1)  # one round: undecided, so the case has a note

    def swapped(record):
        launches = tuple(dataclasses.replace(x, duet_turn_steps=12, duet_swap_bytes=2**20) for x in record.launches)
        return dataclasses.replace(record, key="train-1x2:script", steps=20, warmup=5, launches=launches)

    row = compare.judge_case({"case_id": head.case_id, "record": swapped(head).to_dict()}, None, base=swapped(base))
    [message] = row.messages
    assert row.status == "noisy" and message.endswith(
        "undecided, another duet round\nHINT: each job of 25 steps"
        " took 3 turns of 12 steps; the swap pairing's figures were measured with 6 turns a job or more (docs/detection.md):"
        " pass --scaling-steps 145 or more (or a shorter --turn-steps)"
    ), message
    table = compare.markdown([row], "t")
    assert "undecided, another duet round\n  HINT: each job of 25 steps took 3 turns" in table, table
    crash = "the head's ranks crashed\nTraceback (most recent call last):\n  File 'x.py'\nHINT: rerun with -k it"
    assert compare._kept(crash) == "the head's ranks crashed\nHINT: rerun with -k it"
