"""A user's workload joins the matrix without editing scalegate, and every bad registration is one clear error.

Three ways in (an import path in ``--scaling-models``, the ``pytest_scaling_workloads`` conftest hook, a
``scalegate.workloads`` entry point of an installed distribution) and a test file's own matrix
(``@pytest.mark.scaling_matrix``), each through pytest with the plugin (``pytester``: in process, collection
only, so no job is launched; the entry point in a subprocess, from a real ``.dist-info`` on its sys.path).
Launching such a workload for real: tests/test_user_workload_ranks.py and tests/test_example.py.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[1]
SCALING_TEST = "def test_scaling(scaling_case, benchmark):\n    scaling_case.check(benchmark)\n"


def workload_module(name: str = "my_w", cls: str = "MyW", extra: str = "", presets: str | None = None) -> str:
    presets = presets or '{"tiny": Preset(micro_batch=8, dims={"n": 4}), "small": Preset(micro_batch=8)}'
    return textwrap.dedent(f"""\
        import torch
        from torch import nn

        from scalegate import Preset, Workload


        class {cls}(Workload):
            name = {name!r}
            presets = {presets}

            def build_model(self):
                return nn.Linear(4, 2)

            def dataset(self):
                gen = torch.Generator().manual_seed(self.seed)
                x = torch.randn(64, 4, generator=gen)
                return x, (x[:, 0] > 0).long()
        """) + textwrap.dedent(extra)


@pytest.fixture(scope="module", autouse=True)
def _strategy_modules():
    """Import every strategy module here first: an in-process pytester run drops the modules it imported when
    it ends, and torch refuses to import torch.distributed's operator libraries a second time."""
    from scalegate import strategies

    for name in strategies.names():
        strategies.get(name)


@pytest.fixture(autouse=True)
def _environment(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("SCALEGATE_RUN_ID", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)


def _run(pytester: pytest.Pytester, *args: str, subprocess: bool = False, test: str = SCALING_TEST):
    # not test_scaling.py: the outer session has imported scaling_tests/test_scaling.py under that module name
    pytester.makepyfile(test_user_scaling=test)
    pytester.makeini("[pytest]\n")
    run = pytester.runpytest_subprocess if subprocess else pytester.runpytest_inprocess
    return run("-p", "no:cacheprovider", "--scaling-results-dir", str(pytester.path / "results"), *args)


def _ids(result: pytest.RunResult) -> list[str]:
    return re.findall(r"\[([^\]]+)\]$", result.stdout.str(), flags=re.M)


def _assert_error(result: pytest.RunResult, *says: str) -> None:
    """One message naming the input and a HINT; no traceback of ours; usage error or a collection error."""
    text = result.stderr.str() + result.stdout.str()
    for part in says:
        assert part in text, text
    assert "HINT:" in text
    assert "Traceback" not in text and not re.search(r"\.py:\d+: in ", text), text
    assert result.ret == pytest.ExitCode.USAGE_ERROR or (
        result.ret == pytest.ExitCode.INTERRUPTED and "1 error" in result.stdout.str()
    ), text


# --- the three ways in ---------------------------------------------------------------------------


def test_an_import_path_in_scaling_models_adds_its_cases_under_the_class_name(pytester):
    pytester.makepyfile(my_workloads=workload_module())
    result = _run(
        pytester,
        "--co",
        "-q",
        "--scaling-models",
        "my_workloads:MyW,cnn",
        "--scaling-strategies",
        "ddp",
        "--scaling-topologies",
        "1x2",
    )
    assert _ids(result) == ["ddp-my_w-1x2", "ddp-cnn-1x2"], result.stdout.str()


def test_the_spec_carries_the_reference_and_the_directory_the_ranks_import_it_from(pytester):
    pytester.mkpydir("mypkg")
    pytester.path.joinpath("mypkg", "models.py").write_text(workload_module())
    pytester.makeconftest(
        textwrap.dedent("""\
        import json
        from scalegate.plugin import _cases

        def pytest_collection_finish(session):
            specs = [c.spec.to_dict() for c in _cases(session.config)]
            (session.config.rootpath / "specs.json").write_text(json.dumps(specs))
        """)
    )
    _run(pytester, "--co", "-q", "--scaling-models", "mypkg.models:MyW", "--scaling-strategies", "ddp")
    specs = json.loads((pytester.path / "specs.json").read_text())
    assert [(s["model"], s["workload"], s["import_paths"][0]) for s in specs] == [
        ("my_w", "mypkg.models:MyW", str(pytester.path))
    ] * 2


def test_a_conftest_hook_registers_classes(pytester):
    pytester.makepyfile(my_workloads=workload_module())
    pytester.makeconftest("from my_workloads import MyW\n\ndef pytest_scaling_workloads():\n    return [MyW]\n")
    result = _run(pytester, "--co", "-q", "--scaling-strategies", "ddp", "--scaling-topologies", "1x2")
    assert _ids(result) == [
        "ddp-cnn-1x2",
        "ddp-rnn_mnist-1x2",
        "ddp-resnet-1x2",
        "ddp-bert_qa-1x2",
        "ddp-my_w-1x2",
    ]  # "all" now includes it
    selected = _run(pytester, "--co", "-q", "--scaling-strategies", "ddp", "--scaling-models", "my_w")
    assert _ids(selected) == ["ddp-my_w-1x1", "ddp-my_w-1x2"]


def test_the_same_class_from_a_hook_and_an_option_is_one_workload(pytester):
    pytester.makepyfile(my_workloads=workload_module())
    pytester.makeconftest("from my_workloads import MyW\n\ndef pytest_scaling_workloads():\n    return [MyW]\n")
    result = _run(pytester, "--co", "-q", "--scaling-models", "my_workloads:MyW", "--scaling-strategies", "ddp")
    assert _ids(result) == ["ddp-my_w-1x1", "ddp-my_w-1x2"]


def test_a_built_in_named_by_its_import_path_is_the_built_in(pytester):
    result = _run(
        pytester,
        "--co",
        "-q",
        "--scaling-models",
        "scalegate.workloads.cnn:CNN",
        "--scaling-strategies",
        "ddp",
        "--scaling-topologies",
        "1x2",
    )
    assert _ids(result) == ["ddp-cnn-1x2"]


def test_an_installed_entry_point_registers_its_workload(pytester, monkeypatch):
    site = pytester.mkdir("site")
    (site / "ep_workloads.py").write_text(workload_module(name="ep_w", cls="EpW"))
    info = site / "ep_workloads-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-workloads\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[scalegate.workloads]\nep_w = ep_workloads:EpW\n")
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}:{site}")
    result = _run(pytester, "--co", "-q", "--scaling-strategies", "ddp", "--scaling-models", "ep_w", subprocess=True)
    assert _ids(result) == ["ddp-ep_w-1x1", "ddp-ep_w-1x2"], result.stdout.str() + result.stderr.str()


# --- a test file's own matrix ------------------------------------------------------------------

MARKED = textwrap.dedent("""\
    import pytest
    from my_workloads import MyW

    @pytest.mark.scaling_matrix(models=[MyW, "cnn"], strategies=["ddp", "fsdp"], topologies=["1x2"])
    def test_mine(scaling_case, benchmark):
        scaling_case.check(benchmark)
    """)


def test_scaling_matrix_declares_a_test_files_own_cases(pytester):
    pytester.makepyfile(my_workloads=workload_module(), test_mine=MARKED)
    result = _run(pytester, "--co", "-q", "test_mine.py")
    assert _ids(result) == ["ddp-my_w-1x2", "ddp-cnn-1x2", "fsdp-my_w-1x2", "fsdp-cnn-1x2"], result.stdout.str()
    assert "test_user_scaling" not in result.stdout.str()  # only the marked test's matrix, no built-in test here


def test_command_line_options_and_k_select_from_the_declared_matrix(pytester):
    pytester.makepyfile(my_workloads=workload_module(), test_mine=MARKED)
    narrowed = _run(
        pytester,
        "--co",
        "-q",
        "test_mine.py",
        "--scaling-strategies",
        "fsdp,deepspeed-zero1",
        "--scaling-models",
        "cnn",
    )
    assert _ids(narrowed) == ["fsdp-cnn-1x2"]
    picked = _run(pytester, "--co", "-q", "test_mine.py", "-k", "fsdp and cnn")
    assert _ids(picked) == ["fsdp-cnn-1x2"]


# --- bad registrations: one line naming the input, a HINT, no traceback -------------------------

BAD_MODULES = [
    (
        "raises",
        "raise RuntimeError('boom in the user module')\n",
        "my_workloads:MyW",
        ["--scaling-models my_workloads:MyW: importing 'my_workloads' failed: RuntimeError: boom in the user module"],
    ),
    ("no-class", "", "my_workloads:Nope", ["module 'my_workloads' has no 'Nope'", "its Workload classes: MyW"]),
    (
        "not-a-workload",
        "class Plain:\n    name = 'plain'\n",
        "my_workloads:Plain",
        ["class my_workloads.Plain is not a Workload subclass", "from scalegate import Workload"],
    ),
    ("no-name", "class NoName(MyW):\n    name = None\n", "my_workloads:NoName", ["workload class NoName has no name"]),
    ("empty-name", "class Empty(MyW):\n    name = ''\n", "my_workloads:Empty", ["has name ''"]),
    ("dash-name", "class Dash(MyW):\n    name = 'my-w'\n", "my_workloads:Dash", ["has name 'my-w'", "letters, digits"]),
    ("no-presets", "class Bare(MyW):\n    presets = {}\n", "my_workloads:Bare", ["('my_w') has no presets"]),
    (
        "builtin-name",
        "class Clash(MyW):\n    name = 'cnn'\n",
        "my_workloads:Clash",
        ["workload name 'cnn' is already taken by a built-in workload", "another name"],
    ),
    ("not-a-reference", "", "my_workloads:My-W", ["'my_workloads:My-W' is not an import reference"]),
]


@pytest.mark.parametrize("body, ref, says", [b[1:] for b in BAD_MODULES], ids=[b[0] for b in BAD_MODULES])
def test_a_bad_workload_module_is_a_usage_error(pytester, body, ref, says):
    pytester.makepyfile(my_workloads=workload_module(extra=body) if "raise" not in body else body)
    _assert_error(_run(pytester, "--co", "--scaling-models", ref), *says)


def test_a_module_that_cannot_be_found_says_where_to_run_from(pytester):
    _assert_error(
        _run(pytester, "--co", "--scaling-models", "no_such_pkg.models:MyW"),
        "--scaling-models no_such_pkg.models:MyW: cannot import module 'no_such_pkg.models'",
        "run pytest from the directory that holds no_such_pkg",
    )


def test_two_registrations_of_one_name_name_both(pytester):
    pytester.makepyfile(my_workloads=workload_module(), other=workload_module(cls="Other"))
    pytester.makeconftest("from my_workloads import MyW\n\ndef pytest_scaling_workloads():\n    return [MyW]\n")
    result = _run(pytester, "--co", "--scaling-models", "other:Other")
    _assert_error(
        result,
        "--scaling-models other:Other: workload name 'my_w' is already taken by the workload "
        "registered by pytest_scaling_workloads() in",
        "conftest.py",
    )


@pytest.mark.parametrize(
    "returned, says",
    [
        ("MyW", "returned <class 'my_workloads.MyW'>, not a list of workload classes"),
        ("['my_workloads:MyW']", "'my_workloads:MyW' (str) is not a Workload subclass"),
        ("1 / 0", "pytest_scaling_workloads() in"),
    ],
    ids=["a-class-not-a-list", "a-string", "raises"],
)
def test_a_bad_hook_names_its_conftest(pytester, returned, says):
    pytester.makepyfile(my_workloads=workload_module())
    pytester.makeconftest(f"from my_workloads import MyW\n\ndef pytest_scaling_workloads():\n    return {returned}\n")
    _assert_error(_run(pytester, "--co"), says, "conftest.py")


def test_a_class_defined_inside_a_function_is_refused_with_the_fix(pytester):
    pytester.makepyfile(my_workloads=workload_module())
    pytester.makeconftest(
        textwrap.dedent("""\
        from my_workloads import MyW

        def pytest_scaling_workloads():
            class Local(MyW):
                name = "local_w"
            return [Local]
        """)
    )
    _assert_error(_run(pytester, "--co"), "cannot be imported by name in the ranks", "top level of a module")


def test_a_class_defined_in_a_conftest_is_refused_with_the_fix(pytester):
    pytester.makeconftest(workload_module() + "\n\ndef pytest_scaling_workloads():\n    return [MyW]\n")
    _assert_error(_run(pytester, "--co"), "MyW is defined in a conftest.py", "a module of its own")


def test_a_missing_preset_names_the_workload_and_the_option(pytester):
    pytester.makepyfile(my_workloads=workload_module(presets='{"small": Preset(micro_batch=8)}'))
    result = _run(pytester, "--co", "--scaling-models", "my_workloads:MyW", "--scaling-preset", "tiny")
    _assert_error(result, "model 'my_w' has no preset 'tiny'", "--scaling-preset", "add 'tiny' to MyW.presets")


@pytest.mark.parametrize(
    "marker, says",
    [
        ('models=["nope"]', "scaling_matrix(models=...): unknown workload 'nope'"),
        ('strategies=["ddpp"]', "scaling_matrix(strategies=...): unknown strategy 'ddpp'"),
        ('topologies=["1y2"]', "scaling_matrix(topologies=...): malformed topology '1y2'"),
        ('model=["cnn"]', "scaling_matrix has no argument 'model'"),
        ("strategies=[]", "scaling_matrix(strategies=[]) names none"),
    ],
    ids=["unknown-model", "unknown-strategy", "bad-topology", "misspelt-key", "empty"],
)
def test_a_bad_scaling_matrix_marker_names_the_test(pytester, marker, says):
    pytester.makepyfile(
        test_mine=f"import pytest\n\n@pytest.mark.scaling_matrix({marker})\ndef test_mine(scaling_case):\n    pass\n"
    )
    _assert_error(_run(pytester, "--co", "test_mine.py"), "test_mine.py::test_mine", says)


# --- the matrix of a bare `pytest` (pytest.ini's scaling_testpaths_matrix) --------------------------------------


def _collect_bare(pytester: pytest.Pytester, *args: str, matrix: str = "smoke") -> pytest.RunResult:
    """Collect as `pytest` does with no path named: from the ini's testpaths, which set the smoke matrix."""
    pytester.makepyfile(test_user_scaling=SCALING_TEST)
    pytester.makeini(f"[pytest]\ntestpaths = test_user_scaling.py\nscaling_testpaths_matrix = {matrix}\n")
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "--co", *args)


def _collected(result: pytest.RunResult) -> list[str]:
    return re.findall(r"\[([^\]]+)\]>$", result.stdout.str(), flags=re.M)


def test_a_bare_pytest_runs_the_ini_matrix_and_a_named_path_the_default_one(pytester):
    bare = _collect_bare(pytester)
    assert "ddp-cnn-1x2" in _collected(bare) and "single-cnn-1x1" in _collected(bare)
    assert not [i for i in _collected(bare) if "bert_qa" in i or "resnet" in i], bare.stdout.str()
    assert "scaling: the smoke matrix (every strategy on cnn only" in bare.stdout.str()  # the header says so
    named = _collect_bare(pytester, "test_user_scaling.py")  # `pytest scaling_tests`: the default matrix
    assert "ddp-bert_qa-1x2" in _collected(named) and "smoke matrix" not in named.stdout.str()
    given = _collect_bare(pytester, "--scaling-matrix", "default")
    assert "ddp-bert_qa-1x2" in _collected(given)
    # models named on the command line run in the smoke matrix too
    assert _collected(_collect_bare(pytester, "--scaling-models", "bert_qa", "--scaling-strategies", "ddp")) == [
        "ddp-bert_qa-1x1",
        "ddp-bert_qa-1x2",
    ]


def test_a_testpaths_matrix_that_is_not_one_is_a_usage_error(pytester):
    _assert_error(_collect_bare(pytester, matrix="smok"), "scaling_testpaths_matrix = smok", "smoke")
