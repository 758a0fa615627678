"""Fuzzing the parsers and the baseline loader: any input gives a value or the documented error.

``Topology.parse`` and ``parse_fault`` raise only ``SpecError``; the options' ``type=`` checks only argparse's
error with a HINT, and ``options.parse`` only ``SpecError`` (pytest and the plugin turn both into a usage
error); ``baselines.load`` only ``BaselineError``.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalegate import strategies
from scalegate.contract import SCHEMA_VERSION
from scalegate.contract.errors import BaselineError, SpecError
from scalegate.contract.faults import parse_fault
from scalegate.contract.topology import Topology
from scalegate.plan import catalog, declare, option_groups, options
from scalegate.record import baselines

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOPOLOGY_LIKE = st.from_regex(r"\A\s*[0-9]{0,6}\s*[xX]?\s*[0-9]{0,6}\s*\Z")


@SETTINGS
@given(st.one_of(st.text(), TOPOLOGY_LIKE, st.integers(), st.none(), st.text(alphabet="0123456789x", max_size=5000)))
def test_topology_parse_returns_a_valid_topology_or_spec_error(text):
    try:
        topo = Topology.parse(text)
    except SpecError as exc:
        assert exc.hint
        return
    assert topo.nodes >= 1 and topo.per_node >= 1 and Topology.parse(str(topo)) == topo


FAULT_LIKE = st.builds(
    lambda k, a: f"{k}:{a}",
    st.sampled_from(["hang", "crash", "no-result", "bad-result", "x"]),
    st.from_regex(r"\A((rank|step|foo)=?[0-9a-z]{0,8},?){0,3}\Z"),
)


@SETTINGS
@given(st.one_of(st.text(), FAULT_LIKE))
def test_parse_fault_returns_fields_or_spec_error(text):
    try:
        fields = parse_fault(text)
    except SpecError as exc:
        assert exc.hint
        return
    assert fields and all(isinstance(v, int) and v >= 0 for v in fields.values())


CATALOG = catalog.Catalog()  # the built-in workloads, as the plugin's catalog holds them


def _namespace(overrides: dict[str, object]) -> argparse.Namespace:
    """The overrides as a command line, read by a parser declaring the plugin's option groups."""
    argv: list[str] = []
    for name, value in overrides.items():
        if isinstance(value, bool):
            argv += [name] if value else []
        elif isinstance(value, list):
            argv += [f"{name}={item}" for item in value]
        elif value is not None:
            argv.append(f"{name}={value}")
    parser = argparse.ArgumentParser(exit_on_error=False)
    declare.declare(parser.add_argument, option_groups.SECTIONS)
    return parser.parse_args(argv)


NUMBER = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True, allow_infinity=True))
OVERRIDES = st.fixed_dictionaries(
    {},
    optional={
        # mostly valid names, so the numeric options behind them get exercised too
        "--scaling-topologies": st.one_of(
            st.sampled_from(["1x1", "1x2,1x4", "2x2"]),
            st.text(max_size=20),
            st.lists(TOPOLOGY_LIKE, max_size=4).map(",".join),
        ),
        "--scaling-strategies": st.one_of(st.sampled_from(["all", "ddp", "ddp,single", "ddp"]), st.text(max_size=20)),
        "--scaling-models": st.one_of(st.sampled_from(["all", "cnn", "cnn"]), st.text(max_size=20)),
        "--scaling-steps": st.integers(-3, 100),
        "--scaling-warmup": st.integers(-3, 100),
        "--scaling-tolerance": st.one_of(st.none(), NUMBER),
        "--scaling-default-tolerance": NUMBER,
        "--scaling-timeout": NUMBER,
        "--scaling-cpu-threads": st.integers(-2, 64),
        "--scaling-dtype": st.sampled_from(["fp32", "bf16", "fp8", ""]),
        "--scaling-inject-delay-ms": NUMBER,
        "--scaling-inject-fault": st.lists(st.one_of(FAULT_LIKE, st.text(max_size=10)), max_size=2),
        "--scaling-scaling": st.sampled_from(["weak", "strong", "both", "other"]),
        "--scaling-global-batch": st.one_of(st.none(), st.integers(-4, 4096)),
        "--scaling-update-baselines": st.booleans(),
    },
)


@SETTINGS
@given(OVERRIDES)
def test_options_parse_returns_valid_options_or_a_usage_error(overrides):
    try:
        values = _namespace(overrides)
    except argparse.ArgumentError as exc:
        assert "\nHINT: " in str(exc) and str(exc).startswith("argument --scaling-")
        return
    try:
        opts = options.parse(values, Path("/nonexistent"), strategies.names(), CATALOG)
    except SpecError as exc:
        assert exc.hint
        return
    assert opts.run.steps >= 1 and opts.run.warmup >= 0 and opts.run.cpu_threads >= 1
    assert opts.judging.tolerance is None or 0 <= opts.judging.tolerance < 1
    assert 0 <= opts.baselines.default_tolerance < 1
    assert math.isfinite(opts.timeout_s) and opts.timeout_s > 0
    assert math.isfinite(opts.injection.delay_ms) and opts.injection.delay_ms >= 0
    assert opts.topologies and all(Topology.parse(t) for t in opts.topologies)
    if opts.selection.scaling in ("strong", "both"):
        assert all(opts.selection.global_batch % Topology.parse(t).world_size == 0 for t in opts.topologies)


PROFILE = "cpu-fuzz"
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
METRIC = st.one_of(JSON, st.fixed_dictionaries({"value": JSON, "tolerance": JSON}))
NEAR_VALID = st.fixed_dictionaries(
    {
        "schema_version": st.one_of(st.just(SCHEMA_VERSION), JSON),
        "profile": st.one_of(st.just(PROFILE), JSON),
        "fingerprint": JSON,
        "cases": st.one_of(
            JSON,
            st.dictionaries(
                st.text(max_size=12),
                st.one_of(
                    JSON, st.dictionaries(st.sampled_from(list(baselines.METRICS) + ["provenance"]), METRIC, max_size=4)
                ),
                max_size=3,
            ),
        ),
    }
)


def _load(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        (Path(directory) / f"{PROFILE}.json").write_bytes(raw)
        try:
            loaded = baselines.load(Path(directory), PROFILE)
        except BaselineError as exc:
            assert exc.hint and PROFILE in exc.message  # names the file
            return
        for key in loaded.cases:  # whatever loads is usable by the gate
            for metric in baselines.METRICS:
                ref = loaded.reference(key, metric)
                assert ref is None or 0 <= ref.tolerance < 10


@SETTINGS
@given(
    st.one_of(
        st.binary(max_size=200),
        NEAR_VALID.map(lambda d: json.dumps(d).encode()),
        NEAR_VALID.map(lambda d: json.dumps(d).encode()).flatmap(lambda b: st.integers(0, len(b)).map(lambda n: b[:n])),
    )
)
def test_baseline_load_returns_a_file_or_baseline_error(raw):
    _load(raw)


def test_deeply_nested_baseline_is_a_baseline_error():
    _load(b"[" * 100_000)
