/* scalegate's interactive pages, the part they share (page/build.py puts it before the page's own script): the data
   blob, filter chips, drawing a figure only when it comes near the screen, copy buttons. Plotly does the drawing. */
"use strict";
const SG = (() => {
  const data = JSON.parse(document.getElementById("sg-data").textContent);
  const root = document.getElementById("sg-root");
  root.textContent = "";
  const VERDICT_COLORS = {
    "new regression": "#d62728", regression: "#d62728", regressed: "#d62728", failed: "#d62728",
    improvement: "#2ca02c", improved: "#2ca02c", suspicious: "#ff7f0e", noisy: "#ff7f0e",
    ok: "#1f77b4", "no change": "#555", "insufficient data": "#999", "no-baseline": "#999", "not-meaningful": "#999",
  };
  const CONFIG = { displaylogo: false, displayModeBar: "hover", responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c !== null && c !== undefined && c !== false) node.append(c instanceof Node ? c : String(c));
    }
    return node;
  }

  // build.compact's {q, v} back to numbers, build.ranges' [start, length] pairs back to indexes
  const expand = (c) => c.v.map((x) => (x === null ? null : x * c.q));
  function indexes(pairs) {
    const out = [];
    for (const [start, n] of pairs) for (let i = 0; i < n; i++) out.push(start + i);
    return out;
  }
  const num = (x, digits = 4) => (x === null || x === undefined ? "–" : String(Number(x.toPrecision(digits))));

  /* One row of chips per facet. No chip pressed: the facet does not filter; some pressed: only their values
     (or within a facet, and across facets), plus a text box on `search`. onChange(match) gets the predicate. */
  function filters(container, items, facets, onChange, search) {
    const chosen = Object.fromEntries(facets.map((f) => [f.key, new Set()]));
    let text = "";
    const match = (item) =>
      facets.every((f) => chosen[f.key].size === 0 || chosen[f.key].has(String(item[f.key]))) &&
      (!text || String(item[search]).toLowerCase().includes(text));
    const bar = el("div", { class: "sg-filters" });
    for (const f of facets) {
      const counts = new Map();
      for (const item of items) counts.set(String(item[f.key]), (counts.get(String(item[f.key])) || 0) + 1);
      const values = f.order ? f.order.filter((v) => counts.has(v)) : [...counts.keys()].sort();
      if (values.length < 2) continue; // one value filters nothing
      const row = el("div", { class: "sg-facet", "data-facet": f.key }, el("span", { class: "sg-facet-name" }, f.label));
      for (const value of values) {
        const chip = el("button", { type: "button", class: "sg-chip", "data-value": value, "aria-pressed": "false" });
        chip.append(value, el("span", { class: "sg-count" }, counts.get(value)));
        if (VERDICT_COLORS[value] && f.key === "verdict") chip.style.borderColor = VERDICT_COLORS[value];
        chip.addEventListener("click", () => {
          const on = !chosen[f.key].has(value);
          if (on) chosen[f.key].add(value);
          else chosen[f.key].delete(value);
          chip.setAttribute("aria-pressed", String(on));
          onChange(match);
        });
        row.append(chip);
      }
      bar.append(row);
    }
    const box = el("input", { type: "search", class: "sg-search", placeholder: `${search} contains…` });
    box.addEventListener("input", () => {
      text = box.value.trim().toLowerCase();
      onChange(match);
    });
    bar.append(el("div", { class: "sg-facet" }, el("span", { class: "sg-facet-name" }, "search"), box));
    container.append(bar);
    return match;
  }

  // The page is ready (its first screen drawn): a mark for benchmarks/dashboard_scale.py, an attribute for tests.
  function ready() {
    if (document.body.dataset.ready) return;
    performance.mark("sg-ready");
    document.body.dataset.ready = "1";
  }

  /* Draw each figure once, when it first comes within a screen of the viewport: 300 figures drawn at once take
     seconds, and a reader looks at a few. The first batch's end marks the page ready. */
  function lazy() {
    const drawers = new Map();
    let first = true;
    const observer = new IntersectionObserver(
      (entries) => {
        const drawn = [];
        for (const e of entries) {
          if (!e.isIntersecting || !drawers.has(e.target)) continue;
          observer.unobserve(e.target);
          drawn.push(drawers.get(e.target)());
          drawers.delete(e.target);
        }
        if (first) {
          first = false;
          Promise.all(drawn).then(ready);
        }
      },
      { rootMargin: "100px 0px" }, // the first screen only: each figure drawn ahead delays the page's opening
    );
    return (node, draw) => {
      drawers.set(node, draw);
      observer.observe(node);
    };
  }

  function copyable(text) {
    const code = el("code", {}, text);
    const button = el("button", { type: "button", class: "sg-copy", title: "copy to the clipboard" }, "copy");
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(text);
      } catch (_) {
        const range = document.createRange(); // file:// pages may lack the clipboard API: select, then copy
        range.selectNodeContents(code);
        getSelection().removeAllRanges();
        getSelection().addRange(range);
        document.execCommand("copy");
      }
      button.textContent = "copied";
      setTimeout(() => (button.textContent = "copy"), 1500);
    });
    return el("span", { class: "sg-cmd" }, code, button);
  }

  function badge(verdict) {
    const b = el("span", { class: "sg-badge" }, verdict);
    b.style.background = VERDICT_COLORS[verdict] || "#555";
    return b;
  }

  function axis(title, extra = {}) {
    return Object.assign({ title: { text: title }, gridcolor: "#eee", zeroline: false, automargin: true }, extra);
  }

  function layout(extra = {}) {
    return Object.assign(
      { margin: { l: 60, r: 12, t: 30, b: 40 }, font: { size: 11 }, hovermode: "closest", showlegend: false },
      extra,
    );
  }

  return { data, root, el, expand, indexes, num, filters, ready, lazy, copyable, badge, axis, layout, CONFIG, VERDICT_COLORS };
})();
