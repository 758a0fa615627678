"""Bad input reaches the user as one clear error naming the input and the fix, never a traceback.

Each case runs pytest with the plugin (``pytester``, in process for speed; one case in a subprocess
exactly as a user would) and asserts the usage error's message, its HINT, and that no Python
traceback is printed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scalegate.contract import SCHEMA_VERSION
from scalegate.plan import hostinfo

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[1]
SCALING_TEST = "def test_scaling(scaling_case, benchmark):\n    scaling_case.check(benchmark)\n"

BAD_OPTIONS = [
    (["--scaling-topologies", "2y2"], "malformed topology '2y2'"),
    (["--scaling-topologies", "0x2"], "nodes=0 must be a whole number >= 1"),
    (["--scaling-topologies", "1x1,,1x2"], "malformed topology ''"),
    (["--scaling-strategies", "ddp,nosuch"], "--scaling-strategies: unknown name(s) 'nosuch'"),
    (["--scaling-models", "resnet9000"], "--scaling-models: unknown name(s) 'resnet9000'"),
    (["--scaling-tolerance", "1.5"], "--scaling-tolerance=1.5 is not a fraction in [0, 1)"),
    (["--scaling-tolerance", "-0.1"], "--scaling-tolerance=-0.1 is not a fraction in [0, 1)"),
    (["--scaling-steps", "0"], "--scaling-steps=0 is below 1"),
    (["--scaling-launches", "0"], "--scaling-launches=0 is not in 1..20"),
    (
        [
            "--scaling-scaling",
            "strong",
            "--scaling-global-batch",
            "6",
            "--scaling-topologies",
            "1x1,1x4",
            "--scaling-strategies",
            "ddp",
        ],
        "--scaling-global-batch 6 does not divide by world size 4 of topology 1x4",
    ),
    (["--scaling-scaling", "strong"], "--scaling-scaling strong needs --scaling-global-batch N >= 1"),
    (["--scaling-scaling", "both"], "--scaling-scaling both needs --scaling-global-batch N >= 1"),
    (["--scaling-scaling", "sideways"], "--scaling-scaling='sideways' is not one of weak, strong, both"),
    (["--scaling-global-batch", "8"], "--scaling-global-batch 8 conflicts with weak scaling"),
    (
        ["--scaling-update-baselines", "--scaling-inject-fault", "crash:rank=1"],
        "--scaling-update-baselines with --scaling-inject-fault would record a faulty baseline",
    ),
    (["--scaling-inject-fault", "hang:rank=1"], "--scaling-inject-fault 'hang:rank=1': missing step"),
    (["--scaling-inject-fault", "explode:rank=1"], "unknown fault 'explode'"),
    (["--scaling-baseline-dir", __file__], f"--scaling-baseline-dir {__file__} is a file, not a directory"),
    (["--scaling-results-dir", __file__], f"--scaling-results-dir {__file__} is a file, not a directory"),
    (["--scaling-tensorboard", __file__], f"--scaling-tensorboard {__file__} is a file, not a directory"),
]


@pytest.fixture(autouse=True)
def _environment(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("SCALEGATE_RUN_ID", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)


def _run(pytester: pytest.Pytester, *args: str, subprocess: bool = False) -> pytest.RunResult:
    pytester.makepyfile(test_scaling=SCALING_TEST)
    pytester.makeini("[pytest]\n")
    run = pytester.runpytest_subprocess if subprocess else pytester.runpytest_inprocess
    return run(
        "-p",
        "scalegate.plugin",
        "-p",
        "no:cacheprovider",
        "--scaling-results-dir",
        str(pytester.path / "results"),
        *args,
    )


def _assert_usage_error(result: pytest.RunResult, says: str) -> None:
    err = result.stderr.str()
    out = result.stdout.str()
    assert says in err + out, err + out
    assert "HINT:" in err + out
    assert "Traceback" not in err + out and not re.search(r"\.py:\d+: in ", err + out)  # no stack of ours
    assert result.ret == pytest.ExitCode.USAGE_ERROR or (result.ret == pytest.ExitCode.INTERRUPTED and "1 error" in out)
    print(f"\n{(err or out).strip()[-600:]}")


@pytest.mark.parametrize("args, says", BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_bad_option_is_a_usage_error(pytester, args, says):
    _assert_usage_error(_run(pytester, *args), says)


def _baseline(pytester: pytest.Pytester, text: str) -> Path:
    directory = pytester.path / "baselines"
    directory.mkdir(exist_ok=True)
    path = directory / f"{hostinfo.detect().profile}.json"
    path.write_text(text)
    return directory


def _good(profile: str) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "profile": profile,
        "fingerprint": {},
        "cases": {"ddp-cnn-1x2:tiny": {"efficiency": {"value": 0.8, "tolerance": 0.1}}},
    }


def _bad_baselines() -> list[tuple[str, str, str]]:
    profile = hostinfo.detect().profile
    good = json.dumps(_good(profile))
    wrong_schema = dict(_good(profile), schema_version=99)
    other = dict(_good(profile), profile="gpu-8xh100")
    bad_tol = _good(profile)
    bad_tol["cases"]["ddp-cnn-1x2:tiny"]["efficiency"]["tolerance"] = "ten"
    return [
        ("corrupt", "{this is not json", "is not valid JSON"),
        ("truncated", good[: len(good) // 2], "is not valid JSON"),
        ("empty", "", "is not valid JSON"),
        ("wrong-schema", json.dumps(wrong_schema), "has schema_version 99"),
        ("other-profile", json.dumps(other), "is for profile 'gpu-8xh100'"),
        ("bad-tolerance", json.dumps(bad_tol), "metric 'efficiency' needs"),
        ("not-an-object", "[1, 2]", "top level is list"),
    ]


@pytest.mark.parametrize("name, text, says", _bad_baselines(), ids=[b[0] for b in _bad_baselines()])
def test_bad_baseline_file_is_a_usage_error(pytester, name, text, says):
    directory = _baseline(pytester, text)
    result = _run(pytester, "--scaling-baseline-dir", str(directory), "--co")
    _assert_usage_error(result, says)
    assert str(directory) in result.stderr.str() + result.stdout.str()  # names the file to fix


def test_usage_error_in_a_real_subprocess(pytester):
    directory = _baseline(pytester, "{truncated")
    result = _run(pytester, "--scaling-baseline-dir", str(directory), "--scaling-topologies", "1x2,2y", subprocess=True)
    _assert_usage_error(result, "--scaling-topologies: malformed topology '2y'")
