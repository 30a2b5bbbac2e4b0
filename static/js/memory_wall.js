// The memory wall: naive attention and FlashAttention-2 stepped side by side.
// GET /api/memory-wall computes both walks; this module draws step k of each.

import { formatBytes, formatCount } from "./format.js";
import { react } from "./plot.js";
import { onApply } from "./registry.js";
import { StepPrompt, urlHasStep } from "./step_prompt.js";
import { apiUrl } from "./url.js";
import { jsonSource, mountView } from "./view.js";

const DEFAULTS = { n: 1024, d: 64, dtype: "fp16", bm: 128, bn: 128, ns: "256,512,1024,2048,4096", step: 0 };
const FIELDS = ["n", "d", "dtype", "bm", "bn", "ns"];
const NUMERIC = new Set(["n", "d", "bm", "bn"]);
const LINE = { naive: "#dc2626", flash: "#1d4ed8" };
const MATRIX_COLORS = { Q: "#94a3b8", K: "#64748b", V: "#475569", S: "#dc2626", P: "#f97316", O: "#0f766e" };
// Tile states (see templates/memory_wall.html for the legend).
const TODO = 0, S_HBM = 1, P_HBM = 2, P_READ = 3, NOW = 4, ON_CHIP = 5;
const TILE_COLORS = ["#e5e7eb", "#dc2626", "#f97316", "#fca5a5", "#facc15", "#60a5fa"];
const TILE_NAMES = {
  naive: ["not computed yet", "S written to HBM", "P written to HBM", "P read back (done)", "moving now"],
  flash: ["not computed yet", "", "", "", "on chip now", "done on chip, never in HBM"],
};

const $ = (id) => document.getElementById(id);
const form = $("params");
const prompt = new StepPrompt();
let opening = !urlHasStep(); // a bare link opens where the two have parted ways
onApply(() => (opening = false)); // a room's state names its own step

function fillForm(params) {
  for (const f of FIELDS) form.elements[f].value = params[f];
}

function readForm(params) {
  for (const f of FIELDS) {
    const raw = form.elements[f].value.trim();
    params[f] = NUMERIC.has(f) ? (raw === "" ? NaN : Number(raw)) : raw;
  }
}

const view = mountView({
  name: "memory-wall",
  defaults: DEFAULTS,
  source: jsonSource("/api/memory-wall"),
  errorFields: false, // the message alone
  fillForm,
  readForm,
  loaded(body) {
    const { naive, flash } = body.walks;
    view.lines = {
      naive: naive.cum_read.map((r, i) => r + naive.cum_write[i]),
      flash: flash.cum_read.map((r, i) => r + flash.cum_write[i]),
    };
    renderTable(body);
    const total = Math.max(naive.steps, flash.steps);
    const step = opening ? openingStep(body) : Math.min(view.params.step, total - 1);
    opening = false;
    prompt.show(step, promptText(body, step, total - 1));
    return { total, step };
  },
  exports: ({ params: p }, { url, query }) => ({
    name: `memory-wall-n${p.n}-d${p.d}-${p.bm}x${p.bn}`,
    json: url,
    chrome: apiUrl("/api/memory-wall", { ...query, format: "chrome" }),
  }),
  draw: (k) => {
    prompt.seen(k);
    render(k);
  },
});

/** The first step at which flash has finished a query block (its output written): by then naive
 * attention has a row of score tiles in HBM, and the two traffic lines have parted. */
function openingStep(d) {
  const store = d.kinds.indexOf("store");
  const k = d.walks.flash.kind.indexOf(store);
  return k > 0 ? k : 0;
}

function promptText(d, k, last) {
  const move = "Press → or Play to step on; Home goes back to the start.";
  if (k !== openingStep(d) || k === 0) return `Step ${k} of ${last}. ${move}`;
  const written = d.walks.naive.tile_steps.s_written.flat().filter((s) => s <= k).length;
  return `Step ${k} of ${last}: FlashAttention has finished query block 0 and written only its output; ` +
    `its scores never left the chip. Naive attention has written ${formatCount(written)} tile${written === 1 ? "" : "s"} of scores S to HBM so far. ${move}`;
}

function describe(name, w, k, kinds) {
  if (k >= w.steps) return `finished after ${w.steps} steps`;
  const kind = kinds[w.kind[k]];
  const i = w.q_block[k];
  const j = w.kv_block[k];
  const moved = `read ${formatCount(w.step_read[k])}, wrote ${formatCount(w.step_write[k])}`;
  const text = {
    naive: {
      load_q: `kernel 1 (S = QKᵀ) loads Q block ${i} into SRAM`,
      qk: `kernel 1 computes S tile (${i}, ${j}) and writes it to HBM`,
      softmax: `kernel 2 reads S rows of block ${i} back and writes their softmax P`,
      pv: `kernel 3 (O = PV) reads P tile (${i}, ${j}) back from HBM`,
      store: `kernel 3 writes O block ${i}`,
    },
    flash: {
      load_q: `CTA ${i} loads Q block ${i} into SRAM`,
      tile: `CTA ${i} loads K, V block ${j}; S and P of tile (${i}, ${j}) stay on chip`,
      store: `CTA ${i} writes O block ${i} and its log-sum-exp`,
    },
  }[name][kind];
  return `step ${k}: ${text} (${moved})`;
}

function tileStates(w, k, name) {
  const t = w.tile_steps;
  if (name === "flash") {
    return t.on_chip.map((row) => row.map((s) => (k < s ? TODO : k === s ? NOW : ON_CHIP)));
  }
  return t.s_written.map((row, i) =>
    row.map((sw, j) => {
      const sr = t.s_read[i][j];
      const pr = t.p_read[i][j];
      if (k < sw) return TODO;
      if (k === sw || k === sr || k === pr) return NOW;
      if (k < sr) return S_HBM;
      if (k < pr) return P_HBM;
      return P_READ;
    }),
  );
}

const TILE_SCALE = TILE_COLORS.flatMap((c, v) => [
  [Math.max(0, (v - 0.5) / 5), c],
  [Math.min(1, (v + 0.5) / 5), c],
]);

function renderGrids(k) {
  const { naive, flash } = view.data.walks;
  const g = view.data.grid;
  const heat = (name, w, axis) => {
    const z = tileStates(w, k, name);
    return {
      type: "heatmap",
      z,
      zmin: 0,
      zmax: 5,
      colorscale: TILE_SCALE,
      showscale: false,
      xgap: g.kv_blocks <= 32 ? 1 : 0,
      ygap: g.q_blocks <= 32 ? 1 : 0,
      xaxis: `x${axis}`,
      yaxis: `y${axis}`,
      customdata: z.map((row) => row.map((v) => TILE_NAMES[name][v])),
      hovertemplate: `${name}: tile (query block i=%{y}, key block j=%{x}): %{customdata}<extra></extra>`,
      meta: { legend: "figure:has(#grids) .legend" }, // categories: the caption's chips
    };
  };
  const axis = (domain, title) => ({ domain, title: { text: title }, dtick: g.kv_blocks > 16 ? undefined : 1 });
  const yaxis = (anchor) => ({ autorange: "reversed", anchor, title: { text: "query block i" }, dtick: g.q_blocks > 16 ? undefined : 1 });
  react(
    "grids",
    [heat("naive", naive, ""), heat("flash", flash, "2")],
    {
      height: 280,
      margin: { t: 28 },
      xaxis: axis([0, 0.46], "key block j"),
      xaxis2: axis([0.54, 1], "key block j"),
      yaxis: yaxis("x"),
      yaxis2: { ...yaxis("x2"), title: { text: "" } },
      annotations: [
        { text: "naive: S and P in HBM", x: 0.23, y: 1.08, xref: "paper", yref: "paper", showarrow: false, font: { color: LINE.naive } },
        { text: "flash: tiles on chip only", x: 0.77, y: 1.08, xref: "paper", yref: "paper", showarrow: false, font: { color: LINE.flash } },
      ],
    },
  );
}

function renderTraffic(k) {
  const { naive, flash } = view.data.walks;
  const at = (name, w) => Math.min(k, w.steps - 1);
  const kn = at("naive", naive);
  const kf = at("flash", flash);
  const xs = (n) => Array.from({ length: n }, (_, i) => i);
  if (!view.xs || view.xs.naive.length !== naive.steps || view.xs.flash.length !== flash.steps) {
    view.xs = { naive: xs(naive.steps), flash: xs(flash.steps) };
  }
  react(
    "traffic",
    [
      { x: view.xs.naive, y: view.lines.naive, name: "naive", mode: "lines", line: { color: LINE.naive, width: 2 } },
      { x: view.xs.flash, y: view.lines.flash, name: "flash", mode: "lines", line: { color: LINE.flash, width: 2 } },
      {
        x: [kn, kf],
        y: [view.lines.naive[kn], view.lines.flash[kf]],
        mode: "markers",
        marker: { size: 10, color: [LINE.naive, LINE.flash] },
        showlegend: false,
        hoverinfo: "skip",
      },
    ],
    {
      height: 250,
      legend: { orientation: "h", y: 1.15 },
      xaxis: { title: { text: "step" } },
      yaxis: { title: { text: "HBM elements so far" }, rangemode: "tozero" },
      margin: { l: 64 },
      shapes: [{ type: "line", x0: k, x1: k, yref: "paper", y0: 0, y1: 1, line: { color: "#6b7280", dash: "dot" } }],
    },
  );
}

function renderBars(k) {
  const { naive, flash } = view.data.walks;
  const kn = Math.min(k, naive.steps - 1);
  const kf = Math.min(k, flash.steps - 1);
  const traces = view.data.matrices.map((m) => ({
    type: "bar",
    orientation: "h",
    name: m,
    y: ["naive", "flash"],
    x: [naive.cum_by_matrix[m][kn], flash.cum_by_matrix[m][kf]],
    marker: { color: MATRIX_COLORS[m] },
    hovertemplate: `${m}: %{x:,} elements<extra>%{y}</extra>`,
  }));
  react(
    "bars",
    traces,
    {
      height: 170,
      barmode: "stack",
      legend: { orientation: "h", y: 1.3 },
      xaxis: { title: { text: "HBM elements so far" } },
      yaxis: { autorange: "reversed" },
      margin: { l: 56, t: 24 },
    },
  );
}

function renderCounts(k) {
  const d = view.data;
  for (const name of ["naive", "flash"]) {
    const w = d.walks[name];
    const kk = Math.min(k, w.steps - 1);
    const show = (n) => `${formatCount(n)} (${formatBytes(n * d.dtype_bytes)})`;
    $(`now-${name}`).textContent = describe(name, w, k, d.kinds);
    $(`${name}-read`).textContent = show(w.cum_read[kk]);
    $(`${name}-write`).textContent = show(w.cum_write[kk]);
    $(`${name}-total`).textContent = show(w.closed_form.elements.hbm_total);
  }
}

function renderTable(d) {
  const pct = new Intl.NumberFormat("en-US", { style: "percent", maximumFractionDigits: 1 });
  const rows = d.table.map((r) => {
    const tr = document.createElement("tr");
    if (r.n === d.params.n) tr.className = "current";
    for (const text of [formatCount(r.n), formatCount(r.naive), formatCount(r.flash), `${r.ratio.toFixed(1)}×`, pct.format(r.saving)]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    return tr;
  });
  $("access-table").tBodies[0].replaceChildren(...rows);
  const rounded = d.table.filter((r) => r.flash !== r.flash_seed);
  $("table-note").textContent =
    `d = ${d.params.d}, ${d.params.bm}×${d.params.bn} tiles; naive = 4Nd + 4N². ` +
    (rounded.length
      ? `For N not a multiple of the blocks the seed's formula rounds the last tile up (e.g. ${formatCount(rounded[0].flash_seed)} at N = ${rounded[0].n}); the counts here move only the rows that exist.`
      : "Flash counts equal the seed's formula at these sizes.");
}

function render(k) {
  renderCounts(k);
  renderTraffic(k);
  renderGrids(k);
  renderBars(k);
}
