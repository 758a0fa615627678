"""Reading a run directory back: the per-case result files the session wrote, as they finished."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scalegate.contract.errors import ScalegateError


def load_run(run_dir: Path) -> list[dict[str, Any]]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        what = "is a file, not a run directory" if run_dir.exists() else "does not exist"
        raise ScalegateError(f"run directory {run_dir} {what}", "pass a directory under results/, e.g. results/latest")
    cases = []
    for path in sorted(run_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ScalegateError(
                f"result file {path} is malformed: {exc}", "rerun the case or delete the file"
            ) from None
        if isinstance(data, dict) and "case_id" in data and "status" in data:
            cases.append(data)
    return sorted(cases, key=lambda c: c.get("written", 0))
