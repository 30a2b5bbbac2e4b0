// Flash-Decoding stepper: a few query rows against a long KV cache (algo decode over /ws/trace).
// The server computes the splits, their partial outputs and LSEs, and the merge; this draws them.

import { formatBytes, formatCount } from "./format.js";
import { MeasuredRun } from "./live.js";
import { sci, showRun, table } from "./measured.js";
import { react } from "./plot.js";
import { onApply } from "./registry.js";
import { StepPrompt, urlHasStep } from "./step_prompt.js";
import {
  Figures, TILE_COLORS, exactnessText, gridState, heatmap, highlightLine, span, traceExports, traceSource,
} from "./trace_view.js";
import { mountView } from "./view.js";

const DEFAULTS = {
  n: 1, nk: 4096, d: 64, bn: 64, group: 4, splits: 8, dtype: "fp16", seed: 0, source: "simulated", step: 0,
};
const FIELDS = ["n", "nk", "d", "bn", "group", "splits", "dtype", "seed"];
const NUMBERS = ["n", "nk", "d", "bn", "group", "seed"];
const DTYPE_BYTES = { fp32: 4, fp16: 2, bf16: 2 };
const REDUCING = new Set(["reduce", "store"]);

const $ = (id) => document.getElementById(id);
const form = $("params");
const figures = new Figures();
const prompt = new StepPrompt();
let opening = !urlHasStep(); // a bare link opens once every split has taken its first block
onApply(() => (opening = false)); // a room's state names its own step

function fillForm(params) {
  for (const f of FIELDS) form.elements[f].value = params[f] === "auto" ? "" : params[f];
  form.elements.source.value = params.source;
}

function readForm(params) {
  for (const f of NUMBERS) {
    const raw = form.elements[f].value.trim();
    params[f] = raw === "" ? NaN : Number(raw);
  }
  const splits = form.elements.splits.value.trim();
  params.splits = splits === "" ? "auto" : Number(splits); // "auto": the occupancy rule
  params.dtype = form.elements.dtype.value;
  params.source = form.elements.source.value;
}

function traceParams(params) {
  const out = { algo: "decode" };
  for (const f of FIELDS) if (!(f === "splits" && ["", "auto"].includes(params.splits))) out[f] = params[f];
  return out;
}

const view = mountView({
  name: "decode",
  defaults: DEFAULTS,
  blank: { splits: "auto" }, // a shared state leaves the occupancy rule's splits out
  source: traceSource(figures),
  progressive: true, // the splits grid shows first, the other figures a frame later
  query: traceParams,
  fields: FIELDS,
  share: (params) => ({ ...traceParams(params), source: params.source }),
  fillForm,
  readForm,
  loaded(meta) {
    renderPlan(meta);
    askMeasured(meta);
    const step = opening ? meta.opening_step ?? 0 : view.params.step;
    opening = false;
    const last = meta.n_events - 1;
    prompt.show(step, step === meta.opening_step && step > 0
      ? `Step ${step} of ${last}: the splits run at once, one CTA each, so the steps go round them: every split's first key block, then every split's second, and so on. Press → or Play to step on; Home goes back to the start.`
      : `Step ${step} of ${last}. Press → or Play to step on.`);
    return { total: meta.n_events, step };
  },
  exports: (meta, { query: p }) => traceExports(
    p,
    `trace-decode-n${p.n}-nk${p.nk}-d${p.d}-bn${p.bn}-g${p.group}-s${p.splits ?? "auto"}-${p.dtype}-seed${p.seed}`,
  ),
  draw: (k, ev) => {
    prompt.seen(k);
    view.event = ev;
    render(ev);
    renderMeasuredSplit(ev);
  },
});

function renderPlan(meta) {
  const g = meta.grid;
  const bn = meta.tiles.block_n;
  const asked = traceParams(view.params).splits === undefined ? `the occupancy rule for ${g.sms} SMs asked for ${g.splits_requested}` : `${g.splits_requested} asked`;
  $("plan").textContent =
    `${g.rows} query rows (${meta.problem.group} heads × ${meta.problem.seq_q}) share one K/V head of ${formatCount(meta.problem.seq_k)} keys: ` +
    `${g.kv_blocks} key blocks of ${bn}, ${g.splits} splits of ${g.chunk} block${g.chunk > 1 ? "s" : ""} (${asked}).`;
  $("exactness").textContent = exactnessText(meta.exactness);
  const t = meta.traffic.algo;
  $("decode-total").textContent =
    `${formatCount(t.elements.hbm_total)} elements; partials ${formatBytes(t.bytes.acc_read + t.bytes.acc_write + t.bytes.stats_read + t.bytes.stats_write)}`;
}

function rowLabels(meta) {
  const nq = meta.problem.seq_q;
  return span([0, meta.grid.rows]).map((r) => (nq > 1 ? `h${Math.floor(r / nq)} q${r % nq}` : `head ${r}`));
}

/** Split s × key block j: which blocks each CTA (SM) streams, coloured by progress. */
function renderSplits(ev) {
  const meta = view.data;
  const g = meta.grid;
  const state = gridState(g, ev.step);
  const reducing = REDUCING.has(ev.phase);
  if (!figures.stale("splits", [ev.state.split, reducing, ...state.key])) return;
  const table = g.split_table;
  const z = table.map((s) => state.z[0].map((v, j) => (j >= s.blocks[0] && j < s.blocks[1] ? v : 0)));
  const labels = table.map((s) => `split ${s.split} · SM ${s.sm}`);
  const status = ["not this split's", "not yet", "done", "streaming now"];
  const bn = meta.tiles.block_n;
  const keys = (j) => `keys ${j * bn}–${Math.min((j + 1) * bn, meta.problem.seq_k) - 1}`;
  const hovers = z.map((row, s) => row.map((v, j) => `${labels[s]}: key block j=${j} (${keys(j)}), ${status[v]}`));
  const colorscale = [
    [0, TILE_COLORS.skipped], [0.25, TILE_COLORS.skipped], [0.25, TILE_COLORS.todo], [0.5, TILE_COLORS.todo],
    [0.5, TILE_COLORS.done], [0.75, TILE_COLORS.done], [0.75, TILE_COLORS.current], [1, TILE_COLORS.current],
  ];
  const shapes = [];
  const s = ev.state.split;
  if (s !== null && s !== undefined && s < table.length) {
    shapes.push({
      type: "rect", x0: -0.5, x1: g.kv_blocks - 0.5, y0: s - 0.5, y1: s + 0.5,
      line: { color: reducing ? "#7c3aed" : "#b45309", width: 3, dash: reducing ? "dot" : "solid" },
    });
  }
  const many = table.length > 24;
  react(
    "splits",
    [{
      type: "heatmap", z, zmin: 0, zmax: 3, colorscale, showscale: false, y: table.map((t) => t.split),
      customdata: hovers,
      xgap: g.kv_blocks <= 64 ? 1 : 0, ygap: many ? 0 : 2,
      hovertemplate: "%{customdata}<extra></extra>",
      meta: { legend: "figure:has(#splits) figcaption" },
    }],
    {
      height: Math.min(320, 90 + 16 * table.length),
      shapes,
      margin: { l: many ? 48 : 110 },
      xaxis: { title: { text: `key block j (${bn} keys each; cache of ${formatCount(meta.problem.seq_k)} keys)` }, showgrid: false, zeroline: false },
      yaxis: {
        autorange: "reversed", showgrid: false, zeroline: false,
        tickvals: many ? undefined : table.map((t) => t.split), ticktext: many ? undefined : labels,
        title: many ? { text: "split (CTA)" } : undefined,
      },
    },
  );
}

function renderStats(ev) {
  const st = ev.state;
  const meta = view.data;
  const reducing = REDUCING.has(ev.phase);
  const pair = reducing ? [st.partial_lse, st.lse] : [st.m, st.l];
  if (!figures.stale("stats", [reducing, ...pair])) return;
  const x = rowLabels(meta);
  const mode = x.length > 16 ? "lines" : "lines+markers";
  const traces = reducing
    ? [
      { x, y: st.partial_lse || [], name: `LSEₛ of split ${st.split ?? "–"}`, mode, line: { color: "#7c3aed" } },
      { x, y: st.lse || [], name: "LSE merged so far", mode, line: { color: "#059669", width: 3 } },
    ]
    : [
      { x, y: st.m || [], name: "m (running max)", mode, line: { color: "#b45309" } },
      { x, y: st.l || [], name: "ℓ (running sum)", mode, yaxis: "y2", line: { color: "#1d4ed8" } },
    ];
  react(
    "stats",
    traces,
    {
      height: 240,
      legend: { orientation: "h", y: 1.18 },
      margin: { r: 56, t: 28 },
      xaxis: { title: { text: "query row (head, query)" }, type: "category" },
      yaxis: { title: { text: reducing ? "log-sum-exp" : "m" } },
      yaxis2: { title: { text: "ℓ" }, overlaying: "y", side: "right", rangemode: "tozero" },
    },
  );
}

function renderOutputs(ev) {
  const st = ev.state;
  const meta = view.data;
  const reducing = REDUCING.has(ev.phase);
  const left = reducing || ev.phase === "store_partial" ? st.partial_o : st.o_hat;
  const right = reducing ? st.o : null;
  if (!figures.stale("outputs", [ev.phase, st.split, left, right])) return;
  const y = rowLabels(meta);
  const stack = ($("outputs").clientWidth || 800) < 560; // a phone: the two panels one above the other
  const range = figures.range("o", [left || [], right || []], { symmetric: true });
  const cols = (m) => (m && m.length ? m[0].map((_, c) => c * st.col_stride) : []);
  const traces = [];
  const annotations = [];
  const title = (axis, text) => annotations.push({
    xref: `${axis} domain`, yref: stack ? `${axis.replace("x", "y")} domain` : "paper", x: 0, y: 1, yanchor: "bottom", xanchor: "left", showarrow: false, text: `<b>${text}</b>`,
  });
  const leftTitle = reducing
    ? ev.phase === "store" ? "partials: all merged" : `partial Oₛ of split ${st.split}`
    : ev.phase === "store_partial" ? `partial Oₛ of split ${st.split} (written, fp32)` : `split ${st.split}: Õ / ℓ so far`;
  title("x", leftTitle);
  title("x2", ev.phase === "store" ? "O (final, written in the dtype)" : "O merged so far");
  const note = st.col_stride > 1 ? ` (mean of ${st.col_stride} columns)` : "";
  const hover = (name) => ({ name, row: null, col: "c", note });
  const leftName = reducing || ev.phase === "store_partial" ? "Oₛ" : "Õ/ℓ";
  traces.push(left
    ? heatmap(left, { x: cols(left), y, range, colorbar: stack ? { x: 1.0, ...(right ? { y: 0.79, len: 0.42 } : {}), thickness: 8 } : { x: 0.48, thickness: 8 }, hover: hover(leftName) })
    : { type: "heatmap", z: [[null]], showscale: false, hoverinfo: "skip" });
  traces.push(right
    ? heatmap(right, { x: cols(right), y, range, xaxis: "x2", yaxis: "y2", colorbar: stack ? { x: 1.0, y: 0.21, len: 0.42, thickness: 8 } : { x: 1.0, thickness: 8 }, hover: hover("O") })
    : { type: "heatmap", z: [[null]], xaxis: "x2", yaxis: "y2", showscale: false, hoverinfo: "skip" });
  if (!right) {
    annotations.push({ xref: "x2 domain", yref: "y2 domain", x: 0.5, y: 0.5, showarrow: false, text: "the reduce has not started", font: { color: "#4b5563" } });
  }
  const dim = st.col_stride > 1 ? `head-dim column c (mean of ${st.col_stride})` : "head-dim column c";
  const height = Math.min(300, 110 + 14 * y.length);
  const alone = stack && !right; // a phone before the reduce: the left panel alone, full size
  react(
    "outputs",
    alone ? traces.slice(0, 1) : traces,
    stack
      ? {
        height: alone ? height : 2 * height,
        margin: { l: 64, t: 24 },
        annotations: alone ? annotations.filter((a) => !a.xref.startsWith("x2")) : annotations,
        xaxis: { domain: [0, 0.88], anchor: "y", title: alone ? { text: dim } : undefined },
        yaxis: { domain: alone ? [0, 1] : [0.58, 1], type: "category", autorange: "reversed" },
        xaxis2: { domain: [0, 0.88], title: { text: dim }, anchor: "y2", visible: Boolean(right) },
        yaxis2: { domain: [0, 0.42], type: "category", autorange: "reversed", anchor: "x2", visible: Boolean(right) },
      }
      : {
        height,
        margin: { l: 64, t: 24 },
        annotations,
        xaxis: { domain: [0, 0.45], title: { text: dim } },
        yaxis: { type: "category", autorange: "reversed" },
        xaxis2: { domain: [0.55, 0.98], title: { text: dim }, anchor: "y2", visible: Boolean(right) },
        yaxis2: { type: "category", autorange: "reversed", anchor: "x2", showticklabels: false, visible: Boolean(right) },
      },
  );
}

/** Each split's weight in the output, e^(LSEₛ − LSE) (mean, min–max over rows), merged so far. */
function renderWeights(ev) {
  const meta = view.data;
  const table = meta.grid.split_table;
  const current = ev.phase === "reduce" ? ev.state.split : -1;
  const doneBelow = ev.phase === "store" ? table.length : Math.max(current, 0);
  if (!figures.stale("weights", [doneBelow, current])) return;
  const color = table.map((s) => (s.split < doneBelow ? TILE_COLORS.done : s.split === current ? TILE_COLORS.current : TILE_COLORS.todo));
  react(
    "weights",
    [{
      type: "bar", x: table.map((s) => s.split), y: table.map((s) => s.weight_mean),
      marker: { color, line: { color: "#6b7280", width: 1 } },
      error_y: {
        type: "data", symmetric: false, color: "#374151", thickness: 1,
        array: table.map((s) => s.weight_max - s.weight_mean), arrayminus: table.map((s) => s.weight_mean - s.weight_min),
      },
      customdata: table.map((s) => [s.keys[0], s.keys[1] - 1, s.lse_mean]),
      hovertemplate: "split %{x} (keys %{customdata[0]}–%{customdata[1]}): weight %{y:.3f}, mean LSEₛ %{customdata[2]:.2f}<extra></extra>",
    }],
    {
      height: 220,
      xaxis: { title: { text: "split" }, dtick: table.length <= 16 ? 1 : undefined },
      yaxis: { title: { text: "e^(LSEₛ − LSE)" }, rangemode: "tozero" },
    },
  );
}

function describe(ev) {
  const st = ev.state;
  const meta = view.data;
  const bn = meta.tiles.block_n;
  if (ev.phase === "reduce") {
    const w = st.weight || [];
    const lo = Math.min(...w.filter((v) => v !== null));
    const hi = Math.max(...w.filter((v) => v !== null));
    return `Step ${ev.step}: reduce — merge split ${st.split}: its share of what is merged so far is ${lo.toFixed(3)}–${hi.toFixed(3)} per row (O ← (1 − w)·O + w·Oₛ)`;
  }
  if (ev.phase === "store") return `Step ${ev.step}: store — the merged O is exact softmax attention over all ${formatCount(meta.problem.seq_k)} keys`;
  const sm = meta.grid.split_table[st.split]?.sm;
  const where = ev.kv_block !== null
    ? ` — key block ${ev.kv_block} (keys ${ev.kv_block * bn}–${Math.min((ev.kv_block + 1) * bn, meta.problem.seq_k) - 1})`
    : "";
  return `Step ${ev.step}: split ${st.split} (CTA on SM ${sm}): ${ev.phase.replace("_", " ")}${where}`;
}

function render(ev) {
  const meta = view.data;
  $("now").textContent = describe(ev);
  highlightLine(ev.line);
  const e = DTYPE_BYTES[meta.problem.dtype] || 4;
  const t = ev.totals;
  $("hbm-read").textContent = `${formatCount(t.hbm_read)} (${formatBytes(t.hbm_read * e)})`;
  $("hbm-write").textContent = `${formatCount(t.hbm_write)} (${formatBytes(t.hbm_write * e)})`;
  $("acc-rw").textContent =
    `${formatCount(t.acc_write + t.stats_write)} / ${formatCount(t.acc_read + t.stats_read)} (${formatBytes((t.acc_write + t.stats_write + t.acc_read + t.stats_read) * 4)})`;
  renderSplits(ev);
  renderStats(ev);
  renderOutputs(ev);
  renderWeights(ev);
}

// --- the measured source: the split kernel's partial outputs and LSEs on the same inputs ---

const measured = new MeasuredRun((update) => {
  showRun(update, drawMeasured);
  if (update.state === "done" && view.event) renderMeasuredSplit(view.event);
});

function askMeasured(meta) {
  if (view.params.source !== "measured") {
    measured.clear();
    return;
  }
  const p = meta.problem;
  measured.ask({
    mode: "decode", what: "trace", heads: p.group, kv_heads: 1, seq: p.seq_q, seq_k: p.seq_k, head_dim: p.head_dim,
    dtype: p.dtype, block_m: 16, block_n: meta.tiles.block_n, splits: meta.grid.splits, seed: view.params.seed,
  });
}

function drawMeasured(run) {
  const d = run.result.decode;
  const bad = d.per_split.filter((s) => !s.within).length;
  $("measured-status").textContent = bad
    ? `${bad} of ${d.splits} splits beyond the tolerance`
    : `all ${d.splits} splits within the ${view.data.problem.dtype} tolerance; merged O: max |kernel − simulator| = ${sci(d.max_o_diff)}`;
  const rows = d.per_split.map((s) => [
    `split ${s.split}`, sci(s.max_lse_diff), sci(s.max_o_diff),
    { text: s.within ? "within" : "beyond", cls: s.within ? "within" : "beyond" },
  ]);
  const lse = document.createElement("div");
  lse.id = "measured-lse";
  lse.className = "plot measured-strip";
  lse.setAttribute("role", "img");
  lse.setAttribute("aria-label", "The current split's LSE per row: kernel and simulator");
  const t = table(["split", "max |ΔLSEₛ|", "max |ΔOₛ|", ""], rows, "Each split: kernel against simulator");
  t.id = "measured-splits";
  const note = document.createElement("p");
  note.className = "muted small";
  note.textContent = `Tolerance: |ΔLSE| ≤ ${sci(d.tolerance.lse)}, |ΔO| ≤ ${sci(d.tolerance.o)} (one rounding flip of a probability). ${d.note}.`;
  $("measured-body").replaceChildren(t, lse, note);
}

/** The split of step `ev` highlighted in the table, and its LSE per row from both sides. */
function renderMeasuredSplit(ev) {
  const d = measured.result && measured.result.decode;
  if (!d || !$("measured-splits")) return;
  const s = ev.state.split ?? 0;
  for (const [i, tr] of [...$("measured-splits").tBodies[0].rows].entries()) tr.classList.toggle("current", i === s);
  const split = d.per_split[Math.min(s, d.per_split.length - 1)];
  const rows = span([0, d.rows]);
  react("measured-lse", [
    { x: rows, y: split.lse_simulated, name: "simulator", mode: "lines", line: { color: "#7c3aed" } },
    { x: rows, y: split.lse_kernel, name: "kernel", mode: "markers", marker: { color: "#f59e0b", size: 7, symbol: "x" } },
  ], {
    height: 150,
    legend: { orientation: "h", y: 1.2 },
    margin: { t: 20, b: 30 },
    xaxis: { title: { text: `query row (split ${split.split})` }, dtick: d.rows <= 16 ? 1 : undefined },
    yaxis: { title: { text: "LSEₛ" } },
  });
}
