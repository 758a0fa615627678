"""The main job on an idle host and beside a second job: what each rank waited for a core, and the verdicts.

    python -m experiments.busy_host [--runs 2] [--select "ddp and 1x2"] [--out FILE]

Each run is the stored-baseline main job as a new user runs it (``pytest scaling_tests -k SELECT`` against the
committed baselines), alternately alone and beside a second job: another scaling session of the same selection,
started a few seconds earlier and kept running until the first ends. Per case it records the worst rank's wait for
a core over its measured steps (``figures/resources.py cpu_wait``, from ``measure/contention.py``), the host's steal,
the verdict and its first line. The alone runs need nothing else on the machine: run it so.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scalegate.judge.evidence import CaseRecord

ROOT = Path(__file__).resolve().parents[1]


def _session(results: Path, select: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SCALEGATE_RUN_ID", "PYTEST_ADDOPTS")}
    cmd = [sys.executable, "-m", "pytest", "scaling_tests", "-p", "no:cacheprovider", "-q", "-k", select,
           "--scaling-results-dir", str(results)]  # fmt: skip
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(select: str, busy: bool) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        second = None
        if busy:
            second = _session(Path(tmp) / "second", select)
            time.sleep(8)
        load = os.getloadavg()[0]
        main = _session(Path(tmp) / "main", select)
        main.wait()
        if second is not None:  # ended as Ctrl-C ends a session: its ranks, agents and namespaces go with it
            second.send_signal(signal.SIGINT)
            try:
                second.wait(timeout=60)
            except subprocess.TimeoutExpired:
                second.kill()
                second.wait()
        rows = []
        for path in sorted((Path(tmp) / "main" / "latest").glob("*.json")):
            case = json.loads(path.read_text())
            if "record" not in case:
                continue
            launches = CaseRecord.from_dict(case["record"]).launches
            rows.append(
                {
                    "busy": busy,
                    "case": case["case_id"],
                    "status": case["status"],
                    "first_line": (case.get("message") or "").splitlines()[0] if case.get("message") else "",
                    "contended": "timing not judged: other processes" in (case.get("message") or ""),
                    "cpu_wait": [launch.cpu_wait for launch in launches],
                    "steal": [launch.steal for launch in launches],
                    "load": round(load, 2),
                    "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                }
            )
        return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each kind, alone and beside a second job")
    parser.add_argument("--select", default="ddp and 1x2")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    print("| host | case | verdict | worst rank's wait for a core, per launch | timing judged |")
    print("|---|---|---|---|---|")
    for i in range(args.runs):
        for busy in (False, True):
            for row in run(args.select, busy):
                if args.out:
                    with args.out.open("a") as out:
                        out.write(json.dumps(row) + "\n")
                waits = ", ".join(f"{w:.0%}" for w in row["cpu_wait"] if w is not None) or "-"
                print(f"| {'busy' if busy else 'idle'} | {row['case']} | {row['status']} | {waits} | "
                      f"{'no: named busy' if row['contended'] else 'yes'} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
