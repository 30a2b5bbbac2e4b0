// The tile stepper: step through a FlashAttention-1 or -2 forward trace served over /ws/trace.
// The server computes every event (state, counters, what is on chip); this module only draws.

import { showErrors } from "./errors.js";
import { formatBytes, formatCount } from "./format.js";
import { LazyFigures, react } from "./plot.js";
import { MeasuredRun } from "./live.js";
import { drawStrip, sci, showRun, table } from "./measured.js";
import { changed, onApply } from "./registry.js";
import { StepPrompt, urlHasStep } from "./step_prompt.js";
import { drawAccumulator, drawError, drawStats, drawTile, errorReadout } from "./tile_state.js";
import {
  Figures, drawGrid, drawWrites, exactnessText, gridState, heatmap, highlightLine, span, traceExports, traceSource,
} from "./trace_view.js";
import { writeParams } from "./url.js";
import { mountView } from "./view.js";

const DEFAULTS = {
  algo: "fa2", n: 256, nk: "", d: 64, bm: 64, bn: 64, causal: false, dtype: "fp32", seed: 0, gpu: "h100-sxm",
  source: "simulated", step: 0,
};
const TRACE_FIELDS = ["algo", "n", "nk", "d", "bm", "bn", "causal", "dtype", "seed"];
const NUMBERS = ["n", "d", "bm", "bn", "seed"];
const DTYPE_BYTES = { fp32: 4, fp16: 2, bf16: 2 };
const KIB = 1024;

const $ = (id) => document.getElementById(id);
const form = $("params");
const figures = new Figures();
const lazy = new LazyFigures(); // figures off screen are drawn when they come into view
const gpus = {}; // preset key → specs (GET /api/hardware)
const prompt = new StepPrompt();
let opening = !urlHasStep(); // a bare link opens where the server says the algorithm is at work
onApply(() => (opening = false)); // a room's state names its own step

function fillForm(params) {
  for (const f of ["algo", "n", "nk", "d", "bm", "bn", "dtype", "seed", "gpu", "source"]) {
    if (form.elements[f]) form.elements[f].value = params[f];
  }
  form.elements.causal.checked = Boolean(params.causal);
}

function readForm(params) {
  for (const f of NUMBERS) {
    const raw = form.elements[f].value.trim();
    params[f] = raw === "" ? NaN : Number(raw);
  }
  const nk = form.elements.nk.value.trim();
  params.nk = nk === "" ? "" : Number(nk);
  params.algo = form.elements.algo.value;
  params.dtype = form.elements.dtype.value;
  params.causal = form.elements.causal.checked;
  params.gpu = form.elements.gpu.value;
  params.source = form.elements.source.value;
}

function traceParams(params) {
  const out = {};
  for (const f of TRACE_FIELDS) {
    if (f === "nk" && params.nk === "") continue;
    out[f] = params[f];
  }
  return out;
}

const view = mountView({
  name: "tiles",
  defaults: DEFAULTS,
  fields: TRACE_FIELDS,
  source: traceSource(figures),
  progressive: true, // the tile grid shows first, the other figures a frame later
  urlAfterPaint: true, // the address follows a step once it is on screen
  query: traceParams,
  share: (params) => ({ ...traceParams(params), gpu: params.gpu, source: params.source }),
  fillForm,
  readForm,
  loaded(meta) {
    $("algo-title").textContent = meta.title;
    renderTotals(meta);
    askMeasured(meta);
    const step = opening ? meta.opening_step ?? 0 : Math.min(view.params.step, meta.n_events - 1);
    opening = false;
    const last = meta.n_events - 1;
    const what = meta.grid.kv_blocks > 1
      ? "a second key block meets the running max, so α rescales ℓ and Õ"
      : "the softmax of the only key block";
    const move = "Press → or Play to step on; Home goes back to the start.";
    let text = `Step ${step} of ${last}. ${move}`;
    if (step === 0) text = `Step 0 of ${last}: nothing computed yet. Press → or Play to start.`;
    else if (step === meta.opening_step) text = `Step ${step} of ${last}: ${what}. ${move}`;
    prompt.show(step, text);
    return { total: meta.n_events, step };
  },
  exports: (meta, { query: p }) => traceExports(
    p,
    `trace-${p.algo}-n${p.n}${p.nk ? `-nk${p.nk}` : ""}-d${p.d}-${p.bm}x${p.bn}${p.causal ? "-causal" : ""}-${p.dtype}-seed${p.seed}`,
  ),
  draw: (k, ev) => {
    prompt.seen(k);
    render(withMeasured(ev));
    renderMeasuredStep(k);
  },
});

// --- the measured source: the instrumented kernel's own state, step by step ------------------

const measured = new MeasuredRun((update) => {
  showRun(update, drawMeasured);
  if (update.state === "done" && view.data) redrawStep();
});

/** The run that measures what the simulated trace on screen shows (FA-2 only). */
function askMeasured(meta) {
  const p = view.params;
  if (p.source !== "measured") {
    measured.clear();
    return;
  }
  if (meta.algo !== "fa2") {
    measured.clear();
    showRun({ state: "note", text: "The instrumented kernel runs FA-2's loop order: choose FA-2 to see it measured." }, () => {});
    return;
  }
  measured.ask({
    mode: "fwd", what: "trace", seq: meta.problem.seq_q, seq_k: meta.problem.seq_k, head_dim: meta.problem.head_dim,
    causal: meta.problem.causal, dtype: meta.problem.dtype, block_m: meta.tiles.block_m, block_n: meta.tiles.block_n,
    seed: p.seed,
  });
}

/** The event with the kernel's state in place of the simulator's, where a run has finished. */
function withMeasured(ev) {
  const trace = measured.result && measured.result.trace;
  const got = trace && trace.events[ev.step];
  if (!got) return ev;
  return { ...ev, measured: true, state: { ...ev.state, ...got.state } };
}

function redrawStep() {
  if (view.event) {
    figures.reset();
    render(withMeasured(view.event));
    renderMeasuredStep(view.step);
  }
}

function drawMeasured(run) {
  const trace = run.result.trace;
  const c = trace.compare;
  const n = c.ratio_per_step.length;
  const beyond = c.beyond.length;
  $("measured-status").textContent = beyond
    ? `${beyond} of ${n} steps beyond the ${view.data.problem.dtype} tolerance (marked ✕ in the strip)`
    : `every one of ${n} steps within the ${view.data.problem.dtype} tolerance of the simulator`;
  const body = $("measured-body");
  const step = document.createElement("div");
  step.id = "measured-step";
  const strip = document.createElement("div");
  strip.id = "measured-strip";
  strip.className = "plot measured-strip";
  strip.setAttribute("role", "img");
  strip.setAttribute("aria-label", "Each step's gap between kernel and simulator over its tolerance");
  const note = document.createElement("p");
  note.className = "muted small";
  note.textContent = `Tolerance: ${c.tolerance.rule}; rtol = ${c.tolerance.rtol}. ` +
    `The kernel's output against float64: max |O − exact| = ${sci(c.max_abs_err_vs_reference)}.` +
    (trace.events_carry_o ? "" : " Beyond 256 query rows the kernel's Õ is not sent: the output heatmap shows the simulator's.");
  body.replaceChildren(step, strip, note);
}

/** The diff panel at step k: the kernel's |Δm|, |Δℓ|, |ΔÕ| and the strip's cursor. */
function renderMeasuredStep(k) {
  const trace = measured.result && measured.result.trace;
  if (!trace || !$("measured-step")) return;
  const c = trace.compare;
  const ratio = c.ratio_per_step[k];
  const over = ratio === null || ratio > 1;
  const names = { m: "|Δm| (running max)", l: "|Δℓ| (running sum)", o: "|ΔÕ| (accumulator)" };
  const rows = Object.keys(names).map((key) => [names[key], sci(c.per_step[key][k])]);
  rows.push(["largest gap ÷ tolerance", { text: sci(ratio), cls: over ? "beyond" : "within" }]);
  $("measured-step").replaceChildren(table([`step ${k}: kernel − simulator`, "max"], rows, "Kernel against simulator at this step"));
  drawStrip($("measured-strip"), c.ratio_per_step, c.beyond, k);
}

function renderTotals(meta) {
  const flash = meta.traffic.algo.elements.hbm_total;
  const naive = meta.traffic.naive.elements.hbm_total;
  $("flash-total").textContent = `${formatCount(flash)} elements`;
  $("naive-total").textContent = `${formatCount(naive)} elements (${(naive / flash).toFixed(1)}× this algorithm)`;
  $("exactness").textContent = exactnessText(meta.exactness);
  renderPeak();
}

function gpu() {
  return gpus[view.params.gpu] || null;
}

/** Capacity of one CTA on the chosen GPU: shared memory per block, and one SM's register file. */
function capacity() {
  const g = gpu();
  return g ? { smem: g.smem_per_block_kib * KIB, regs: g.regs_per_sm * 4, name: g.name.replace(/^NVIDIA /, "") } : null;
}

function kib(b) {
  return `${(b / KIB).toFixed(b < 10 * KIB ? 1 : 0)} KiB`;
}

function renderPeak() {
  const cap = capacity();
  const meta = view.data;
  if (!meta || !cap) return;
  const peak = meta.onchip_peak;
  const over = peak.smem_bytes > cap.smem;
  $("onchip-peak").textContent =
    `Largest on-chip need in this trace: ${kib(peak.smem_bytes)} of shared memory (step ${peak.smem_step}), ` +
    `${kib(peak.reg_bytes)} of registers (step ${peak.reg_step}). ` +
    (over ? `That does not fit the ${kib(cap.smem)} a CTA may use on the ${cap.name}.` : `The ${cap.name} allows ${kib(cap.smem)} per CTA.`);
  $("onchip-peak").classList.toggle("over", over);
}

function renderOnchip(ev) {
  const chip = ev.onchip;
  const cap = capacity();
  if (!chip || !cap) return;
  const body = $("onchip-body");
  body.replaceChildren(
    ...chip.buffers.map((b) => {
      const tr = document.createElement("tr");
      tr.className = b.where;
      const cells = [b.name, b.where === "smem" ? "shared mem." : "registers", `${b.shape[0]} × ${b.shape[1]}`, `${formatCount(b.bytes)} B`, b.what];
      for (const text of cells) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.append(td);
      }
      return tr;
    }),
  );
  if (chip.buffers.length === 0) {
    const tr = document.createElement("tr");
    const td = document.createElement("td");
    td.colSpan = 5;
    td.textContent = "nothing: this step writes straight to HBM";
    tr.append(td);
    body.append(tr);
  }
  const meters = [
    ["smem", chip.smem_bytes, cap.smem, "of shared memory per CTA"],
    ["reg", chip.reg_bytes, cap.regs, "of registers per SM"],
  ];
  const warnings = [];
  for (const [id, used, total, what] of meters) {
    const meter = $(`${id}-meter`);
    meter.max = total;
    meter.value = Math.min(used, total);
    meter.high = total * 0.9;
    meter.optimum = 0;
    const text = `${kib(used)} of ${kib(total)} ${what} (${((100 * used) / total).toFixed(0)} %)`;
    $(`${id}-text`).textContent = text;
    meter.setAttribute("aria-valuetext", text);
    meter.parentElement.classList.toggle("over", used > total);
    if (used > total) warnings.push(`${kib(used)} ${what.replace("of ", "")} needed, ${kib(total)} available`);
  }
  const warn = $("onchip-warning");
  warn.hidden = warnings.length === 0;
  warn.textContent = warnings.length
    ? `Over capacity on the ${cap.name}: ${warnings.join("; ")}. A real kernel could not hold these tiles: use smaller blocks or a smaller head_dim.`
    : "";
}

function renderGrid(ev) {
  const meta = view.data;
  const state = gridState(meta.grid, ev.step);
  lazy.draw($("grid"), () => {
    if (figures.stale("grid", [ev.q_block, ev.kv_block, state.key[0], state.key[1]])) {
      drawGrid($("grid"), meta, ev, state, { fresh: figures.stale("grid-tiles", [meta]) });
    }
  });
  lazy.draw($("writes"), () => {
    if (figures.stale("writes", state.writes)) drawWrites($("writes"), meta, state, { label: "Oᵢ → HBM" });
  });
  return state;
}

function renderOutput(ev, meta) {
  const st = ev.state;
  if (!st.rows || !st.o_hat) return;
  if (!figures.stale("out", [st.rows, st.col_stride, st.o_hat])) return;
  const rows = span(st.rows);
  const cols = st.o_hat.length ? st.o_hat[0].map((_, c) => c * st.col_stride) : [];
  const range = figures.range("o_hat", st.o_hat, { symmetric: true });
  const note = st.col_stride > 1 ? ` (mean of ${st.col_stride} columns)` : "";
  // FA-2 shows Õ / ℓ, its estimate of O; FA-1 the Oᵢ it stores after each visit.
  const name = meta.algo === "fa1" ? "Oᵢ" : "Õ/ℓ";
  react(
    "out",
    [heatmap(st.o_hat, { x: cols, y: rows, range, hover: { name, col: "c", note } })],
    {
      height: 240,
      xaxis: { title: { text: st.col_stride > 1 ? `head-dim column c (mean of ${st.col_stride})` : "head-dim column c" } },
      yaxis: { title: { text: "query row i" }, autorange: "reversed" },
    },
  );
}

function describeEvent(ev) {
  const st = ev.state;
  const meta = view.data;
  const parts = [];
  if (ev.q_block !== null && st.rows) parts.push(`Q block ${ev.q_block} (rows ${st.rows[0]}–${st.rows[1] - 1})`);
  if (ev.kv_block !== null) {
    const c0 = ev.kv_block * meta.tiles.block_n;
    const c1 = Math.min(c0 + meta.tiles.block_n, meta.problem.seq_k) - 1;
    parts.push(`K/V block ${ev.kv_block} (keys ${c0}–${c1})`);
  }
  const where = parts.length ? parts.join(" × ") : "all rows";
  const masked = ev.masked ? " — partial tile: masked pairs at −∞" : "";
  const source = ev.measured ? " [the kernel's state]" : "";
  return `Step ${ev.step}${source}: ${ev.phase.replace("_", " ")} — ${where}${masked}`;
}

/** Draw event `ev`, and the trace's peak against the chosen GPU (a room may change the GPU). */
function render(ev) {
  const meta = view.data;
  view.event = ev;
  renderPeak();
  $("now").textContent = describeEvent(ev);
  highlightLine(ev.line);
  const e = DTYPE_BYTES[meta.problem.dtype] || 4;
  const t = ev.totals;
  $("hbm-read").textContent = `${formatCount(t.hbm_read)} (${formatBytes(t.hbm_read * e)})`;
  $("hbm-write").textContent = `${formatCount(t.hbm_write)} (${formatBytes(t.hbm_write * e)})`;
  $("stats-rw").textContent = `${formatCount(t.stats_read)} / ${formatCount(t.stats_write)} (${formatBytes((t.stats_read + t.stats_write) * 4)})`;
  const state = renderGrid(ev);
  const writes = state.writes.reduce((a, b) => a + b, 0);
  $("o-writes").textContent = `${formatCount(writes)} (${meta.grid.q_blocks} query blocks)`;
  renderOnchip(ev);
  const dtype = meta.problem.dtype;
  errorReadout($("err-readout"), ev, dtype, { measured: Boolean(ev.measured) });
  // Each figure is drawn now where the reader can see it, else once it comes into view.
  lazy.draw($("out"), () => renderOutput(ev, meta));
  lazy.draw($("tile").parentElement, () => drawTile($("tile"), $("tile-p"), ev, figures, { algo: meta.algo, measured: Boolean(ev.measured) }));
  lazy.draw($("ml"), () => drawStats($("ml"), ev, figures));
  lazy.draw($("err"), () => drawError($("err"), ev, dtype, figures));
  lazy.draw($("acc"), () => drawAccumulator($("acc"), ev, figures, meta.algo));
}

form.elements.gpu.addEventListener("change", () => {
  view.params.gpu = form.elements.gpu.value;
  writeParams(view.params);
  renderPeak();
  if (view.event) renderOnchip(view.event);
  changed();
});

async function loadGpus() {
  try {
    const res = await fetch("/api/hardware");
    const body = await res.json();
    for (const g of body.gpus) gpus[g.key] = g;
  } catch (err) {
    showErrors([{ msg: `GPU presets unavailable: ${err}` }]);
  }
  if (!gpus[view.params.gpu]) view.params.gpu = DEFAULTS.gpu;
  form.elements.gpu.value = view.params.gpu;
  renderPeak();
  if (view.event) renderOnchip(view.event);
}

loadGpus();
