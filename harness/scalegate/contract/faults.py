"""The faults a case injects, all off by default: they exist so tests can prove each gate and each check fires.

``Faults`` is a section of every case (``spec.faults``); its two options (``--scaling-inject-delay-ms``,
``--scaling-inject-slowdown``) are declared here once, and ``--scaling-inject-fault``'s text (``parse_fault``) sets
the others (plan/option_groups.py reads it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalegate.contract.errors import SpecError
from scalegate.contract.option import Real, option


@dataclass(frozen=True, kw_only=True)
class Faults:
    """Injected faults, all off by default. They exist so tests can prove each gate fires."""

    # sleep inside every step of a multi-rank job (a slow interconnect)
    delay_ms: float = option(
        0.0,
        "sleep this long in every step of multi-rank jobs (default: off)",
        check=Real(lambda v: 0 <= v < math.inf, "is not a delay >= 0", "pass milliseconds >= 0"),
        name="inject_delay_ms",
    )
    grad_scale: float = 1.0  # scale this rank's gradients before the optimizer (a wrong reduction)
    grad_scale_rank: int = 0
    skip_step: int = -1  # this untimed step's optimizer update is skipped on skip_step_rank (a desync)
    skip_step_rank: int = 0
    # sleep this fraction of the step's own measured time inside every step of a multi-rank job:
    # a relative slowdown, the same size on any machine (experiments/detection.py measures the gate with it)
    slowdown: float = option(
        0.0,
        "make every multi-rank step this fraction slower, e.g. 0.1 (default: off)",
        check=Real(lambda v: 0 <= v <= 10, "is not in [0, 10]", "e.g. 0.1 for 10% slower steps"),
        name="inject_slowdown",
    )
    # reliability faults (--scaling-inject-fault); -1 = off. Steps count from 0 over every step, warm-up included.
    hang_rank: int = -1  # this rank sleeps forever at hang_step (a collective that never completes)
    hang_step: int = 0
    crash_rank: int = -1  # this rank raises at crash_step
    crash_step: int = 0
    no_result_rank: int = -1  # this rank exits 0 without writing its result
    bad_result_rank: int = -1  # this rank writes a malformed result file
    # this many extra gradient-sized all-reduces in every step (a duplicated collective: the bytes gate)
    extra_allreduce: int = 0
    hold_memory_mb: int = 0  # every rank holds this much more memory through the measured steps (memory gate)
    # this rank sleeps this long in every forward, before its loss (a straggler: harness/scalegate/figures/stragglers.py names it)
    straggler_rank: int = -1
    straggler_ms: int = 0
    # --scaling-checkpoint's window restores the model but not the optimizer state (a resume that loses Adam's
    # moments and step count): the round-trip parity check must fail the case (harness/scalegate/measure/checkpoint.py)
    checkpoint_skip_optimizer: bool = False
    # the single-process reference normalises the whole global batch even where the ranks' BatchNorm sees only their
    # shard (a loose reference): gradient agreement must fail on such a model, so the check is not loose
    whole_batch_reference: bool = False
    # a script's bootstrap counts every optimizer-step call of every optimizer as a training step (a naive step
    # hook): the measurement self-check (harness/scalegate/checks/script.py) must fail the case
    count_every_step: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "checkpoint_skip_optimizer", bool(self.checkpoint_skip_optimizer))  # 1 from the CLI
        object.__setattr__(self, "whole_batch_reference", bool(self.whole_batch_reference))
        object.__setattr__(self, "count_every_step", bool(self.count_every_step))

    @property
    def any(self) -> bool:
        return (
            self.delay_ms > 0
            or self.grad_scale != 1.0
            or self.skip_step >= 0
            or self.slowdown > 0
            or max(self.hang_rank, self.crash_rank, self.no_result_rank, self.bad_result_rank) >= 0
            or self.extra_allreduce > 0
            or self.hold_memory_mb > 0
            or (self.straggler_rank >= 0 and self.straggler_ms > 0)
            or self.checkpoint_skip_optimizer
            or self.whole_batch_reference
            or self.count_every_step
        )


FAULT_SYNTAX = (
    "hang:rank=R,step=K | crash:rank=R[,step=K] | no-result:rank=R | bad-result:rank=R | "
    "straggler:rank=R,ms=M | checkpoint-skip-optimizer (with --scaling-checkpoint) | count-every-step (scripts)"
)
_FAULT_KEYS = {
    "hang": ("hang", ("rank", "step")),
    "crash": ("crash", ("rank", "step")),
    "no-result": ("no_result", ("rank",)),
    "bad-result": ("bad_result", ("rank",)),
    "straggler": ("straggler", ("rank", "ms")),
    "checkpoint-skip-optimizer": ("checkpoint_skip_optimizer", ()),
    "count-every-step": ("count_every_step", ()),
}  # a switch: no arguments
_FAULT_REQUIRED = {"hang": ("rank", "step"), "straggler": ("rank", "ms")}  # the others need only a rank


def parse_fault(text: str) -> dict[str, int]:
    """``hang:rank=1,step=3`` -> ``{"hang_rank": 1, "hang_step": 3}`` (``Faults`` field values)."""
    hint = f"write --scaling-inject-fault as {FAULT_SYNTAX}, e.g. hang:rank=1,step=3"
    kind, _, args = str(text).strip().partition(":")
    if kind not in _FAULT_KEYS:
        raise SpecError(f"--scaling-inject-fault {text!r}: unknown fault {kind!r}", hint)
    prefix, allowed = _FAULT_KEYS[kind]
    values: dict[str, int] = {}
    for item in filter(None, (a.strip() for a in args.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not allowed:
            raise SpecError(f"--scaling-inject-fault {text!r}: {kind} takes no arguments, got {item!r}", hint)
        if not eq or key not in allowed or key in values:
            raise SpecError(
                f"--scaling-inject-fault {text!r}: {item!r} is not one of {', '.join(allowed)}=N (each at most once)",
                hint,
            )
        value = value.strip()
        if not (value.isascii() and value.isdigit()) or len(value) > 6:
            raise SpecError(f"--scaling-inject-fault {text!r}: {key}={value!r} is not a whole number >= 0", hint)
        values[key] = int(value)
    if not allowed:  # a switch (checkpoint-skip-optimizer): on, with no arguments (any was refused above)
        return {prefix: 1}
    missing = [key for key in _FAULT_REQUIRED.get(kind, ("rank",)) if key not in values]
    if missing:
        raise SpecError(f"--scaling-inject-fault {text!r}: missing {' and '.join(missing)}", hint)
    return {f"{prefix}_{key}": value for key, value in values.items()}
