"""``python -m scalegate selftest --gpu``: the whole CUDA path in one command, and a report the project keeps.

    python3 -m benchmarks.gpu_acceptance                   # a fresh GPU machine: ./setup.sh (the CUDA wheel), then this
    python -m scalegate selftest --gpu                     # every phase, about 17 minutes; docs/gpu/<device>-<date>.md
    python -m scalegate selftest --gpu --phases aa-rounds  # one phase alone (the A/A duet rounds: about 9 minutes)
    python -m scalegate selftest --gpu --dry-run --gpus 2  # the phases' commands for 2 GPUs, nothing run (any machine)
    python -m scalegate selftest --render experiments/data/gpu/nvidia-h200-2026-11-26.json   # the page again

On a CUDA machine it runs the phases of harness/scalegate/cli/gpu_phases.py (every strategy at 1x1; 1x2 over NCCL on 2+
GPUs; torch.compile; a team's script timed by CUDA events; an A/A ``gate --base HEAD``), each a pytest session (or
the gate) with its share of ``--budget-s``, checks what only a GPU shows (harness/scalegate/report/acceptance.py: NVML peak
per rank against ``torch.cuda.max_memory_allocated``, MFU against the datasheet peak), and writes
``docs/gpu/<device>-<date>.md`` with its raw JSON in ``experiments/data/gpu/``. Exit codes: 0 every case passed or skipped for a
reason this machine explains; 1 a failure (listed at the end and in the page); 2 no CUDA device (one line), or
bad arguments.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import time
from pathlib import Path

from scalegate.cli import gpu_phases
from scalegate.contract.errors import ScalegateError
from scalegate.gate.project import Project
from scalegate.plan import hostinfo
from scalegate.plan import option_types as t
from scalegate.report import acceptance_page, acceptance_run

EXIT_OK, EXIT_FAILED, EXIT_NO_GPU = 0, 1, 2
RAW_DIR = Path("experiments") / "data" / "gpu"  # where each report's raw JSON goes, beside the lab's other data
NO_GPU = "selftest --gpu: no CUDA device here (torch {torch}: torch.cuda.is_available() is False); nothing to verify"


def add_parser(sub) -> None:
    s = sub.add_parser(
        "selftest",
        help="the GPU path in one command: every phase, a report under docs/gpu (needs CUDA)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--gpu", action="store_true", help="run the GPU acceptance phases (the only self test so far)")
    s.add_argument(
        "--budget-s",
        type=t.real("--budget-s", lambda v: 60 <= v <= 3600, "is not in 60..3600 seconds", "e.g. --budget-s 1050"),
        default=gpu_phases.Settings.budget_s,
        help="wall time for all phases together, shared by weight (default: %(default)s)",
    )
    s.add_argument(
        "--models",
        type=models,
        default="cnn",
        help="workloads every strategy runs on, comma-separated, or all; every workload's single reference runs "
        "anyway (default: %(default)s)",
    )
    s.add_argument(
        "--phases",
        type=phases,
        default=(),
        help="run only these phases, comma-separated (" + ", ".join(gpu_phases.names()) + "); the page names the "
        "others as not chosen (default: every phase this machine can run)",
    )
    s.add_argument(
        "--aa-rounds",
        type=t.whole("--aa-rounds", 2, 20),
        default=gpu_phases.Settings.aa_rounds,
        help="A/A duet rounds of the aa-rounds phase; six state a spread to about 32%% of itself "
        "(default: %(default)s)",
    )
    defaults = gpu_phases.Settings
    s.add_argument(
        "--steps",
        type=t.whole("--steps", 1, 1000),
        default=defaults.steps,
        help="measured steps (default: %(default)s)",
    )
    s.add_argument(
        "--warmup",
        type=t.whole("--warmup", 0, 100),
        default=defaults.warmup,
        help="warm-up steps (default: %(default)s)",
    )
    s.add_argument(
        "--out", help="where the page goes (default: docs/gpu of this checkout; its JSON: experiments/data/gpu)"
    )
    s.add_argument("--work-dir", help="where the phases' results go (default: results/gpu-acceptance)")
    s.add_argument("--dry-run", action="store_true", help="print the phases' commands and budgets; run nothing")
    s.add_argument("--gpus", type=t.whole("--gpus", 1, 64), help="with --dry-run: plan for this many GPUs")
    s.add_argument("--render", metavar="JSON", help="write the page again from a recorded report's JSON")
    s.set_defaults(handler=lambda args, extra: main(args))


def models(text: str) -> str:
    """``all`` or built-in workload names: they become a ``-k`` expression (harness/scalegate/cli/gpu_phases.py)."""
    names = text.split(",")
    if text != "all" and not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) for n in names):
        raise t.usage(
            f"--models={text!r} is not 'all' or comma-separated workload names",
            "e.g. --models cnn,bert_qa (a workload class or hf:<type>: run pytest scaling_tests with --scaling-models)",
        )
    return text


def phases(text: str) -> tuple[str, ...]:
    """Phase names of harness/scalegate/cli/gpu_phases.py, comma-separated: they run in the plan's order."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    known = gpu_phases.names()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise t.usage(
            f"--phases={text!r}: {unknown[0]!r} is not a phase" if unknown else f"--phases={text!r} names no phase",
            "e.g. --phases ab-gate,aa-rounds (the phases: " + ", ".join(known) + ")",
        )
    return names


def check_args(args: argparse.Namespace) -> None:
    """The combinations argparse cannot refuse: one ScalegateError naming them, with a HINT."""
    if args.render and (args.dry_run or args.gpu):
        raise ScalegateError("--render rewrites a recorded page: it runs nothing", "pass --render JSON alone")
    if not args.render and not args.gpu:
        raise ScalegateError(
            "selftest needs --gpu: the GPU acceptance run is its only test so far",
            "python -m scalegate selftest --gpu (on a CUDA machine), or add --dry-run --gpus N to see its phases",
        )
    if args.gpus is not None and not args.dry_run:
        raise ScalegateError(
            f"--gpus {args.gpus} only plans (with --dry-run); a run uses the GPUs it finds",
            "drop --gpus, or add --dry-run",
        )


def main(args: argparse.Namespace) -> int:
    check_args(args)
    root = Project.find().root
    pages = Path(args.out or root / "docs" / "gpu").resolve()
    if args.render:
        report = acceptance_page.load(Path(args.render))
        md, _ = acceptance_page.paths(pages, report, Path(args.render).parent)
        md.write_text(acceptance_page.page(Path(args.render)))
        print(f"selftest: {md}")
        return EXIT_OK
    settings = gpu_phases.Settings(
        budget_s=args.budget_s,
        models=args.models,
        steps=args.steps,
        warmup=args.warmup,
        phases=args.phases,
        aa_rounds=args.aa_rounds,
        work_dir=Path(args.work_dir or root / "results" / "gpu-acceptance").resolve() / time.strftime("%Y%m%d-%H%M%S"),
    )
    if args.dry_run and args.gpus:
        return dry_run(gpu_phases.plan(args.gpus, settings, in_git(root)), settings)
    host = hostinfo.detect()
    if host.device != "cuda":
        import torch  # its full version says which build it is (2.13.0+cpu)

        print(NO_GPU.format(torch=torch.__version__), file=sys.stderr)
        return EXIT_NO_GPU
    phases = gpu_phases.plan(host.devices_per_node, settings, in_git(root))
    if args.dry_run:
        return dry_run(phases, settings)
    return acceptance_run.run(phases, settings, host, root, pages, root / RAW_DIR)


def in_git(root: Path) -> bool:
    return hostinfo.commit(root) != "unknown"


def dry_run(phases: list[gpu_phases.Phase], settings: gpu_phases.Settings) -> int:
    first = next((i for i, p in enumerate(phases) if not p.skip), None)
    for i, phase in enumerate(phases):
        if phase.skip:
            print(f"{phase.name}: not run here: {phase.skip}")
            continue
        share = phase.timeout_for(phases[i + 1 :], settings.budget_s) if i == first else None
        budget = f"{share:.0f} s" if share is not None else "its share of the time left"
        print(f"{phase.name} ({budget}): {phase.proves}\n  {shlex.join(phase.argv)}")
    return EXIT_OK
