"""The frozen case specification shared by the launching side and the worker side: what a case trains, where, and
the option sections it carries whole (contract/sections.py, contract/faults.py), as torchtitan passes its JobConfig.

A rank reads the spec from ``SPEC.json`` (``CaseSpec.read``), and every result file keeps it under ``spec``. That JSON
is flat: each section's values under their own keys (``steps``, ``duet_side``: ``option.key_of``), the faults under
``faults``, so a spec file reads the same whatever the sections. ``CaseSpec.of`` builds a spec from such keys.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalegate.contract.errors import SpecError
from scalegate.contract.faults import Faults
from scalegate.contract.option import check_values, key_of
from scalegate.contract.script import ScriptSpec
from scalegate.contract.sections import Duet, Execution, Run, Windows
from scalegate.contract.topology import Topology

SCALINGS = ("weak", "strong")
DEVICES = ("auto", "cpu", "cuda")
FLAT = ("run", "execution", "duet", "windows")  # the sections whose values a spec's JSON holds under their own keys


@dataclass(frozen=True, kw_only=True)
class CaseSpec:
    strategy: str
    model: str
    preset: str
    topology: str
    micro_batch: int
    scaling: str = "weak"
    global_batch: int | None = None  # strong scaling only: fixed across world sizes
    device: str = "auto"
    lr: float = 1e-3
    grad_check: bool = True
    microbatches: int = 0  # pipeline strategies: micro-batches per step; 0 = one per stage (world size)
    # parity (harness/scalegate/parity.py): a second strategy trained in the same launch, its steps interleaved with
    # ``strategy``'s, each rank running both (harness/scalegate/worker/companion.py); "" = none. The name is checked where
    # strategies are resolved (harness/scalegate/plan/matrix.py, the worker), so the spec never imports the registry
    companion: str = ""
    dims: dict[str, Any] = field(default_factory=dict)  # overrides of the preset's model size knobs
    # Where the worker finds a workload that is not built in (scalegate.workloads.resolve): "package.module:Class" or
    # "hf:<model_type>"; "" = the built-in workload named ``model``. The ranks are other processes (torchrun,
    # srun, the warm agent's forkserver, possibly another node, any cwd), so the spec carries the absolute
    # directories they put in front of sys.path before importing it, rather than trusting their environment.
    workload: str = ""
    import_paths: tuple[str, ...] = ()
    # Parameter elements whose true gradient is 0, which gradient and parameter agreement leave out: found once per
    # workload and preset by the pytest side's probe before a launch (fixtures/probe.py, harness/scalegate/plan/probe.py):
    # {"dtype", "why", "params": {name: {"numel", "ranges": [[start, stop], ...]}}}; {} = not probed
    zero_grad: dict[str, Any] = field(default_factory=dict)
    # A team's own training script instead of a workload (harness/scalegate/contract/script.py): the ranks run it through the
    # bootstrap, and ``strategy`` is the script's own word for its strategy
    script: ScriptSpec | None = None
    # the option sections, whole, as the session's options give them (plan/options.py ``spec_sections``)
    run: Run = field(default_factory=Run)
    execution: Execution = field(default_factory=Execution)
    duet: Duet = field(default_factory=Duet)
    windows: Windows = field(default_factory=Windows)
    faults: Faults = field(default_factory=Faults)

    def __post_init__(self) -> None:
        if isinstance(self.script, dict):  # a JSON round trip
            object.__setattr__(self, "script", ScriptSpec.from_dict(self.script))
        topo = Topology.parse(self.topology)  # raises with a HINT on a malformed string
        object.__setattr__(self, "topology", str(topo))
        if self.micro_batch < 1:
            raise SpecError(
                f"micro-batch {self.micro_batch} for {self.case_id} must be >= 1", "fix the model preset's micro_batch"
            )
        _one_of("scaling", self.scaling, SCALINGS, self.case_id)
        _one_of("device", self.device, DEVICES, self.case_id)
        for name in (*FLAT, "faults"):  # every option as its declaration checks it (contract/option.py)
            check_values(getattr(self, name), f" for {self.case_id}")
        if self.windows.local_steps < 0:
            raise SpecError(
                f"local_steps={self.windows.local_steps} for {self.case_id} is negative",
                "pass --scaling-local-steps 0 (off) or more",
            )
        if not isinstance(self.companion, str):
            raise SpecError(
                f"companion={self.companion!r} for {self.case_id} is not a strategy name",
                'name a strategy, e.g. companion="ddp", or leave it "" (none)',
            )
        self._check_workload()
        if self.microbatches < 0:
            raise SpecError(
                f"microbatches={self.microbatches} for {self.case_id} is negative",
                "use 0 (one micro-batch per pipeline stage) or a positive count",
            )
        self._check_batch()

    def _check_workload(self) -> None:
        if not isinstance(self.workload, str):
            raise SpecError(
                f"workload={self.workload!r} for {self.case_id} is not an import reference",
                'write "package.module:Class", or leave it "" for the built-in workload named by model',
            )
        paths = self.import_paths
        if isinstance(paths, str) or not all(isinstance(p, str) for p in paths):
            raise SpecError(
                f"import_paths={paths!r} for {self.case_id} is not a list of directories",
                'pass a tuple of absolute directories, e.g. ("/home/me/repo",)',
            )
        object.__setattr__(self, "import_paths", tuple(paths))  # a JSON round trip reads a list
        if not isinstance(self.zero_grad, dict) or not isinstance(self.zero_grad.get("params", {}), dict):
            raise SpecError(
                f"zero_grad={self.zero_grad!r} for {self.case_id} is not the probe's mapping",
                'leave it {} (the pytest side fills it in before a launch) or {"params": {name: {"numel": n, '
                '"ranges": [[start, stop]]}}}',
            )
        relative = [p for p in paths if not Path(p).is_absolute()]
        if relative:
            raise SpecError(
                f"import_paths for {self.case_id}: {relative[0]!r} is relative; ranks run in other "
                "directories (torchrun, srun, other nodes)",
                "pass absolute directories",
            )

    def _check_batch(self) -> None:
        if self.scaling == "weak":
            return
        if self.global_batch is None or self.global_batch < 1:
            raise SpecError(
                f"strong scaling for {self.case_id} needs a global batch >= 1, got {self.global_batch}",
                "pass --scaling-global-batch N",
            )
        if self.global_batch % self.world_size:
            raise SpecError(
                f"global batch {self.global_batch} does not divide by world size {self.world_size} "
                f"(topology {self.topology}) for {self.case_id}",
                f"use a global batch that is a multiple of {self.world_size}, "
                f"e.g. {self.world_size * max(1, self.global_batch // self.world_size)}",
            )

    @property
    def topo(self) -> Topology:
        return Topology.parse(self.topology)

    @property
    def world_size(self) -> int:
        return self.topo.world_size

    @property
    def case_id(self) -> str:
        """``ddp-cnn-1x2``; under strong scaling ``ddp-cnn-1x2-strong``: another global batch, another baseline."""
        return f"{self.strategy}-{self.model}-{self.topology}{'-strong' if self.scaling == 'strong' else ''}"

    @property
    def local_batch(self) -> int:
        """Samples each data-parallel rank processes per step."""
        if self.scaling == "weak":
            return self.micro_batch
        return self.global_batch // self.world_size  # type: ignore[operator]

    @property
    def global_batch_size(self) -> int:
        return self.local_batch * self.world_size

    def replace(self, **changes: Any) -> "CaseSpec":
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, **values: Any) -> "CaseSpec":
        """A spec from its JSON's keys (``steps=3`` is ``run.steps``, ``faults`` a dict or ``Faults``), beside the
        case's own fields and whole sections: how a spec file is read, and a short way to name a few values."""
        values = dict(values)
        if isinstance(values.get("faults"), dict):
            values["faults"] = Faults(**values["faults"])
        given: dict[str, dict[str, Any]] = {}
        for key, (section, name) in _keys().items():
            if key in values:
                given.setdefault(section, {})[name] = values.pop(key)
        for section, changes in given.items():
            values[section] = dataclasses.replace(values.get(section) or _section(section)(), **changes)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in FLAT:
                data.update({key_of(g): copy.deepcopy(getattr(value, g.name)) for g in dataclasses.fields(value)})
            else:
                data[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else copy.deepcopy(value)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CaseSpec":
        return cls.of(**data)

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.to_dict(), indent=2))
        return path

    @classmethod
    def read(cls, path: Path) -> "CaseSpec":
        return cls.from_dict(json.loads(Path(path).read_text()))


def _section(name: str) -> type:
    return CaseSpec.__dataclass_fields__[name].default_factory  # type: ignore[return-value]


@functools.cache
def _keys() -> dict[str, tuple[str, str]]:
    """Each key of a spec's JSON that a section holds -> (the section's field in ``CaseSpec``, its own field)."""
    own = {f.name for f in dataclasses.fields(CaseSpec)}
    found: dict[str, tuple[str, str]] = {}
    for section in FLAT:
        for f in dataclasses.fields(_section(section)):
            key = key_of(f)
            if key in found or key in own:
                raise TypeError(f"{section}.{f.name}: the key {key!r} of a spec's JSON is taken already")
            found[key] = (section, f.name)
    return found


def _one_of(name: str, value: str, allowed: tuple[str, ...], case_id: str) -> None:
    if value not in allowed:
        raise SpecError(
            f"{name}={value!r} for {case_id} is not one of {', '.join(allowed)}", f"pick one of: {', '.join(allowed)}"
        )
