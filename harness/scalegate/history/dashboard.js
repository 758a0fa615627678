/* The history page (history/dashboard.py builds its data): the alerts, one card per series, new regressions first,
   chips that filter, and each card's Plotly figure drawn when the card first comes near the screen. */
"use strict";
(() => {
  const { data, root, el } = SG;
  const runs = data.runs;
  const series = data.series;
  const CAP = 1500; // points drawn per figure at most; longer series keep each bucket's lowest and highest run
  const KIND_COLORS = { regression: "#d62728", improvement: "#2ca02c", suspicious: "#ff7f0e" };
  const EVENT_COLOR = "#888";
  const cardId = (i) => `series-${i}`;
  const pct = (x) => (x === null ? "±∞" : `${x >= 0 ? "+" : ""}${(100 * x).toFixed(1)}%`);

  root.append(
    el("h1", {}, data.title),
    el(
      "p",
      { class: "sg-meta" },
      `${data.db}: ${runs.id.length} runs, ${series.length} series. ${data.method} Lines: red regression, green `,
      "improvement, orange suspicious (smaller than the minimum effect); solid new, dashed old; black: each ",
      "segment's median; grey dotted: a version change. Hover a point for its run, date and commit; drag to zoom, ",
      "double-click to reset.",
    ),
  );
  banner();
  versionChanges();
  const shown = el("p", { class: "sg-shown" });
  const grid = el("div", { class: "sg-grid" });
  const watch = SG.lazy();
  const cards = series.map(card);
  const facets = [
    { key: "cluster", label: "cluster" },
    { key: "hardware", label: "hardware" },
    { key: "strategy", label: "strategy" },
    { key: "model", label: "model" },
    { key: "topology", label: "topology" },
    { key: "preset", label: "preset" },
    { key: "scaling", label: "scaling" },
    { key: "metric", label: "metric" },
    { key: "verdict", label: "verdict", order: data.verdicts },
  ];
  update(SG.filters(root, series, facets, update, "case"));
  grid.append(...cards);
  root.append(shown, grid);
  if (!series.length) {
    grid.append(el("p", {}, "No checked metric in this history yet."));
    SG.ready();
  }

  function update(match) {
    let n = 0;
    series.forEach((s, i) => {
      const on = match(s);
      cards[i].hidden = !on;
      n += on;
    });
    shown.textContent = `${n} of ${series.length} series shown`;
    shown.dataset.shown = String(n);
  }

  function banner() {
    const failing = series.map((s, i) => [s, i]).filter(([s]) => s.verdict === "new regression");
    if (!failing.length) {
      root.append(el("div", { class: "sg-banner" }, "No new regression."));
      return;
    }
    const commands = (a) => [
      el("div", {}, "reproduce on a PR gate: ", SG.copyable(a.reproduce)),
      ...(a.bisect.length
        ? a.bisect.map((b) => el("div", {}, "then bisect: ", SG.copyable(b)))
        : [el("div", {}, "no release to bisect: CUDA and NCCL come with torch's build")]),
    ];
    root.append(
      el(
        "div",
        { class: "sg-banner bad" },
        el("b", {}, `${failing.length} new regression(s)`),
        el("ul", {}, failing.map(([s, i]) => el("li", {}, el("a", { href: `#${cardId(i)}` }, `${s.case} ${s.metric}`), ` [${s.machine}]`))),
        el("div", {}, "Alerts: what to run next"),
        el("ul", { class: "sg-alerts" }, data.alerts.map((a) => el("li", {}, `${a.case} [${a.machine}] ${a.metrics.join(", ")} regressed at ${a.cause}`, commands(a)))),
      ),
    );
  }

  function versionChanges() {
    if (!data.version_changes.length) return;
    root.append(
      el("details", { class: "sg-meta" }, el("summary", {}, `${data.version_changes.length} version change(s) in the history`),
        el("ul", {}, data.version_changes.map((t) => el("li", {}, t)))),
    );
  }

  function card(s, i) {
    const plot = el("div", { class: "sg-plot" });
    const changes = s.changes.slice().reverse();
    const node = el(
      "section",
      { class: `sg-card${s.verdict === "new regression" ? " failed" : ""}`, id: cardId(i), "data-case": s.case, "data-metric": s.metric },
      el("h3", {}, el("span", {}, s.case), el("span", { class: "sg-sub" }, s.metric), SG.badge(s.verdict), el("span", { class: "sg-sub" }, s.machine)),
      s.quarantined ? el("div", { class: "sg-change" }, `quarantined (reported, not failing): ${s.quarantined}`) : null,
      changes.slice(0, 3).map((c) => el("div", { class: "sg-change" }, c.text, c.reproduce ? el("div", {}, SG.copyable(c.reproduce)) : null, c.bisect.map((b) => el("div", {}, SG.copyable(b))))),
      changes.length > 3 ? el("div", { class: "sg-change" }, `and ${changes.length - 3} earlier change point(s)`) : null,
      changes.length ? null : el("div", { class: "sg-change" }, `${s.v.v.length} runs, min effect ${Math.round(100 * s.min_effect)}%`),
      plot,
    );
    watch(plot, () => draw(s, plot));
    return node;
  }

  // Each bucket's lowest and highest point, and both sides of every change point: a drop stays a drop.
  function decimate(ys, cap, cuts) {
    const keep = new Set([0, ys.length - 1]);
    for (const c of cuts) keep.add(c - 1).add(c);
    const size = (2 * ys.length) / cap;
    for (let start = 0; start < ys.length; start += size) {
      let lo = -1;
      let hi = -1;
      for (let i = Math.floor(start); i < Math.min(ys.length, Math.floor(start + size)); i++) {
        if (ys[i] === null) continue;
        if (lo < 0 || ys[i] < ys[lo]) lo = i;
        if (hi < 0 || ys[i] > ys[hi]) hi = i;
      }
      if (lo >= 0) keep.add(lo).add(hi);
    }
    return [...keep].sort((a, b) => a - b);
  }

  function draw(s, node) {
    const ys = SG.expand(s.v);
    const at = SG.indexes(s.runs);
    const n = ys.length;
    const xs = n > CAP ? decimate(ys, CAP, s.changes.map((c) => c.i)) : ys.map((_, i) => i);
    const trace = {
      type: "scatter",
      mode: n > 300 ? "lines" : "lines+markers", // a thousand SVG markers per figure cost more than they show
      x: xs,
      y: xs.map((i) => ys[i]),
      customdata: xs.map((i) => [runs.id[at[i]], runs.date[at[i]], runs.commit[at[i]]]),
      hovertemplate: `<b>%{y:.4g}</b> ${s.unit}<br>run %{customdata[0]}<br>%{customdata[1]}<br>commit %{customdata[2]}<extra></extra>`,
      line: { color: "#1f77b4", width: 1 },
      marker: { size: 5 },
    };
    const edges = [0, ...s.changes.map((c) => c.i), n];
    const shapes = s.medians.map((m, k) => ({
      type: "line", x0: edges[k] - 0.3, x1: edges[k + 1] - 0.7, y0: m * s.v.q, y1: m * s.v.q,
      line: { color: "#000", width: 1.5 }, opacity: 0.7,
    }));
    const annotations = [];
    for (const e of s.events) {
      shapes.push({ type: "line", yref: "paper", x0: e.i - 0.5, x1: e.i - 0.5, y0: 0, y1: 1, line: { color: EVENT_COLOR, width: 1.5, dash: "dot" } });
      const late = e.i > 0.7 * n;
      annotations.push({ x: e.i - 0.5, y: 0, yref: "paper", xanchor: late ? "right" : "left", yanchor: "bottom", showarrow: false, text: e.text, font: { color: "#555", size: 10 } });
    }
    for (const c of s.changes) {
      const color = KIND_COLORS[c.kind] || "#555";
      shapes.push({ type: "line", yref: "paper", x0: c.i - 0.5, x1: c.i - 0.5, y0: 0, y1: 1, line: { color, width: 2, dash: c.new ? "solid" : "dash" } });
      const late = c.i > 0.7 * n; // a label near the right edge goes left of its line, inside the plot
      annotations.push({ x: c.i - 0.5, y: 1, yref: "paper", xanchor: late ? "right" : "left", yanchor: "top", showarrow: false, text: `${c.kind} ${pct(c.effect)}`, font: { color, size: 10 } });
    }
    const layout = SG.layout({ shapes, annotations, xaxis: SG.axis("run (oldest first)", { range: [-0.02 * n - 0.5, 1.02 * n - 0.5] }), yaxis: SG.axis(s.unit, range(ys, s.min_effect)) });
    return Plotly.newPlot(node, [trace], layout, SG.CONFIG);
  }

  // At least ± the minimum effect around the median, as the static page: noise must not look like a cliff.
  function range(ys, minEffect) {
    const finite = ys.filter((y) => y !== null).sort((a, b) => a - b);
    if (!finite.length) return {};
    const mid = finite[Math.floor(finite.length / 2)];
    if (mid === 0) return {};
    const pad = Math.abs(mid) * minEffect;
    const low = Math.min(finite[0], mid - pad);
    const high = Math.max(finite[finite.length - 1], mid + pad);
    return { range: [low - 0.06 * (high - low), high + 0.06 * (high - low)] };
  }
})();
