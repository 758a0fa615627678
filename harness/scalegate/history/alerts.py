"""What a regression's alert tells a person to do next: the command that reproduces it on a PR gate, and the bisect.

- A change point at a version change (events.py) is attributed to it: reproduce with the A/B gate across
  environments, the base side in a venv holding the release before (``gate --base-python``; ``bisect --package``
  builds that venv under ``.venv/envs/<package>-<version>``), and bisect the package's releases
  (``bisect --package``). CUDA and NCCL come with torch's build: no release of theirs to bisect, the gate across
  environments is the next step.
- Any other change point keeps its commit range: reproduce with ``gate --base LAST_GOOD`` at the first bad commit,
  and ``bisect LAST_GOOD FIRST_BAD``. A run of an uncommitted tree records ``<commit>-dirty``; the commands take
  the commit.

One alert per case, machine and cause, naming every metric that regressed there.
"""

from __future__ import annotations

from dataclasses import dataclass

NOT_RELEASES = ("cuda", "nccl")  # versions torch's build brings, not packages bisect --package can install
ENVS = ".venv/envs"  # where bisect --package builds each release's venv (its --envs default)


@dataclass(frozen=True, kw_only=True)
class NextSteps:
    cause: str  # "torch 2.12.0 -> 2.13.0 between nightly-59 and nightly-60", or "commits a..b"
    reproduce: str
    bisect: tuple[str, ...]  # empty where nothing can be bisected (a CUDA or NCCL change alone)
    event: bool  # attributed to a version change


def _commit(text: str) -> str:
    return text.removesuffix("-dirty")


def for_commits(last_good: str, first_bad: str, case_id: str) -> NextSteps:
    good, bad = _commit(last_good), _commit(first_bad)
    return NextSteps(
        cause=f"commits {last_good}..{first_bad}",
        reproduce=f"git checkout {bad} && python -m scalegate gate --base {good} -k {case_id}",
        bisect=(f"python -m scalegate bisect {good} {bad} -k {case_id}",),
        event=False,
    )


def for_versions(changes: tuple[tuple[str, str, str], ...], cause: str, case_id: str) -> NextSteps:
    releases = [(p, a, b) for p, a, b in changes if p not in NOT_RELEASES]
    if releases:
        package, before, _ = releases[0]
        base = f"{ENVS}/{package}-{before}/bin/python"
    else:
        base = "BASE_ENV/bin/python"  # a venv with the torch build of the run before: named by the person
    return NextSteps(
        cause=cause,
        reproduce=f"python -m scalegate gate --base-python {base} -k {case_id}",
        bisect=tuple(f"python -m scalegate bisect --package {p} {a} {b} -k {case_id}" for p, a, b in releases),
        event=True,
    )


@dataclass(frozen=True, kw_only=True)
class Alert:
    machine: str
    case_id: str
    metrics: tuple[str, ...]
    steps: NextSteps

    def lines(self) -> list[str]:
        head = f"  alert: {self.case_id} [{self.machine}] {', '.join(self.metrics)} regressed at {self.steps.cause}"
        out = [head, f"    reproduce: {self.steps.reproduce}"]
        out += [f"    bisect:    {b}" for b in self.steps.bisect]
        if not self.steps.bisect:
            out.append("    bisect:    none: CUDA and NCCL come with torch's build; compare the environments above")
        return out

    def to_dict(self) -> dict:
        return {
            "machine": self.machine,
            "case": self.case_id,
            "metrics": list(self.metrics),
            "cause": self.steps.cause,
            "event": self.steps.event,
            "reproduce": self.steps.reproduce,
            "bisect": list(self.steps.bisect),
        }


def group(found: list[tuple[str, str, str, NextSteps]]) -> list[Alert]:
    """(machine, case id, metric, next steps) of each new regression -> one alert per case, machine and cause."""
    merged: dict[tuple[str, str, NextSteps], list[str]] = {}
    for machine, case_id, metric, steps in found:
        metrics = merged.setdefault((machine, case_id, steps), [])
        if metric not in metrics:
            metrics.append(metric)
    return [Alert(machine=m, case_id=c, metrics=tuple(sorted(ms)), steps=s) for (m, c, s), ms in merged.items()]
