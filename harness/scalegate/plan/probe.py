"""The spec a launch carries, after one look at the case's model on the pytest side (fixtures/probe.py).

Once per workload, preset, dims, seed and data directory in this process: the model's output is checked against
the default loss (a SpecError with a HINT, before any rank starts), and the parameter elements with a true
gradient of 0 go into ``CaseSpec.zero_grad`` for the ranks' agreement checks to leave out. The session and
``launch.run_case`` call ``prepare`` just before they launch.
"""

from __future__ import annotations

import json
from typing import Any

from scalegate import workloads
from scalegate.contract.errors import SpecError
from scalegate.contract.spec import CaseSpec

_FOUND: dict[tuple, dict[str, Any] | SpecError] = {}


def prepare(spec: CaseSpec, data_dir: str | None = None) -> CaseSpec:
    """``spec`` with the probe's zero-gradient elements where its gradients are checked; raises the probe's
    SpecError (a model output the default loss cannot read) for every case of that workload. A training script has
    no model here to probe: its gradients are not compared (harness/scalegate/checks/script.py)."""
    if spec.script is not None:
        return spec
    found = found_for(spec, data_dir)
    if not spec.grad_check or spec.zero_grad:  # nothing compared, or probed already (a relaunch)
        return spec
    return spec.replace(zero_grad=found)


def found_for(spec: CaseSpec, data_dir: str | None = None) -> dict[str, Any]:
    from scalegate.workloads import probe  # torch, only when a case is about to launch

    key = (
        spec.workload or spec.model,
        spec.import_paths,
        spec.preset,
        json.dumps(spec.dims, sort_keys=True, default=str),
        spec.run.seed,
        data_dir or "",
    )
    if key not in _FOUND:
        workload = workloads.resolve(spec)(spec.preset, spec.run.seed, data_dir, dims=spec.dims)
        try:
            _FOUND[key] = probe.probe(workload)
        except SpecError as exc:
            _FOUND[key] = SpecError(f"{spec.case_id}: {exc.message}", exc.hint)
    found = _FOUND[key]
    if isinstance(found, SpecError):
        raise SpecError(found.message, found.hint)
    return found
