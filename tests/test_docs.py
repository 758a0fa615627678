"""The README lands and the reference cannot drift: docs/options.md is the code's own option groups, it names every
option ``pytest --help`` shows, and every page the README links exists.

The site itself is built in CI (.ci/run: ``mkdocs build --strict``, where a broken link, a missing anchor or a
page left out of the nav fails); these checks need no mkdocs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
    for page in sorted((ROOT / "docs").rglob("*.md")):
        name = page.relative_to(ROOT / "docs").as_posix()
        if name.startswith("gpu/"):
            continue  # each GPU run's report: linked from verified-on-gpu.md, not listed (mkdocs.yml's not_in_nav)
        assert f": {name}" in nav, f"docs/{name} is not in mkdocs.yml's nav"


# --- references to files: no page, README or harness comment names a file the repository lacks --------------------

ROOTS = (
    "harness",
    "docs",
    "benchmarks",
    "experiments",
    "slurm",
    "tests",
    "examples",
    "fixtures",
    "baselines",
    "scaling_tests",
    "db",
    ".github",
    ".ci",
)
PACKAGES = (
    "contract",
    "plan",
    "launch",
    "worker",
    "measure",
    "strategies",
    "figures",
    "checks",
    "judge",
    "record",
    "report",
    "history",
    "page",
    "gate",
    "cli",
)
# a path from the repository's root (harness/scalegate/gate/life.py, docs/gate.md, slurm/pr.sbatch) or from the
# package's (gate/life.py); not a part of a longer word, a URL or a path outside the repository
REPO_PATH = re.compile(rf"(?<![\w./:~-])((?:{'|'.join(re.escape(r) for r in ROOTS)})/[\w./-]*[\w/])")
PACKAGE_PATH = re.compile(rf"(?<![\w./:~-])((?:{'|'.join(PACKAGES)})/[\w/]+\.py)\b")
PLACEHOLDER = re.compile(r"[<>{}*…]|\.\.\.")
DOC_ANCHOR = re.compile(r"(docs/[\w/.-]+\.md)#([\w-]+)")
# files of a team's repository the docs show (what `scalegate init` writes there, a user's test file): not this one's
TEAMS_FILES = {".github/workflows/scalegate.yml", "scaling_tests/test_train.py", "scaling_tests/test_my_model.py"}


def _pages() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def _harness_text(path: Path) -> str:
    """A module's comments and string literals (its docstrings among them): what a reader of the code is sent to."""
    import tokenize

    kept = []
    with path.open() as handle:
        for token in tokenize.generate_tokens(handle.readline):
            if token.type in (tokenize.COMMENT, tokenize.STRING):
                kept.append(token.string)
    return "\n".join(kept)


def _missing(text: str) -> list[str]:
    found = []
    for match in REPO_PATH.finditer(text):
        path = match.group(1).rstrip(".")
        tail = text[match.end() : match.end() + 1]
        if PLACEHOLDER.search(path) or tail in "<{*(" and tail:
            continue  # a pattern (docs/gpu/<device>-<date>.md, requirements*.txt) or a call, not a file
        if not (ROOT / path).exists() and path not in TEAMS_FILES:
            found.append(path)
    for match in PACKAGE_PATH.finditer(text):
        if not (ROOT / "harness" / "scalegate" / match.group(1)).exists():
            found.append(match.group(1))
    return found


def test_no_page_readme_or_harness_comment_names_a_file_the_repository_lacks():
    """docs/**.md and README.md, and the comments, docstrings and strings under harness/: every repository path they
    name exists (a file moved is a reference to update, not a dead end for the reader)."""
    missing = {}
    for page in _pages():
        found = _missing(page.read_text())
        if found:
            missing[str(page.relative_to(ROOT))] = sorted(set(found))
    for module in sorted((ROOT / "harness" / "scalegate").rglob("*.py")):
        if "workloads" in module.relative_to(ROOT).parts:
            continue  # the link to fixtures/, checked as itself
        found = _missing(_harness_text(module))
        if found:
            missing[str(module.relative_to(ROOT))] = sorted(set(found))
    assert not missing, f"references to files the repository lacks: {missing}"


def slug(heading: str) -> str:
    """The anchor mkdocs gives a heading (Python-Markdown's toc: its text, ASCII, punctuation dropped, lower case,
    spaces to '-'): "A team's script: a launch's own tails" -> a-teams-script-a-launchs-own-tails; "A measured σ"
    -> a-measured."""
    import unicodedata

    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"`([^`]*)`", r"\1", text).replace("**", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on a page, as mkdocs numbers repeats (x, x_1, x_2); headings in code blocks are not."""
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text().splitlines():
        line = re.sub(r"^(> ?)+", "", line)  # a heading quoted (a PR comment shown as it posts) is a heading too
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            base = slug(line.lstrip("#").strip())
            n = seen.get(base, 0)
            seen[base] = n + 1
            seen.setdefault(f"{base}_{n}" if n else base, 1)
    return set(seen)


def test_slugs_are_mkdocs_anchors():
    assert slug("A team's script: a launch's own tails, trimmed") == "a-teams-script-a-launchs-own-tails-trimmed"
    assert slug("A measured σ") == "a-measured"
    assert slug("The sequential test (harness/scalegate/judge/sequential.py)") == (
        "the-sequential-test-harnessscalegatejudgesequentialpy"
    )
    assert slug("The fsdp canary's A/A mean, and gloo's threads") == "the-fsdp-canarys-aa-mean-and-gloos-threads"
    assert slug("Today's figures: what the default 5% tolerance catches") == (
        "todays-figures-what-the-default-5-tolerance-catches"
    )


def test_every_docs_anchor_the_harness_links_is_a_heading_of_that_page():
    """policy.py and the judge's comments send a reader to docs/evidence/<page>.md#<section>: the section exists."""
    broken = []
    for module in sorted((ROOT / "harness" / "scalegate").rglob("*.py")):
        for page, anchor in DOC_ANCHOR.findall(_harness_text(module)):
            if not (ROOT / page).is_file() or anchor not in anchors(ROOT / page):
                broken.append(f"{module.relative_to(ROOT)}: {page}#{anchor}")
    assert not broken, f"links to sections that do not exist: {broken}"


def test_the_docs_and_the_code_cite_no_file_outside_the_repository():
    """The docs and the code are the users'; the notes of the people building the project are not, and are never
    cited: a definition the code follows is docs/concepts.md's or docs/architecture.md's."""
    code = [p for folder in ("harness", "benchmarks", "tests", "experiments") for p in (ROOT / folder).rglob("*.py")]
    cited = [
        f"{path.relative_to(ROOT)}: {word}"
        for path in [
            README,
            ROOT / "pyproject.toml",
            *sorted(p for p in (ROOT / "docs").rglob("*") if p.is_file() and p.suffix in (".md", ".py")),
            *sorted(p for p in code if p != Path(__file__).resolve()),
        ]
        for word in ("DESIGN" + ".md", "STYLE" + ".md", "../" + "shared")
        if word in path.read_text()
    ]
    assert not cited, cited


SET_WORDS = (
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|"
    "fifteenth|sixteenth"
)


def test_user_pages_state_todays_rule_and_leave_the_sets_to_the_evidence_pages():
    """A user page states the rule and today's figure with a link; the sets a figure came from (the sixth set, set A)
    are the evidence pages' (docs/evidence/), and no harness comment names one either."""
    named = re.compile(rf"\b({SET_WORDS}) sets?\b|\bset [AB]\b|\b({SET_WORDS})-set\b", flags=re.I)
    found = [
        f"{path.relative_to(ROOT)}: {m.group(0)}"
        for path in [README, *sorted((ROOT / "docs").glob("*.md"))]
        for m in named.finditer(path.read_text())
    ]
    found += [
        f"{path.relative_to(ROOT)}: {m.group(0)}"
        for path in sorted((ROOT / "harness" / "scalegate").rglob("*.py"))
        for m in named.finditer(path.read_text())
    ]
    assert not found, f"a measurement set named outside docs/evidence/: {found}"
