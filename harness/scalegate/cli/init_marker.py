"""The ``scaling_script`` marker ``scalegate init`` writes for a team's script, and the test file that holds it.

The marker passes the script's step flag ``{steps}`` (the steps each case needs), its strategy flag ``{strategy}``,
and its devices and nodes flags the case's shape (Lightning's ``Trainer(devices=..., num_nodes=...)`` must match
the launch); ``batch`` is the script's default batch times its default accumulation. Before it is written, the
marker goes through the same validation pytest gives it (harness/scalegate/plan/script.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from scalegate import policy
from scalegate.cli.init_script import PLACEHOLDER, ScriptFlags
from scalegate.contract.errors import ScalegateError
from scalegate.contract.topology import Topology
from scalegate.plan import script as plan_script

# What each placeholder's argument is for, said in the marker
SAYS = {
    "steps": "the optimizer steps each case needs (warm-up and measured)",
    "strategy": "each case's strategy word",
    "devices": "the case's ranks per node",
    "nodes": "the case's nodes",
}


@dataclass(frozen=True, kw_only=True)
class Marker:
    script: str  # relative to the repository's root, as pytest's rootdir reads it
    args: tuple[tuple[str, str], ...]  # (argument, why) in the order they are written
    name: str
    strategies: tuple[str, ...]
    topologies: tuple[str, ...]
    batch: int | None
    batch_says: str
    loss_pattern: str = ""

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(arg for arg, _ in self.args)

    @property
    def test_path(self) -> str:
        return f"scaling_tests/test_{self.name}.py"

    def kwargs(self) -> dict[str, object]:
        given = {"name": self.name, "strategies": list(self.strategies), "topologies": list(self.topologies)}
        if self.batch is not None:
            given["batch"] = self.batch
        return {**given, "loss_pattern": self.loss_pattern, "canary": True}

    def with_pattern(self, pattern: str) -> "Marker":
        return replace(self, loss_pattern=pattern)


def plan(
    root: Path,
    found: ScriptFlags,
    *,
    name: str | None,
    strategies: list[str] | None,
    topologies: list[str],
    batch: int | None,
    steps_flag: str | None,
) -> Marker:
    """The marker for the script ``found`` read, with what the user named on init's command line."""
    steps = steps_flag or (flag.name if (flag := found.role("steps")) else None)
    if steps is None:
        shown = ", ".join(f.name for f in found.flags) or "none"
        raise ScalegateError(
            f"{found.path.name} takes no flag for its number of steps among the flags {found.source} show ({shown})",
            "give the script a step flag (e.g. --max-steps) or name the one it has: init --steps-flag=--num-updates",
        )
    flags = {"steps": steps}
    for role in ("strategy", "devices", "nodes"):
        if (flag := found.role(role)) is not None:
            flags[role] = flag.name
    order = ("strategy", "steps", "devices", "nodes")
    args = tuple((f"{flags[r]}={PLACEHOLDER[r]}", SAYS[r]) for r in order if r in flags)
    words = _strategies(found, strategies)
    shapes = tuple(str(Topology.parse(t)) for t in topologies)
    counted, says = _batch(found, batch)
    stem = name or re.sub(r"[^a-z0-9_]", "_", found.path.stem.lower()).strip("_") or "script"
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", stem):
        raise ScalegateError(f"--name {stem!r} cannot name a test", "use lower-case letters, digits and _")
    script = found.path.resolve().relative_to(root.resolve()).as_posix()
    return Marker(
        script=script, args=args, name=stem, strategies=words, topologies=shapes, batch=counted, batch_says=says
    )


def _strategies(found: ScriptFlags, given: list[str] | None) -> tuple[str, ...]:
    """The strategy words: the user's, else the script's ``ddp`` (or its flag's default or first choice)."""
    flag = found.role("strategy")
    if flag is None:
        if given and len(given) > 1:
            raise ScalegateError(
                f"{found.path.name} has no strategy flag, so --strategies {','.join(given)} would run the same code "
                "under several names",
                "name one word for what the script does (--strategies ddp), or give the script a --strategy flag",
            )
        return tuple(given or ["ddp"])
    if given:
        unknown = [w for w in given if flag.choices and w not in flag.choices]
        if unknown:
            raise ScalegateError(
                f"--strategies {','.join(given)}: {found.path.name}'s {flag.name} takes {', '.join(flag.choices)}",
                f"name words its {flag.name} takes, e.g. --strategies {flag.choices[0]}",
            )
        return tuple(dict.fromkeys(given))
    if not flag.choices:
        return (flag.default if isinstance(flag.default, str) and flag.default else "ddp",)
    return ("ddp",) if "ddp" in flag.choices else (flag.choices[0],)


def _batch(found: ScriptFlags, given: int | None) -> tuple[int | None, str]:
    """Samples per rank per optimizer step, and where that number came from."""
    if given is not None:
        return given, "samples per rank per optimizer step (init --batch)"
    flag, accumulation = found.role("batch"), found.role("accumulation")
    if flag is None or not isinstance(flag.default, int) or isinstance(flag.default, bool):
        return None, ""
    times = accumulation.default if accumulation and isinstance(accumulation.default, int) else 1
    said = f"{flag.name}'s default" + (f" x {accumulation.name}'s {times}" if times != 1 else "")
    return flag.default * times, f"samples per rank per optimizer step: {said}"


def validated(marker: Marker, root: Path) -> None:
    """The marker as pytest will read it: the same checks (plan/script.py), so a written marker collects."""
    plan_script.declared((marker.script, *marker.argv), marker.kwargs(), root, marker.test_path)


def pattern_literal(pattern: str) -> str:
    """A raw string where one can hold the pattern (it reads as the regex), else Python's own quoting."""
    if '"' not in pattern and "\n" not in pattern and not pattern.endswith("\\"):
        return f'r"{pattern}"'
    return repr(pattern)


def test_file(marker: Marker) -> str:
    """The test file: the marker and the test that runs each of its cases."""
    first = f"{marker.strategies[0]}-{marker.name}-{marker.topologies[0]}"
    lines = [
        f'"""The scaling cases of {marker.script}, written by `python -m scalegate init`: edit them freely.',
        "",
        "pytest                                        # every case, each strategy with its 1x1 reference",
        f"pytest -k {first} --scaling-steps 50".ljust(46) + "# one case, more measured steps",
        f"python -m scalegate gate --base origin/main --scaling-steps {policy.SCRIPT_GATE_STEPS}   # the PR gate, head against base",
        '"""',
        "",
        "import pytest",
        "",
        "",
        "@pytest.mark.scaling_script(",
        f"    {json.dumps(marker.script)},  # the training script, run unchanged",
        *(f"    {json.dumps(arg)},  # {why}" for arg, why in marker.args),
        f"    name={json.dumps(marker.name)},  # case ids: <strategy>-{marker.name}-<topology>",
        f"    strategies={json.dumps(list(marker.strategies))},",
        f"    topologies={json.dumps(list(marker.topologies))},",
        *([f"    batch={marker.batch},  # {marker.batch_says}"] if marker.batch is not None else []),
        f"    loss_pattern={pattern_literal(marker.loss_pattern)},  # read from rank 0's output",
        "    canary=True,  # what `python -m scalegate gate` runs",
        ")",
        f"def test_{marker.name}(scaling_case, benchmark):",
        "    scaling_case.check(benchmark)",
        "",
    ]
    return "\n".join(lines)
