"""A team's own training script as a scaling case: what both sides know of it.

The pytest side builds a ``ScriptSpec`` from the ``@pytest.mark.scaling_script`` marker (harness/scalegate/plan/script.py)
with every placeholder of the argument list filled for the case's topology; each rank runs the script through
the bootstrap (harness/scalegate/worker/script.py), which times its optimizer steps without changing a line of it.
"""

from __future__ import annotations

import dataclasses
import re
import string
from dataclasses import dataclass

from scalegate.contract.errors import SpecError
from scalegate.contract.topology import Topology

# What a script's arguments may name: the strategy (the script's own word for it) and the case's shape
# and ``steps``: the optimizer steps the case needs (warm-up and measured), for a ``--max-steps={steps}``
PLACEHOLDERS = ("strategy", "world_size", "nnodes", "nproc_per_node", "steps")


@dataclass(frozen=True, kw_only=True)
class ScriptSpec:
    path: str  # absolute path of the script
    argv: tuple[str, ...]  # its arguments, placeholders filled
    template: tuple[str, ...] = ()  # the arguments as declared, placeholders unfilled (``at`` fills them again)
    cwd: str  # where it runs (the repository it belongs to)
    loss_pattern: str = ""  # a regex read over every rank-0 output line: (step, loss) or (loss)
    stop_after_window: bool = False  # stop the script once the measured window has closed
    batch: int | None = None  # samples per step: per rank (weak) or in all (strong); None: optimizer steps/s
    loss_tolerance: float = 0.05  # strong scaling: the loss curves agree within this relative difference
    needed_steps: int = 0  # the optimizer steps the case needs: what ``{steps}`` stands for

    def __post_init__(self) -> None:
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "template", tuple(self.template))
        if self.loss_pattern:
            try:
                groups = re.compile(self.loss_pattern).groups
            except re.error as exc:
                raise SpecError(
                    f"loss_pattern {self.loss_pattern!r} is not a regular expression: {exc}",
                    r'e.g. loss_pattern=r"step (\d+) loss ([0-9.eE+-]+)"',
                ) from None
            if groups not in (1, 2):
                raise SpecError(
                    f"loss_pattern {self.loss_pattern!r} has {groups} groups",
                    r"give one group (the loss) or two (the step, then the loss), "
                    r'e.g. r"step (\d+) loss ([0-9.eE+-]+)"',
                )

    @classmethod
    def from_dict(cls, data: dict) -> "ScriptSpec":
        return cls(**data)

    def at(self, strategy: str, topology: Topology, where: str = "scaling_script") -> "ScriptSpec":
        """The same script for another strategy or topology: its arguments filled again (the 1x1 reference)."""
        filled = values(strategy, topology, self.needed_steps)
        return dataclasses.replace(self, argv=fill(self.template, filled, where))


def needed_steps(steps: int, warmup: int) -> int:
    """The optimizer steps a case's script must run: its warm-up (at least the one that opens the window) and its
    measured steps (worker/script.py's ``StepClock``)."""
    return max(warmup, 1) + steps


def values(strategy: str, topology: Topology, steps: int = 0) -> dict[str, object]:
    """What the placeholders stand for in a case of ``strategy`` on ``topology`` that needs ``steps`` steps."""
    return {
        "strategy": strategy,
        "world_size": topology.world_size,
        "nnodes": topology.nodes,
        "nproc_per_node": topology.per_node,
        "steps": steps,
    }


def fill(template: tuple[str, ...], values: dict[str, object], where: str) -> tuple[str, ...]:
    """Each argument with its ``{placeholder}``s filled; an unknown one names the argument and the known ones."""
    out = []
    for arg in template:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(arg)]
        except ValueError as exc:  # a lone brace
            raise SpecError(f"{where}: argument {arg!r}: {exc}", "write a literal brace as {{ or }}") from None
        for field in fields:
            if field is not None and field not in PLACEHOLDERS:
                raise SpecError(
                    f"{where}: argument {arg!r} names an unknown placeholder {{{field}}}",
                    f"use {', '.join('{' + p + '}' for p in PLACEHOLDERS)}, or write a literal brace as {{{{ }}}}",
                )
        out.append(arg.format(**values))
    return tuple(out)
