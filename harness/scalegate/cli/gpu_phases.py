"""The GPU acceptance run's phases (``python -m scalegate selftest --gpu``): each one a command as an argument list.

One pytest session (or one ``gate``) per phase, so a phase that hangs or crashes costs its own budget, not the
others', and each leaves its own results directory and JUnit file for the report (harness/scalegate/report/acceptance.py):

| phase | what it proves on CUDA | GPUs |
|---|---|---|
| ``matrix-1x1`` | every strategy on one GPU (``--scaling-matrix full`` at 1x1, the Lightning Trainer's too) and every workload's single reference: NVML sampling, DeepSpeed, FSDP1, Fabric's and the Trainer's fsdp/deepspeed, DataParallel (2+ GPUs), MFU; the rest skip with their reason | 1 |
| ``matrix-1x2-nccl`` | the default matrix on 1x2 over NCCL, with the same-launch local efficiency and parity | 2 |
| ``compile`` | ``--scaling-compile`` for single, ddp and fsdp | 1 |
| ``script`` | a team's script (examples/train_script) timed by CUDA events | 1 |
| ``ab-gate`` | ``gate --base HEAD`` (an A/A): the worktree, the rounds and the A/B judge, once | 1 |
| ``swap`` | ``gate --base HEAD --pairing swap`` on ``ddp-resnet-1x1`` (an A/A, two rounds): each rank's training state leaves the GPU between its turns; the page says what a swap moved, its milliseconds out and back, and what stayed in the rank's allocator and its whole process (NVML) | 1 |
| ``aa-rounds`` | A/A duet rounds of ``ddp-resnet-1x1`` (a step of 20 ms or more) and its reference: each round's spread, the GPU's clocks, temperature, power and throttle reasons round by round (``record-baselines --duet-aa``) | 1 |

The matrix phases run every strategy on ``--models`` (default cnn) and every workload's single reference, so
the whole strategy list fits the budget; ``--models all --budget-s 1200`` runs every strategy on every workload.
Budgets: each phase has a weight, and when it starts it gets its weight's share of the time still left, so time a
fast phase leaves is spent by the later ones (``Phase.timeout_for``). The plan is a pure function of the GPU count and
the settings, tested on CPU. The weights are the GPU runs' walls (docs/gpu): matrix-1x1 279-295 s, compile 84 s (it
compiles for real since the second H100 run), script 36-40 s, the A/A gate 75-134 s, and an A/A resnet duet round
79-89 s on the H200 (six: ~520 s); the whole run takes about 17 minutes, so a device session of 15 runs it in two
commands with ``--phases`` (docs/verified-on-gpu.md).
"""

from __future__ import annotations

from dataclasses import replace

from scalegate.cli.gpu_gate_phases import aa_phase, gate_phase, swap_phase
from scalegate.cli.gpu_phase import Phase, Settings, common
from scalegate.contract import cards

SCRIPT_CASES = "benchmarks/gpu_script_cases.py"


def all_strategies() -> str:
    """Every strategy, the opt-in Lightning Trainer ones too: on a GPU each runs or says why it cannot."""
    return ",".join(cards.names())


def selection(s: Settings, topology: str = "") -> list[str]:
    """Every strategy on ``s.models`` and the single-process reference of every workload: the whole strategy list
    at the cost of one workload (``all``: every strategy on every workload, a budget of ~20 minutes). With
    ``topology``, only its cases besides the references (the default matrix's other 1x1 cases only say they are
    in the full matrix)."""
    cases = ["" if s.models == "all" else m for m in s.models.split(",")]
    terms = [" and ".join(filter(None, (m, topology))) for m in cases]
    if terms == [""]:
        return ["--scaling-models", "all"]
    references = "(single and 1x1)" if topology else "single"
    return ["--scaling-models", "all", "-k", " or ".join([references, *(f"({t})" if " " in t else t for t in terms)])]


def pytest_phase(name: str, proves: str, weight: float, tests: list[str], args: list[str], s: Settings) -> Phase:
    results = s.work_dir / name
    junit = results / "junit.xml"
    argv = [s.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *tests, f"--junitxml={junit}"]
    argv += [*common(s), "--scaling-max-launches", "1", "--scaling-confirm", "0"]
    argv += ["--scaling-results-dir", str(results), *args]
    return Phase(name=name, proves=proves, argv=tuple(argv), weight=weight, results_dir=results, junit=junit)


def plan(gpus: int, s: Settings, in_git: bool = True) -> list[Phase]:
    """The phases for a node of ``gpus`` GPUs, in the order they run; those that cannot run here carry ``skip``."""
    per_node = "1x1,1x2" if gpus >= 2 else "1x1"
    two = "" if gpus >= 2 else f"needs 2 GPUs on one node, this node has {gpus}"
    phases = [
        pytest_phase(
            "matrix-1x1",
            "every strategy at 1x1 and every workload's reference (NVML, DeepSpeed, FSDP1, Fabric, Trainer, dp, MFU)",
            6.0,  # the first H100 run (docs/gpu): ~16 s a case, 14 cases in 223 s of 224 and the Trainer's not reached
            ["scaling_tests/test_scaling.py"],
            ["--scaling-matrix", "full", "--scaling-topologies", "1x1", "--scaling-strategies", all_strategies()]
            + selection(s),
            s,
        ),
        pytest_phase(
            "matrix-1x2-nccl",
            "the default matrix on 1x2 over NCCL, local efficiency, parity",
            4.0,
            ["scaling_tests"],
            ["--scaling-matrix", "default", "--scaling-topologies", "1x1,1x2", "--scaling-strategies", all_strategies()]
            + [*selection(s, "1x2"), "--scaling-local-steps", "20"],
            s,
        ),
        pytest_phase(
            "compile",
            "torch.compile on CUDA: single, ddp, fsdp",
            1.8,  # the first H100 run compiled nothing (41-49 s); compiling for real, 49 s for single and ddp, 35 s fsdp
            ["scaling_tests/test_scaling.py"],
            ["--scaling-compile", "--scaling-matrix", "full", "--scaling-topologies", per_node]
            + ["--scaling-strategies", "single,ddp,fsdp", "--scaling-models", "cnn"],
            s,
        ),
        pytest_phase(
            "script",
            "a team's training script, its steps timed by CUDA events",
            0.8,
            [SCRIPT_CASES],
            ["--scaling-topologies", per_node],
            s,
        ),
        gate_phase(per_node, s),
        swap_phase(s),
        aa_phase(s),
    ]
    skips = {"matrix-1x2-nccl": two, "ab-gate": "" if in_git else "not a git checkout: the A/B gate's base is HEAD"}
    skips["aa-rounds"] = skips["swap"] = skips["ab-gate"]
    if s.phases:
        chosen = f"not chosen (--phases {','.join(s.phases)})"
        skips.update({p.name: chosen for p in phases if p.name not in s.phases})
    return [replace(p, skip=skips.get(p.name, "")) for p in phases]


def names() -> tuple[str, ...]:
    """Every phase's name, in the plan's order (``--phases`` picks from them)."""
    return tuple(p.name for p in plan(2, Settings()))
