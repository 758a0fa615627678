"""The README lands and the reference cannot drift: docs/options.md is the code's own option groups, it names every
option ``pytest --help`` shows, and every page the README links exists.

The site itself is built in CI (.ci/run: ``mkdocs build --strict``, where a broken link, a missing anchor or a
page left out of the nav fails); these checks need no mkdocs.
"""

from __future__ import annotations

import re
import subprocess
import sys

from scalegate.cli import reference
from tests.conftest import ROOT

README = ROOT / "README.md"


def test_the_committed_options_page_is_what_the_code_declares():
    """The --scaling-* tables exactly; the commands' sections by name (argparse's help layout moves between Python
    versions: 3.13 prints metavars differently, so their text is the interpreter's, not a drift)."""
    committed = (ROOT / "docs" / "options.md").read_text()
    generated = reference.markdown()
    stale = "docs/options.md is stale: python -m scalegate.cli.reference > docs/options.md (mkdocs build does it too)"
    assert committed.split("## Commands")[0] == generated.split("## Commands")[0], stale
    headings = re.findall(r"^#{3,4} `[a-z -]+`$", generated, flags=re.M)
    assert len(headings) >= 10 and headings == re.findall(r"^#{3,4} `[a-z -]+`$", committed, flags=re.M), stale


def test_the_options_page_names_every_option_pytest_help_shows():
    shown = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    options = set(re.findall(r"(--scaling-[a-z0-9-]+)", shown.stdout))
    assert len(options) > 30, f"pytest --help shows only {sorted(options)}"
    page = (ROOT / "docs" / "options.md").read_text()
    listed = set(re.findall(r"`(--scaling-[a-z0-9-]+)`", page))
    assert options <= listed, f"missing from docs/options.md: {sorted(options - listed)}"
    assert listed <= options, f"docs/options.md lists options pytest does not know: {sorted(listed - options)}"


def test_every_declared_option_is_in_pytests_help_the_gates_help_and_the_options_page():
    """One declaration per option (plan/option_groups.py): adding a field to a section makes it a pytest option, a
    gate option passed on to every session, and a row of docs/options.md, with nothing else to edit."""
    from scalegate.plan import declare
    from scalegate.plan.option_groups import SECTIONS

    declared = {declare.flag_name(f) for section in SECTIONS for f in declare.fields(section)}
    assert len(declared) > 40

    def helped(*args: str) -> set[str]:
        done = subprocess.run([sys.executable, *args, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return set(re.findall(r"(--scaling-[a-z0-9-]+)", done.stdout))

    page = set(re.findall(r"`(--scaling-[a-z0-9-]+)`", (ROOT / "docs" / "options.md").read_text()))
    for where, shown in (
        ("pytest --help", helped("-m", "pytest", "-p", "no:cacheprovider")),
        ("python -m scalegate gate --help", helped("-m", "scalegate", "gate")),
        ("docs/options.md", page),
    ):
        assert declared == shown, f"{where}: missing {sorted(declared - shown)}, unknown {sorted(shown - declared)}"


def test_the_readme_is_a_landing_page_with_the_quick_start_and_the_three_uses():
    text = README.read_text()
    assert len(text.splitlines()) < 150, "the README lands in one screen or two: move a section to docs/"
    for command in (
        "./setup.sh",
        ".venv/bin/pytest        #",  # .ci/run's test command, as the quick start says it
        ".venv/bin/pytest scaling_tests -k ddp",
        "srun --ntasks-per-node=1 pytest scaling_tests -k fsdp",
        "sbatch slurm/nightly.sbatch",
        "python -m scalegate gate --base origin/main",
        "@pytest.mark.scaling_script(",
    ):
        assert command in text, f"the README no longer shows {command!r}"
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (ROOT / image).is_file(), f"the README's picture {image} is missing"


def test_every_page_the_readme_links_exists_and_every_docs_page_is_linked_from_it_or_the_site():
    text = README.read_text()
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)", text))
    for page in linked:
        assert (ROOT / page).is_file(), f"the README links {page}, which does not exist"
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f": {page.name}" in nav, f"docs/{page.name} is not in mkdocs.yml's nav"
