"""The interactive pages: the history dashboard (``history report``) and the run report (``report``'s index.html).

What they hold is checked from the page's own data blob; what a person sees is checked in a real headless
Chromium driven over the DevTools protocol (benchmarks/browser.py): the page draws, a filter chip narrows what is
shown, the real mouse over a point brings up Plotly's hover naming the run's commit, and a screenshot is kept
as the test's artifact (``tmp_path``, kept by pytest for the last runs) and checked for its colours.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

from scalegate.page import build
from scalegate.page.facets import split_case_id
from tests import browser
from tests.runs import add_all, run, series_runs, write_run
from tests.test_cli import make_case

MAX_SMALL_PAGE = 5.5e6  # plotly.js (~4.8 MB) and a small blob: nothing inlined twice


def blob(page: Path) -> dict:
    text = page.read_text()
    found = re.search(r"<script type='application/json' id='sg-data'>(.*?)</script>", text, re.S)
    assert found, "the page has no data blob"
    return json.loads(found.group(1))


def history_page(tmp_path: Path, *extra: str) -> Path:
    db = tmp_path / "h.sqlite"
    add_all(db, series_runs(tmp_path, 20, slow_from=16, grow_from=9))
    done = run("history", "report", "--db", db, "--out", tmp_path / "page", "--baseline-dir", tmp_path, *extra)
    assert done.returncode == 0, done.stderr
    return tmp_path / "page" / "index.html"


def test_the_history_page_is_one_offline_file_with_new_regressions_first(tmp_path):
    page = history_page(tmp_path)
    text = page.read_text()
    assert page.stat().st_size < MAX_SMALL_PAGE and text.count("* plotly.js v") == 1  # inlined once, not per figure
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=['\"]?https?:", text), "the page must need no network"
    assert not list(page.parent.glob("*.png")), "PNGs are the --static page's"
    data = blob(page)
    assert len(data["series"]) == 10 and len(data["runs"]["id"]) == 20
    first = data["series"][:3]
    assert [s["verdict"] for s in first] == ["new regression"] * 3 and {s["case_id"] for s in first} == {"ddp-cnn-1x2"}
    assert {s["strategy"] for s in data["series"]} == {"ddp", "fsdp"} and {s["topology"] for s in first} == {"1x2"}
    change = first[0]["changes"][0]
    assert change["bisect"] == ["python -m scalegate bisect commit15 commit16 -k ddp-cnn-1x2"] and change["new"]
    assert change["reproduce"] == "git checkout commit16 && python -m scalegate gate --base commit15 -k ddp-cnn-1x2"
    assert data["alerts"][0]["bisect"] == change["bisect"] and first[0]["cluster"] == "(none)"
    memory = next(s for s in data["series"] if s["case_id"] == "fsdp-cnn-1x2" and s["metric"] == "peak_memory_bytes")
    assert memory["verdict"] == "regression" and memory["unit"] == "peak memory (MiB)"
    values = [v * memory["v"]["q"] for v in memory["v"]["v"]]
    assert 380 < values[0] < 420 and 450 < values[-1] < 500  # MiB, back from the compact integers
    assert data["runs"]["commit"][memory["runs"][0][0] + 16] == "commit16"


def test_the_static_page_stays_behind_its_flag(tmp_path):
    page = history_page(tmp_path, "--static")
    assert len(list(page.parent.glob("*.png"))) == 10 and "sg-data" not in page.read_text()


def test_an_empty_history_or_a_missing_plotly_is_bad_input_with_a_hint(tmp_path, monkeypatch):
    from scalegate.history import store

    with store.connect(tmp_path / "empty.sqlite", create=True):
        pass
    done = run("history", "report", "--db", tmp_path / "empty.sqlite", "--out", tmp_path / "page")
    assert done.returncode == 2 and "holds no runs" in done.stderr and "HINT: add runs first" in done.stderr
    monkeypatch.setitem(sys.modules, "plotly.offline", None)  # as if plotly were not installed
    add_all(tmp_path / "h.sqlite", series_runs(tmp_path, 3))
    done = run("history", "report", "--db", tmp_path / "h.sqlite", "--out", tmp_path / "page")
    assert done.returncode == 2 and "needs plotly" in done.stderr and "--static" in done.stderr
    assert "Traceback" not in done.stderr


def test_compact_values_and_case_ids_come_back_as_they_were():
    values = [0.8123456, float("nan"), 401.5e6 / 2**20, 0.0]
    c = build.compact(values)
    assert c["v"][1] is None and abs(c["v"][2] * c["q"] - values[2]) < 0.05 and c["v"][3] == 0
    assert build.ranges([0, 1, 2, 5, 6]) == [[0, 3], [5, 2]]
    assert "</script>" not in build.blob({"x": "</script><!--"})
    known = ["deepspeed-zero2", "fsdp", "fsdp-tp", "ddp"]
    assert split_case_id("deepspeed-zero2-cnn-1x2", known) == {
        "strategy": "deepspeed-zero2",
        "model": "cnn",
        "topology": "1x2",
        "scaling": "weak",
    }
    assert split_case_id("fsdp-tp-hf:gpt2-2x2-strong", known)["model"] == "hf:gpt2"
    assert split_case_id("mine-mlp-1x2", known)["strategy"] == "mine"


# JavaScript run in the page: the centre of a chip, and where a drawn figure's point is on the screen.
CENTER = """(() => {{ const r = document.querySelector({css!r}).getBoundingClientRect();
  return [r.left + r.width / 2, r.top + r.height / 2]; }})()"""
POINT = """(() => {{ const gd = document.querySelector({css!r}); gd.scrollIntoView({{block: "center"}});
  const t = gd._fullData[{trace}], L = gd._fullLayout, r = gd.getBoundingClientRect();
  const top = t.type === "bar" ? t.y[{i}] / 2 : t.y[{i}];  // a bar's middle, a point's centre
  const x = L.xaxis.d2p(t.x[{i}]) + L._size.l + r.left, y = L.yaxis.d2p(top) + L._size.t + r.top;
  return [x, y, {{x: t.x[{i}], custom: t.customdata ? t.customdata[{i}] : null}}]; }})()"""
VISIBLE = "[...document.querySelectorAll({css!r})].filter(n => !n.closest('[hidden]')).length"


def _hover(page: browser.Chromium, css: str, trace: int, i: int) -> tuple[str, object]:
    x, y, what = page.js(POINT.format(css=css, trace=trace, i=i))
    page.mouse_move(x - 3, y - 3)  # Plotly's hover follows the mouse: arrive at the point, not jump onto it
    page.mouse_move(x, y)
    hover = f"{css} .hoverlayer .hovertext"
    return page.wait_for(f"document.querySelector({hover!r})?.textContent", timeout_s=10), what


def _colours(png: Path) -> tuple[int, int]:
    import matplotlib.image

    pixels = (matplotlib.image.imread(png)[..., :3] * 255).astype(np.int32).reshape(-1, 3)
    distinct = len(np.unique(pixels[:, 0] << 16 | pixels[:, 1] << 8 | pixels[:, 2]))
    red = int(np.all(np.abs(pixels - (214, 39, 40)) < 30, axis=1).sum())  # a regression's line, badge, banner
    return distinct, red


def test_the_history_page_filters_hovers_and_draws_in_a_real_browser(tmp_path):
    path = browser.require()
    page_file = history_page(tmp_path)
    with browser.Chromium(path, width=1280, height=1000) as page:
        page.open(page_file.as_uri())
        page.wait_for("document.body.dataset.ready")
        assert page.js("document.querySelector('.sg-shown').dataset.shown") == "10"
        assert page.js(VISIBLE.format(css=".sg-card")) == 10
        text, point = _hover(page, "#series-0 .sg-plot", 0, 17)
        assert point["custom"][2] == "commit17" and "commit commit17" in text and "run nightly-17" in text, text
        page.screenshot(tmp_path / "history-hover.png")
        page.click(*page.js(CENTER.format(css=".sg-facet[data-facet=metric] .sg-chip[data-value=efficiency]")))
        page.wait_for("document.querySelector('.sg-shown').dataset.shown === '2'")
        assert page.js(VISIBLE.format(css=".sg-card")) == 2
        assert page.js("[...document.querySelectorAll('.sg-card:not([hidden])')].map(c => c.dataset.metric)") == [
            "efficiency",
            "efficiency",
        ]
        page.click(*page.js(CENTER.format(css=".sg-facet[data-facet=verdict] .sg-chip[data-value='no change']")))
        page.wait_for("document.querySelector('.sg-shown').dataset.shown === '1'")  # fsdp's efficiency
        page.wait_for(f"{VISIBLE.format(css='.sg-card .main-svg')} >= 1")  # drawn as it came into view
        page.screenshot(tmp_path / "history-filtered.png")
    distinct, red = _colours(tmp_path / "history-hover.png")
    assert distinct > 300 and red > 500, f"{distinct} colours, {red} red pixels: the regression is not drawn"


def test_the_run_report_page_shows_the_ab_table_and_filters_its_figures(tmp_path):
    path = browser.require()
    cases = [
        make_case(bytes_per_step=10e6),
        make_case("fsdp-cnn-1x2", step_s=0.05, bytes_per_step=12e6),
        make_case("single-cnn-1x1", world=1, step_s=0.021),
    ]
    head = write_run(tmp_path / "run", *cases)
    base = [make_case(c["case_id"], world=int(c["spec"]["topology"].split("x")[1])) for c in cases]  # the 0.7 level
    write_run(head / "base", *base)
    (head / "base" / "commit.json").write_text(json.dumps({"ref": "origin/main", "commit": "0123456789abcdef"}))
    done = run("report", head, "--out", tmp_path / "report", "--baseline-dir", tmp_path / "none")
    assert done.returncode == 0, done.stderr
    index = tmp_path / "report" / "index.html"
    data = blob(index)
    assert data["against"] == "origin/main (0123456789ab) (A/B)"
    assert "verdicts against origin/main (0123456789ab) (A/B)" in (tmp_path / "report" / "report.md").read_text()
    assert [c["case"] for c in data["cases"]] == ["ddp-cnn-1x2", "fsdp-cnn-1x2", "single-cnn-1x1"]
    with browser.Chromium(path, width=1280, height=1400) as page:
        page.open(index.as_uri())
        page.wait_for("document.body.dataset.ready")
        verdicts, ledgers = ".sg-table:not([data-table=ledger]) tbody tr", "[data-table=ledger] tbody tr"
        assert page.js(f"document.querySelectorAll({verdicts!r}).length") == 3
        assert page.js(f"document.querySelectorAll({ledgers!r}).length") == 3  # a case without a ledger says so
        figures = page.js("[...document.querySelectorAll('[data-figure]')].map(n => n.dataset.figure)")
        assert figures == ["speedup", "efficiency", "memory", "bytes"], figures
        text, case = _hover(page, "[data-figure=efficiency]", 0, 1)
        assert case["x"] == "fsdp-cnn-1x2" and "fsdp-cnn-1x2: efficiency" in text, text
        page.click(*page.js(CENTER.format(css=".sg-facet[data-facet=strategy] .sg-chip[data-value=fsdp]")))
        page.wait_for("document.querySelector('.sg-shown').dataset.shown === '1'")
        assert page.js(VISIBLE.format(css=verdicts)) == 1 and page.js(VISIBLE.format(css=ledgers)) == 1
        assert page.js("document.querySelector('[data-figure=efficiency]').data[0].x") == ["fsdp-cnn-1x2"]
        page.screenshot(tmp_path / "report.png", full_page=True)
    distinct, _ = _colours(tmp_path / "report.png")
    assert distinct > 200, f"only {distinct} colours: the report drew blank"
