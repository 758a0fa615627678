"""Parity cases, planned on the pytest side: a second front end held to raw PyTorch on the same training.

Each pair (candidate, baseline) becomes one case per selected workload on the default topology; the candidate's
spec names the baseline as its ``companion``, so one launch trains both, interleaved step by step
(harness/scalegate/worker/companion.py). The verdict is the judge's (harness/scalegate/judge/parity.py); the launches are the front
end's (harness/scalegate/parity.py).

    pytest scaling_tests -k parity                         # every pair on the default topology (1x2)
    pytest scaling_tests -k "parity-fabric-ddp-vs-ddp-cnn-1x2"
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scalegate.contract import cards
from scalegate.contract.spec import CaseSpec
from scalegate.plan import matrix
from scalegate.plan.hostinfo import HostInfo
from scalegate.plan.options import Options

# (candidate, baseline): the candidate is held to the baseline. The Trainer's fit loop steps beside its companion
# too: it runs in a thread paced step by step (harness/scalegate/strategies/lightning_trainer.py).
PAIRS = (("fabric-ddp", "ddp"), ("lightning-ddp", "ddp"))
TOPOLOGIES = ("1x2",)


@dataclass(frozen=True, kw_only=True)
class ParityCase:
    id: str  # parity-<candidate>-vs-<baseline>-<model>-<topology>, so -k selects naturally
    spec: CaseSpec  # the candidate's, with the baseline as its companion: one launch trains both
    skip: str | None = None
    oversubscribed: bool = False

    @property
    def candidate(self) -> str:
        return self.spec.strategy

    @property
    def baseline(self) -> str:
        return self.spec.companion


def build(options: Options, host: HostInfo, pairs=PAIRS, topologies=TOPOLOGIES) -> list[ParityCase]:
    cases = []
    for candidate, baseline in pairs:
        if candidate in cards.OPT_IN and candidate not in options.strategies:
            continue  # an opt-in front end is held to parity when its strategy is named
        for model in options.models:
            for topology in topologies:
                # parity judges losses and the paired steps only: the same-launch local window would be idle time
                spec = matrix.spec_for(candidate, model, topology, options, host)
                spec = spec.replace(companion=baseline, windows=dataclasses.replace(spec.windows, local_steps=0))
                skip = matrix.skip_reason(spec, host)  # either strategy's reason, or an unknown companion's error
                if skip is None and options.matrix == "smoke":  # every strategy once: a pair is two of them again
                    skip = "parity pairs are in the default matrix, not the smoke one: pass --scaling-matrix default"
                if skip is None and spec.topo.multi_node:
                    skip = f"parity runs single-node topologies; {topology} has {spec.topo.nodes} nodes"
                cases.append(
                    ParityCase(
                        id=f"parity-{candidate}-vs-{baseline}-{model}-{topology}",
                        spec=spec,
                        skip=skip,
                        oversubscribed=matrix.oversubscribed(spec.topo, host, options.run.cpu_threads),
                    )
                )
    return cases
