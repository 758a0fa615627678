/* The run report (report/run_page.py builds its data): the verdict table and the run's figures; chips filter
   both, and every figure is redrawn from the cases the filters leave. */
"use strict";
(() => {
  const { data, root, el, num } = SG;
  const cases = data.cases;
  const pct = (x, digits = 1) => (x === null || x === undefined ? "–" : `${x >= 0 && digits ? "+" : ""}${(100 * x).toFixed(digits)}%`);
  const fixed = (x, d) => (x === null || x === undefined ? "–" : x.toFixed(d));
  const color = (v) => SG.VERDICT_COLORS[v] || "#1f77b4";

  const counts = {};
  for (const c of cases) counts[c.verdict] = (counts[c.verdict] || 0) + 1;
  const failed = cases.filter((c) => c.failed);
  root.append(
    el("h1", {}, data.title),
    el("p", { class: "sg-meta" }, `profile ${data.profile} (${data.cluster}); commit ${data.commit}; against ${data.against}. `,
      "Hover a bar or point for its case and value; drag to zoom, double-click to reset."),
    el("div", { class: `sg-banner${failed.length ? " bad" : ""}` }, el("b", {}, failed.length ? "FAIL" : "PASS"), " — ",
      data.verdicts.filter((v) => counts[v]).map((v) => `${counts[v]} ${v}`).join(", ") || "no case"),
  );
  const facets = ["strategy", "model", "topology", "preset", "verdict"].map((key) => ({ key, label: key, order: key === "verdict" ? data.verdicts : null }));
  const shown = el("p", { class: "sg-shown" });
  const body = el("tbody");
  const COLUMNS = [
    ["case", (c) => el("code", {}, c.key)],
    ["W", (c) => c.world ?? "–", true],
    ["samples/s", (c) => fixed(c.throughput, 1), true],
    ["MFU", (c) => pct(c.mfu, 0).replace("+", ""), true],
    ["efficiency (95% CI)", (c) => `${fixed(c.efficiency, 3)}${c.low === null ? "" : ` (${fixed(c.low, 3)}–${fixed(c.high, 3)})`}`, true],
    ["local eff", (c) => fixed(c.local, 3), true],
    ["gated on", (c) => c.gate || "–"],
    ["baseline", (c) => baseline(c), true],
    ["delta", (c) => pct(c.delta), true],
    ["launches", (c) => c.launches, true],
    ["peak MiB/rank", (c) => fixed(c.peak_mib, 0), true],
    ["MB/step", (c) => fixed(c.mb_per_step, 2), true],
    ["verdict", (c) => el("span", {}, SG.badge(c.verdict), c.quarantined ? " quarantined" : "")],
    ["note", (c) => note(c.message || (c.quarantined ? `quarantined: ${c.quarantined}` : ""))],
  ];
  const rows = cases.map((c) => el("tr", { "data-case": c.case }, COLUMNS.map(([name, cell, isNum]) => el("td", { class: isNum ? "num" : name === "note" ? "note" : null }, cell(c)))));
  body.append(...rows);
  const figures = [
    ["speedup", "Speedup against world size (dashed: ideal, speedup = W)", speedup],
    ["efficiency", "Efficiency (bar, 95% CI; black: baseline) and local efficiency (diamond; dotted: its baseline)", efficiency],
    ["memory", "Peak memory per rank", memory],
    ["bytes", "Bytes on the wire per step (whole job)", bytes],
    ["mfu", "Achieved TFLOP/s per device (label: MFU against the peak)", mfu],
    ["breakdown", "Where each rank's step went: compute and exposed communication (median step)", breakdown],
  ].filter(([, , fig]) => fig(cases));
  const nodes = figures.map(([name, title]) => el("div", { class: "sg-plot", "data-figure": name }));
  const mb = (x) => fixed(x / 1e6, 2);
  const LEDGER = ["case", "collective", "calls a step", "MB a step", "MB within a node", "MB across nodes", "exact verdict"];
  const ledgerRows = cases.flatMap((c) => (c.ledger.length ? c.ledger : [null]).map((r, i) => el("tr", { "data-case": c.case }, [
    el("td", {}, i ? "" : el("code", {}, c.key)),
    el("td", {}, r ? r.what : c.ledger_note || "no collective"),
    el("td", { class: "num" }, r ? `${r.calls}${r.calls_range ? ` (${r.calls_range.join("–")})` : ""}` : "–"),
    el("td", { class: "num" }, r ? mb(r.bytes) : "–"),
    el("td", { class: "num" }, r ? mb(r.intra) : "–"),
    el("td", { class: "num" }, r ? mb(r.cross) : "–"),
    el("td", { class: "note" }, i ? "" : exact(c.collectives || {})),
  ])));
  const match = SG.filters(root, cases, facets, update, "case");
  root.append(
    shown,
    el("h2", {}, data.against.endsWith("(A/B)") ? "A/B verdicts: head against the base commit" : "Verdicts"),
    el("table", { class: "sg-table" }, el("thead", {}, el("tr", {}, COLUMNS.map(([name]) => el("th", {}, name)))), body),
    el("h2", {}, "Collectives: the ledger of the measured steps"),
    el("table", { class: "sg-table", "data-table": "ledger" }, el("thead", {}, el("tr", {}, LEDGER.map((name) => el("th", {}, name)))), el("tbody", {}, ledgerRows)),
    el("div", { class: "sg-grid" }, figures.map(([name, title], i) => el("section", { class: "sg-card" }, el("h3", {}, title), nodes[i]))),
    data.notes ? el("pre", { class: "sg-pre" }, data.notes) : null,
  );
  update(match).then(SG.ready);

  function note(text) {  // the judge's whole sentence on hover, its start in the table
    return text.length > 120 ? el("span", { title: text }, `${text.slice(0, 117)}…`) : text;
  }

  function exact(found) {  // the judge's state, its lines on hover
    if (!found.state || found.state === "nothing to compare") return "–";
    return el("span", { title: (found.lines || []).join("\n") }, `${found.state}${found.against ? ` (against ${found.against})` : ""}`);
  }

  function baseline(c) {
    const gated = c.gate === "local" || c.gate === "a/b" ? c.baseline_local : c.baseline;
    if (gated === null || gated === undefined) return "–";
    return `${gated.toFixed(3)}${c.tolerance === null ? "" : ` ±${Math.round(100 * c.tolerance)}%`}${c.gate === "a/b" ? " (base commit)" : ""}`;
  }

  function update(match) {
    const on = cases.map(match);
    rows.forEach((row, i) => (row.hidden = !on[i]));
    const kept = new Set(cases.filter((_, i) => on[i]).map((c) => c.case));
    ledgerRows.forEach((row) => (row.hidden = !kept.has(row.dataset.case)));
    const picked = cases.filter((_, i) => on[i]);
    shown.textContent = `${picked.length} of ${cases.length} cases shown`;
    shown.dataset.shown = String(picked.length);
    return Promise.all(figures.map(([, , fig], i) => Plotly.react(nodes[i], ...fig(picked))));
  }

  function bars(list, y, extra = {}) {
    return Object.assign({ type: "bar", x: list.map((c) => c.case), y: list.map(y), hovertemplate: "%{x}: %{y:.4g}<extra></extra>" }, extra);
  }

  function speedup(list) {
    const lines = new Map();
    for (const c of list) {
      if (c.speedup === null || c.speedup === undefined || c.strategy === "single") continue;
      const label = `${c.strategy} ${c.model} (${c.preset})`;
      lines.set(label, [...(lines.get(label) || []), c]);
    }
    if (list === cases && !lines.size) return null;
    const top = Math.max(2, ...list.map((c) => c.world || 0));
    const traces = [{ type: "scatter", mode: "lines", x: [1, top], y: [1, top], line: { dash: "dash", color: "#000", width: 1 }, name: "ideal", hoverinfo: "skip" }];
    for (const [label, points] of [...lines].sort()) {
      const sorted = points.slice().sort((a, b) => a.world - b.world);
      const start = sorted.some((c) => c.world === 1) ? [] : [{ world: 1, speedup: 1, case: "single-process reference" }];
      const all = [...start, ...sorted];
      traces.push({ type: "scatter", mode: "lines+markers", name: label, x: all.map((c) => c.world), y: all.map((c) => c.speedup), text: all.map((c) => c.case), hovertemplate: "%{text}<br>W %{x}: speedup %{y:.3f}<extra></extra>" });
    }
    return [traces, SG.layout({ showlegend: true, legend: { font: { size: 10 } }, xaxis: SG.axis("world size W (devices)", { dtick: 1 }), yaxis: SG.axis("speedup over 1x1") })];
  }

  function efficiency(list) {
    if (list === cases && !cases.some((c) => c.efficiency !== null)) return null;
    const withEff = list.filter((c) => c.efficiency !== null);
    const bar = bars(withEff, (c) => c.efficiency, {
      marker: { color: withEff.map((c) => color(c.verdict)) }, opacity: 0.85, name: "efficiency",
      error_y: { type: "data", symmetric: false, array: withEff.map((c) => (c.high ?? c.efficiency) - c.efficiency), arrayminus: withEff.map((c) => c.efficiency - (c.low ?? c.efficiency)), color: "#000" },
      customdata: withEff.map((c) => c.verdict), hovertemplate: "%{x}: efficiency %{y:.3f} (%{customdata})<extra></extra>",
    });
    const marks = (key, symbol, name) => ({ type: "scatter", mode: "markers", name, x: withEff.filter((c) => c[key] !== null).map((c) => c.case), y: withEff.filter((c) => c[key] !== null).map((c) => c[key]), marker: { symbol, color: "#000", size: symbol === "line-ew" ? 26 : 8, line: { width: 2 } }, hovertemplate: `%{x}: ${name} %{y:.3f}<extra></extra>` });
    const traces = [bar, marks("baseline", "line-ew", "baseline efficiency"), marks("local", "diamond", "local efficiency"), marks("baseline_local", "line-ew-open", "baseline local efficiency")];
    return [traces, SG.layout({ bargap: 0.35, xaxis: SG.axis("", { tickangle: -30 }), yaxis: SG.axis("efficiency = speedup / W"), shapes: [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: 1, y1: 1, line: { dash: "dash", width: 1 } }] })];
  }

  function memory(list) {
    const ranks = Math.max(0, ...list.map((c) => c.ranks_mib.length));
    if (list === cases && !ranks) return null;
    const traces = [];
    for (let r = 0; r < ranks; r++) traces.push(bars(list, (c) => c.ranks_mib[r] ?? null, { name: `rank ${r}`, hovertemplate: `%{x} rank ${r}: %{y:.1f} MiB<extra></extra>` }));
    const source = (cases.find((c) => c.memory_source) || {}).memory_source || "memory";
    return [traces, SG.layout({ barmode: "group", showlegend: true, xaxis: SG.axis("", { tickangle: -30 }), yaxis: SG.axis(`peak MiB (${source.split(" ")[0]})`) })];
  }

  function bytes(list) {
    const found = list.filter((c) => c.mb_per_step !== null);
    if (list === cases && !found.length) return null;
    return [[bars(found, (c) => c.mb_per_step, { marker: { color: "#9467bd" }, hovertemplate: "%{x}: %{y:.2f} MB per step<extra></extra>" })], SG.layout({ xaxis: SG.axis("", { tickangle: -30 }), yaxis: SG.axis("MB per step") })];
  }

  function mfu(list) {
    const found = list.filter((c) => c.tflops);
    if (list === cases && !found.length) return null;
    const text = found.map((c) => (c.mfu === null ? "" : pct(c.mfu, 1).replace("+", "")));
    return [[bars(found, (c) => c.tflops, { marker: { color: "#2ca02c" }, text, textposition: "outside", hovertemplate: "%{x}: %{y:.3g} TFLOP/s, MFU %{text}<extra></extra>" })], SG.layout({ xaxis: SG.axis("", { tickangle: -30 }), yaxis: SG.axis("achieved TFLOP/s per device") })];
  }

  function breakdown(list) {
    const parts = list.flatMap((c) => c.breakdown.map(([rank, compute, comm]) => ({ x: `${c.case} r${rank}`, compute, comm })));
    if (list === cases && !parts.length) return null;
    const stack = (key, name, colour) => ({ type: "bar", name, x: parts.map((p) => p.x), y: parts.map((p) => p[key]), marker: { color: colour }, hovertemplate: `%{x}: ${name} %{y:.2f} ms<extra></extra>` });
    return [[stack("compute", "compute (the local step)", "#1f77b4"), stack("comm", "exposed communication", "#d62728")], SG.layout({ barmode: "stack", showlegend: true, xaxis: SG.axis("", { tickangle: -30 }), yaxis: SG.axis("ms per step") })];
  }
})();
