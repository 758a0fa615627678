"""The A/B verdict on a gate's paired rounds, and its words: the sequential test over the rounds' estimates
(judge/duet_pairs.py) held to their floors (judge/duet_floors.py), the efficiency and, asked for, the step time at
W; the message names how the rounds were paired, what a swap cost, where gloo's threads ran and a HINT where the GPUs
drifted or a swap round took too few turns.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Sequence

from scalegate.judge import gpu, sequential
from scalegate.judge import metric as V
from scalegate.judge.duet_floors import (
    aa_floor,
    alternate_floor,
    kind_of,
    rounds_design,
    sigma_of,
    speed_drop,
    swap_floor,
    trim_of,
)
from scalegate.judge.duet_pairs import RoundEstimate, not_paired, round_estimate
from scalegate.judge.evidence import ALTERNATE, CaseRecord, LaunchRecord
from scalegate.judge.outcome import AB, Overrides
from scalegate.judge.timing import Timing, decided
from scalegate.policy import SWAP_TURN_STEPS, SWAP_TURNS
from scalegate.record.baselines import BaselineFile


def fallback(record: CaseRecord, base: CaseRecord) -> str:
    """Why the case's rounds were judged as rounds, not paired ("" where no round was meant to pair)."""
    rounds = list(zip(record.launches, base.launches))
    if not any(h.duet or b.duet for h, b in rounds):
        return ""
    why = next((not_paired(h, b) for h, b in rounds if not_paired(h, b)), "a round with too few pairs")
    return f"; not paired, judged as rounds: {why}"


def swap_said(launches: Sequence[LaunchRecord]) -> str:
    """The swap pairing's cost for the verdict (measure/swap.py): what a rank's swap moved and took; "" without."""
    swapped = [launch for launch in launches if launch.duet_swap_bytes]
    if not swapped:
        return ""
    mib = max(launch.duet_swap_bytes for launch in swapped) / 2**20
    ms = 1000 * statistics.median(launch.duet_swap_s for launch in swapped)
    if any(launch.duet_swap_freed for launch in swapped):
        idle = [launch.duet_swap_idle_bytes for launch in swapped if launch.duet_swap_idle_bytes is not None]
        held = [launch.duet_swap_idle_device_bytes for launch in swapped if launch.duet_swap_idle_device_bytes]
        stayed = f"; {max(idle) / 2**20:.1f} MiB stayed in its allocator" if idle else ""
        stayed += f"{',' if idle else ';'} {max(held) / 2**20:.1f} MiB in its whole process (NVML)" if held else ""
        return f", the idle job swapped out ({mib:.1f} MiB a rank, {ms:.1f} ms out and back{stayed})"
    return f", the idle job's state copied out and back, kept in host memory ({mib:.1f} MiB a rank, {ms:.1f} ms)"


def threads_said(record: CaseRecord, base: CaseRecord) -> str:
    """Where gloo's worker threads ran in the duet (contract/affinity.py ``gloo_threads``), for the verdict: "" where
    the ranks do not say (CUDA, a base commit from before the choice). A reason to leave them free is named by its
    first words (the strategy, "a team's script", the option); the ranks' results keep the whole of it."""
    sides = [sorted({_short(launch.duet_threads) for launch in r.launches}) for r in (record, base)]
    if sides[0] == sides[1] == ["not said"]:
        return ""
    if sides[0] == sides[1] and len(sides[0]) == 1:
        said = sides[0][0]
        return "; gloo's threads bound with each rank" if said == "bound" else f"; gloo's threads {said}"
    head, base_said = ("/".join(s) for s in sides)
    return f"; gloo's threads: head {head}, base {base_said}"


def _short(said: str) -> str:
    """ "free: zero1-torch: its many small broadcasts ..." -> "free (zero1-torch)"; "" -> "not said"."""
    if not said.startswith("free: "):
        return said or "not said"
    return f"free ({said[len('free: ') :].split(':')[0]})"


def timing(record: CaseRecord, base: CaseRecord, baseline: BaselineFile | None, overrides: Overrides) -> Timing | None:
    """The A/B verdict on the duet's efficiency ratio, where every round was a duet; None otherwise. With
    ``--scaling-step-time-tolerance`` the step time at W is decided too, and either regressing fails the case."""
    found_rounds = [round_estimate(h, b, trim_of(record)) for h, b in zip(record.launches, base.launches)]
    if not found_rounds or not all(found_rounds):
        return None
    rounds: list[RoundEstimate] = found_rounds  # type: ignore[assignment]
    design = rounds_design(record, baseline, overrides, sigma_floor=0.0)  # no floor from arithmetic: sigma is measured
    alternate = rounds[0].pairing == ALTERNATE
    local = alternate and all(r.local is not None for r in rounds)
    if alternate and not local:  # every round read alike: the local efficiencies only where each round has them
        rounds = [dataclasses.replace(r, local=None) for r in rounds]
    kind = "alternate" if alternate else "duet"
    over = f"{len(rounds)} {kind} round{'s' if len(rounds) > 1 else ''} ({'; '.join(r.describe() for r in rounds)})"
    steps = max(launch.duet_turn_steps for launch in record.launches)
    how = "whole jobs alternating with the base commit's" if alternate else "duet against the base commit"
    how += f" in turns of {steps} steps" if steps > 1 and not alternate else ""
    how += swap_said(record.launches) if not alternate else ""
    capped = gpu.capped_rounds([h.gpu_state for h in record.launches], [b.gpu_state for b in base.launches])
    where = f"[{record.where}, {how}{threads_said(record, base)}{capped}]"
    swapped = not alternate and any(launch.duet_swap_bytes for launch in record.launches)

    def floor_of(step_w: bool = False) -> tuple[float, str]:
        if alternate:
            return alternate_floor(record, step_w=step_w, local=local)
        return swap_floor(record, step_w) if swapped else aa_floor(record, baseline, step_w=step_w)

    floor = floor_of()
    verdicts = [_decided([r.efficiency_log for r in rounds], [r.se for r in rounds], floor, design, over, where)]
    step_time = record.conduct.step_time_tolerance
    if step_time:  # speed at W, base/head: a step time ``step_time`` slower is a drop of 1 - 1/(1 + step_time)
        speed = dataclasses.replace(design, detect=speed_drop(step_time))
        logs, ses = [-r.at_w.mean for r in rounds], [r.at_w.se for r in rounds]
        again = f"the same {len(rounds)} round{'s' if len(rounds) > 1 else ''}"
        floor = floor_of(step_w=True)
        verdicts.append(_decided(logs, ses, floor, speed, again, where, "step speed at W (base/head step time)"))
    regressed = [v for v in verdicts if v.status == V.REGRESSED]
    if regressed or all(v.status == V.OK for v in verdicts):
        chosen = regressed[0] if regressed else verdicts[0]
        others = [v.message for v in verdicts if v is not chosen]
        return dataclasses.replace(chosen, message=_hinted("; ".join([chosen.message, *others]), record, base))
    undecided = next(v for v in verdicts if v.status != V.OK)
    more = len(rounds) < design.max_launches
    tail = f"undecided, another {kind} round" if more else f"still undecided after {design.max_launches} {kind} rounds"
    messages = [f"{v.message}: {tail}" if v is undecided else v.message for v in verdicts]
    message = _hinted("; ".join(messages), record, base)
    return dataclasses.replace(undecided, status=V.NOISY, next_launches=1 if more else 0, message=message)


def _hinted(message: str, record: CaseRecord, base: CaseRecord) -> str:
    """The message, with a HINT where the GPUs were left to drift (judge/gpu.py), and one where a swap round's jobs
    took too few turns to be read (``few_turns``)."""
    advice = [gpu.hint([launch.gpu_state for launch in (*record.launches, *base.launches)]), few_turns(record)]
    return "\n".join([message, *(line for line in advice if line)])


def few_turns(record: CaseRecord) -> str:
    """A HINT where the swap pairing's jobs took fewer turns each than its recorded ones (``SWAP_TURNS``): a turn of
    many steps keeps its own level, and with a few of them a round reads that level (docs/duet.md, "Longer turns");
    "" otherwise."""
    swapped = [launch for launch in record.launches if launch.duet_swap_bytes]
    if not swapped:
        return ""
    steps = record.warmup + record.steps
    turn = max(launch.duet_turn_steps for launch in swapped)
    fewest = SWAP_TURNS[kind_of(record)]
    if turn * fewest <= steps:
        return ""
    # a turn held half the job (the cap) asked for more: the gate's turn, unless --turn-steps named a shorter one
    asked = max(turn, SWAP_TURN_STEPS) if turn >= steps // 2 else turn
    return (
        f"HINT: each job of {steps} steps took {-(-steps // turn)} turns of {turn} steps; the swap pairing's figures "
        f"were measured with {fewest} turns a job or more (docs/detection.md): pass --scaling-steps "
        f"{asked * fewest - record.warmup} or more (or a shorter --turn-steps)"
    )


def _decided(
    logs: list[float],
    ses: list[float],
    floor: tuple[float, str],
    design: sequential.Design,
    over: str,
    where: str,
    what: str = "efficiency",
) -> Timing:
    """One sequential test over the rounds' log ratios (head/base, lower is worse): decided, or undecided with its
    state (``timing`` words the undecided case). Sigma: the rounds' block means, never below the A/A duets'
    recorded spread (``floor``: ``aa_floor``) nor the rounds' own."""
    sigma, source = sigma_of(logs, ses, floor)
    ratios = [math.exp(x) for x in logs]
    found = sequential.decide(ratios, 1.0, sigma, math.inf, design)  # type: ignore[arg-type]
    state = sequential.state(found, design, sigma_source=source, rounds=len(ratios), duet=True, metric=what)
    value = math.exp(statistics.fmean(logs))
    test = f"A/B sequential test: {sequential.power(design)}; paired spread ±{found.sigma:.1%}, {source}"
    done = decided(AB, found, state, value, "1.000 (the base commit, step by step)", over, test, where, what)
    if done is not None:
        return done
    return Timing(
        gate=AB,
        status=V.NOISY,
        sequential=state,
        message=f"{what} {value:.3f} ({found.change:+.1%} over {over}) ({test}) {where}",
    )
