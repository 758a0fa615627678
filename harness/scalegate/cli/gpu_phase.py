"""One phase of the GPU acceptance run (cli/gpu_phases.py plans them): what the run was asked for (``Settings``),
what a phase runs and where it writes (``Phase``), and the measurement settings every phase shares (``common``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What the command line chose (harness/scalegate/cli/selftest.py checks each value as it reads it)."""

    budget_s: float = 1050.0
    models: str = "cnn"  # the workloads every strategy runs on; the single references run on every workload
    steps: int = 20  # 10 left resnet at 74% of its first loss (convergence asks 70%); steps cost ms on a GPU
    warmup: int = 3
    case_timeout_s: float = 120.0
    work_dir: Path = Path("results/gpu-acceptance")
    python: str = sys.executable
    phases: tuple[str, ...] = ()  # the phases to run (``--phases``); empty: every one this machine can run
    aa_rounds: int = 6  # enough rounds to state a spread (its own uncertainty about 1/sqrt(2(N-1)): 32% at six)


@dataclass(frozen=True, kw_only=True)
class Phase:
    """One command of the run, its share of the time (``weight``) and where it writes; ``skip``: why it does not run."""

    name: str
    argv: tuple[str, ...]
    proves: str  # what it shows on CUDA (the page says it)
    weight: float
    results_dir: Path
    skip: str = ""  # why it does not run on this machine
    junit: Path | None = None  # where its JUnit XML goes (pytest phases)
    gate_json: Path | None = None  # where its verdicts go (the gate)
    spread: bool = False  # A/A duet rounds (record-baselines --duet-aa): its rows are the spreads it prints

    def timeout_for(self, later: list["Phase"], remaining_s: float) -> float:
        """This phase's share of the time left: its weight over its own and the later running phases' weights."""
        weights = self.weight + sum(p.weight for p in later if not p.skip)
        return max(0.0, remaining_s * self.weight / weights)


def common(settings: Settings, steps: int | None = None) -> list[str]:
    """The measurement settings every phase shares: short windows, one launch, no stored baselines (a GPU profile
    has none yet, and the acceptance run checks the path, not a level)."""
    return [
        "--scaling-steps",
        str(steps or settings.steps),
        "--scaling-warmup",
        str(settings.warmup),
        "--scaling-timeout",
        f"{settings.case_timeout_s:g}",
        "--scaling-baseline-dir",
        str(settings.work_dir / "no-baselines"),
    ]
