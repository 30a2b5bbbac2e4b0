// What the trace steppers (/tiles, /backward, /decode) share: their source for view.js
// `mountView`, and drawing helpers. Everything here draws what the server sent (meta and events
// of /ws/trace); none of it knows an algorithm.

import { formatCount } from "./format.js";
import { react, widthOf } from "./plot.js";
import { currentView } from "./registry.js";
import { TraceSocket } from "./socket.js";
import { apiUrl } from "./url.js";

const $ = (id) => document.getElementById(id);

export const TILE_COLORS = { skipped: "#ffffff", todo: "#e5e7eb", done: "#60a5fa", current: "#f59e0b" };

/**
 * `fn(k)` for the newest `k` asked: at once, unless more input (a key held down) is already
 * waiting; then once, in a task of its own after that input, with the newest k asked since.
 * Steps asked faster than they are drawn draw only the latest.
 */
function newest(fn) {
  const channel = new MessageChannel();
  let wanted = null;
  const run = () => {
    const k = wanted;
    wanted = null;
    if (k !== null) fn(k);
  };
  channel.port1.onmessage = run;
  return (k) => {
    const more = navigator.scheduling?.isInputPending?.();
    if (!more) {
      wanted = k;
      run();
      return;
    }
    if (wanted === null) channel.port2.postMessage(null);
    wanted = k;
  };
}

/**
 * The source of a trace stepper (view.js `mountView`): the trace of the view's query over
 * /ws/trace, one event per step (steps asked while one is drawn collapse to the newest). A new
 * trace fills the pseudocode list and resets `figures`; Shift+← → jump between its marks (a new
 * tile, a CTA's first op).
 */
export function traceSource(figures) {
  return (host) => {
    const socket = new TraceSocket({
      onMeta(meta) {
        renderPseudocode(meta.pseudocode, "pseudocode", meta.line_phases);
        figures.reset();
        host.loaded(meta);
      },
      onEvent: (ev) => host.drawn(ev.step, ev),
      onError: (errors) => host.failed(errors),
    });
    return {
      open: (query) => socket.open(query).catch((err) => host.failed([{ msg: String(err) }])),
      step: newest((k) => socket.step(k)),
      jump: markTarget,
    };
  };
}

/** The export links of a trace: its operations as JSON and as a Chrome trace, saved as `name`. */
export function traceExports(query, name) {
  return { name, json: apiUrl("/api/trace/ops", query), chrome: apiUrl("/api/trace/chrome", query) };
}

/** Integers from a span [start, stop). */
export function span([start, stop]) {
  const out = [];
  for (let r = start; r < stop; r += 1) out.push(r);
  return out;
}

/** Equal numbers, arrays of numbers or arrays of such arrays (null for −∞). */
export function same(a, b) {
  if (a === b) return true;
  if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i += 1) if (!same(a[i], b[i])) return false;
  return true;
}

/**
 * What a page's figures show, to redraw only those whose data changed (Plotly's redraw is the
 * costly part of a step), and axis ranges that only grow over a trace, so axes and colour bars
 * stay put while stepping. `reset()` when a new trace opens.
 */
export class Figures {
  constructor() {
    this.reset();
  }

  reset() {
    this.drawn = {};
    this.ranges = {};
  }

  /** True when figure `id` does not show `parts` yet (and records that it will). */
  stale(id, parts) {
    if (same(this.drawn[id], parts)) return false;
    this.drawn[id] = parts;
    return true;
  }

  /** A growing range over the finite values seen under `name`, rounded outwards; or null. */
  range(name, values, { symmetric = false, zero = false } = {}) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const v of [values].flat(3)) {
      if (v === null || !Number.isFinite(v)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    if (symmetric) {
      const m = Math.max(Math.abs(lo), Math.abs(hi));
      if (!(m > 0)) return this.ranges[name] || null; // all zeros: centre them, keep the scale
      [lo, hi] = [-m, m];
    }
    if (zero) lo = Math.min(0, lo);
    const old = this.ranges[name];
    if (old) [lo, hi] = [Math.min(lo, old[0]), Math.max(hi, old[1])];
    if (!Number.isFinite(lo) || !Number.isFinite(hi)) return null;
    const grid = 10 ** Math.floor(Math.log10(Math.max(hi - lo, Math.abs(hi), Math.abs(lo), 1e-9))) / 4;
    const range = [Math.floor(lo / grid) * grid, Math.ceil(hi / grid) * grid];
    if (range[0] === range[1]) range[1] += grid;
    this.ranges[name] = range;
    return range;
  }
}

/**
 * Fill the pseudocode list `id` with the trace's lines (numbered from 0, as events name them).
 * `phases` (meta.line_phases): per line, the phases of the ops that run it, which link the line
 * to the figures (<figure data-phases>) those phases change.
 */
export function renderPseudocode(lines, id = "pseudocode", phases = []) {
  $(id).replaceChildren(
    ...lines.map((text, i) => {
      const li = document.createElement("li");
      li.textContent = text;
      li.dataset.line = i;
      li.dataset.phases = (phases[i] || []).join(" ");
      return li;
    }),
  );
  linkLines($(id));
}

// --- linked highlighting: pseudocode lines ↔ the figures they change -----------------------

const phasesOf = (el) => new Set((el.dataset.phases || "").split(" ").filter(Boolean));
const meets = (a, b) => [...a].some((p) => b.has(p));
const linkedFigures = () => document.querySelectorAll("figure[data-phases]");

/** Mark with `cls` the figures that the phases `phases` change (none for an empty set). */
function markFigures(phases, cls) {
  for (const fig of linkedFigures()) fig.classList.toggle(cls, meets(phasesOf(fig), phases));
}

/**
 * Hovering (or focusing) a pseudocode line outlines the figures it changes; hovering a figure
 * marks the lines that change it. Bound once per list.
 */
function linkLines(list) {
  if (!list || list.dataset.linked) return;
  list.dataset.linked = "1";
  const onLine = (ev) => {
    const li = ev.target.closest && ev.target.closest("li[data-phases]");
    markFigures(li ? phasesOf(li) : new Set(), "linked-hover");
  };
  list.addEventListener("mouseover", onLine);
  list.addEventListener("mouseleave", () => markFigures(new Set(), "linked-hover"));
  for (const fig of linkedFigures()) {
    fig.addEventListener("mouseenter", () => {
      const mine = phasesOf(fig);
      for (const li of list.children) li.classList.toggle("linked-hover", meets(phasesOf(li), mine));
    });
    fig.addEventListener("mouseleave", () => {
      for (const li of list.children) li.classList.remove("linked-hover");
    });
  }
}

/** Highlight line `line` of the pseudocode list `id` (aria-current for screen readers). */
export function highlightLine(line, id = "pseudocode") {
  let phases = new Set();
  for (const li of $(id).children) {
    const on = Number(li.dataset.line) === line;
    li.classList.toggle("current", on);
    if (on) {
      li.setAttribute("aria-current", "step");
      phases = phasesOf(li);
    } else {
      li.removeAttribute("aria-current");
    }
  }
  markFigures(phases, "linked-now"); // the figures this line changes get its colour
}

/** The step of the next (direction > 0) or previous mark (a new tile, a CTA's first op). */
export function markTarget(meta, now, direction) {
  const marks = meta.marks;
  const target = direction > 0 ? marks.find((s) => s > now) : [...marks].reverse().find((s) => s < now);
  return target === undefined ? (direction > 0 ? meta.n_events - 1 : 0) : target;
}

/** How many entries of the sorted list `steps` are ≤ k. */
function countUpTo(steps, k) {
  let lo = 0;
  let hi = steps.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (steps[mid] <= k) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Status of every tile at step k from the server's tile_first / tile_last (the loop order is in
 * those steps): 0 skipped (a causal tile no CTA computes), 1 not yet, 2 done, 3 current; and
 * per query block the writes of its running output to global memory so far.
 */
export function gridState(grid, k) {
  const z = [];
  let done = 0;
  let current = -1;
  for (let i = 0; i < grid.q_blocks; i += 1) {
    const row = [];
    for (let j = 0; j < grid.kv_blocks; j += 1) {
      const first = grid.tile_first[i][j];
      const last = grid.tile_last[i][j];
      let s = 1;
      if (first < 0) s = grid.kinds[i][j] === 0 ? 0 : 1;
      else if (last < k) s = 2;
      else if (first <= k) s = 3;
      if (s === 2) done += 1;
      if (s === 3) current = i * grid.kv_blocks + j;
      row.push(s);
    }
    z.push(row);
  }
  const writes = grid.out_writes.map((steps) => countUpTo(steps, k));
  return { z, writes, key: [done, current, writes.reduce((a, b) => a + b, 0)] };
}

/** The fill of tile (i, j) inset by `g` (block units): its gap stays visible. */
function cellPath(i, j, g) {
  return `M${j - 0.5 + g},${i - 0.5 + g}H${j + 0.5 - g}V${i + 0.5 - g}H${j - 0.5 + g}Z`;
}

/**
 * The moving parts of the tile grid as layout shapes (redrawing shapes is far cheaper than
 * redrawing the heatmap): done tiles, the current tile, a diagonal stroke on every partial
 * tile, the current query row and key column, and the causal boundary.
 */
function gridShapes(div, meta, ev, state) {
  const g = meta.grid;
  const nq = g.q_blocks;
  const nk = g.kv_blocks;
  const bm = meta.tiles.block_m;
  const bn = meta.tiles.block_n;
  const perCell = ((widthOf(div) || 600) - 80) / Math.max(nk, 1);
  const gap = nk <= 32 && nq <= 32 ? Math.min(0.08, 1 / Math.max(perCell, 1)) : 0;
  let done = "";
  let current = null;
  let strokes = "";
  for (let i = 0; i < nq; i += 1) {
    for (let j = 0; j < nk; j += 1) {
      const s = state.z[i][j];
      if (s === 2) done += cellPath(i, j, gap);
      else if (s === 3) current = cellPath(i, j, gap);
      if (g.kinds[i][j] === 1) strokes += `M${j - 0.35},${i + 0.35}L${j + 0.35},${i - 0.35}`;
    }
  }
  const shapes = [];
  const fill = (path, color) => ({ type: "path", path, fillcolor: color, line: { width: 0 }, layer: "above" });
  if (done) shapes.push(fill(done, TILE_COLORS.done));
  if (current) shapes.push(fill(current, TILE_COLORS.current));
  if (strokes) shapes.push({ type: "path", path: strokes, line: { color: "#374151", width: 1.5 } });
  if (ev.q_block !== null && ev.q_block !== undefined && nq > 1) {
    shapes.push({
      type: "rect", xref: "x", yref: "y", x0: -0.5, x1: nk - 0.5, y0: ev.q_block - 0.5, y1: ev.q_block + 0.5,
      line: { color: "#b45309", width: 3 },
    });
  }
  if (ev.kv_block !== null && ev.kv_block !== undefined) {
    shapes.push({
      type: "rect", xref: "x", yref: "y", x0: ev.kv_block - 0.5, x1: ev.kv_block + 0.5, y0: -0.5, y1: nq - 0.5,
      line: { color: "#1d4ed8", width: 3, dash: "dot" },
    });
  }
  if (meta.problem.causal) {
    // Key k is visible to query q iff k ≤ q + (Nk − Nq): the boundary in block coordinates.
    const off = meta.problem.seq_k - meta.problem.seq_q;
    const q0 = Math.max(0, -off);
    shapes.push({
      type: "line", xref: "x", yref: "y",
      x0: (q0 + off) / bn - 0.5, y0: q0 / bm - 0.5,
      x1: meta.problem.seq_k / bn - 0.5, y1: meta.problem.seq_q / bm - 0.5,
      line: { color: "#7c2d12", width: 2, dash: "dash" },
    });
  }
  return shapes;
}

/** "19" or "16–19": the indices of the `k`-th shown cell of `stride` from `start` (< `stop`). */
export function cellSpan(start, k, stride = 1, stop = Infinity) {
  const a = start + k * stride;
  const b = Math.min(a + stride, stop) - 1;
  return a >= b ? `${a}` : `${a}–${b}`;
}

/** Labels of `n` shown cells of `stride` from `start`: row or key indices, or their spans. */
export function cellSpans(start, n, stride = 1, stop = Infinity) {
  return Array.from({ length: n }, (_, k) => cellSpan(start, k, stride, stop));
}

/**
 * What the grid's tile (i, j) is: its query rows and keys, and whether it is computed whole,
 * partly masked or skipped by the causal mask (kinds: 0 skipped, 1 partial, 2 full).
 */
function tileHovers(meta) {
  const { block_m: bm, block_n: bn } = meta.tiles;
  const { seq_q: nq, seq_k: nk } = meta.problem;
  const kinds = ["skipped: the causal mask hides all of it", "partial: masked on the diagonal", "computed whole"];
  return meta.grid.kinds.map((row, i) => row.map((kind, j) =>
    `rows ${cellSpan(i * bm, 0, bm, nq)} × keys ${cellSpan(j * bn, 0, bn, nk)}: ${kinds[kind] ?? "computed"}` +
    (kind === 0 ? "" : " (click: its first step)")));
}

/** The grid's top and bottom margins, which the strip beside it shares (rows level). */
const GRID_MARGIN = { t: 8, b: 52 };

/**
 * The tile grid: a heatmap of the tiles that exist (white: skipped by the causal mask, grey:
 * computed) drawn once per trace, and the progress of `state` (gridState) drawn over it as
 * shapes. `fresh` redraws the heatmap (a new trace); otherwise only the shapes move. Its colours
 * are categories: the chips of the figure's caption are its legend.
 */
export function drawGrid(div, meta, ev, state, { height = 300, fresh = true } = {}) {
  const shapes = gridShapes(div, meta, ev, state);
  if (!fresh) {
    Plotly.relayout(div, { shapes });
    bindTileClicks(div); // (a first drawing that waited for a frame had no handlers yet)
    return;
  }
  const g = meta.grid;
  const nq = g.q_blocks;
  const nk = g.kv_blocks;
  const z = g.kinds.map((row) => row.map((kind) => (kind === 0 ? 0 : 1)));
  div.flashMeta = meta; // for the click below: the trace on screen
  react(div, [{
    type: "heatmap", z, zmin: 0, zmax: 1, showscale: false,
    colorscale: [[0, TILE_COLORS.skipped], [0.5, TILE_COLORS.skipped], [0.5, TILE_COLORS.todo], [1, TILE_COLORS.todo]],
    xgap: nk <= 32 && nq <= 32 ? 2 : 0, ygap: nk <= 32 && nq <= 32 ? 2 : 0,
    customdata: tileHovers(meta),
    hovertemplate: "tile (query block i=%{y}, key block j=%{x}): %{customdata}<extra></extra>",
    meta: { legend: `figure:has(#${div.id}) figcaption` },
  }], {
    height,
    shapes,
    showlegend: false,
    // Fixed bottom and top margins: the strip beside the grid (drawWrites) keeps its rows level.
    margin: { t: GRID_MARGIN.t, b: GRID_MARGIN.b },
    clickmode: "event",
    xaxis: {
      title: { text: `key block j (${meta.tiles.block_n} keys each)` },
      dtick: nk > 16 ? undefined : 1, range: [-0.5, nk - 0.5], showgrid: false, zeroline: false, automargin: false,
    },
    yaxis: {
      title: { text: `query block i (${meta.tiles.block_m} rows each)` }, dtick: nq > 16 ? undefined : 1,
      range: [nq - 0.5, -0.5], showgrid: false, zeroline: false,
    },
  });
  bindTileClicks(div);
}

/** A click on tile (i, j) of the grid goes to the first step of its ops. */
function bindTileClicks(div) {
  const el = typeof div === "string" ? $(div) : div;
  if (!el || el.dataset.tileClicks || typeof el.on !== "function") return;
  el.dataset.tileClicks = "1";
  el.on("plotly_click", (ev) => {
    const point = ev.points && ev.points[0];
    const meta = el.flashMeta;
    const view = currentView();
    if (!point || !meta || !view) return;
    const first = meta.grid.tile_first[point.y]?.[point.x];
    if (!(first >= 0)) return;
    view.applyState({ params: view.getState().params, step: first });
  });
}


/**
 * A one-column strip beside the grid (same height, rows aligned): how often each query block's
 * running output has gone to global memory so far, with its colour bar. Its own figure, so that
 * the grid's redraws (every tile) and the strip's (every write) do not pay for each other.
 */
export function drawWrites(div, meta, state, { label = "Oᵢ → HBM", height = 300 } = {}) {
  const nq = meta.grid.q_blocks;
  const zmax = Math.max(2, ...meta.grid.out_writes.map((s) => s.length));
  react(div, [{
    type: "heatmap", z: state.writes.map((w) => [w]), x: [0],
    zmin: 0, zmax, showscale: true,
    colorbar: { thickness: 6, len: 1, xpad: 2, outlinewidth: 0, tickfont: { size: 10 }, dtick: zmax <= 8 ? 1 : undefined },
    colorscale: [[0, "#ffffff"], [1, "#c2410c"]], ygap: nq <= 32 ? 2 : 0,
    text: state.writes.map((w) => [String(w)]), texttemplate: nq <= 24 ? "%{text}" : "",
    hovertemplate: `query block i=%{y}: ${label} %{z} time(s) so far<extra></extra>`,
  }], {
    height,
    margin: { l: 4, r: 4, t: GRID_MARGIN.t, b: GRID_MARGIN.b },
    xaxis: {
      showticklabels: false, title: { text: label, font: { size: 11 } }, fixedrange: true, showgrid: false, zeroline: false,
      automargin: false,
    },
    yaxis: { range: [nq - 0.5, -0.5], showticklabels: false, fixedrange: true, showgrid: false, zeroline: false, automargin: false },
  }, { modebar: false });
}

/** "1,234 elements (4.9 kB)". */
export function elementsAndBytes(elements, bytesPer, formatBytes) {
  return `${formatCount(elements)} (${formatBytes(elements * bytesPer)})`;
}

/** One sentence on a traced result against the dtype's own rounding (meta.exactness). */
export function exactnessText(ex) {
  const parts = ex.outputs.map((o) => {
    const err = `max |${o.name} − exact| = ${o.max_abs_err.toExponential(2)}`;
    if (ex.dtype === "fp32" || o.rounding_floor === 0) return err;
    const times = (o.max_abs_err / o.rounding_floor).toFixed(2);
    return `${err}, ${times}× the ${o.rounding_floor.toExponential(2)} that rounding the exact ${o.name} to ${ex.dtype} costs`;
  });
  return `${parts.join("; ")} (float64 reference; ${ex.dtype} unit roundoff ${ex.unit_roundoff.toExponential(2)}).`;
}

/**
 * A hover that says what a heatmap cell is: "S[i=19, j=166] = −0.0568". `rows`, `cols` label
 * the cells (indices, or spans "16–19" where a cell averages several); `format` is d3's.
 */
export function cellHover(name, { row = "i", col = "j", rows, cols, format = ".3~g", note = "" }) {
  const i = rows ? "%{customdata[0]}" : "%{y}";
  const j = cols ? "%{customdata[1]}" : "%{x}";
  const where = [row === null ? i : `${row}=${i}`, col === null ? j : `${col}=${j}`].join(", ");
  return `${name}[${where}] = %{z:${format}}${note}<extra></extra>`;
}

/** customdata pairing each cell's row and column labels (for cellHover). */
function cellLabels(z, rows, cols) {
  return z.map((row, r) => row.map((_, c) => [rows ? rows[r] : r, cols ? cols[c] : c]));
}

/**
 * A heatmap trace of a matrix (rows × columns); by default diverging colours around 0, with a
 * colour bar (`colorbar`: its placement, e.g. {x: 0.4} beside a left-hand panel). `hover`:
 * cellHover's options, the matrix's name first.
 */
export function heatmap(z, { x, y, range, xaxis, yaxis, colorbar = {}, name, colorscale = "RdBu", hover } = {}) {
  const scale = range ? { zmin: range[0], zmax: range[1] } : { zmid: 0 };
  const trace = {
    type: "heatmap", z, colorscale, ...scale, showscale: true,
    colorbar: { thickness: 10, len: 0.9, outlinewidth: 0, tickfont: { size: 11 }, ...colorbar },
  };
  if (x) trace.x = x;
  if (y) trace.y = y;
  if (xaxis) trace.xaxis = xaxis;
  if (yaxis) trace.yaxis = yaxis;
  if (name) trace.name = name;
  if (hover) {
    trace.hovertemplate = cellHover(hover.name, hover);
    if (hover.rows || hover.cols) trace.customdata = cellLabels(z, hover.rows, hover.cols);
  }
  return trace;
}
