"""One self-contained HTML page: Plotly's bundled JavaScript once, the data as one JSON blob, the page's own script.

Why this shape, for ``history report`` (1,000 nightlies x 300 series) and ``scalegate report``:

- offline: the page is opened from shared storage or a CI artifact, often with no network, so nothing comes from
  a CDN; plotly.js (bundled by plotly.py, ~4.8 MB) is inlined once per page, not once per figure as
  ``fig.to_html`` per figure would (300 figures would be 1.4 GB);
- small and fast to open: the figures are not serialised as Plotly JSON (one figure of 1,000 points with its
  hover text is ~100 KB, 300 of them 30 MB); the page carries the numbers once, compactly (``compact``: 4
  significant digits as integers of one scale per series), and its script builds each figure in the browser
  when its card scrolls into view or a filter shows it;
- the drawing is Plotly's (zoom, pan, hover, export); the script only turns the blob into traces and keeps
  the filters.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
from pathlib import Path
from typing import Any, Sequence

from scalegate.contract import atomic
from scalegate.contract.errors import ScalegateError

HERE = Path(__file__).parent
DIGITS = 4  # significant digits kept per value: 0.01% of the series' largest, far below any effect that counts


def plotly_js() -> str:
    """plotly.js as plotly.py bundles it; a missing plotly is bad input with a HINT, not a traceback."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise ScalegateError(
            "the interactive page needs plotly, which is not installed in this environment",
            "pip install -e '.[report]' (./setup.sh installs it), or pass --static for the matplotlib PNG page",
        ) from None
    return get_plotlyjs()


def compact(values: Sequence[float], digits: int = DIGITS) -> dict[str, Any]:
    """Values as ``{"q": scale, "v": integers}`` (value = integer * scale, ``null`` where not finite): about 5
    characters a point where repr() takes 18."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    top = max(finite, default=0.0)
    q = 10.0 ** (math.floor(math.log10(top)) - (digits - 1)) if top > 0 else 1.0
    return {"q": q, "v": [round(v / q) if math.isfinite(v) else None for v in values]}


def ranges(indexes: Sequence[int]) -> list[list[int]]:
    """Ascending integers as ``[start, length]`` runs: a series present in every run is one pair."""
    out: list[list[int]] = []
    for i in indexes:
        if out and out[-1][0] + out[-1][1] == i:
            out[-1][1] += 1
        else:
            out.append([i, 1])
    return out


def finite(data: Any) -> Any:
    """The blob as strict JSON: NaN and infinities (an effect from a zero median) become null."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def blob(data: Any) -> str:
    """JSON safe inside a <script> element: no '</script>' or '<!--' can end it early."""
    text = json.dumps(finite(data), separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def document(*, title: str, data: Any, script: Path) -> str:
    """The whole page: shared style and script, plotly.js, the data, and the page's own ``script``."""
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return "\n".join(
        [
            "<!doctype html>",
            "<html lang='en'><head><meta charset='utf-8'>",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f"<title>{html.escape(title)}</title>",
            f"<meta name='generator' content='scalegate, {now}'>",
            f"<style>{(HERE / 'style.css').read_text()}</style>",
            f"<script>{plotly_js()}</script>",
            "</head><body><main id='sg-root'><noscript>This page draws its figures with JavaScript.</noscript></main>",
            f"<script type='application/json' id='sg-data'>{blob(data)}</script>",
            f"<script>{(HERE / 'common.js').read_text()}</script>",
            f"<script>{Path(script).read_text()}</script>",
            "</body></html>",
            "",
        ]
    )


def write(path: Path, *, title: str, data: Any, script: Path) -> Path:
    """Write the page atomically (a reader of shared storage never sees half of it); its path."""
    return atomic.write_text(Path(path), document(title=title, data=data, script=script))
