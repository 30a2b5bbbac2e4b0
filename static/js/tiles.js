// The tile stepper: step through a FlashAttention trace served over /ws/trace.
// The server computes every event; this module only draws what it receives.

import { Controls } from "./controls.js";
import { apiUrl, bindPngButtons, setExportLink } from "./exports.js";
import { TraceSocket, baseLayout, formatBytes, formatCount, plotConfig, readParams, writeParams } from "./state.js";
import { changed, registerView } from "./view.js";

const DEFAULTS = { algo: "fa2", n: 256, d: 64, bm: 64, bn: 64, seed: 0, step: 0 };
const TRACE_FIELDS = ["algo", "n", "d", "bm", "bn", "seed"];
const COLORS = { todo: "#e5e7eb", done: "#60a5fa", current: "#f59e0b" };

const $ = (id) => document.getElementById(id);
const form = $("params");
const view = {
  params: readParams(DEFAULTS),
  meta: null,
  step: 0, // the step on screen (controls.target is the newest step asked for)
  event: null,
  drawn: {}, // figure id → key of what it shows (unchanged figures are not redrawn)
  ranges: {}, // axis name → [lo, hi] seen so far in this trace
};

function showErrors(errors) {
  const box = $("errors");
  if (!errors || errors.length === 0) {
    box.hidden = true;
    box.textContent = "";
    return;
  }
  box.hidden = false;
  box.replaceChildren(
    ...errors.map((e) => {
      const p = document.createElement("p");
      p.textContent = e.msg;
      return p;
    }),
  );
}

function fillForm() {
  for (const field of ["n", "d", "bm", "bn", "seed"]) {
    form.elements[field].value = view.params[field];
  }
}

function traceParams() {
  const out = {};
  for (const f of TRACE_FIELDS) out[f] = view.params[f];
  return out;
}

const socket = new TraceSocket({
  onMeta(meta) {
    view.meta = meta;
    showErrors([]);
    $("algo-title").textContent = meta.title;
    controls.setTotal(meta.n_events);
    setExports();
    renderPseudocode(meta.pseudocode);
    renderTotals(meta);
    view.drawn = {};
    view.ranges = {};
    controls.goto(view.params.step);
  },
  onEvent(ev) {
    view.event = ev;
    view.step = ev.step;
    view.params.step = ev.step;
    writeParams(view.params);
    render(ev);
  },
  onError(errors) {
    showErrors(errors);
  },
});

const controls = new Controls({ goto: (k) => view.meta && socket.step(k), jump: gotoMark });

function open() {
  showErrors([]);
  writeParams(view.params);
  socket.open(traceParams()).catch((err) => showErrors([{ msg: String(err) }]));
}

function gotoMark(direction) {
  if (!view.meta) return;
  const marks = view.meta.marks;
  const now = controls.target;
  const target = direction > 0 ? marks.find((s) => s > now) : [...marks].reverse().find((s) => s < now);
  controls.goto(target === undefined ? (direction > 0 ? view.meta.n_events - 1 : 0) : target);
}

function setExports() {
  const p = traceParams();
  const name = `trace-${p.algo}-n${p.n}-d${p.d}-${p.bm}x${p.bn}-seed${p.seed}`;
  setExportLink("export-json", apiUrl("/api/trace/ops", p), `${name}.json`);
  setExportLink("export-chrome", apiUrl("/api/trace/chrome", p), `${name}.trace.json`);
}

function renderPseudocode(lines) {
  const list = $("pseudocode");
  list.replaceChildren(
    ...lines.map((text, i) => {
      const li = document.createElement("li");
      li.textContent = text;
      li.dataset.line = i;
      return li;
    }),
  );
}

function renderTotals(meta) {
  const flash = meta.traffic.algo.elements.hbm_total;
  const naive = meta.traffic.naive.elements.hbm_total;
  $("flash-total").textContent = `${formatCount(flash)} elements`;
  $("naive-total").textContent =
    `${formatCount(naive)} elements (${(naive / flash).toFixed(1)}× flash)`;
  $("exactness").textContent = `${meta.max_abs_err.toExponential(2)} (float64 reference)`;
}

function tileStatus(ev, meta) {
  const { q_blocks: nq, kv_blocks: nk } = meta.grid;
  const qb = ev.q_block ?? 0;
  const kb = ev.kv_block;
  const z = [];
  for (let i = 0; i < nq; i += 1) {
    const row = [];
    for (let j = 0; j < nk; j += 1) {
      let s = 0;
      if (i < qb) s = 1;
      else if (i === qb) {
        if (ev.phase === "store") s = 1;
        else if (kb !== null && j < kb) s = 1;
        else if (kb !== null && j === kb) s = 2;
      }
      row.push(s);
    }
    z.push(row);
  }
  return z;
}

/**
 * An axis range that only grows over a trace, rounded outwards to a coarse grid: the axes and
 * colour bars of the per-row figures stay put while stepping (cheaper to redraw, easier to
 * compare step with step). Returns null until a finite value has been seen.
 */
function stickyRange(name, values, { symmetric = false, zero = false } = {}) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of values.flat()) {
    if (v === null || !Number.isFinite(v)) continue;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (symmetric) [lo, hi] = [-Math.max(Math.abs(lo), Math.abs(hi)), Math.max(Math.abs(lo), Math.abs(hi))];
  if (zero) lo = Math.min(0, lo);
  const old = view.ranges[name];
  if (old) [lo, hi] = [Math.min(lo, old[0]), Math.max(hi, old[1])];
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return null;
  const grid = 10 ** Math.floor(Math.log10(Math.max(hi - lo, Math.abs(hi), Math.abs(lo), 1e-9))) / 4;
  const range = [Math.floor(lo / grid) * grid, Math.ceil(hi / grid) * grid];
  if (range[0] === range[1]) range[1] += grid;
  view.ranges[name] = range;
  return range;
}

/** Equal numbers, arrays of numbers or arrays of such arrays (null for −∞). */
function same(a, b) {
  if (a === b) return true;
  if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i += 1) if (!same(a[i], b[i])) return false;
  return true;
}

/** True when figure `id` does not show `parts` yet (and records that it will). */
function stale(id, parts) {
  if (same(view.drawn[id], parts)) return false;
  view.drawn[id] = parts;
  return true;
}

function renderGrid(ev) {
  if (!stale("grid", [ev.q_block, ev.kv_block, ev.phase === "store"])) return;
  const meta = view.meta;
  const { q_blocks: nq, kv_blocks: nk } = meta.grid;
  const z = tileStatus(ev, meta);
  const qb = ev.q_block ?? 0;
  const shapes = [
    {
      type: "rect", xref: "x", yref: "y", x0: -0.5, x1: nk - 0.5, y0: qb - 0.5, y1: qb + 0.5,
      line: { color: "#b45309", width: 3 },
    },
  ];
  if (ev.kv_block !== null) {
    shapes.push({
      type: "rect", xref: "x", yref: "y", x0: ev.kv_block - 0.5, x1: ev.kv_block + 0.5,
      y0: -0.5, y1: nq - 0.5, line: { color: "#1d4ed8", width: 3, dash: "dot" },
    });
  }
  const trace = {
    type: "heatmap", z, zmin: 0, zmax: 2, showscale: false,
    hovertemplate: "Q block %{y} × K/V block %{x}<extra></extra>",
    xgap: nk <= 32 ? 2 : 0, ygap: nq <= 32 ? 2 : 0,
    colorscale: [
      [0, COLORS.todo], [0.33, COLORS.todo], [0.34, COLORS.done], [0.66, COLORS.done],
      [0.67, COLORS.current], [1, COLORS.current],
    ],
  };
  const layout = {
    ...baseLayout,
    height: 300,
    shapes,
    xaxis: { title: { text: `K/V block (block_n = ${meta.tiles.block_n})` }, dtick: nk > 8 ? undefined : 1 },
    yaxis: { title: { text: `Q block (block_m = ${meta.tiles.block_m})` }, autorange: "reversed", dtick: nq > 8 ? undefined : 1 },
  };
  Plotly.react("grid", [trace], layout, plotConfig);
}

function renderStats(ev) {
  const st = ev.state;
  if (!st.rows || !st.m) return; // an op without forward row state (other algorithms)
  if (!stale("ml", [st.rows, st.m, st.l])) return;
  const rows = [];
  for (let r = st.rows[0]; r < st.rows[1]; r += 1) rows.push(r);
  const fixed = (range) => (range ? { range, autorange: false } : { autorange: true });
  // One marker per row helps on small blocks; beyond 16 rows they cost more than they show.
  const mode = rows.length > 16 ? "lines" : "lines+markers";
  const layout = {
    ...baseLayout,
    height: 240,
    legend: { orientation: "h", y: 1.12 },
    xaxis: { title: { text: "query row" } },
    yaxis: { title: { text: "m (running max)" }, ...fixed(stickyRange("m", st.m)) },
    yaxis2: { title: { text: "ℓ (running sum)" }, overlaying: "y", side: "right", ...fixed(stickyRange("l", st.l, { zero: true })) },
    margin: { ...baseLayout.margin, r: 56 },
  };
  Plotly.react(
    "ml",
    [
      { x: rows, y: st.m, name: "m", mode, marker: { size: 4 }, line: { color: "#b45309" } },
      { x: rows, y: st.l, name: "ℓ", yaxis: "y2", mode, marker: { size: 4 }, line: { color: "#1d4ed8" } },
    ],
    layout,
    plotConfig,
  );
}

function renderOutput(ev) {
  const st = ev.state;
  if (!st.rows || !st.o_hat) return;
  if (!stale("out", [st.rows, st.col_stride, st.o_hat])) return;
  const rows = [];
  for (let r = st.rows[0]; r < st.rows[1]; r += 1) rows.push(r);
  const cols = st.o_hat.length ? st.o_hat[0].map((_, c) => c * st.col_stride) : [];
  const range = stickyRange("o_hat", st.o_hat, { symmetric: true });
  const scale = range ? { zmin: range[0], zmax: range[1] } : { zmid: 0 };
  Plotly.react(
    "out",
    [{ type: "heatmap", z: st.o_hat, x: cols, y: rows, colorscale: "RdBu", ...scale, colorbar: { thickness: 10 } }],
    {
      ...baseLayout,
      height: 240,
      xaxis: { title: { text: st.col_stride > 1 ? `head dim (mean of ${st.col_stride})` : "head dim" } },
      yaxis: { title: { text: "query row" }, autorange: "reversed" },
    },
    plotConfig,
  );
}

function describeEvent(ev) {
  const st = ev.state;
  const where = st.rows ? `Q block ${ev.q_block} (rows ${st.rows[0]}–${st.rows[1] - 1})` : "all rows";
  const meta = view.meta;
  let kv = "";
  if (ev.kv_block !== null) {
    const c0 = ev.kv_block * meta.tiles.block_n;
    const c1 = Math.min(c0 + meta.tiles.block_n, meta.problem.seq_k) - 1;
    kv = ` × K/V block ${ev.kv_block} (keys ${c0}–${c1})`;
  }
  return `Step ${ev.step}: ${ev.phase.replace("_", " ")} — ${where}${kv}`;
}

function render(ev) {
  $("step").value = ev.step;
  $("now").textContent = describeEvent(ev);
  for (const li of $("pseudocode").children) {
    const on = Number(li.dataset.line) === ev.line;
    li.classList.toggle("current", on);
    if (on) li.setAttribute("aria-current", "step");
    else li.removeAttribute("aria-current");
  }
  const bytes = view.meta.traffic.algo.bytes.hbm_read / Math.max(1, view.meta.traffic.algo.elements.hbm_read);
  $("hbm-read").textContent = `${formatCount(ev.totals.hbm_read)} (${formatBytes(ev.totals.hbm_read * bytes)})`;
  $("hbm-write").textContent = `${formatCount(ev.totals.hbm_write)} (${formatBytes(ev.totals.hbm_write * bytes)})`;
  renderGrid(ev);
  renderStats(ev);
  renderOutput(ev);
  document.body.dataset.step = ev.step;
  controls.shown(ev.step);
  changed();
}

form.addEventListener("submit", (e) => {
  e.preventDefault();
  for (const field of ["n", "d", "bm", "bn", "seed"]) {
    const raw = form.elements[field].value.trim();
    view.params[field] = raw === "" ? NaN : Number(raw);
  }
  view.params.step = 0;
  open();
});


registerView({
  name: "tiles",
  getState: () => ({ params: traceParams(), step: view.step }),
  applyState(state) {
    const same = TRACE_FIELDS.every((f) => String(state.params[f]) === String(view.params[f]));
    Object.assign(view.params, state.params, { step: state.step ?? 0 });
    if (same && view.meta) controls.goto(view.params.step);
    else {
      fillForm();
      open();
    }
  },
});

bindPngButtons();
fillForm();
open();
