"""The duet's faults, named (docs/duet.md#faults): what the coordinator says when a job cannot go on, and the stop.

A rank whose connection closes before its ``bye`` (``exited``), and a turn not given back within the turn limit
(``hung``): the message names the side, the job, the ranks (with their nodes) and their last steps, and for a hang
each rank stuck outside torch, from its ``where``. ``stop`` tells the failed job's ranks and its partner's; the
partner's failure says it was stopped.
"""

from __future__ import annotations

from scalegate.launch.duet_jobs import Job


def exited(job: Job, rank: int) -> str:
    """A rank of ``job`` whose connection closed mid-duet: its side, rank, node and the step it was at."""
    step = job.last_step.get(rank, -1) + 1
    return f"the {job.side} side's rank {rank} on node {job.nodes.get(rank, 0)} exited mid-duet at step {step} ({job.name})"


def hung(job: Job, turn_s: float) -> str:
    """``job`` held its turn past ``turn_s``: the ranks still in the turn and every rank's last step, then each rank
    in the turn whose own frame is outside torch (the one stuck; the others wait for it in a collective)."""
    running = sorted(set(job.ranks) - job.waiting - job.left)
    steps = ", ".join(f"rank {r} {job.last_step.get(r, -1)}" for r in sorted(job.ranks))
    where = ", ".join(f"{r} (node {job.nodes.get(r, 0)})" for r in running)
    return (
        f"the {job.side} side's job {job.name} did not give its turn back in {turn_s:.0f} s: rank(s) "
        f"{where} still in the turn; last steps done: {steps}"
    ) + "".join(
        f"; rank {r} (node {job.nodes.get(r, 0)}) is stuck outside torch, in {job.where[r]['frame']}"
        for r in running
        if job.where.get(r, {}).get("frame") and not job.where[r].get("torch")
    )


def stop(job: Job, partner: Job | None, why: str) -> None:
    """``job`` failed with ``why``: its ranks are told to stop (their launcher ends them), and so are its partner's
    where the partner is still running."""
    job.failed = why
    job.tell({"op": "stop", "why": why})
    if partner is not None and not partner.gone:
        partner.failed = f"stopped: {why}"
        partner.tell({"op": "stop", "why": why})
