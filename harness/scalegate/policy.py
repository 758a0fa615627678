"""The tuned settings, in one place: each with its rule in one line and the docs section that holds its evidence.

A setting here is a number chosen from measurements (how many launches, how long to wait, what spread to assume),
not a shape of the data. The code that applies one imports it from here; the measurements behind today's values,
and the values they replaced, are in the linked sections of the docs' evidence pages, not in comments. A value
that tests may shorten reads an environment variable named beside it; a gate never sets one.
"""

from __future__ import annotations

import math
import os
import sys


def _seconds(name: str, default: float) -> float:
    """A duration the environment may set (the tests shorten them); a value that is no number of seconds stops the
    process with one line, as bad input does, before anything runs."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        print(
            f"error: {name}={text!r} is not a number of seconds\nHINT: unset it, or set it to seconds ({name}={default:g})",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return value


# --- one case's launches (the options' defaults, plan/option_groups.py, and the judge's) ----------------------------
# Same-launch (distributed, local) step pairs after the measured steps: 40 pairs spread ~2% between launches on the
# 2-core VMs. docs/evidence/detection.md#designing-the-same-launch-reference
LOCAL_STEPS = 40
# The sequential test's launch budget per case in a plain pytest run.
# docs/evidence/detection.md#the-launch-budgets-8-in-the-gate-4-in-a-plain-session
MAX_LAUNCHES = 4
# The sequential test's error rates: false alarms when nothing changed, misses at the drop it is built for.
ALPHA, BETA = 0.01, 0.05
# The drop the sequential test is built to catch where a baseline's local efficiency names none, and the one
# recorded with each new local efficiency. docs/evidence/detection.md#the-defaults-it-set-a-10-tolerance-and-a-noisy-band
DETECT = 0.10
# How far a front end (fabric-ddp, lightning-ddp) may fall below ddp's throughput in the same launch.
PARITY_TOLERANCE = 0.10
# The tolerance written into new baselines: a 5% one raised false alarms on shared 2-core VMs.
# docs/evidence/detection.md#the-defaults-it-set-a-10-tolerance-and-a-noisy-band
RECORDED_TOLERANCE = 0.10
# A suspected regression of the classic gate is confirmed after this pause, outside the slow phase it fell in.
# docs/evidence/detection.md#relaunches-in-rounds-and-paritys-test
CONFIRM_PAUSE_S = _seconds("SCALEGATE_CONFIRM_PAUSE_S", 20)

# --- the collective ledger and a busy host (judge/ledger.py, judge/core.py) ---------------------------------------
# The rise in a case's collective bytes a step, across nodes or within one, that regresses it without timing: the
# ledger repeats to the byte between launches, so the tolerance only leaves room for a rounding of sizes.
# docs/memory-and-wire.md#launches-repeat-it-to-the-byte
LEDGER_TOLERANCE = 0.01
# A timing verdict is noisy, never regressed, where a rank's stepping thread waited for a core this share of its
# measured steps or more (another process on its cores), or the host's steal reached it.
# docs/evidence/detection.md#a-busy-host-measured
CONTENDED_WAIT = 0.25

# --- the PR gate (gate/plan.py) ----------------------------------------------------------------------------------
# The drop the stored-baseline gate catches: the CPU profile's baselines record 25%, so the gate names its own.
STORED_GATE_TOLERANCE = 0.10
# The drop the A/B gate catches by default: the smallest one its recorded A/A rounds catch >= 95% of the time with
# <= 1% false alarms within the default budget (5% on the canaries and on a team's script).
# docs/evidence/duet.md#todays-figures-what-the-default-5-tolerance-catches
AB_GATE_TOLERANCE = 0.05
# Rounds (launches) a gate may take to decide a case. docs/evidence/detection.md#relaunches-in-rounds-and-paritys-test
GATE_MAX_LAUNCHES = 8
# A training script's duet rounds, unless --scaling-max-launches is named: seven catch a 5% drop ~96% of the time at
# < 1% false alarms, in ~10 minutes.
# docs/evidence/script.md#where-a-rounds-time-goes-and-a-shorter-1x1-reference
SCRIPT_ROUNDS = 7
# An alternate pairing's rounds (a case whose two jobs run whole, one after the other), unless
# --scaling-max-launches is named: ten catch a 10% drop ~97% of the time at < 1% false alarms (replayed over its
# recorded A/A rounds; eight ~91%), an undecided canary gate taking ~6.5 minutes.
# docs/evidence/alternate.md#ten-rounds-for-the-alternate-pairing
ALTERNATE_ROUNDS = 10
# The swap pairing's turn (gate --pairing swap without --turn-steps), in optimizer steps: a swap costs a copy of the
# job's state each way, so its turns are long against it; shorter turns (10) spread the canary's rounds no less.
# docs/evidence/swap.md#the-turns-and-the-copies
SWAP_TURN_STEPS = 25
# The fewest turns a job of the swap pairing takes for its rounds to read like the recorded ones, a workload's (the
# canary's 100 steps in turns of 25) and a training script's (the example script's 150); fewer get a HINT
# (judge/duet.py few_turns). docs/duet.md#longer-turns
SWAP_TURNS = {"workload": 4, "script": 6}
# Seconds between the starts of two rounds that do not pair in time (the rounds mode): launches a minute apart
# share no slow phase of the host. docs/evidence/detection.md#relaunches-in-rounds-and-paritys-test
ROUND_GAP_S = _seconds("SCALEGATE_ROUND_GAP_S", 30)

# --- a training script's launches in a paired gate (plan/options.py resolves them) ------------------------------
# Its 1x1 reference launches this many times a session: each 1x1 launch keeps a level of its own.
# docs/evidence/script.md#four-1x1-launches-a-round
SCRIPT_REFERENCE_LAUNCHES = 4
# ... and its case at W this many times, pooled into one estimate a round.
# docs/evidence/script.md#four-short-launches-at-w-long-ones-at-1x1
SCRIPT_CASE_LAUNCHES = 4
# ... each 1x1 launch measuring this share of the case's steps, at least SCRIPT_REFERENCE_MIN_STEPS: a launch's first
# pairs are its steadiest. docs/evidence/script.md#where-a-rounds-time-goes-and-a-shorter-1x1-reference
SCRIPT_REFERENCE_SHARE = 0.5
SCRIPT_REFERENCE_MIN_STEPS = 100
# The measured steps a launch of a team's script that its detection figures were taken at (the example script, 34 of
# 35 A/A gates passed, a 5% drop caught 97.3% in seven rounds): what `scalegate init` writes into the CI templates
# as --scaling-steps. docs/evidence/script.md#todays-figures
SCRIPT_GATE_STEPS = 300

# --- the duet's coordinator and its ranks (launch/duet.py, measure/turns.py) -------------------------------------
PAIR_WAIT_S = _seconds("SCALEGATE_DUET_PAIR_WAIT_S", 120)  # a job waits this long for its partner to join
TURN_S = _seconds("SCALEGATE_DUET_TURN_S", 600)  # a turn not given back in this long is a hang
RANK_WAIT_S = _seconds("SCALEGATE_DUET_WAIT_S", 900)  # a rank waits this long for one answer of the coordinator
# A multi-node gate's other nodes wait this long for node 0's coordinator, and node 0 for them, before the first round.
NODE_WAIT_S = _seconds("SCALEGATE_GATE_NODE_WAIT_S", 300)
# Once node 0's sessions of a round ended, every job of the round has: the other nodes' sessions get this long to end
# theirs (writing their files) before they are told to.
ROUND_GRACE_S = _seconds("SCALEGATE_GATE_ROUND_GRACE_S", 60)

# --- the paired estimate (judge/duet_pairs.py) -------------------------------------------------------------------------
# A round's pairs are trimmed this share at each end: a descheduled step hits one side of one pair.
TRIM = 0.2
# A training script's are trimmed 40%: at 1x1 a launch's units carry tails of their own.
# docs/evidence/script.md#a-launchs-own-tails-trimmed
SCRIPT_TRIM = 0.4
BLOCKS = 5  # a round's standard error from the trimmed means of this many runs of consecutive pairs
# Pairs per unit: in the ABBA order each side's two turns in a row differ, two pairs hold one of each.
# docs/evidence/duet.md#two-kinds-of-turn-units-of-two-pairs
UNIT = 2
MIN_ROUNDS = 2  # either verdict of an A/B gate needs this many rounds
# Sigma's floor where a profile recorded no A/A rounds of its own (record-baselines --duet-aa N): the spread of a
# round's efficiency log ratio between recorded A/A rounds on the 2-core CPU VMs, and what it was measured on.
# docs/evidence/duet.md#the-sigma-floors-and-what-they-were-measured-on
RECORDED_AA = {
    "workload": (0.0232, "20 A/A duet rounds of ddp-cnn-1x2 recorded on the 2-core VMs"),
    "script": (
        0.0270,
        "59 A/A duet rounds of 18 whole gates of the example script (four W launches of 300 pairs and four 1x1 "
        "launches a round), recorded on the 2-core VMs",
    ),
}
# The same for --scaling-step-time-tolerance's test, on the step time at W alone.
RECORDED_AA_STEP_W = {
    "workload": (0.0111, "34 A/A duet rounds of the cnn canaries' step time at W recorded on the 2-core VMs"),
    "script": (
        0.0239,
        "59 A/A duet rounds of 18 whole gates of the example script's step time at W (four W launches of 300 pairs), "
        "on the 2-core VMs",
    ),
}
# The alternate pairing's floors (whole jobs one after the other: a launch's level is all of a round's spread), the
# efficiency's and the step time at W's, from its recorded A/A rounds on the 2-core CPU VMs, a workload's and a
# training script's. docs/evidence/alternate.md#todays-figures
RECORDED_AA_ALTERNATE = {
    "workload": (
        (0.0804, "12 A/A alternate rounds of ddp-cnn-1x2 recorded on the 2-core VMs"),
        (0.0542, "12 A/A alternate rounds of ddp-cnn-1x2's step time at W recorded on the 2-core VMs"),
    ),
    "script": (
        (0.0863, "10 A/A alternate rounds of the example script (150 steps) recorded on the 2-core VMs"),
        (0.0672, "10 A/A alternate rounds of the example script's step time at W recorded on the 2-core VMs"),
    ),
}
# The same where a round's efficiency is read from each launch's own local steps (a workload's; a script has none):
# two launches of the local efficiency's spread between launches. docs/evidence/alternate.md#the-other-session-parked
RECORDED_AA_ALTERNATE_LOCAL = (0.038, "two launches' local efficiencies, 2.7% each between launches on the 2-core VMs")
# The swap pairing's floors (turns of 25 steps, each job's state copied out and back between its turns), the
# efficiency's and the step time at W's, from its recorded A/A rounds on the 2-core CPU VMs, where the copies free
# nothing (host memory): forced rounds and whole gates pooled. A script's efficiency floor is from rounds whose two
# sides' paths are of one length, as the gate lays them out (gate/worktree.py), above their spread (3.7%); replayed
# with each run's level kept (duet_replay --by-run), 0.1% of A/A gates alarm at it.
# docs/evidence/swap.md#the-gates-own-layout-measured
RECORDED_AA_SWAP = {
    "workload": (
        (0.0356, "19 A/A swap rounds of ddp-cnn-1x2 (turns of 25 steps) recorded on the 2-core VMs"),
        (0.0236, "19 A/A swap rounds of ddp-cnn-1x2's step time at W recorded on the 2-core VMs"),
    ),
    "script": (
        (
            0.045,
            "167 A/A swap rounds in 24 runs of the example script (150 steps, turns of 25), both sides' paths of one "
            "length, recorded on the 2-core VMs",
        ),
        (0.0408, "26 A/A swap rounds of the example script's step time at W recorded on the 2-core VMs"),
    ),
}
