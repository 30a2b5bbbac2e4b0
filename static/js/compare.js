// Measured vs simulated: a shipped validation dataset, configuration by configuration.
// GET /api/compare computes everything (rows, the chosen configuration's breakdown, notes and
// timeline); this module draws it. Step = the chosen configuration's index in sweep order.

import { mountMeasureNow } from "./compare_live.js";
import { formatBytes } from "./format.js";
import { react } from "./plot.js";
import { jsonSource, mountView } from "./view.js";

const DEFAULTS = { gpu: "", sweep: "", id: "" };
const LIMITER_COLORS = {
  tensor: "#1d4ed8",
  sfu: "#7c3aed",
  alu: "#0891b2",
  memory: "#059669",
  latency: "#d97706",
  launch: "#6b7280",
  tail: "#d1d5db",
  host: "#9f1239",
};
const SUBSET_COLORS = { fit: "#1d4ed8", holdout: "#ea580c" };
const TILE_DASH = { t0: "solid", t1: "solid", t2: "solid" };
const TILE_COLORS = { t0: "#1d4ed8", t1: "#059669", t2: "#dc2626" };

const $ = (id) => document.getElementById(id);
const form = $("params");

let live = []; // this GPU's live points (compare_live.js), each naming its problem

/** The live points of the chosen configuration's problem (its id without the tile suffix). */
function livePoints() {
  const problem = view.data.chosen.id.replace(/-[^-]+$/, "");
  return live.filter((p) => p.problem === problem);
}

const us = (x) => (x === null || x === undefined ? "–" : `${x.toLocaleString("en-US", { maximumFractionDigits: 1 })} µs`);
const pct = (x) => (x === null || x === undefined ? "–" : `${x >= 0 ? "+" : ""}${x.toFixed(1)}%`);

// The step is the chosen configuration's index: stepping to another one loads its breakdown.
const view = mountView({
  name: "compare",
  defaults: DEFAULTS,
  source: jsonSource("/api/compare"),
  errorFields: false, // the message alone
  loaded(body, { previous }) {
    view.params.gpu = body.dataset.gpu;
    view.params.sweep = body.dataset.sweep === "protocol" ? "" : body.dataset.sweep;
    view.params.id = body.chosen.id;
    form.elements.dataset.value = body.dataset.key;
    if (!previous || previous.dataset.key !== body.dataset.key) {
      fillConfigs();
      renderDataset();
    }
    form.elements.id.value = body.chosen.id;
    return { total: body.rows.length, step: body.rows.findIndex((r) => r.id === body.chosen.id) };
  },
  exports: (body, { url }) => ({ name: `compare-${body.dataset.key.replace(":", "-")}-${body.chosen.id}`, json: url }),
  goto(k, show) {
    if (view.data.rows[k].id === view.data.chosen.id) show(k);
    else choose(view.data.rows[k].id);
  },
  draw: render,
});

function fillConfigs() {
  const sel = $("config-select");
  sel.replaceChildren(
    ...view.data.rows.map((r) => {
      const o = document.createElement("option");
      o.value = r.id;
      o.textContent = `${r.id} (${pct(r.error_pct)})`;
      return o;
    }),
  );
}

function renderDataset() {
  const d = view.data.dataset;
  const strong = document.createElement("strong");
  strong.textContent = "Shipped dataset:";
  const device = document.createElement("span");
  device.className = "dataset-device";
  device.textContent = d.device;
  $("dataset-note").replaceChildren(
    strong,
    " the measured points were measured on ",
    device,
    ` on ${d.date} (torch ${d.torch}, triton ${d.triton}${d.ncu ? `, bytes by Nsight Compute ${d.ncu.replace(/^Version /, "")}` : ""}), not on this machine. flashscope ships them (${d.file}) so the comparison works offline.`,
  );
  const head = d.headline; // the subset the headline figures are of: "all" or "holdout"
  const a = d.summary[head];
  const t = head === "all" ? d.summary.targets : {}; // the targets are set over all rows
  const mark = (ok) => (ok === null || ok === undefined ? "" : ok ? " ✓" : " ✗");
  const fixed = (x, digits = 1) => (x === null || x === undefined ? "–" : x.toFixed(digits));
  const share = (x) => (x === null || x === undefined ? "–" : `${Math.round(x * 100)}%`);
  $("summary-title").textContent = `${d.label[0].toUpperCase()}${d.label.slice(1)}: ${head === "all" ? `all ${a.rows} configurations` : `the held-out half (${a.rows} configurations, nothing fitted on them)`}`;
  const rank = a.ranking;
  const items = [
    [`time MAPE (${head === "all" ? "all" : "held out"})`, `${fixed(a.time.mape_pct)}%${mark(t.time_mape)}`],
    ["time bias (mean error)", pct(a.time.bias_pct)],
    ["within 10%", `${share(a.time.within_10pct)} of configurations`],
    ["worst error", `${pct(a.time.worst_pct)} (${a.time.worst_id})${mark(t.time_worst)}`],
    ["DRAM bytes MAPE", a.dram_bytes.mape_pct === null ? "–" : `${a.dram_bytes.mape_pct.toFixed(1)}%, worst ${pct(a.dram_bytes.worst_pct)}${mark(t.dram_bytes)}`],
    ["L2 bytes MAPE", a.l2_bytes.mape_pct === null ? "–" : `${a.l2_bytes.mape_pct.toFixed(1)}%, worst ${pct(a.l2_bytes.worst_pct)}${mark(t.l2_bytes)}`],
    ["tile ranking (Spearman)", rank.spearman_mean == null ? "– (no problem measured at several tile configurations)" : `${rank.spearman_mean.toFixed(2)}${mark(t.spearman)}${rank.repeat_spearman_mean == null ? "" : `; the GPU's own timing passes agree to ${rank.repeat_spearman_mean.toFixed(2)}`}`],
    ...(a.ranking_candidates && a.ranking_candidates.spearman_mean != null ? [["ranking of the kernels' candidates", `${a.ranking_candidates.spearman_mean.toFixed(2)}${a.ranking_candidates.repeat_spearman_mean == null ? "" : ` (passes agree to ${a.ranking_candidates.repeat_spearman_mean.toFixed(2)})`}`]] : []),
    ["best tiles within 5%", rank.pick_within_5pct == null ? "–" : `${Math.round(rank.pick_within_5pct * 100)}% of problems${mark(t.best_within_5pct)}`],
    ...(a.kernels_alone
      ? [["backward kernels alone (mean error against Nsight Compute)", Object.entries(a.kernels_alone).map(([name, k]) => `${name.replace(/^bwd_/, "")} ${pct(k.bias_pct)}`).join(", ")]]
      : []),
  ];
  $("summary").replaceChildren(
    ...items.flatMap(([k, v]) => {
      const dt = document.createElement("dt");
      dt.textContent = k;
      const dd = document.createElement("dd");
      dd.textContent = v;
      return [dt, dd];
    }),
  );
  renderSubsets(d, fixed, share);
  renderMisses(d.known_misses);
}

/** A table's rows of text cells, the first its header. */
function fillTable(table, head, rows) {
  const tr = (cells, tag) => {
    const row = document.createElement("tr");
    for (const text of cells) {
      const cell = document.createElement(tag);
      cell.textContent = text;
      row.append(cell);
    }
    return row;
  };
  table.replaceChildren(tr(head, "th"), ...rows.map((r) => tr(r, "td")));
}

/** The fit half and the held-out half side by side: the engine was fitted on the first only. */
function renderSubsets(d, fixed, share) {
  const cols = [["fit", d.summary.fit], ["holdout", d.summary.holdout]];
  const line = (name, f) => [name, ...cols.map(([, s]) => f(s))];
  fillTable($("subsets"), ["", ...cols.map(([k, s]) => `${k === "fit" ? "fitted on" : "held out"} (${s.rows})`)], [
    line("time MAPE", (s) => `${fixed(s.time.mape_pct)}%`),
    line("bias", (s) => pct(s.time.bias_pct)),
    line("within 10%", (s) => share(s.time.within_10pct)),
    line("worst", (s) => pct(s.time.worst_pct)),
    line("DRAM bytes MAPE", (s) => (s.dram_bytes.mape_pct == null ? "–" : `${fixed(s.dram_bytes.mape_pct)}%`)),
    line("Spearman", (s) => fixed(s.ranking.spearman_mean, 2)),
    line("best tiles within 5%", (s) => share(s.ranking.pick_within_5pct)),
  ]);
}

/** The classes of held-out configurations still beyond 10%, as the server computed them. */
function renderMisses(misses) {
  const classes = misses.classes;
  $("misses-note").textContent = classes.length
    ? `Classes of the held-out configurations whose time is off by more than ${misses.beyond_pct}% on average, worst first, and the effect the engine lacks for each.`
    : `No class of the held-out configurations is off by more than ${misses.beyond_pct}% on average.`;
  const table = $("misses");
  table.hidden = classes.length === 0;
  fillTable(table, ["class", "rows", "MAPE", "bias"], []);
  for (const c of classes) {
    const row = table.insertRow();
    row.dataset.key = c.key;
    row.title = c.configs;
    for (const text of [c.name, String(c.rows), `${c.mape_pct.toFixed(1)}%`, pct(c.bias_pct)]) row.insertCell().textContent = text;
    const lacks = table.insertRow().insertCell();
    lacks.colSpan = 4;
    lacks.className = "muted lacks";
    lacks.textContent = `lacks: ${c.lacks}`;
  }
}

function renderScatter() {
  const rows = view.data.rows;
  const chosen = view.data.chosen;
  const all = rows.flatMap((r) => [r.measured_us, r.simulated_us]).filter((x) => x > 0);
  const lo = Math.min(...all) * 0.8;
  const hi = Math.max(...all) * 1.25;
  const traces = [
    { x: [lo, hi, hi, lo], y: [lo * 0.9, hi * 0.9, hi * 1.1, lo * 1.1], fill: "toself", mode: "lines", line: { width: 0 }, fillcolor: "rgba(107,114,128,0.15)", name: "±10%", hoverinfo: "skip" },
    { x: [lo, hi], y: [lo, hi], mode: "lines", line: { color: "#111827", dash: "dash" }, name: "y = x", hoverinfo: "skip" },
  ];
  for (const subset of ["fit", "holdout"]) {
    for (const mode of ["fwd", "bwd"]) {
      const rs = rows.filter((r) => r.subset === subset && r.mode === mode && r.measured_us);
      traces.push({
        x: rs.map((r) => r.measured_us),
        y: rs.map((r) => r.simulated_us),
        customdata: rs.map((r) => r.id),
        text: rs.map((r) => `${r.id}<br>${r.tiles}<br>error ${pct(r.error_pct)}`),
        hovertemplate: "%{text}<extra></extra>",
        mode: "markers",
        name: `${mode}, ${subset === "fit" ? "fitted" : "held out"}`,
        marker: { color: SUBSET_COLORS[subset], symbol: mode === "fwd" ? "circle" : "diamond", size: 8, opacity: 0.8 },
      });
    }
  }
  const points = livePoints().filter((p) => p.kernel_us && p.simulated_us);
  if (points.length) {
    traces.push({
      x: points.map((p) => p.kernel_us),
      y: points.map((p) => p.simulated_us),
      text: points.map((p) => `live on ${p.device}: ${p.tile}<br>kernels ${us(p.kernel_us)}, predicted ${us(p.simulated_us)}`),
      hovertemplate: "%{text}<extra></extra>",
      mode: "markers",
      name: "live, this GPU",
      marker: { color: "#16a34a", symbol: "star", size: 13, line: { color: "#14532d", width: 1 } },
    });
  }
  traces.push({
    x: [chosen.measured_us],
    y: [chosen.simulated_us],
    mode: "markers",
    name: "chosen",
    hoverinfo: "skip",
    marker: { color: "rgba(0,0,0,0)", size: 18, line: { color: "#f59e0b", width: 3 } },
  });
  react(
    "scatter",
    traces,
    {
      height: 360,
      xaxis: { type: "log", title: { text: "measured (µs)" }, range: [Math.log10(lo), Math.log10(hi)] },
      yaxis: { type: "log", title: { text: "simulated (µs)" }, range: [Math.log10(lo), Math.log10(hi)] },
      legend: { x: 1.02, y: 1 },
      margin: { l: 64 },
    },
  );
}

function renderLines() {
  const c = view.data.chosen;
  const fam = view.data.rows.filter((r) => r.mode === c.mode && r.head_dim === c.head_dim && r.causal === c.causal);
  const traces = [];
  for (const tile of ["t0", "t1", "t2"]) {
    const rs = fam.filter((r) => r.tile === tile).sort((a, b) => a.seq - b.seq);
    if (rs.length === 0) continue;
    const label = `${tile}: ${rs[0].tiles}`;
    traces.push({ x: rs.map((r) => r.seq), y: rs.map((r) => r.measured_us), mode: "lines+markers", name: `${label} measured`, line: { color: TILE_COLORS[tile], dash: TILE_DASH[tile] } });
    traces.push({ x: rs.map((r) => r.seq), y: rs.map((r) => r.simulated_us), mode: "lines", name: `${tile} simulated`, line: { color: TILE_COLORS[tile], dash: "dash" } });
    const now = livePoints().find((p) => p.tile === tile && p.kernel_us);
    if (now) {
      traces.push({
        x: [c.seq], y: [now.kernel_us], mode: "markers", name: "live, this GPU", legendgroup: "live",
        showlegend: !traces.some((t) => t.legendgroup === "live"),
        marker: { color: TILE_COLORS[tile], symbol: "star", size: 14, line: { color: "#111827", width: 1 } },
      });
    }
  }
  react(
    "lines",
    traces,
    {
      height: 360,
      xaxis: { type: "log", title: { text: "N (batch·N = 16384)" }, tickvals: [512, 1024, 2048, 4096, 8192, 16384] },
      yaxis: { type: "log", title: { text: "µs" } },
      legend: { orientation: "h", y: -0.42, font: { size: 11 } },
      margin: { l: 56, b: 130, t: 30 },
      title: {
        text: traces.length
          ? `${c.mode}, d = ${c.head_dim}, ${c.causal ? "causal" : "full"}`
          : "this sweep draws each shape once: no series over N",
        font: { size: 13 },
        y: 0.98,
      },
    },
  );
}

function renderErrors() {
  const rows = view.data.rows;
  const chosen = view.data.chosen.id;
  react(
    "errors-plot",
    [
      {
        type: "bar",
        x: rows.map((r) => r.id),
        y: rows.map((r) => r.error_pct),
        customdata: rows.map((r) => r.id),
        marker: { color: rows.map((r) => (r.id === chosen ? "#f59e0b" : SUBSET_COLORS[r.subset])) },
        hovertemplate: "%{x}: %{y:.1f}%<extra></extra>",
        name: "error",
      },
    ],
    {
      height: 300,
      showlegend: false,
      xaxis: { showticklabels: false, title: { text: "configurations in sweep order" } },
      yaxis: { title: { text: "error %" }, zeroline: true },
      shapes: [10, -10, 25, -25].map((y) => ({ type: "line", xref: "paper", x0: 0, x1: 1, y0: y, y1: y, line: { color: Math.abs(y) === 10 ? "#6b7280" : "#dc2626", dash: "dot", width: 1 } })),
      margin: { l: 56 },
    },
  );
}

function renderBreakdown() {
  const c = view.data.chosen;
  const traces = Object.entries(c.breakdown_us).map(([lim, v]) => ({
    type: "bar",
    orientation: "h",
    name: lim,
    y: ["simulated"],
    x: [v],
    marker: { color: LIMITER_COLORS[lim] },
    hovertemplate: `${lim}: %{x:.1f} µs<extra></extra>`,
  }));
  traces.push({ type: "bar", orientation: "h", name: "measured", y: ["measured"], x: [c.measured_us], marker: { color: "#111827" }, hovertemplate: "measured: %{x:.1f} µs<extra></extra>" });
  react(
    "breakdown",
    traces,
    {
      height: 230,
      barmode: "stack",
      xaxis: { title: { text: "µs" }, rangemode: "tozero" },
      yaxis: { autorange: "reversed" },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom", font: { size: 11 } },
      margin: { l: 80, t: 64 },
    },
  );
  const head = ["kernel", "simulated", "sim., alone", "ncu, alone", "clock", "CTAs/SM", "registers", "spilled"];
  const rows = c.kernels.map((k) => [
    k.name,
    us(k.simulated_us),
    us(k.simulated_alone_us),
    us(k.measured_us),
    k.clock == null ? "–" : `${Math.round(k.clock * 100)}%`,
    `${k.ctas_per_sm} · ${k.measured_ctas_per_sm ?? "–"}`,
    `${k.regs_per_thread}${k.regs_source === "estimated" ? " (est.)" : ""} · ${k.measured_regs_per_thread ?? "–"}`,
    k.local_load_bytes ? formatBytes(k.local_load_bytes) : "–",
  ]);
  fillTable($("kernels"), head, rows);
}

function renderTimeline() {
  const t = view.data.chosen.timeline;
  react(
    "timeline",
    t.data,
    { ...t.layout, height: 320, margin: { l: 48 }, legend: { orientation: "h", y: 1.15 } },
  );
}

/** The measured schedule, where benchmarks/timeline.py recorded one for this configuration. */
function renderMeasured() {
  const m = view.data.chosen.measured_schedule;
  const note = $("measured-note");
  for (const id of ["running", "measured-timeline"]) $(id).hidden = !m;
  if (!m) {
    for (const id of ["running", "measured-timeline"]) Plotly.purge(id);
    note.textContent = "No measured schedule for this configuration (benchmarks/timeline.py records forward rows: N = 1024 and 4096 on the H200, 512 to 4096 on the H100).";
    return;
  }
  const r = m.resident_per_sm;
  note.textContent = `${m.device}, ${m.date}: ${m.ctas.toLocaleString("en-US")} CTAs in ${us(m.span_us)} (simulated ${us(m.simulated_span_us)}); CTAs resident per SM ${r.measured.toFixed(2)} measured, ${r.simulated.toFixed(2)} simulated.`;
  react(
    "running",
    m.running.data,
    { ...m.running.layout, height: 260, legend: { orientation: "h", y: 1.15 } },
  );
  react(
    "measured-timeline",
    m.gantt.data,
    { ...m.gantt.layout, height: 340, margin: { l: 48, t: 48 }, showlegend: false, title: { text: "measured SM timeline (one bar per CTA)", font: { size: 12 } } },
  );
}

function render() {
  const c = view.data.chosen;
  $("now").textContent = `${c.id}: ${c.tiles}${c.route ? `, ${c.route} route` : ""} — measured ${us(c.measured_us)}, simulated ${us(c.simulated_us)} (${pct(c.error_pct)}), ${c.subset === "fit" ? "fitted on" : "held out"}.`;
  $("why").replaceChildren(
    ...c.notes.map((n) => {
      const li = document.createElement("li");
      li.className = `note-${n.level}`;
      li.dataset.kind = n.kind;
      li.textContent = n.text;
      return li;
    }),
  );
  renderScatter();
  renderLines();
  renderErrors();
  renderBreakdown();
  renderTimeline();
  renderMeasured();
  bindClicks();
  document.body.dataset.config = c.id;
}

function choose(id) {
  if (!id || (view.data && id === view.data.chosen.id)) return;
  view.params.id = id;
  view.reload();
}

form.elements.dataset.addEventListener("change", () => {
  const [gpu, sweep = ""] = form.elements.dataset.value.split(":");
  view.params.gpu = gpu;
  view.params.sweep = sweep;
  view.params.id = "";
  view.reload();
});
form.elements.id.addEventListener("change", () => choose(form.elements.id.value));

mountMeasureNow({
  problem: () => ({ gpu: view.params.gpu, ...(view.params.sweep ? { sweep: view.params.sweep } : {}), id: view.params.id }),
  onPoints(points) {
    live = points;
    if (view.data) {
      renderScatter();
      renderLines();
    }
  },
});

let clicksBound = false;

/** Clicking a point of the scatter or a bar of the errors explains that configuration. */
function bindClicks() {
  if (clicksBound) return;
  clicksBound = true;
  for (const id of ["scatter", "errors-plot"]) {
    $(id).on("plotly_click", (ev) => {
      const point = ev.points && ev.points[0];
      if (point && point.customdata) choose(point.customdata);
    });
  }
}
