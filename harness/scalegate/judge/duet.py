"""The duet's paired estimate (docs/duet.md): head and base took turns step by step, so step i of each pairs.

Per round: ``d_i = ln(t_head,i / t_base,i)`` of the slowest rank's step time, at W (the case) and at 1 (its 1x1
reference, a duet too). Each launch's estimate is the trimmed mean of its ``d`` (a descheduled step hits one side
of one pair): 20% at each end for a workload, 40% for a training script (``SCRIPT_TRIM``); its standard error comes
from the same trimmed means of blocks of consecutive pairs, so a slow phase spanning several pairs is not read as
independent evidence. The efficiency is t1/tW, so ``ln(eff_head / eff_base) = d_1 - d_W``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from scalegate.figures import stats
from scalegate.judge import estimates, gpu, sequential
from scalegate.judge import metric as V
from scalegate.judge.evidence import ALTERNATE, PAIRED, CaseRecord, LaunchRecord
from scalegate.judge.outcome import AB, Overrides
from scalegate.judge.references import efficiency_tolerance
from scalegate.judge.timing import Timing, decided
from scalegate.policy import (
    BLOCKS,
    MIN_ROUNDS,
    RECORDED_AA,
    RECORDED_AA_ALTERNATE,
    RECORDED_AA_ALTERNATE_LOCAL,
    RECORDED_AA_STEP_W,
    RECORDED_AA_SWAP,
    SCRIPT_TRIM,
    SWAP_TURN_STEPS,
    SWAP_TURNS,
    TRIM,
    UNIT,
)
from scalegate.record.baselines import BaselineFile

__all__ = ["BLOCKS", "MIN_ROUNDS", "RECORDED_AA", "RECORDED_AA_STEP_W", "SCRIPT_TRIM", "TRIM", "UNIT"]


def is_script(record: CaseRecord) -> bool:
    return record.key.endswith(":script")


def kind_of(record: CaseRecord) -> str:
    """The kind the recorded floors and turns are kept by: "script" (a user's training script) or "workload"."""
    return "script" if is_script(record) else "workload"


def aa_floor(record: CaseRecord, baseline: BaselineFile | None, step_w: bool = False) -> tuple[float, str]:
    """Sigma's floor from A/A duets, and where it comes from: the spread the profile's baseline recorded for this case
    (``record-baselines --duet-aa N``), else ``RECORDED_AA``, fitted on the 2-core VMs. ``step_w``: the floor of the
    step time at W's test (``sigma_step_w``, ``RECORDED_AA_STEP_W``). BaselineError where the recorded value is
    malformed."""
    recorded = baseline.duet_aa(record.key) if baseline is not None else None
    if step_w and recorded is not None and recorded.sigma_step_w is not None:
        return recorded.sigma_step_w, recorded.describe() + " (step time at W)"
    if not step_w and recorded is not None:
        return recorded.sigma, recorded.describe()
    return measured_floor(kind_of(record), step_w)


def measured_floor(kind: str, step_w: bool = False, pairing: str = "duet") -> tuple[float, str]:
    """The floor measured on the 2-core VMs for ``kind`` ("workload" or "script") in ``pairing`` (the duet, "swap"
    or "alternate"): the efficiency's, or the step time at W's (benchmarks/duet_replay.py replays with it)."""
    if pairing in ("swap", "alternate"):
        efficiency, at_w = (RECORDED_AA_SWAP if pairing == "swap" else RECORDED_AA_ALTERNATE)[kind]
        return at_w if step_w else efficiency
    return (RECORDED_AA_STEP_W if step_w else RECORDED_AA)[kind]


def alternate_floor(record: CaseRecord, step_w: bool = False, local: bool = False) -> tuple[float, str]:
    """Sigma's floor in the alternate pairing: the spread of its recorded A/A rounds (``RECORDED_AA_ALTERNATE``);
    ``local``: of the efficiency read from each launch's same-launch local steps (``RECORDED_AA_ALTERNATE_LOCAL``)."""
    if local and not step_w:
        return RECORDED_AA_ALTERNATE_LOCAL
    return measured_floor(kind_of(record), step_w, "alternate")


def swap_floor(record: CaseRecord, step_w: bool = False) -> tuple[float, str]:
    """Sigma's floor in the swap pairing: the spread of its recorded A/A rounds (``RECORDED_AA_SWAP``)."""
    return measured_floor(kind_of(record), step_w, "swap")


def speed_drop(step_time: float) -> float:
    """A step time ``step_time`` slower, as the drop in speed (base/head step time) the step-time test detects."""
    return 1 - 1 / (1 + step_time)


def rounds_design(
    record: CaseRecord, baseline: BaselineFile | None, overrides: Overrides, sigma_floor: float
) -> sequential.Design:
    """The sequential test over an A/B gate's rounds, duet or not: the case's drop to catch and budget, both
    verdicts after ``MIN_ROUNDS`` rounds."""
    conduct = record.conduct
    return sequential.Design(
        detect=efficiency_tolerance(record, overrides, baseline),
        alpha=conduct.alpha,
        beta=conduct.beta,
        max_launches=conduct.max_launches,
        min_launches_regressed=MIN_ROUNDS,
        min_launches_ok=MIN_ROUNDS,
        sigma_floor=sigma_floor,
    )


def trim_of(record: CaseRecord) -> float:
    """The share of a round's units trimmed at each end for this case: ``SCRIPT_TRIM`` for a training script."""
    return SCRIPT_TRIM if is_script(record) else TRIM


@dataclass(frozen=True)
class Paired:
    """One series of duet pairs: the trimmed mean of its log ratios and that mean's standard error."""

    mean: float
    se: float
    pairs: int


@dataclass(frozen=True)
class RoundEstimate:
    at_w: Paired
    at_1: Paired
    pairing: str = PAIRED  # PAIRED (step by step) or ALTERNATE (whole launches, one after the other)
    # the alternate pairing's efficiency from each launch's own local steps (``local_alternated``), where both have them
    local: Paired | None = None

    @property
    def efficiency_log(self) -> float:
        """ln(efficiency head / base) = ln(t1 ratio) - ln(tW ratio); the local efficiencies' log ratio where read."""
        return self.local.mean if self.local is not None else self.at_1.mean - self.at_w.mean

    @property
    def se(self) -> float:
        return self.local.se if self.local is not None else math.hypot(self.at_w.se, self.at_1.se)

    def describe(self) -> str:
        if self.local is not None:
            return (
                f"step time {math.exp(self.at_w.mean) - 1:+.1%} at W, local efficiency "
                f"{math.exp(self.efficiency_log) - 1:+.1%} ±{self.se:.1%} ({self.local.pairs} same-launch pairs a side)"
            )
        return (
            f"step time {math.exp(self.at_w.mean) - 1:+.1%} at W, {math.exp(self.at_1.mean) - 1:+.1%} at 1x1, "
            f"efficiency {math.exp(self.efficiency_log) - 1:+.1%} ±{self.se:.1%} ({self.at_w.pairs} "
            f"{'pairs' if self.pairing == PAIRED else 'steps a side at W'})"
        )


def trimmed_mean(values: Sequence[float], trim: float = TRIM) -> float:
    ordered = sorted(values)
    cut = int(len(ordered) * trim)
    kept = ordered[cut : len(ordered) - cut] or ordered
    return statistics.fmean(kept)


def block_se(values: Sequence[float], blocks: int = BLOCKS, trim: float = TRIM) -> float:
    """The standard error of the trimmed mean (``trim``) from the trimmed means of ``blocks`` runs of consecutive
    values (batch means): it keeps what neighbouring pairs share, which the pairs' own spread over sqrt(n) would
    hide, and it is the error of the estimate the judge uses (plain block means read a script's 1x1 tails as noise:
    docs/evidence/duet.md#a-teams-script-a-launchs-own-tails-trimmed)."""
    n = len(values)
    blocks = min(blocks, n // 2)
    if blocks < 2:
        return math.inf
    size = n // blocks
    means = [trimmed_mean(values[i * size : (i + 1) * size], trim) for i in range(blocks)]
    return statistics.stdev(means) / math.sqrt(blocks)


def paired(
    head: Sequence[float],
    base: Sequence[float],
    lengths: tuple[Sequence[int], Sequence[int]] = ((), ()),
    unit: int = UNIT,
    trim: float = TRIM,
) -> Paired | None:
    """The pairs' estimate over units of ``unit`` consecutive pairs, ``ln(sum t_head / sum t_base)`` each;
    ``lengths``: both sides' steps per launch where a series pools several launches (the 1x1 reference's,
    ``--scaling-reference-launches``; the case's, ``--scaling-launches``): launch n of the head pairs with launch n
    of the base, step by step, so a launch that measured fewer steps shifts no later pair, and no unit spans two
    launches."""
    logs = [x for launch in zip_launches(head, base, lengths) for x in unit_logs(launch, unit)]
    if len(logs) < 4:
        return None
    return Paired(mean=trimmed_mean(logs, trim), se=block_se(logs, trim=trim), pairs=len(logs) * unit)


def unit_logs(launch: Sequence[tuple[float, float]], unit: int = UNIT) -> list[float]:
    """One launch's (head, base) step pairs in units of ``unit`` consecutive pairs, ``ln(sum t_head / sum t_base)``
    each; a unit with a step that measured nothing is left out."""
    logs = []
    for i in range(0, len(launch) - unit + 1, unit):
        heads, bases = zip(*launch[i : i + unit])
        if min(heads) > 0 and min(bases) > 0:
            logs.append(math.log(sum(heads) / sum(bases)))
    return logs


def zip_launches(
    head: Sequence[float], base: Sequence[float], lengths: tuple[Sequence[int], Sequence[int]]
) -> list[list[tuple[float, float]]]:
    """Both sides' steps paired launch by launch (as one launch where either side's lengths are unknown)."""
    head_lengths, base_lengths = lengths
    if not head_lengths or not base_lengths or sum(head_lengths) != len(head) or sum(base_lengths) != len(base):
        return [list(zip(head, base))]
    out = []
    h = b = 0
    for n_head, n_base in zip(head_lengths, base_lengths):
        out.append(list(zip(head[h : h + n_head], base[b : b + n_base])))
        h, b = h + n_head, b + n_base
    return out


def round_estimate(head: LaunchRecord, base: LaunchRecord, trim: float = TRIM) -> RoundEstimate | None:
    """The round's estimate where the case and its 1x1 reference each ran as a duet on both sides; else None.
    ``trim``: the case's (``trim_of``). Where both sides ran whole jobs one after the other (the alternate pairing),
    launch n of the head pairs with launch n of the base as a whole (``alternated``)."""
    if head.duet == base.duet == head.reference_duet == base.reference_duet == ALTERNATE:
        at_w = alternated(head.step_times_s, base.step_times_s, (head.lengths, base.lengths), trim)
        lengths = (head.reference_lengths, base.reference_lengths)
        at_1 = alternated(head.reference_step_times_s, base.reference_step_times_s, lengths, trim)
        if at_w is None or at_1 is None:
            return None
        return RoundEstimate(at_w=at_w, at_1=at_1, pairing=ALTERNATE, local=local_alternated(head, base))
    if not (head.duet == base.duet == PAIRED and head.reference_duet == base.reference_duet == PAIRED):
        return None
    at_w = paired(head.step_times_s, base.step_times_s, (head.lengths, base.lengths), trim=trim)
    lengths = (head.reference_lengths, base.reference_lengths)
    at_1 = paired(head.reference_step_times_s, base.reference_step_times_s, lengths, trim=trim)
    if at_w is None or at_1 is None:
        return None
    return RoundEstimate(at_w=at_w, at_1=at_1)


def alternated(
    head: Sequence[float], base: Sequence[float], lengths: tuple[Sequence[int], Sequence[int]], trim: float = TRIM
) -> Paired | None:
    """Whole launches one after the other: launch n's log ratio of trimmed mean step times, head over base, averaged
    over the round's launches; its standard error from each launch's own steps (a launch's level, which no launch's
    steps can see, is the recorded A/A floor's: ``aa_floor``)."""
    logs, variances = [], []
    for h, b in zip(split(head, lengths[0]), split(base, lengths[1])):
        if len(h) < 4 or len(b) < 4 or min(h) <= 0 or min(b) <= 0:
            continue
        logs.append(math.log(trimmed_mean(h, trim) / trimmed_mean(b, trim)))
        variances.append(sum(statistics.variance([math.log(t) for t in x]) / len(x) for x in (h, b)))
    if not logs:
        return None
    se = math.sqrt(sum(variances)) / len(logs)
    return Paired(mean=statistics.fmean(logs), se=se, pairs=min(len(head), len(base)))


def local_alternated(head: LaunchRecord, base: LaunchRecord) -> Paired | None:
    """Whole launches one after the other, each judged against its own same-launch reference: the log ratio of the
    two launches' local efficiencies (``estimates.local``: local over distributed steps, pair by pair, within each
    launch), so a launch's own level cancels inside it. Its standard error from the two bootstrap intervals. None
    where either launch has no local pairs (a script; a replica that did not fit on the device) or no interval."""
    found = [estimates.local(launch) for launch in (head, base)]
    if found[0] is None or found[1] is None:
        return None
    ses = [stats.log_standard_error(e) for e in found]
    if ses[0] is None or ses[1] is None:
        return None
    pairs = min(len(head.pair_step_times_s), len(base.pair_step_times_s))
    return Paired(mean=math.log(found[0].value / found[1].value), se=math.hypot(*ses), pairs=pairs)


def split(steps: Sequence[float], lengths: Sequence[int]) -> list[Sequence[float]]:
    """A series pooled from several launches, launch by launch (one launch where its lengths are unknown)."""
    if not lengths or sum(lengths) != len(steps):
        return [steps]
    out, at = [], 0
    for n in lengths:
        out.append(steps[at : at + n])
        at += n
    return out


def not_paired(head: LaunchRecord, base: LaunchRecord) -> str:
    """Why a round is not paired (for the verdict), or "" where it is."""
    for side, launch in (("head", head), ("base", base)):
        pairing = launch.duet if launch.duet in (PAIRED, ALTERNATE) else PAIRED
        for what, status in (("case", launch.duet), ("1x1 reference", launch.reference_duet)):
            if status != pairing:
                return f"the {side} commit's {what} ran {status or 'without a duet'}"
    return ""


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


def sigma_of(logs: Sequence[float], ses: Sequence[float], recorded: tuple[float, str]) -> tuple[float, str]:
    """The sequential test's spread of one round's log ratio, and where it comes from: the rounds' block means,
    never below ``recorded`` (recorded A/A duet rounds: a launch's own level, which no round's pairs can see) nor
    the rounds' own spread. benchmarks/duet_replay.py replays recorded rounds through it."""
    sigma, source = statistics.median(ses), "measured: block means of the rounds' duet pairs"
    floor, where = recorded
    if floor > sigma:
        sigma, source = floor, f"measured: {where}, above the rounds' block means"
    if len(logs) >= 2 and statistics.stdev(logs) > sigma:
        sigma, source = statistics.stdev(logs), f"measured: the {len(logs)} rounds' own spread, above their block means"
    return sigma, source


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
