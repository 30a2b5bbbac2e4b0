// The backward stepper: the FlashAttention-2 backward (algo fa2-bwd) served over /ws/trace,
// one operation per step. The server computes P, dS and the gradient partials; this draws them.

import { formatBytes, formatCount } from "./format.js";
import { MeasuredRun } from "./live.js";
import { sci, showRun, table } from "./measured.js";
import { react } from "./plot.js";
import { onApply } from "./registry.js";
import { StepPrompt, urlHasStep } from "./step_prompt.js";
import {
  Figures, cellSpans, drawGrid, drawWrites, exactnessText, gridState, heatmap, highlightLine, span, traceExports,
  traceSource,
} from "./trace_view.js";
import { mountView } from "./view.js";

const DEFAULTS = {
  n: 128, nk: "", d: 32, bm: 32, bn: 32, causal: false, dtype: "fp32", seed: 0, source: "simulated", step: 0,
};
const FIELDS = ["n", "nk", "d", "bm", "bn", "causal", "dtype", "seed"];
const NUMBERS = ["n", "d", "bm", "bn", "seed"];
const DTYPE_BYTES = { fp32: 4, fp16: 2, bf16: 2 };
const PHASE_TEXT = {
  preprocess_d: "preprocess: D = rowsum(dO ∘ O) for a query block",
  load_kv_bwd: "a CTA takes key block j: load Kⱼ, Vⱼ; dK = dV = 0",
  load_q_bwd: "load Qᵢ, dOᵢ, LSEᵢ, Dᵢ",
  recompute_p: "rebuild P = e^(S − LSE) from the saved log-sum-exp",
  dv: "dV += Pᵀ dO",
  dp: "dP = dO Vᵀ",
  ds: "dS = P ∘ (dP − D)",
  dq: "dQᵢ += dS Kⱼ: read, add, write the fp32 accumulator in HBM",
  dk: "dK += dSᵀ Q",
  store_dkdv: "write dKⱼ, dVⱼ",
  convert_dq: "postprocess: dQᵢ = scale · accumulator, written in the dtype",
};

const $ = (id) => document.getElementById(id);
const form = $("params");
const figures = new Figures();
const prompt = new StepPrompt();
let opening = !urlHasStep(); // a bare link opens on a step where the backward is at work
onApply(() => (opening = false)); // a room's state names its own step

function fillForm(params) {
  for (const f of ["n", "nk", "d", "bm", "bn", "dtype", "seed", "source"]) form.elements[f].value = params[f];
  form.elements.causal.checked = Boolean(params.causal);
}

function readForm(params) {
  for (const f of NUMBERS) {
    const raw = form.elements[f].value.trim();
    params[f] = raw === "" ? NaN : Number(raw);
  }
  const nk = form.elements.nk.value.trim();
  params.nk = nk === "" ? "" : Number(nk);
  params.dtype = form.elements.dtype.value;
  params.causal = form.elements.causal.checked;
  params.source = form.elements.source.value;
}

function traceParams(params) {
  const out = { algo: "fa2-bwd" };
  for (const f of FIELDS) if (!(f === "nk" && params.nk === "")) out[f] = params[f];
  return out;
}

const view = mountView({
  name: "backward",
  defaults: DEFAULTS,
  source: traceSource(figures),
  progressive: true, // the tile grid shows first, the other figures a frame later
  query: traceParams,
  fields: FIELDS,
  share: (params) => ({ ...traceParams(params), source: params.source }),
  fillForm,
  readForm,
  loaded(meta) {
    const t = meta.traffic.algo;
    $("bwd-total").textContent =
      `${formatCount(t.elements.hbm_total)} elements; dQ accumulator ${formatBytes(t.bytes.acc_read + t.bytes.acc_write)}`;
    $("exactness").textContent = exactnessText(meta.exactness);
    askMeasured(meta);
    const step = opening ? meta.opening_step ?? 0 : view.params.step;
    opening = false;
    const last = meta.n_events - 1;
    prompt.show(step, step === meta.opening_step && step > 0
      ? `Step ${step} of ${last}: P has been rebuilt from the saved LSE, dV and dP are in, and dS = P ∘ (dP − D) has just formed. Press → or Play to step on; Home goes back to the preprocess.`
      : `Step ${step} of ${last}. Press → or Play to step on.`);
    return { total: meta.n_events, step };
  },
  exports: (meta, { query: p }) => traceExports(
    p,
    `trace-fa2-bwd-n${p.n}${p.nk ? `-nk${p.nk}` : ""}-d${p.d}-${p.bm}x${p.bn}${p.causal ? "-causal" : ""}-${p.dtype}-seed${p.seed}`,
  ),
  draw: (k, ev) => {
    prompt.seen(k);
    render(ev);
  },
});

const EMPTY = { type: "heatmap", z: [[null]], showscale: false, hoverinfo: "skip" };

// The two panels of a pair and where each one's colour bar stands (paper coordinates); below
// STACK_BELOW_PX (a phone) the pair stacks, one panel above the other.
const PANELS = [{ domain: [0, 0.4], bar: 0.41 }, { domain: [0.57, 0.97], bar: 0.98 }];
const STACKED = [{ domain: [0.58, 1], bar: 0.79 }, { domain: [0, 0.42], bar: 0.21 }];
const STACK_BELOW_PX = 560;

/**
 * Two heatmaps side by side (left on x/y, right on x2/y2), each with its colour bar, or a note
 * where one is missing.
 */
function pair(id, left, right, { height = 230 } = {}) {
  const traces = [];
  const annotations = [];
  const stack = ($(id).clientWidth || 800) < STACK_BELOW_PX;
  for (const [k, side] of [[0, left], [1, right]]) {
    const axes = k === 0 ? {} : { xaxis: "x2", yaxis: "y2" };
    if (side.z) {
      const look = side.colorscale ? { colorscale: side.colorscale } : {};
      const colorbar = stack
        ? { x: 1.0, y: STACKED[k].bar, len: 0.42, thickness: 8 }
        : { x: PANELS[k].bar, thickness: 8 };
      traces.push(heatmap(side.z, { ...axes, ...look, x: side.x, y: side.y, range: side.range, colorbar, hover: side.hover }));
    } else {
      traces.push({ ...EMPTY, ...axes });
      annotations.push({
        xref: `x${k ? 2 : ""} domain`, yref: `y${k ? 2 : ""} domain`, x: 0.5, y: 0.5, showarrow: false,
        text: side.empty, font: { color: "#4b5563" },
      });
    }
    annotations.push({
      xref: `x${k ? 2 : ""} domain`, yref: stack ? `y${k ? 2 : ""} domain` : "paper", x: 0, y: 1.0,
      yanchor: "bottom", xanchor: "left", showarrow: false, text: `<b>${side.title}</b>`,
    });
  }
  // Stacked, the lower panel names the x axis for both when they share it.
  const shared = left.xTitle === right.xTitle;
  react(
    id,
    traces,
    stack
      ? {
        height: 2 * height + 40,
        margin: { t: 24 },
        annotations,
        xaxis: { domain: [0, 0.88], anchor: "y", title: shared ? undefined : { text: left.xTitle } },
        yaxis: { domain: STACKED[0].domain, title: { text: left.yTitle }, autorange: "reversed" },
        xaxis2: { domain: [0, 0.88], title: { text: right.xTitle }, anchor: "y2" },
        yaxis2: { domain: STACKED[1].domain, title: { text: right.yTitle || left.yTitle }, autorange: "reversed", anchor: "x2" },
      }
      : {
        height,
        margin: { t: 24 },
        annotations,
        xaxis: { domain: PANELS[0].domain, title: { text: left.xTitle } },
        yaxis: { title: { text: left.yTitle }, autorange: "reversed" },
        xaxis2: { domain: PANELS[1].domain, title: { text: right.xTitle }, anchor: "y2" },
        yaxis2: { autorange: "reversed", anchor: "x2" },
      },
  );
}

function tileAxis(st, key) {
  const stride = st.tile_stride || 1;
  const first = key === "rows" ? st.rows[0] : st.cols[0];
  return (n) => Array.from({ length: n }, (_, i) => first + i * stride);
}

function renderTile(ev) {
  const st = ev.state;
  if (!figures.stale("tile", [st.rows, st.cols, st.p, st.ds])) return;
  const have = st.rows && st.cols;
  const note = have ? "not computed yet at this step" : "no tile at this step";
  const range = figures.range("ds", st.ds || [], { symmetric: true });
  const stride = st.tile_stride || 1;
  // A cell averages stride × stride entries on large tiles: its hover gives the spans.
  const hover = (name, z, format) => ({
    name, format, rows: cellSpans(st.rows[0], z.length, stride, st.rows[1]),
    cols: cellSpans(st.cols[0], z[0].length, stride, st.cols[1]), note: stride > 1 ? " (mean of the cell)" : "",
  });
  const side = (name, z, title, r, colorscale, format) => ({
    colorscale,
    z: have && z ? z : null,
    x: have && z ? tileAxis(st, "cols")(z[0].length) : undefined,
    y: have && z ? tileAxis(st, "rows")(z.length) : undefined,
    hover: have && z ? hover(name, z, format) : undefined,
    range: r,
    title,
    empty: `${name}: ${note}`,
    xTitle: "key j",
    yTitle: "query row i",
  });
  pair(
    "tile",
    // P is a probability: its hover reads as a decimal (".3~r": 0.00066, not 660µ).
    side("P", st.p, "P = e^(S − LSE)", figures.range("p", st.p || [], { zero: true }), [[0, "#f8fafc"], [1, "#1e3a8a"]], ".3~r"),
    side("dS", st.ds, "dS = P ∘ (dP − D)", range, undefined, ".3~g"),
  );
}

function renderAccumulators(ev) {
  const st = ev.state;
  if (!figures.stale("acc", [st.cols, st.dk, st.dv])) return;
  const cols = st.cols ? span(st.cols) : null;
  const dims = (m) => m[0].map((_, c) => c * st.col_stride);
  const dim = st.col_stride > 1 ? `head-dim column c (mean of ${st.col_stride})` : "head-dim column c";
  const side = (name, z) => ({
    z: cols && z ? z : null,
    x: cols && z ? dims(z) : undefined,
    y: cols || undefined,
    hover: cols && z ? { name, row: "j", col: "c", note: st.col_stride > 1 ? ` (mean of ${st.col_stride} columns)` : "" } : undefined,
    range: figures.range(name, z || [], { symmetric: true }),
    title: `${name}ⱼ (fp32, on chip)`,
    empty: `${name}: no key block in flight`,
    xTitle: dim,
    yTitle: "key j",
  });
  pair("acc", side("dK", st.dk), side("dV", st.dv));
}

function renderRows(ev) {
  const st = ev.state;
  if (!figures.stale("dq", [st.rows, st.dq, st.lse, st.delta])) return;
  const rows = st.rows ? span(st.rows) : [];
  const traces = [];
  const annotations = [
    { xref: "x domain", yref: "paper", x: 0, y: 1, yanchor: "bottom", xanchor: "left", showarrow: false, text: "<b>dQᵢ so far (scaled)</b>" },
    { xref: "x2 domain", yref: "paper", x: 0, y: 1, yanchor: "bottom", xanchor: "left", showarrow: false, text: "<b>LSEᵢ and Dᵢ</b>" },
  ];
  if (st.dq) {
    const x = st.dq[0].map((_, c) => c * st.col_stride);
    const note = st.col_stride > 1 ? ` (mean of ${st.col_stride} columns)` : "";
    traces.push(heatmap(st.dq, {
      x, y: rows, range: figures.range("dq", st.dq, { symmetric: true }), colorbar: { x: 0.53, thickness: 8 },
      hover: { name: "dQ", col: "c", note },
    }));
  } else {
    traces.push({ ...EMPTY });
    annotations.push({ xref: "x domain", yref: "y domain", x: 0.5, y: 0.5, showarrow: false, text: "dQ: no query block in flight", font: { color: "#4b5563" } });
  }
  const mode = rows.length > 16 ? "lines" : "lines+markers";
  traces.push({ x: rows, y: st.lse || [], name: "LSE", mode, xaxis: "x2", yaxis: "y2", line: { color: "#b45309" }, marker: { size: 4 } });
  traces.push({ x: rows, y: st.delta || [], name: "D", mode, xaxis: "x2", yaxis: "y2", line: { color: "#1d4ed8" }, marker: { size: 4 } });
  react(
    "dq",
    traces,
    {
      height: 230,
      margin: { t: 24 },
      annotations,
      legend: { x: 1, xanchor: "right", y: 1, bgcolor: "rgba(255,255,255,0.7)" },
      xaxis: { domain: [0, 0.52], title: { text: st.col_stride > 1 ? `head-dim column c (mean of ${st.col_stride})` : "head-dim column c" } },
      yaxis: { title: { text: "query row i" }, autorange: "reversed" },
      xaxis2: { domain: [0.68, 1], title: { text: "query row i" }, anchor: "y2" },
      yaxis2: { anchor: "x2" },
    },
  );
}

function describe(ev) {
  const st = ev.state;
  const where = [];
  if (ev.q_block !== null && st.rows) where.push(`Q block ${ev.q_block} (rows ${st.rows[0]}–${st.rows[1] - 1})`);
  if (ev.kv_block !== null && st.cols) where.push(`K/V block ${ev.kv_block} (keys ${st.cols[0]}–${st.cols[1] - 1})`);
  const masked = ev.masked ? ", partial tile (masked pairs: P = 0)" : "";
  return `Step ${ev.step}: ${PHASE_TEXT[ev.phase] || ev.phase} — ${where.join(" × ") || "all rows"}${masked}`;
}

function render(ev) {
  const meta = view.data;
  $("now").textContent = describe(ev);
  highlightLine(ev.line);
  const e = DTYPE_BYTES[meta.problem.dtype] || 4;
  const t = ev.totals;
  $("hbm-read").textContent = `${formatCount(t.hbm_read)} (${formatBytes(t.hbm_read * e)})`;
  $("hbm-write").textContent = `${formatCount(t.hbm_write)} (${formatBytes(t.hbm_write * e)})`;
  $("stats-rw").textContent = `${formatCount(t.stats_read)} / ${formatCount(t.stats_write)} (${formatBytes((t.stats_read + t.stats_write) * 4)})`;
  $("acc-rw").textContent = `${formatCount(t.acc_read)} / ${formatCount(t.acc_write)} (${formatBytes((t.acc_read + t.acc_write) * 4)})`;
  const state = gridState(meta.grid, ev.step);
  if (figures.stale("grid", [ev.q_block, ev.kv_block, state.key[0], state.key[1]])) {
    drawGrid($("grid"), meta, ev, state, { height: 260, fresh: figures.stale("grid-tiles", [meta]) });
  }
  if (figures.stale("writes", state.writes)) {
    drawWrites($("writes"), meta, state, { label: "dQᵢ → HBM", height: 260 });
  }
  renderTile(ev);
  renderAccumulators(ev);
  renderRows(ev);
}

// --- the measured source: the backward kernel's dQ, dK, dV on the same inputs --------------

const measured = new MeasuredRun((update) => showRun(update, drawMeasured));

function askMeasured(meta) {
  if (view.params.source !== "measured") {
    measured.clear();
    return;
  }
  const p = meta.problem;
  measured.ask({
    mode: "bwd", what: "trace", seq: p.seq_q, seq_k: p.seq_k, head_dim: p.head_dim, causal: p.causal,
    dtype: p.dtype, block_m: meta.tiles.block_m, block_n: meta.tiles.block_n, seed: view.params.seed,
  });
}

function drawMeasured(run) {
  const g = run.result.gradients;
  const bad = g.gradients.filter((x) => !x.within).map((x) => x.name);
  $("measured-status").textContent = bad.length
    ? `${bad.join(", ")} beyond the tolerance (${g.route} route)`
    : `dQ, dK and dV within the tolerance (${g.route} route)`;
  const rows = g.gradients.map((x) => [
    x.name, sci(x.kernel_vs_float64), sci(x.simulator_vs_float64), sci(x.torch_vs_float64), sci(x.kernel_vs_simulator),
    sci(x.bound), { text: x.within ? "within" : "beyond", cls: x.within ? "within" : "beyond" },
  ]);
  const note = document.createElement("p");
  note.className = "muted small";
  note.textContent = `Max |error|, on the simulator's inputs. Rule: ${g.rule}. ${g.per_tile[0].toUpperCase()}${g.per_tile.slice(1)}.`;
  $("measured-body").replaceChildren(
    table(["gradient", "kernel − float64", "simulator − float64", `PyTorch in ${view.params.dtype} − float64`,
      "kernel − simulator", "bound", ""], rows,
      "The backward kernel's gradients against the simulator and float64"),
    note,
  );
}
