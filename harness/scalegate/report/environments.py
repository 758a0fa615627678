"""The two sides' environments of an A/B gate run, as the table shows them: only what differs, or one line.

Each side's environment is recorded by ``gate`` (harness/scalegate/gate/environments.py) in ``environment.json`` beside its
cases (the base side's in ``base/``); ``compare`` on the same run shows the same lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FILE = "environment.json"


def read(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(run_dir) / FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def versions(env: dict[str, Any]) -> dict[str, str]:
    """name -> version (None as '-'), with Python, CUDA and NCCL beside the packages."""
    out = {"python": str(env.get("python_version", "?"))}
    out.update({name: str(v) if v else "-" for name, v in (env.get("packages") or {}).items()})
    for key in ("cuda", "nccl", "scalegate"):
        if env.get(key):
            out[key] = str(env[key])
    return out


def differences(base: dict[str, Any], head: dict[str, Any]) -> list[tuple[str, str, str]]:
    b, h = versions(base), versions(head)
    return [
        (name, b.get(name, "-"), h.get(name, "-")) for name in dict.fromkeys([*b, *h]) if b.get(name) != h.get(name)
    ]


def markdown(base: dict[str, Any] | None, head: dict[str, Any] | None) -> str:
    """Lines under the A/B table: the interpreters, and each version that differs between the sides."""
    if not base or not head:
        return ""
    lines = [f"\nEnvironments: base `{base.get('python')}`, head `{head.get('python')}`"]
    diff = [d for d in differences(base, head) if d[0] != "scalegate"]
    if not diff:
        return lines[0] + " (the same versions on both sides).\n"
    lines += ["", "| package | base | head |", "|---|---|---|"]
    lines += [f"| {name} | {b} | {h} |" for name, b, h in diff]
    return "\n".join(lines) + "\n"
