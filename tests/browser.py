"""The headless Chromium of benchmarks/browser.py, for the tests: a test needs one where CI installed it."""

from __future__ import annotations

import os

import pytest

from benchmarks.browser import BROWSERS, BrowserError, Chromium, find

__all__ = ["BROWSERS", "BrowserError", "Chromium", "find", "require"]


def require() -> str:
    """The browser's path; a test fails without one where CI installed it (SCALEGATE_REQUIRE_BROWSER), else skips."""
    browser = find()
    if browser is None and os.environ.get("SCALEGATE_REQUIRE_BROWSER"):
        pytest.fail(f"SCALEGATE_REQUIRE_BROWSER is set but none of {', '.join(BROWSERS)} is on PATH")
    if browser is None:
        pytest.skip(
            f"no headless browser ({', '.join(BROWSERS)}) on PATH: apt-get install -y chromium (.ci/run does this in CI)"
        )
    return browser
