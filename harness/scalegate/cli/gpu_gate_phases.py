"""The GPU acceptance run's phases that run a whole command (cli/gpu_phases.py plans them): the A/A gate
(``ab-gate``), the swap pairing's A/A gate (``swap``) and A/A duet rounds recorded as a spread (``aa-rounds``)."""

from __future__ import annotations

from scalegate.cli.gpu_phase import Phase, Settings, common

GATE_BASE = "HEAD"  # an A/A: the machinery runs once; a verdict other than ok or noisy is a finding

# The A/A gate's pairs a round: on the H200 (docs/gpu/nvidia-h200-2026-11-25.md) 20 pairs of the cnn's 2-3 ms steps
# left ddp-cnn-1x1 noisy after its 2 rounds (the rounds read +11.3% and -11.6% at 1x1, with the side turning first);
# 200 pairs cost about a second a side, and a duet round is decided by its pairs.
GATE_STEPS = 200


def gate_phase(per_node: str, s: Settings) -> Phase:
    results = s.work_dir / "ab-gate"
    verdicts = results / "gate.json"
    argv = [s.python, "-m", "scalegate", "gate", "--base", GATE_BASE, "--results-dir", str(results)]
    argv += ["--json", str(verdicts), *common(s, max(s.steps, GATE_STEPS)), "--scaling-max-launches", "2"]
    argv += ["--scaling-models", "cnn"]
    argv += ["--scaling-strategies", "single,ddp", "--scaling-topologies", per_node]
    return Phase(
        name="ab-gate",
        proves="the A/B gate (gate --base HEAD, an A/A) and its judge, once",
        argv=tuple(argv),
        weight=2.6,  # two rounds of single and ddp, each side a pytest session: 134 s on the H100, 73 s on the H200
        results_dir=results,
        gate_json=verdicts,
    )


def swap_phase(s: Settings) -> Phase:
    """The swap pairing on CUDA (docs/duet.md, "One resident job in turns of steps"): an A/A gate of a case whose
    step takes 20 ms or more, in turns of the gate's default steps, two rounds. Its rows say what a rank's swap moved,
    its milliseconds out and back and what stayed while it was out, in the rank's caching allocator and in its whole
    process by NVML's count: what decides whether a model that fills the GPU can take turns with its partner."""
    results = s.work_dir / "swap"
    verdicts = results / "gate.json"
    argv = [s.python, "-m", "scalegate", "gate", "--base", GATE_BASE, "--pairing", "swap"]
    argv += ["--results-dir", str(results), "--json", str(verdicts), *common(s, GATE_STEPS)]
    argv += ["--scaling-max-launches", "2", "--scaling-models", "resnet", "--scaling-strategies", "single,ddp"]
    argv += ["--scaling-matrix", "full", "--scaling-topologies", "1x1"]
    argv += ["-k", "(ddp-resnet-1x1 or single-resnet-1x1) and not parity"]
    return Phase(
        name="swap",
        proves="the swap pairing on CUDA (gate --pairing swap, an A/A): what a swap moves and takes, what stays",
        argv=tuple(argv),
        weight=4.0,  # not run on a GPU yet: two resnet duet rounds (79-89 s each on the H200) and the swaps
        results_dir=results,
        gate_json=verdicts,
    )


def aa_phase(s: Settings) -> Phase:
    """A/A duet rounds of a case whose step takes 20 ms or more on a GPU: the spread of a round, and the GPU's state in
    every round (its rounds' results keep it), recorded into a baseline file of the run's own."""
    results = s.work_dir / "aa-rounds"
    argv = [s.python, "-m", "scalegate", "record-baselines", "--duet-aa", str(s.aa_rounds)]
    argv += ["--results-dir", str(results), "--baseline-dir", str(results / "baselines")]
    argv += ["-k", "(ddp-resnet-1x1 or single-resnet-1x1) and not parity", *common(s, GATE_STEPS)[:-2]]
    argv += ["--scaling-models", "resnet", "--scaling-strategies", "single,ddp"]
    argv += ["--scaling-matrix", "full", "--scaling-topologies", "1x1"]
    return Phase(
        name="aa-rounds",
        proves=f"{s.aa_rounds} A/A duet rounds of ddp-resnet-1x1: a round's spread, with the GPU's clocks round by round",
        argv=tuple(argv),
        weight=11.0,  # the H200 (docs/gpu/nvidia-h200-2026-11-27.md): 79-89 s a round, ~520 s for six
        results_dir=results,
        spread=True,
    )
