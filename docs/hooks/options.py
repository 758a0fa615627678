"""mkdocs hook: write docs/options.md from the code's own option declarations before every build of the site.

The page is committed too (so it reads on GitHub), and tests/test_docs.py fails when the committed page is not
what ``python -m scalegate.cli.reference`` writes: the reference can drift from ``pytest --help`` in neither place.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def on_pre_build(config, **kwargs) -> None:
    sys.path.insert(0, str(ROOT / "harness"))  # this checkout's scalegate, even where another one is installed
    try:
        from scalegate.cli import reference
    finally:
        sys.path.remove(str(ROOT / "harness"))
    page = Path(config["docs_dir"]) / "options.md"
    text = reference.markdown()
    if not page.exists() or page.read_text() != text:
        page.write_text(text)
