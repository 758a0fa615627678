"""Baseline files: validated on load with the file named and a HINT; updated atomically with a diff."""

import json

import pytest

from scalegate.contract import SCHEMA_VERSION
from scalegate.contract.errors import BaselineError
from scalegate.record import baselines

PROFILE = "cpu-test-2c-torch2.13.0"


def write(directory, data):
    path = directory / f"{PROFILE}.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def good(**case):
    entry = {"efficiency": {"value": 0.8, "tolerance": 0.1}}
    entry.update(case)
    return {
        "schema_version": SCHEMA_VERSION,
        "profile": PROFILE,
        "fingerprint": {},
        "cases": {"ddp-cnn-1x2:tiny": entry},
    }


def test_missing_file_means_no_baseline(tmp_path):
    assert baselines.load(tmp_path, PROFILE) is None


def test_reference_lookup(tmp_path):
    write(tmp_path, good())
    ref = baselines.load(tmp_path, PROFILE).reference("ddp-cnn-1x2:tiny", "efficiency")
    assert (ref.value, ref.tolerance) == (0.8, 0.1)


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "is not valid JSON"),
        ('{"schema_version": 1, "profile": "cpu-test', "is not valid JSON"),  # truncated
        ("[1, 2]", "top level is list"),
        (dict(good(), schema_version=99), "schema_version 99"),
        (dict(good(), profile="cuda-h100-x8"), "is for profile 'cuda-h100-x8'"),
        (dict(good(), cases=[]), "has no 'cases' object"),
        (good(efficiency={"value": 0.8}), "metric 'efficiency' needs"),
        (good(efficiency={"value": "fast", "tolerance": 0.1}), "is not a number"),
        (good(efficiency={"value": 0.8, "tolerance": -1}), "metric 'efficiency' needs"),
    ],
)
def test_corrupt_baseline_names_file_and_hints(tmp_path, content, words):
    path = write(tmp_path, content)
    with pytest.raises(BaselineError) as err:
        baselines.load(tmp_path, PROFILE)
    assert str(path) in str(err.value) and words in str(err.value)
    assert "HINT" in str(err.value)


def test_update_merges_atomically_and_prints_a_diff(tmp_path):
    entry = {"efficiency": {"value": 0.7, "tolerance": 0.1}, "throughput": {"value": 100.0, "tolerance": 0.1}}
    path, diff = baselines.update(tmp_path, PROFILE, {"cpu": "x"}, {"a:tiny": entry})
    assert diff == ["+ a:tiny: efficiency 0.7, throughput 100"]
    entry2 = {"efficiency": {"value": 0.75, "tolerance": 0.1}}
    _, diff = baselines.update(tmp_path, PROFILE, {"cpu": "x"}, {"a:tiny": entry2, "b:tiny": entry2})
    assert diff == ["~ a:tiny: efficiency 0.7 -> 0.75", "+ b:tiny: efficiency 0.75"]
    loaded = baselines.load(tmp_path, PROFILE)
    assert set(loaded.cases) == {"a:tiny", "b:tiny"}
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind
