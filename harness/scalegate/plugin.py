"""The pytest plugin: ``--scaling-*`` options, the strategy x model x topology matrix, the
``scaling_case`` fixture, pytest-benchmark records, and the results table at the end.

Registered through the ``pytest11`` entry point named ``scalegate.plugin`` (pyproject.toml), so it works in
any repository where scalegate is installed. The entry point has the module's own name on purpose: this
repository's ``conftest.py`` (``pytest_plugins = ["scalegate.plugin"]``), ``-p scalegate.plugin`` and the entry
point then name one plugin, which pytest registers once (under two names pluggy would refuse the module).
Workloads come from the session's catalog (harness/scalegate/plan/catalog.py): built-ins, entry points, the
``pytest_scaling_workloads`` hook (harness/scalegate/hookspec.py) and import paths in ``--scaling-models``; a test file
may declare its own matrix with ``@pytest.mark.scaling_matrix`` (harness/scalegate/plan/marker.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scalegate import hookspec, parity
from scalegate.contract import cards
from scalegate.contract.errors import ScalegateError
from scalegate.judge import Outcome, metric, sequential
from scalegate.launch import warm
from scalegate.plan import catalog, declare, hostinfo, marker, matrix, options, script
from scalegate.plan import parity as parity_plan
from scalegate.record import baselines, run_status, runfiles, update
from scalegate.report import table
from scalegate.session import ScalingSession, run_id

SESSION = pytest.StashKey[ScalingSession]()
CASES = pytest.StashKey[list]()
CATALOG = pytest.StashKey[catalog.Catalog]()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)
    parser.addini(
        options.TESTPATHS_MATRIX_INI,
        "the scaling matrix of a bare `pytest` (run from testpaths, no path named) when --scaling-matrix is not "
        f"given: one of {', '.join(sorted(options.MATRICES))} (default: default)",
        default="",
    )


def _bare_matrix(config: pytest.Config) -> None:
    """A bare `pytest` takes the ini's matrix (this repository's: the smoke one, so its own tests stay fast);
    `pytest scaling_tests` and any named path keep the default one."""
    if config.option.scaling_matrix is not None or config.args_source != pytest.Config.ArgsSource.TESTPATHS:
        return
    name = config.getini(options.TESTPATHS_MATRIX_INI).strip()
    if name and name not in options.MATRICES:
        raise pytest.UsageError(
            f"{options.TESTPATHS_MATRIX_INI} = {name} in {config.inipath}: not a matrix\n"
            f"HINT: set it to one of {', '.join(sorted(options.MATRICES))}, or remove it"
        )
    config.option.scaling_matrix = name or None


def pytest_report_header(config: pytest.Config) -> str | None:
    state = config.stash.get(SESSION, None)
    if state is None or state.options.matrix != "smoke":
        return None
    return (
        f"scaling: the smoke matrix (every strategy on {options.SMOKE_MODEL} only, and its 1x1 reference); "
        "`pytest scaling_tests` runs the default matrix, every strategy x workload"
    )


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scaling: a scaling benchmark case (launches a real multi-process job)")
    config.addinivalue_line(
        "markers",
        "scaling_tolerance(**fractions): per-test tolerances, e.g. "
        "scaling_tolerance(efficiency=0.15, peak_memory_bytes=0.3)",
    )
    config.addinivalue_line(
        "markers",
        "scaling_script(path, *argv, name=, strategies=[...], topologies=[...]): a team's own training script as "
        "scaling cases of a test taking scaling_case (docs/your-script.md)",
    )
    config.addinivalue_line(
        "markers",
        "scaling_matrix(models=[...], strategies=[...], topologies=[...]): the "
        "scaling matrix of a test taking scaling_case (docs/your-model.md)",
    )
    _bare_matrix(config)
    try:
        known = catalog.discover(
            config.pluginmanager.hook.pytest_scaling_workloads.get_hookimpls(), search_paths=[str(config.rootpath)]
        )
        config.stash[CATALOG] = known
        # each value was checked as pytest read it (harness/scalegate/plan/option_types.py); parse checks them together
        opts = options.parse(config.option, Path(config.rootpath), cards.names(), known)
        host = hostinfo.detect()
        baseline = baselines.load(opts.baseline_dir, host.profile)
    except ScalegateError as exc:
        raise pytest.UsageError(str(exc)) from None
    run_dir = opts.results_dir / run_id()
    run_status.install_sigterm(run_dir)  # SLURM's time limit: clean up as for Ctrl-C, and mark the run partial
    agents = warm.pool(log_dir=run_dir) if opts.launching.launcher == "warm" else None
    config.stash[SESSION] = ScalingSession(options=opts, host=host, run_dir=run_dir, baseline=baseline, agents=agents)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION, None)
    if session is not None and session.agents is not None:
        session.agents.close()  # the warm agent, its forkserver and its network namespace


def _cases(config: pytest.Config) -> list[matrix.Case]:
    """The matrix, built once and only where a scaling test is collected."""
    if CASES not in config.stash:
        state = config.stash[SESSION]
        config.stash[CASES] = matrix.build(state.options, state.host)
    return config.stash[CASES]


def _given(config: pytest.Config) -> set[str]:
    """The --scaling-* lists given on the command line: they select from a test's declared lists."""
    given = {
        "models": config.getoption("--scaling-models").strip() != "all",
        "strategies": config.getoption("--scaling-strategies").strip() != "all",
        "topologies": config.getoption("--scaling-topologies") is not None,
    }
    return {key for key, on in given.items() if on}


def _script_cases(metafunc: pytest.Metafunc, mark: pytest.Mark) -> list[matrix.Case]:
    """A team's own training script, declared with ``@pytest.mark.scaling_script`` (harness/scalegate/plan/script.py)."""
    config, where = metafunc.config, metafunc.definition.nodeid
    state = config.stash[SESSION]
    decl = script.declared(mark.args, mark.kwargs, Path(config.rootpath), where)
    return script.cases(decl, state.options, state.host, Path(config.rootpath), where, _given(config))


def _declared_cases(metafunc: pytest.Metafunc, mark: pytest.Mark) -> list[matrix.Case]:
    """The matrix a test declares with ``@pytest.mark.scaling_matrix`` (harness/scalegate/plan/marker.py)."""
    config = metafunc.config
    state = config.stash[SESSION]
    opts = marker.options_for(
        state.options,
        config.stash[CATALOG],
        mark.args,
        mark.kwargs,
        explicit=sorted(_given(config)),
        strategy_names=cards.names(),
        where=metafunc.definition.nodeid,
    )
    return matrix.build(opts, state.host)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # errors here are the user's input (a mark, a workload): one message and its HINT, no traceback of ours
    try:
        _generate(metafunc)
    except ScalegateError as exc:
        pytest.fail(str(exc), pytrace=False)


def _generate(metafunc: pytest.Metafunc) -> None:
    if "parity_case" in metafunc.fixturenames:  # scaling_tests/test_parity.py: front end vs raw PyTorch
        state = metafunc.config.stash[SESSION]
        pairs = parity_plan.build(state.options, state.host)
        metafunc.parametrize(
            "parity_case", [pytest.param(c, id=c.id, marks=pytest.mark.scaling) for c in pairs], indirect=True
        )
    if "scaling_case" not in metafunc.fixturenames:
        return
    mark = metafunc.definition.get_closest_marker("scaling_matrix")
    declared_script = metafunc.definition.get_closest_marker("scaling_script")
    if declared_script is not None:
        cases = _script_cases(metafunc, declared_script)
    else:
        cases = _declared_cases(metafunc, mark) if mark is not None else _cases(metafunc.config)
    metafunc.parametrize(
        "scaling_case", [pytest.param(c, id=c.id, marks=pytest.mark.scaling) for c in cases], indirect=True
    )


class CaseRunner:
    """What a scaling test holds: run the case once, record it, assert its verdict."""

    def __init__(self, session: ScalingSession, case: matrix.Case, tolerances: dict[str, float] | None = None) -> None:
        self.session = session
        self.case = case
        self.tolerances = tolerances or {}  # from @pytest.mark.scaling_tolerance(efficiency=0.15, ...)

    def run(self, benchmark=None) -> Outcome:
        outcome = self.session.run(self.case, self.tolerances)
        if benchmark is not None and outcome.result is not None:
            record_benchmark(benchmark, outcome, self.session.profile)
        return outcome

    def check(self, benchmark=None) -> Outcome:
        outcome = self.run(benchmark)
        if outcome.failed:
            pytest.fail(f"{outcome.case_id}: {outcome.message}", pytrace=False)
        if outcome.quarantined and outcome.status in ("regressed", "failed"):
            pytest.xfail(f"{outcome.case_id}: {outcome.message.splitlines()[0]}")
        return outcome


@pytest.fixture
def scaling_case(request: pytest.FixtureRequest) -> CaseRunner:
    case: matrix.Case = request.param
    if case.skip:
        pytest.skip(case.skip)
    run_status.mark_running(request.config.stash[SESSION].run_dir)
    mark = request.node.get_closest_marker("scaling_tolerance")
    try:
        tolerances = metric.tolerance_overrides(mark.args, mark.kwargs) if mark else {}
    except ScalegateError as exc:
        pytest.fail(str(exc), pytrace=False)
    return CaseRunner(request.config.stash[SESSION], case, tolerances)


@pytest.fixture
def parity_case(request: pytest.FixtureRequest) -> parity.ParityRunner:
    case: parity_plan.ParityCase = request.param
    if case.skip:
        pytest.skip(case.skip)
    state = request.config.stash[SESSION]
    opts = state.options  # the same sequential test as the efficiency gate: its budget, alpha and beta
    design = sequential.Design(**declare.pick(sequential.Design, opts.sequential))
    return parity.ParityRunner(
        case=case,
        out_dir=state.run_dir / "parity",
        tolerance=opts.judging.parity_tolerance,
        data_dir=opts.launching.data_dir,
        agents=state.agents,
        design=design,
        strict=opts.judging.strict,
    )


def record_benchmark(benchmark, outcome: Outcome, profile: str) -> None:
    """Each measured step (slowest rank) becomes one round of the benchmark's statistics."""
    if getattr(benchmark, "disabled", False):
        return
    result = outcome.result
    stats = benchmark._make_stats(1)  # pytest-benchmark 5.x: no public call for external timings
    for seconds in result.step_times_s:
        stats.update(seconds)
    benchmark._mode = "external timings (scalegate)"  # so the fixture does not report itself as unused
    spec = result.spec
    benchmark.extra_info.update(
        strategy=spec.strategy,
        model=spec.model,
        preset=spec.preset,
        topology=spec.topology,
        world_size=spec.world_size,
        global_batch=spec.global_batch_size,
        throughput=result.throughput,
        speedup=outcome.speedup,
        efficiency=outcome.efficiency,
        noise_rel=outcome.noise_rel,
        local_efficiency=outcome.local_efficiency,
        gated_on=outcome.gate,
        launches=outcome.launches,
        verdict=outcome.status,
        profile=profile,
        tokens_per_s=outcome.tokens_per_s,
        flops_per_step=outcome.flops_per_step,
        achieved_flops_per_device=outcome.achieved_flops,
        mfu=outcome.mfu,
        peak_flops=outcome.peak_flops,
        peak_source=outcome.peak_source,
        mfu_unavailable=outcome.mfu_unavailable,
        peak_memory_bytes=[r.peak_memory_bytes for r in result.ranks],
        memory_source=result.ranks[0].memory_source,
    )
    found = outcome.resources or {}
    wire = found.get("wire") or {}
    benchmark.extra_info.update(
        state_bytes=found.get("state_bytes"),
        ddp_state_bytes=found.get("ddp_state_bytes"),
        cuda_memory=found.get("cuda_memory"),
        cpu_s=found.get("cpu_s"),
        compile_s=found.get("compile_s"),
        bytes_per_step=wire.get("bytes_per_step"),
        analytic_bytes_per_step=wire.get("analytic_bytes_per_step"),
        wire_source=wire.get("source"),
        wire_unavailable=wire.get("unavailable"),
        checkpoint=found.get("checkpoint"),  # --scaling-checkpoint: save_s, load_s, bytes per rank, s/GB
    )
    benchmark.extra_info.update(step_breakdown(outcome))


def step_breakdown(outcome: Outcome) -> dict:
    """Where the step's time went and who arrived last, as the table and the case JSON have them: records read
    with ``--benchmark-json`` or ``--benchmark-compare`` would otherwise show a step time with no why."""
    found = (outcome.resources or {}).get("breakdown") or {}
    late = outcome.stragglers or {}
    per_rank = found.get("per_rank") or []
    return {
        "comm_exposed_share": found.get("exposed_share"),  # the table's "comm exp"
        "comm_exposed_share_mad": found.get("exposed_share_mad"),
        "compute_s": {str(r["rank"]): r["compute_s"] for r in per_rank},  # the local step: no communication
        "exposed_comm_s": {str(r["rank"]): r["exposed_comm_s"] for r in per_rank},
        "breakdown_pairs": found.get("pairs"),
        "straggler_rank": late.get("rank"),
        # the verdict's line naming the rank; else why none is named (communication inside the forward), or ""
        "straggler": late.get("message") or late.get("why") or "",
        "straggler_excess_s": late.get("excess_s"),
    }


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """--scaling-canaries: keep the cases declared as canaries (gate/project.py), where any is declared."""
    if not config.getoption("--scaling-canaries"):
        return

    def case(item: pytest.Item) -> matrix.Case | None:
        return getattr(item, "callspec", None) and item.callspec.params.get("scaling_case")  # type: ignore[return-value]

    canaries = [i for i in items if case(i) is not None and case(i).canary]  # type: ignore[union-attr]
    if not canaries:
        return  # none declared: every case is what the repository gates
    config.hook.pytest_deselected(items=[i for i in items if i not in canaries])
    items[:] = canaries


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    session = config.stash.get(SESSION, None)
    if session is None or hasattr(config, "workerinput") or not session.run_dir.exists():
        return
    if session.slurm is not None and session.slurm.node_id > 0:  # under srun node 0 alone reports
        return
    cases = runfiles.load_run(session.run_dir)
    if not cases:
        return
    tr = terminalreporter
    tr.write_sep("=", f"scaling results ({session.profile}; {session.host.cluster_note})")
    tr.write_line(table.table(cases))
    if session.baseline is None:
        tr.write_line(
            f"no baseline for {session.profile} "
            f"(record one with --scaling-update-baselines into {session.options.baseline_dir})"
        )
    for case in cases:
        if case["status"] in ("regressed", "failed", "improved"):
            tr.write_line(f"{case['case_id']}: {case['message'].splitlines()[0]}")
    for case in cases:  # a quarantine is never silent (harness/scalegate/record/quarantine.py)
        if case.get("quarantined"):
            tr.write_line(f"quarantined, not failing: {case['case_id']}: {case['quarantined']}")
    tr.write_line(f"results: {session.run_dir}")
    for case in cases:  # --scaling-profile: Chrome traces, one per rank (chrome://tracing, ui.perfetto.dev)
        traces = [Path(t) for t in case.get("traces") or []]
        if traces:
            tr.write_line(
                f"{case['case_id']} profiler traces: {traces[0].parent}/{{{','.join(t.name for t in traces)}}}"
            )
    opts = session.options
    if opts.output.tensorboard is not None:
        tr.write_line(f"tensorboard scalars: tensorboard --logdir {opts.output.tensorboard}")
    if opts.baselines.update_baselines:
        try:
            for line in update.update_from_run(cases, opts.baseline_dir, opts.baselines.default_tolerance):
                tr.write_line(line)
        except ScalegateError as exc:
            tr.write_line(f"baselines NOT updated: {exc}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(SESSION, None)
    if state is None or hasattr(session.config, "workerinput") or not state.run_dir.exists():
        return
    run_status.mark_finished(state.run_dir, exitstatus, interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    latest = state.run_dir.parent / "latest"
    try:
        if latest.is_symlink() or latest.exists():
            latest.unlink()
        os.symlink(state.run_dir.name, latest)
    except OSError:
        pass
