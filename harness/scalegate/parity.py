"""The parity test's launches: both front ends in one launch, launched again while the judge is undecided.

What a parity case is and which pairs exist: harness/scalegate/plan/parity.py. How it is judged: harness/scalegate/judge/parity.py,
a pure function of the launches, which this runner asks after every launch and which ``compare`` asks again
from the launches the case's file keeps (``launch_results``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalegate.contract import atomic
from scalegate.contract.errors import ScalegateError
from scalegate.contract.results import CaseResult
from scalegate.judge import parity as judge_parity
from scalegate.judge import sequential
from scalegate.judge.parity import LOSS_ATOL, ParityCall, ParityOutcome
from scalegate.launch import run_case
from scalegate.plan.parity import ParityCase
from scalegate.policy import PARITY_TOLERANCE

if TYPE_CHECKING:
    from scalegate.launch import warm


@dataclass
class ParityRunner:
    """What a parity test holds: launches of both front ends (each one launch, interleaved), judged after each,
    launched again while the judge says more launches could decide, recorded."""

    case: ParityCase
    out_dir: Path  # <run dir>/parity
    tolerance: float = PARITY_TOLERANCE
    data_dir: str | None = None
    agents: "warm.AgentPool | None" = None  # the session's warm torchrun agent (--scaling-launcher warm)
    design: sequential.Design = field(default_factory=sequential.Design)  # alpha, beta, budget
    strict: bool = False

    @property
    def call(self) -> ParityCall:
        case = self.case
        return ParityCall(
            case_id=case.id,
            candidate=case.candidate,
            baseline=case.baseline,
            topology=case.spec.topology,
            tolerance=self.tolerance,
            design=self.design,
            oversubscribed=case.oversubscribed,
            strict=self.strict,
        )

    def run(self) -> ParityOutcome:
        launches: list[CaseResult] = []
        more = 1
        while more:
            try:
                launches.append(
                    run_case(self.case.spec, self.out_dir / self.case.id, data_dir=self.data_dir, agents=self.agents)
                )
            except ScalegateError as exc:
                if not launches:
                    failed = (f"{self.case.id}: {exc}",)
                    return self._write(ParityOutcome(case_id=self.case.id, problems=failed, status="failed"), [])
                outcome, _ = judge_parity.verdict(self.call, launches)
                note = f"{outcome.timing_note} (a further launch failed: {exc})"
                return self._write(dataclasses.replace(outcome, timing_note=note), launches)
            outcome, more = judge_parity.verdict(self.call, launches)
        return self._write(outcome, launches)

    def _write(self, outcome: ParityOutcome, launches: list[CaseResult]) -> ParityOutcome:
        data: dict[str, Any] = dataclasses.asdict(outcome)
        data.update(
            spec=self.case.spec.to_dict(),
            candidate=self.case.candidate,
            baseline=self.case.baseline,
            interleaved=True,
            tolerance=self.tolerance,
            loss_atol=LOSS_ATOL,
            written=time.time(),
            failed=outcome.failed,
            launches=len(outcome.launch_ratios),
            oversubscribed=self.case.oversubscribed,
            design={"alpha": self.design.alpha, "beta": self.design.beta, "max_launches": self.design.max_launches},
            launch_results=[r.to_dict() for r in launches],  # what compare re-judges
        )
        atomic.write_json(self.out_dir / f"{self.case.id}.json", data)
        return outcome
