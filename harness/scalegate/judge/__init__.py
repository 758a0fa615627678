"""One judge for every caller: ``judge(record, baseline, overrides) -> Outcome``.

pytest (the session), ``python -m scalegate compare`` and ``python -m scalegate gate`` hand the same
``CaseRecord`` (written into each case's result file) to the same pure function. Definitions of the two
efficiencies and of the sequential test: docs/gate.md.
"""

from scalegate.judge.core import judge
from scalegate.judge.evidence import CaseRecord, Conduct, LaunchRecord, launch_record, pooled_steps
from scalegate.judge.outcome import (
    AB,
    CLASSIC,
    FAILED,
    IMPROVED,
    LOCAL,
    NO_BASELINE,
    NOISY,
    NOT_MEANINGFUL,
    OK,
    REGRESSED,
    SEVERITY,
    MetricVerdict,
    Outcome,
    Overrides,
)

__all__ = [
    "AB",
    "CLASSIC",
    "FAILED",
    "IMPROVED",
    "LOCAL",
    "NO_BASELINE",
    "NOISY",
    "NOT_MEANINGFUL",
    "OK",
    "REGRESSED",
    "SEVERITY",
    "CaseRecord",
    "Conduct",
    "LaunchRecord",
    "MetricVerdict",
    "Outcome",
    "Overrides",
    "judge",
    "launch_record",
    "pooled_steps",
]
