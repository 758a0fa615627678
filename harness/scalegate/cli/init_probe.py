"""One short real run of a team's script, before ``scalegate init`` writes its marker: the script must run under
torchrun with the marker's arguments, and the loss pattern must match what it prints.

The run is ``torchrun --standalone`` on one node with the first single-node topology's ranks (else one), the first
strategy word and ``{steps}`` = ``--probe-steps``; each rank runs the script through worker/short_run.py, which ends
it as a gate's rank ends, without the interpreter's teardown (where torch can abort a gloo rank that finished). A
pattern the user gives that matches none of the lines is refused with the lines it saw; without one, the first of
the common stacks' patterns below that matches is taken. Matching is the bootstrap's
(harness/scalegate/worker/script_loss.py): ``re.search`` on each line, every group a number.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from scalegate.cli.init_marker import Marker
from scalegate.contract.errors import ScalegateError
from scalegate.contract.script import fill, values
from scalegate.contract.topology import Topology

# The loss lines of the common stacks (docs/your-script.md, "Recipes"), most specific first; the last two are
# generic: a step number before a loss, a loss alone
PATTERNS = (
    r"'loss': '?([0-9.eE+-]+)'?",  # the HF Trainer's log dict
    r"step (\d+) loss ([0-9.eE+-]+)",
    r"step (\d+): loss ([0-9.eE+-]+)",  # Accelerate's logger
    r"step (\d+) train_loss ([0-9.eE+-]+)",  # Lightning's self.print
    r"iter (\d+): loss ([0-9.eE+-]+)",  # nanoGPT
    r"\[step\s+(\d+)\] loss: ([0-9.eE+-]+)",  # DeepSpeed's engine, printed
    r"step:\s*(\d+)\s+(?:\x1b\[[0-9;]*m)?loss:\s*([0-9.eE+-]+)",  # torchtitan, coloured
    r"(?i)(?:step|iter(?:ation)?)\W*(\d+)\b.*?\bloss\W+([0-9][0-9.eE+-]*)",
    r"(?i)\bloss\W+([0-9][0-9.eE+-]*)",
)
SHOWN_LINES = 25  # the lines an error shows of what the run printed
# torchrun's own first line when a rank failed ("E1128 07:12:47.312000 10652 torch/distributed/elastic/...
# failed (exitcode: 1) local_rank: 0 ..."); its traceback and failure box follow it, 25 lines without the rank's error
LAUNCHER_FAILED = re.compile(r"^E\d{4} \S+ \d+ torch/distributed/elastic/\S+\] failed \(exitcode")


@dataclass(frozen=True, kw_only=True)
class Probe:
    command: list[str]
    lines: list[str]
    times: list[float] = field(default_factory=list)  # when each line came, in seconds from the run's start


def run(root: Path, marker: Marker, steps: int, timeout_s: float, python: str = sys.executable) -> Probe:
    """The script's short run, its output (every rank's, stdout and stderr) as lines, each with when it came."""
    shape = next((Topology.parse(t) for t in marker.topologies if Topology.parse(t).nodes == 1), None)
    per_node = shape.per_node if shape else 1
    topology = Topology.parse(f"1x{per_node}")
    argv = fill(marker.argv, values(marker.strategies[0], topology, steps), marker.test_path)
    command = [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={per_node}"]
    command += ["-m", "scalegate.worker.short_run", marker.script, *argv]  # each rank ended as a gate's rank ends
    said = " ".join(["torchrun", *command[3:]])
    print(f"init: one short run of the script, {steps} steps: {said}", flush=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCALEGATE_")}
    env["PYTHONUNBUFFERED"] = "1"  # each line as the script prints it: its time is when the step ended
    lines, times, code = _streamed(command, root, env, timeout_s)
    if code is None:
        raise ScalegateError(
            f"the short run of {marker.script} did not end within {timeout_s:g} s ({said}); it printed:\n"
            + _shown(lines),
            "check that the script stops after the steps its step flag names, or raise --probe-timeout",
        )
    if code != 0:
        raise ScalegateError(
            f"the short run of {marker.script} exited {code} ({said}); it printed:\n" + _shown(_ranks(lines)),
            "make the script run under torchrun with these arguments (run the command above), then init again",
        )
    return Probe(command=command, lines=lines, times=times)


def _streamed(
    command: list[str], root: Path, env: dict[str, str], timeout_s: float
) -> tuple[list[str], list[float], int | None]:
    """The command's lines and when each came; its exit code, None where it ran past ``timeout_s`` (then killed,
    with everything it started)."""
    lines: list[str] = []
    times: list[float] = []
    start = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        errors="replace", start_new_session=True,
    )  # fmt: skip

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            times.append(time.monotonic() - start)
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code: int | None = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = None
    reader.join(timeout=10)
    return list(lines), list(times), code


def step_seconds(pattern: str, probe: Probe) -> float | None:
    """A step's seconds in the short run: the median time between the loss lines of consecutive steps (a line's
    time is when the script printed it), the first of them left out (the first step is warm-up). None where fewer
    than three remain, or where the run printed no times."""
    compiled = re.compile(pattern)
    seen: list[tuple[float, float]] = []  # (step, time) of each loss line that moves the step on
    for line, at in zip(probe.lines, probe.times):
        match = compiled.search(line)
        if not match or not match.groups() or not all(_number(g) for g in match.groups()):
            continue
        step = float(match.group(1)) if compiled.groups == 2 else float(len(seen))
        if not seen or step > seen[-1][0]:
            seen.append((step, at))
    gaps = [(t2 - t1) / (s2 - s1) for (s1, t1), (s2, t2) in zip(seen[1:], seen[2:])]
    return statistics.median(gaps) if len(gaps) >= 3 else None


def matches(pattern: str, lines: list[str]) -> list[str]:
    """The lines the pattern reads a loss from, as the bootstrap reads them."""
    compiled = re.compile(pattern)
    found = []
    for line in lines:
        match = compiled.search(line)
        if match and match.groups() and all(_number(g) for g in match.groups()):
            found.append(line)
    return found


def loss_pattern(given: str | None, probe: Probe, script: str) -> tuple[str, list[str]]:
    """The given pattern, checked against the run, else the first common one that matches; with its lines."""
    if given:
        try:
            groups = re.compile(given).groups
        except re.error as exc:
            raise ScalegateError(f"--loss-pattern {given!r} is not a regular expression: {exc}", _EXAMPLE) from None
        if groups not in (1, 2):
            raise ScalegateError(f"--loss-pattern {given!r} has {groups} groups", _EXAMPLE)
        found = matches(given, probe.lines)
        if not found:
            raise ScalegateError(
                f"--loss-pattern {given!r} matched none of the {len(probe.lines)} lines {script}'s short run "
                "printed:\n" + _shown(probe.lines),
                "give a pattern for the line that says the loss: " + _EXAMPLE,
            )
        return given, found
    for pattern in PATTERNS:
        if found := matches(pattern, probe.lines):
            return pattern, found
    raise ScalegateError(
        f"no loss line found in what {script}'s short run printed ({len(probe.lines)} lines):\n" + _shown(probe.lines),
        "print the loss each step on rank 0 (e.g. print(f'step {step} loss {loss.item():.4f}')), or name the "
        "line that says it: --loss-pattern REGEX, " + _EXAMPLE,
    )


_EXAMPLE = r"one group (the loss) or two (the step, then the loss), e.g. 'step (\d+) loss ([0-9.eE+-]+)'"


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _ranks(lines: list[str]) -> list[str]:
    """A failed run's lines up to torchrun's own first failure line (kept: it names the rank and its exit code),
    so the lines shown end with the ranks' error, not with torchrun's traceback and failure box."""
    cut = next((i for i, line in enumerate(lines) if LAUNCHER_FAILED.match(line)), None)
    if cut is None:
        return lines
    return [*lines[: cut + 1], f"... (torchrun's own traceback and failure report, {len(lines) - cut - 1} lines)"]


def _shown(lines: list[str]) -> str:
    """The last lines of a run, indented; how many came before them."""
    last = lines[-SHOWN_LINES:]
    before = f"  ... ({len(lines) - len(last)} lines before)\n" if len(lines) > len(last) else ""
    if not lines:
        return "  (nothing)"
    return before + "\n".join(f"  | {line}" for line in last)
