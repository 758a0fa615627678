"""The duet's paired estimate (docs/duet.md): head and base took turns step by step, so step i of each pairs.

Per round: ``d_i = ln(t_head,i / t_base,i)`` of the slowest rank's step time, at W (the case) and at 1 (its 1x1
reference, a duet too). Each launch's estimate is the trimmed mean of its ``d`` (a descheduled step hits one side
of one pair): 20% at each end for a workload, 40% for a training script (``duet_floors.trim_of``); its standard
error comes from the same trimmed means of blocks of consecutive pairs, so a slow phase spanning several pairs is not
read as independent evidence. The efficiency is t1/tW, so ``ln(eff_head / eff_base) = d_1 - d_W``. Whole jobs one
after the other (the alternate pairing) pair launch by launch instead. The floors these estimates are held to are
judge/duet_floors.py's; the verdict and its words, judge/duet.py's.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from scalegate.figures import stats
from scalegate.judge import estimates
from scalegate.judge.evidence import ALTERNATE, PAIRED, LaunchRecord
from scalegate.policy import BLOCKS, TRIM, UNIT


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
    docs/evidence/script.md#a-launchs-own-tails-trimmed)."""
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
