"""A real headless Chromium driven over the Chrome DevTools Protocol, with nothing but the standard library.

    python -m benchmarks.browser results/latest/report/index.html --out report.png   # a page's whole screenshot

Why a pipe: ``--remote-debugging-pipe`` makes Chromium read protocol commands from its fd 3 and write replies
and events to its fd 4, each message JSON ended by a NUL byte. No port, no websocket client, no driver package
(Playwright and Selenium download browsers of their own, which this project's machines cannot fetch): the
Debian ``chromium`` that .ci/run installs is all it needs. benchmarks/dashboard_scale.py and the tests of the
interactive pages (history dashboard, run report; tests/browser.py) load a page, run JavaScript in it, move the real
mouse, and take screenshots through this.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find() -> str | None:
    return next(filter(None, map(shutil.which, BROWSERS)), None)


class BrowserError(RuntimeError):
    pass


class Chromium:
    """One headless browser and one page (tab) in it; ``with Chromium(path) as page: page.open(url)``."""

    def __init__(self, browser: str, *, width: int = 1280, height: int = 1000, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="scalegate-chromium-")
        to_browser, self._out = os.pipe()  # we write commands into _out; Chromium reads them at its fd 3
        self._in, from_browser = os.pipe()  # Chromium writes at its fd 4; we read _in
        # Out of the way of 3 and 4, so that placing the ends there in the child cannot clobber one another.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser, from_browser)]
        for fd in (to_browser, from_browser):
            os.close(fd)

        def place() -> None:
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        argv = [
            browser,
            "--headless",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-pipe",
            f"--user-data-dir={self.profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self.proc = subprocess.Popen(
            argv, preexec_fn=place, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        for fd in high:
            os.close(fd)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""
        try:
            page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
            self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
            self.call("Page.enable")
            self.call("Runtime.enable")
            self.call(
                "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
            )
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in (self._out, self._in):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise BrowserError(f"no answer from Chromium within {self.timeout_s} s")
            chunk = os.read(self._in, 1 << 16)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
                raise BrowserError(f"Chromium closed its pipe (exit {self.proc.poll()}): {err}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One protocol command, answered; the events that arrive meanwhile are kept in ``events``."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + self.timeout_s
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._read(deadline))

    def js(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a Promise is awaited); a thrown error is raised."""
        done = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in done:
            details = done["exceptionDetails"]
            raise BrowserError(f"{expression[:80]}...: {details.get('exception', {}).get('description', details)}")
        return done["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0) -> Any:
        """Poll a JavaScript expression until it is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.js(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"still false after {timeout_s} s: {expression}")
            time.sleep(0.05)

    def mouse_move(self, x: float, y: float) -> None:
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    def click(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def screenshot(self, path: Path, *, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        Path(path).write_bytes(base64.b64decode(self.call("Page.captureScreenshot", **params)["data"]))
        return Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a page's whole screenshot, taken in headless Chromium")
    parser.add_argument("page", type=Path, help="an HTML file (a run's report/index.html, a history's index.html)")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args(argv)
    path = find()
    if path is None:
        print(f"error: none of {', '.join(BROWSERS)} is on PATH\nHINT: apt-get install -y chromium", file=sys.stderr)
        return 2
    if not args.page.is_file():
        print(
            f"error: {args.page} is not a file\nHINT: pass a page such as results/latest/report/index.html",
            file=sys.stderr,
        )
        return 2
    with Chromium(path, width=args.width, height=args.height) as page:
        page.open(args.page.resolve().as_uri())
        page.wait_for("document.readyState === 'complete'")
        print(page.screenshot(args.out, full_page=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
