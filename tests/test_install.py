"""What ``pip install`` puts into a user's environment: one import name, ``scalegate``, and nothing that clobbers
another project's package (PyPI's ``fixtures``, testing-cabal's, is the name the repository's fixtures/ folder
once installed over).

The repository keeps its folders (harness/, fixtures/: docs/architecture.md); the package is harness/scalegate/ (a src layout)
and harness/scalegate/workloads is a link to ../../fixtures, so the workloads install as ``scalegate.workloads``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

from tests import envs
from tests.conftest import ROOT

PACKAGE = ROOT / "harness" / "scalegate"
CHANGELOG = ROOT / "CHANGELOG.md"


def _listed_packages() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(config["tool"]["setuptools"]["packages"])


def test_every_package_of_the_tree_is_listed_for_the_wheel():
    found = {"scalegate", "scalegate.workloads"} | {
        "scalegate." + ".".join(p.parent.relative_to(PACKAGE).parts)
        for p in PACKAGE.rglob("__init__.py")
        if p.parent != PACKAGE
    }
    assert found == _listed_packages(), "add the new package to [tool.setuptools] packages in pyproject.toml"


def test_the_workloads_link_points_at_the_fixtures_folder():
    link = PACKAGE / "workloads"
    assert link.is_symlink() and link.resolve() == (ROOT / "fixtures").resolve()


def build_wheel(source: Path, out: Path) -> Path:
    """The wheel of ``source``, built offline with this environment's setuptools and setuptools-scm."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [built] = out.glob("scalegate-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(ROOT, tmp_path_factory.mktemp("wheel"))


def test_the_wheel_installs_one_top_level_name_with_the_workloads_inside(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"scalegate"}, f"the wheel installs top-level {sorted(tops)}"
    assert "scalegate/workloads/cnn.py" in names and "scalegate/plugin.py" in names  # the link was followed
    assert not any(n.startswith(("harness/", "fixtures/")) for n in names)
    pages = {"scalegate/page/common.js", "scalegate/page/style.css", "scalegate/history/dashboard.js"}
    assert pages | {"scalegate/report/run_page.js"} <= set(names), "the interactive pages' scripts (package-data)"
    templates = {
        f"scalegate/cli/templates/{n}"
        for n in ("github-scalegate.yml", "scalegate-nightly.sbatch", "scalegate-submit.sh")
    }
    assert templates <= set(names), "the CI templates `scalegate init` writes (package-data)"


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def release() -> str:
    """The latest release the CHANGELOG names (its first ``## X.Y.Z`` heading): what the README installs."""
    found = re.search(r"^## (\d+\.\d+\.\d+) ", CHANGELOG.read_text(), flags=re.M)
    assert found, "CHANGELOG.md names no release (## X.Y.Z (date))"
    return found.group(1)


def test_the_latest_release_is_tagged_on_this_branchs_history():
    """The CHANGELOG's latest release names its commit, one this checkout descends from, so a clone at the tag builds
    the wheel the README installs; where the clone carries tags (``git clone --no-tags`` does not), ``vX.Y.Z`` is
    that commit."""
    tag = f"v{release()}"
    found = re.search(rf"^Tagged `{re.escape(tag)}` on commit ([0-9a-f]{{40}})\.$", CHANGELOG.read_text(), flags=re.M)
    assert found, f"CHANGELOG.md's {release()} names no commit: 'Tagged `{tag}` on commit <40 hex digits>.'"
    commit = found.group(1)
    assert _git("merge-base", "--is-ancestor", commit, "HEAD").returncode == 0, (
        f"{tag}'s {commit} is not in HEAD's history"
    )
    tags = _git("tag", "--list", "v*").stdout.split()
    if tags:  # a clone with its tags: the release's tag is there, on the commit the CHANGELOG names
        assert tag in tags, f"no tag {tag}: git tag {tag} {commit}"
        tagged = _git("rev-parse", f"{tag}^{{commit}}").stdout.strip()
        assert tagged == commit, f"{tag} is {tagged}, the CHANGELOG says {commit}"


def test_the_wheel_is_versioned_by_the_commit_it_was_built_from(wheel):
    """setuptools-scm: the release at its tag, else the next version's devN+g<commit>; a wheel names the code it
    holds."""
    version = wheel.name.split("-")[1]
    head = _git("rev-parse", "HEAD").stdout
    if (
        _git("describe", "--exact-match", "--tags", "--match", "v*", "HEAD").returncode == 0
        and not _git("status", "--porcelain", "--untracked-files=no").stdout
    ):
        assert version == release(), f"{wheel.name} at the tag v{release()}"
    else:
        found = re.search(r"\+g([0-9a-f]{7,})", version)
        assert found and head.startswith(found.group(1)), f"{wheel.name} does not name HEAD {head[:12]}"
    assert zipfile.ZipFile(wheel).read(f"scalegate-{version}.dist-info/METADATA").decode().count(f"Version: {version}")


def test_a_git_archive_export_builds_without_git(tmp_path):
    """slurm/base-env.sh builds the base commit's environment from ``git archive``, which has no .git: setuptools-scm
    then reads .git_archival.txt (filled by git: .gitattributes' export-subst; a version from it once a v* tag
    exists), else takes the fallback version; either way the export builds."""
    tree = tmp_path / "export"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    assert "$Format" not in (tree / ".git_archival.txt").read_text(), "git did not fill .git_archival.txt"
    build_wheel(tree, tmp_path)


@pytest.mark.slow
def test_the_sdist_builds_the_same_wheel_and_the_wheel_installs_alone_into_a_fresh_venv_beside_torch(wheel, tmp_path):
    """What CI builds of a release: the sdist (setuptools' own build hook, offline), from it a wheel of the same
    version and files as the checkout's, and that wheel installed into a fresh venv beside torch (tests/envs.py):
    pip installs scalegate alone, torch stays as it was, and ``python -m scalegate init --help`` answers."""
    out = tmp_path / "sdist"
    built = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta; print(build_meta.build_sdist({str(out)!r}))"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    sdist = out / built.stdout.split()[-1]
    subprocess.run(["tar", "-xzf", str(sdist), "-C", str(out)], check=True)
    from_sdist = build_wheel(out / sdist.name.removesuffix(".tar.gz"), tmp_path / "from-sdist")
    assert from_sdist.name == wheel.name, "the sdist's wheel names another version"
    assert set(zipfile.ZipFile(from_sdist).namelist()) == set(zipfile.ZipFile(wheel).namelist())

    fresh = envs.beside_torch(tmp_path / "env")
    before = fresh.run(f"python -c '{envs.TORCH_PROBE}'", tmp_path)
    done = fresh.run(f"python -m pip install {from_sdist}", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.findall(r"^Successfully installed (.+)$", done.stdout, flags=re.M) == [from_sdist.name.split("-py3")[0]]
    assert fresh.run(f"python -c '{envs.TORCH_PROBE}'", tmp_path).stdout == before.stdout != ""
    helped = fresh.run("python -m scalegate init --help", tmp_path)
    assert helped.returncode == 0 and "--gpus-per-node" in helped.stdout, helped.stderr[-2000:]


def test_installing_scalegate_beside_pypi_fixtures_leaves_it_working(wheel, tmp_path):
    """A target holding testing-cabal's ``fixtures`` (copied from this environment, where the test extras installed
    it), then the scalegate wheel into the same target: ``fixtures.Fixture`` is still there."""
    dist = importlib.metadata.distribution("fixtures")  # installed by setup.sh's test extras: never skipped in CI
    source = Path(dist.locate_file("fixtures"))
    target = tmp_path / "site"
    target.mkdir()
    subprocess.run(["cp", "-r", str(source), str(target)], check=True)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    probe = (
        "import fixtures, scalegate.workloads as w; "
        "assert hasattr(fixtures, 'Fixture'), fixtures.__file__; "
        "print(fixtures.__file__, w.__file__)"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    fixtures_file, workloads_file = ran.stdout.split()
    assert fixtures_file.startswith(str(target / "fixtures")) and workloads_file.startswith(str(target / "scalegate"))


def test_this_environment_imports_pypi_fixtures_outside_the_repository(tmp_path):
    """The suite's own environment has both installed; from any directory but the repository's root,
    ``import fixtures`` is testing-cabal's and scalegate's workloads are ``scalegate.workloads``."""
    probe = "import fixtures, scalegate.workloads as w; fixtures.Fixture; print(w.BUILTIN and 'ok')"
    ran = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran.stderr[-2000:]


def test_no_code_imports_the_folder_names():
    """``harness`` and ``fixtures`` are folders, not import names: an import by those names would load a second,
    unrelated copy of the modules (from the repository root on sys.path) beside ``scalegate``'s."""
    offenders = []
    for path in [
        *ROOT.glob("harness/**/*.py"),
        *ROOT.glob("fixtures/*.py"),
        *ROOT.glob("tests/*.py"),
        *ROOT.glob("scaling_tests/*.py"),
        *ROOT.glob("benchmarks/*.py"),
        *ROOT.glob("experiments/*.py"),
        *ROOT.glob("examples/**/*.py"),
    ]:
        if "workloads" in path.relative_to(ROOT).parts[:3] and path.parts[-4:-2] == ("harness", "scalegate"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith(("import harness", "from harness", "import fixtures", "from fixtures")):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {stripped}")
    assert not offenders, offenders


def test_the_architecture_page_shows_the_layers_the_linter_checks():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [layers] = [c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    page = (ROOT / "docs" / "architecture.md").read_text()
    shown = page.split("<!-- layers:")[1].split("```")[1].strip().splitlines()
    assert shown == layers, "docs/architecture.md's layers differ from pyproject.toml's import-linter contract"


def _requirements(dist: str) -> list:
    """``dist``'s requirements that apply here (markers evaluated, no extra asked)."""
    from packaging.requirements import Requirement

    found = [Requirement(r) for r in importlib.metadata.requires(dist) or []]
    return [r for r in found if r.marker is None or r.marker.evaluate({"extra": ""})]


def test_the_changepoint_extra_is_pinned_and_nothing_it_installs_asks_for_torch():
    """Apache Otava is subclassed (harness/scalegate/history/otava_search.py), so its release is pinned; and what it
    brings, walked through this environment's installed metadata, names no torch: installing the extra beside a
    team's torch leaves that torch alone (setup.sh installs the extra under the same torch constraint)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [pinned] = config["project"]["optional-dependencies"]["changepoint"]
    assert re.fullmatch(r"apache-otava==\d+\.\d+\.\d+", pinned), pinned
    assert importlib.metadata.version("apache-otava") == pinned.split("==")[1]  # setup.sh installed the pin
    seen, todo, path = set(), ["apache-otava"], {"apache-otava": "apache-otava"}
    while todo:
        dist = todo.pop()
        for req in _requirements(dist):
            name = re.sub(r"[-_.]+", "-", req.name).lower()
            assert name != "torch", f"{path[dist]} -> {req} would install a torch"
            if name not in seen:
                seen.add(name)
                path[name] = f"{path[dist]} -> {req.name}"
                with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                    importlib.metadata.distribution(name)
                    todo.append(name)
    assert "numpy" in seen and len(seen) > 10, sorted(seen)  # the walk went through its dependencies
