// FlashAttention-3 on Hopper: one CTA's warpgroups as a Gantt, the FA-3 model above the
// kernel's recorded timeline. GET /api/hopper computes both sides; stepping moves a cursor
// through the model's events (and to the same event in the recording) and says what runs then.
// On an H100 or H200 server the launch can be recorded live (hopper_live.js); the finished run's
// id goes into the URL (`run`), and the twin shows its recording in place of the shipped one.

import { costText, liveSummary, mountRecord, spanText } from "./hopper_live.js";
import { react } from "./plot.js";
import { onApply } from "./registry.js";
import { urlHasStep } from "./step_prompt.js";
import { jsonSource, mountView } from "./view.js";

const DEFAULTS = {
  gpu: "h100-sxm", head_dim: 128, consumers: 2, dtype: "fp16", seq: 4096,
  pingpong: true, pipeline: true, causal: false, persistent: false, block_n: 128, stages: 2,
  whole: false, run: "", step: 0,
};
const SELECTS = ["gpu", "head_dim", "consumers", "dtype"];
const NUMERIC = new Set(["head_dim", "consumers", "seq"]);
const CHECKS = ["pingpong", "pipeline", "causal", "persistent", "whole"];
const VIEW_ONLY = new Set(["step", "whole"]); // not sent to the server
// What a live recording (`run`) is of: changing one of these shows the shipped recording again.
const RECORDED = [...SELECTS, "seq", "pingpong", "pipeline", "causal", "persistent"];

// The phases' colours: copies in blues, waits pale, the tensor cores' products green, the
// softmax (exp2 on the SFU) orange.
const PHASES = {
  load_q: { color: "#94a3b8", label: "copy of Q (TMA)" },
  load_k: { color: "#60a5fa", label: "copy of K (TMA)" },
  load_v: { color: "#a78bfa", label: "copy of V (TMA)" },
  wait_k: { color: "#e5e7eb", label: "waits for K" },
  wait_v: { color: "#d1d5db", label: "waits for V" },
  wait_turn: { color: "#fde68a", label: "waits for its turn" },
  qk: { color: "#16a34a", label: "S = QKᵀ (tensor cores)" },
  softmax: { color: "#f97316", label: "softmax (exp2 on the SFU)" },
  pv: { color: "#0f766e", label: "P·V (tensor cores)" },
  epilogue: { color: "#6b7280", label: "epilogue (O written)" },
};
const WINDOW_BLOCKS = 6; // the Gantt's window spans about this many key blocks of one warpgroup

const $ = (id) => document.getElementById(id);
const form = $("params");
let opening = !urlHasStep(); // a link without a step opens in the steady state
onApply(() => (opening = false)); // a room's state names its own step
const us = (ns) => ns / 1e3;
const pct = (x) => `${(100 * x).toFixed(0)} %`;

function fillForm(p) {
  for (const f of SELECTS) form.elements[f].value = String(p[f]);
  form.elements.seq.value = p.seq;
  for (const f of CHECKS) form.elements[f].checked = Boolean(p[f]);
}

function readForm(p) {
  const before = RECORDED.map((f) => String(p[f]));
  for (const f of [...SELECTS, "seq"]) {
    const raw = form.elements[f].value.trim();
    p[f] = NUMERIC.has(f) ? (raw === "" ? NaN : Number(raw)) : raw;
  }
  for (const f of CHECKS) p[f] = form.elements[f].checked;
  if (RECORDED.some((f, i) => String(p[f]) !== before[i])) p.run = "";
}

// A toggle applies at once; ping-pong needs pipelining and a second consumer to take turns
// with, so each follows the other.
form.addEventListener("change", (ev) => {
  const name = ev.target.name;
  const els = form.elements;
  if (name === "pingpong" && els.pingpong.checked) {
    els.pipeline.checked = true;
    if (els.consumers.value === "1") els.consumers.value = "2";
  }
  if (name === "pipeline" && !els.pipeline.checked) els.pingpong.checked = false;
  if (name === "consumers" && els.consumers.value === "1") els.pingpong.checked = false;
  if (name !== "seq") form.requestSubmit();
});

function rowOf(iv) {
  return iv.role === "loader" ? "loader" : `consumer ${iv.warpgroup}`;
}

const keyOf = (iv) => `${iv.warpgroup}|${iv.phase}|${iv.tile}|${iv.block}`;

/** What an interval is, in words (for hovers and the narrative). */
function what(iv) {
  const b = iv.block;
  return {
    load_q: `the copy of Q for tile ${iv.tile}`,
    load_k: `the copy of K block ${b}`,
    load_v: `the copy of V block ${b}`,
    wait_k: b < 0 ? `a wait for Q of tile ${iv.tile} to land` : `a wait for K block ${b} to land`,
    wait_v: `a wait for V block ${b} to land`,
    wait_turn: `a wait for its turn on the tensor cores (block ${b})`,
    qk: `the product S = QKᵀ of block ${b}`,
    softmax: `the softmax of block ${b}`,
    pv: `the product P·V of block ${b}`,
    epilogue: `the epilogue of tile ${iv.tile}: O rescaled and written`,
  }[iv.phase];
}

/** The interval as the subject of a sentence: what starts at the cursor. */
function starts(iv) {
  const who = rowOf(iv);
  const b = iv.block;
  switch (iv.phase) {
    case "qk": return `${who}'s S = QKᵀ of block ${b} goes to the tensor cores`;
    case "pv": return `${who}'s P·V product of block ${b} goes to the tensor cores`;
    case "softmax": return `${who} starts its softmax of block ${b}`;
    case "wait_k": return b < 0 ? `${who} waits for its Q to land` : `${who} waits for K block ${b} to land`;
    case "wait_v": return `${who} waits for V block ${b} to land`;
    case "wait_turn": return `${who} waits for its turn on the tensor cores`;
    case "epilogue": return `${who} rescales and writes its output of tile ${iv.tile}`;
    default: return `the loader issues ${what(iv)}`;
  }
}

/** The interval as a clause: what else runs at that moment. */
function runs(iv) {
  const who = rowOf(iv);
  const b = iv.block;
  switch (iv.phase) {
    case "qk": return `${who}'s S = QKᵀ of block ${b} is on the tensor cores`;
    case "pv": return `${who}'s P·V product of block ${b} is on the tensor cores`;
    case "softmax": return `${who} runs its softmax of block ${b}`;
    case "wait_k": case "wait_v": case "wait_turn": return `${who} ${what(iv).replace(/^a wait/, "waits")}`;
    case "epilogue": return `${who} writes its output`;
    default: return `${what(iv)} is in flight`;
  }
}

/** One sentence: the event at time t and what else runs on the other rows then. */
function narrate(intervals, ev, t) {
  const others = intervals.filter(
    (iv) => iv !== ev && iv.start_ns <= t && iv.end_ns > t && (iv.role !== ev.role || iv.warpgroup !== ev.warpgroup),
  );
  // One clause per row: its interval started last.
  const byRow = new Map();
  for (const iv of others) {
    const r = rowOf(iv);
    if (!byRow.has(r) || byRow.get(r).start_ns < iv.start_ns) byRow.set(r, iv);
  }
  const rows = [...byRow.values()].sort((a, b) => a.warpgroup - b.warpgroup);
  const rest = rows.length ? ` while ${rows.map(runs).join(", and ")}` : "; nothing else runs";
  return `at ${us(t).toFixed(2)} µs ${starts(ev)}${rest}.`;
}

function blocksIn(intervals) {
  return new Set(intervals.filter((iv) => iv.phase === "qk").map((iv) => `${iv.warpgroup}|${iv.tile}|${iv.block}`)).size;
}

/** Everything the Gantt needs of one source, computed once per load. */
function source(intervals, consumers) {
  const end = Math.max(1, ...intervals.map((iv) => iv.end_ns));
  const perWarpgroup = Math.max(1, blocksIn(intervals) / Math.max(1, consumers));
  const keys = new Map();
  for (const iv of intervals) if (!keys.has(keyOf(iv))) keys.set(keyOf(iv), iv);
  return { intervals, end, period: end / perWarpgroup, keys };
}

function rows(consumers) {
  return ["loader", ...Array.from({ length: consumers }, (_, w) => `consumer ${w}`)];
}

function barTraces(src, axis, showlegend) {
  const out = [];
  for (const [phase, spec] of Object.entries(PHASES)) {
    const ivs = src.intervals.filter((iv) => iv.phase === phase);
    if (!ivs.length) continue;
    out.push({
      type: "bar",
      orientation: "h",
      name: spec.label,
      legendgroup: phase,
      showlegend,
      base: ivs.map((iv) => us(iv.start_ns)),
      x: ivs.map((iv) => Math.max(us(iv.end_ns - iv.start_ns), 1e-4)),
      y: ivs.map(rowOf),
      width: phase.startsWith("load_") ? 0.45 : 0.75,
      marker: { color: spec.color, line: { width: 0 } },
      opacity: phase.startsWith("load_") ? 0.8 : 1,
      xaxis: `x${axis}`,
      yaxis: `y${axis}`,
      customdata: ivs.map((iv) =>
        `${rowOf(iv)}: ${what(iv)}<br>${us(iv.start_ns).toFixed(3)}–${us(iv.end_ns).toFixed(3)} µs (${(iv.end_ns - iv.start_ns).toFixed(0)} ns)`),
      hovertemplate: "%{customdata}<extra></extra>",
    });
  }
  return out;
}

function windowOf(src, t, whole) {
  if (whole) return [0, us(src.end)];
  const w = us(src.period) * WINDOW_BLOCKS;
  const lo = Math.max(0, us(t) - 0.35 * w);
  return [lo, Math.min(us(src.end), lo + w)];
}

function cursorShape(t, axis) {
  return {
    type: "line", xref: `x${axis}`, yref: `y${axis} domain`, x0: us(t), x1: us(t), y0: 0, y1: 1,
    line: { color: "#111827", width: 2, dash: "dash" },
  };
}

// A finished live recording of the launch on screen: its run into the URL, and the twin again.
const record = mountRecord({
  recorded(runId) {
    view.params.run = runId;
    view.reload();
  },
});

const view = mountView({
  name: "hopper",
  defaults: DEFAULTS,
  source: jsonSource("/api/hopper"),
  query: (p) => Object.fromEntries(Object.entries(p).filter(([k]) => !VIEW_ONLY.has(k))),
  fillForm,
  readForm,
  loaded(body) {
    const consumers = body.simulated.config.consumers;
    const sim = source(body.simulated.timeline.intervals, consumers);
    const rec = body.measured.timeline;
    const meas = rec ? source(rec.intervals, consumers) : null;
    view.hopper = { sim, meas, consumers, body };
    view.traces = [...barTraces(sim, "", true), ...(meas ? barTraces(meas, "2", false) : [])];
    renderStatic(body);
    record.show(body);
    const total = sim.intervals.length;
    const step = opening ? openingStep(sim.intervals, consumers) : view.params.step | 0;
    opening = false;
    return { total, step: Math.min(Math.max(0, step), total - 1) };
  },
  exports: ({ params: p }, { url }) => ({
    name: `hopper-${p.gpu}-d${p.head_dim}-c${p.consumers}${p.pingpong ? "-pingpong" : ""}${p.pipeline ? "-pipelined" : ""}${p.causal ? "-causal" : ""}`,
    json: url,
  }),
  draw: (k) => renderStep(k),
});

/** Where a link without a step opens: the last consumer's softmax of block 2, once the
 * warpgroups have settled into their rhythm (the first event if there is none). */
function openingStep(intervals, consumers) {
  const k = intervals.findIndex((iv) => iv.phase === "softmax" && iv.warpgroup === consumers - 1 && iv.block === 2);
  return Math.max(0, k);
}

function renderStep(k) {
  const { sim, meas, consumers, body } = view.hopper;
  const ev = sim.intervals[k];
  const t = ev.start_ns;
  const match = meas ? meas.keys.get(keyOf(ev)) : null;
  const tm = match ? match.start_ns : null;
  $("now-sim").textContent = narrate(sim.intervals, ev, t);
  $("now-measured").textContent = !meas
    ? measuredWhy(body.measured)
    : match
      ? narrate(meas.intervals, match, tm)
      : `the recording has no ${what(ev).replace(/^(the|a) /, "")} for ${rowOf(ev)}.`;
  const labels = rows(consumers);
  const yaxis = (domain) => ({
    domain, type: "category", categoryorder: "array", categoryarray: labels, autorange: "reversed",
    fixedrange: true, ticks: "",
  });
  const layout = {
    height: 430,
    barmode: "overlay",
    bargap: 0,
    hovermode: "closest",
    margin: { l: 92, t: 28, b: 28 },
    legend: { orientation: "h", y: -0.14, x: 0, font: { size: 11 } },
    showlegend: false,
    xaxis: { anchor: "y", range: windowOf(sim, t, view.params.whole) },
    yaxis: yaxis([0.57, 1]),
    xaxis2: { anchor: "y2", range: meas ? windowOf(meas, tm ?? 0, view.params.whole) : [0, 1], visible: Boolean(meas) },
    yaxis2: { ...yaxis([0, 0.41]), visible: Boolean(meas) },
    shapes: [cursorShape(t, ""), ...(meas && tm !== null ? [cursorShape(tm, "2")] : [])],
    annotations: [
      { text: `<b>simulated</b>: FA-3 model, ${body.gpu_name} (µs from the program's start)`, xref: "paper", yref: "paper", x: 0, y: 1.07, showarrow: false, xanchor: "left", font: { size: 12 } },
      {
        text: meas ? `<b>measured</b>: ${measuredLabel(body)}` : `<b>measured</b>: ${missing(body)}`,
        xref: "paper", yref: "paper", x: 0, y: meas ? 0.5 : 0.3, showarrow: false, xanchor: "left", font: { size: 12, color: meas ? "#111827" : "#b91c1c" },
      },
    ],
  };
  react("gantt", view.traces, layout);
}

/** Where the measured Gantt comes from: a live recording on this server, or a shipped one. */
function measuredLabel(body) {
  const rec = body.measured.timeline;
  if (rec.live) return `recorded live on ${rec.device} (µs), ${costText(rec)}`;
  return `recorded on ${body.measured.device}, ${body.measured.date} (µs)`;
}

/** Why the measured side is empty, in a few words (the readout and the Gantt's label). */
function missing(body) {
  if (!body.measured.available) return "no measurement for this GPU";
  if (body.simulated.dtype === "fp8") return "fp8 is a what-if, nothing was measured";
  return body.measured.timeline ? "no time measured at this head_dim" : "no recorded timeline of this variant";
}

function measuredWhy(m) {
  const why = m.available ? m.timeline_why || "no recorded timeline of this variant" : m.why;
  return `${why[0].toUpperCase()}${why.slice(1)}.`;
}

function fmtMs(us_) {
  return us_ >= 1000 ? `${(us_ / 1000).toFixed(3)} ms` : `${us_.toFixed(1)} µs`;
}

function renderKey() {
  const items = Object.values(PHASES).map(({ color, label }) => {
    const li = document.createElement("li");
    const chip = document.createElement("span");
    chip.className = "chip";
    chip.style.background = color;
    li.append(chip, label);
    return li;
  });
  $("phase-key").replaceChildren(...items);
}

function renderStatic(body) {
  const sim = body.simulated;
  const m = body.measured;
  $("time-sim").textContent = `${fmtMs(sim.time_us)} · ${sim.tflops.toFixed(0)} TFLOP/s${sim.dtype === "fp8" ? " (fp8 what-if)" : ""}`;
  const live = m.timeline && m.timeline.live ? m.timeline : null;
  $("time-measured").textContent = live
    ? `${fmtMs(live.plain_ms * 1e3)} · measured live on ${live.device}`
    : m.time
      ? `${fmtMs(m.time.ms * 1e3)} · ${m.time.label}`
      : `none: ${missing(body)}`;
  $("busy-tensor").textContent = pct(sim.busy.tensor);
  $("busy-sfu").textContent = pct(sim.busy.sfu);
  const c = sim.config;
  const cfg = `${c.consumers} consumers, block_n ${c.block_n}, ${c.stages} stages`;
  const notShown = m.live && m.live.why ? ` The live recording is not shown: ${m.live.why}.` : "";
  if (live) {
    $("measured-source").textContent = `${cfg}. Measured side: ${liveSummary(live)}; run ${m.live.run}.`;
  } else if (!m.available) {
    $("measured-source").textContent = `${cfg}. ${measuredWhy(m)}${notShown}`;
  } else {
    const v = m.versions;
    const rec = m.timeline;
    const recText = rec
      ? ` Recorded variant '${rec.variant}' at N = ${rec.seq}: plain kernel ${rec.plain_ms.toFixed(3)} ms, the recording cost ${(100 * rec.overhead).toFixed(1)} %${spanText(rec)}${rec.notes.length ? ` (${rec.notes.join("; ")})` : ""}.`
      : ` ${measuredWhy(m)}`;
    $("measured-source").textContent = `${cfg}. Measured side: ${m.device}, ${m.date} (torch ${v.torch}, Triton ${v.triton}).${recText}${notShown}`;
  }
  renderKey();
  renderBusy(body);
  renderVersions(body);
  renderExplain(body);
  renderFp8(body);
  renderVariants(body);
}

function renderBusy(body) {
  const cats = ["tensor cores", "softmax / SFU", "copies"];
  const sim = body.simulated;
  const traces = [
    { name: "model, whole launch", y: [sim.busy.tensor, sim.busy.sfu, sim.busy.loader], marker: { color: "#1d4ed8" } },
    { name: "simulated timeline", y: ["tensor", "softmax", "copy"].map((k) => sim.coverage[k]), marker: { color: "#93c5fd" } },
  ];
  if (body.measured.timeline) {
    const cov = body.measured.timeline.coverage;
    traces.push({ name: "measured timeline", y: ["tensor", "softmax", "copy"].map((k) => cov[k]), marker: { color: "#f97316" } });
  }
  react("busy", traces.map((t) => ({ ...t, type: "bar", x: cats, hovertemplate: `${t.name}: %{y:.0%}<extra>%{x}</extra>` })), {
    height: 250, barmode: "group", yaxis: { tickformat: ".0%", range: [0, 1], title: { text: "busy" } },
    legend: { orientation: "h", y: 1.2 }, margin: { t: 36 },
  });
}

function renderVersions(body) {
  const rows_ = body.compare;
  react("versions", [{
    type: "bar", orientation: "h",
    y: rows_.map((r) => r.label), x: rows_.map((r) => r.time_us / 1e3),
    marker: { color: rows_.map((r) => (r.source === "measured" ? "#f97316" : r.algo === "fa3" ? "#1d4ed8" : "#94a3b8")) },
    text: rows_.map((r) => fmtMs(r.time_us)), textposition: "auto",
    customdata: rows_.map((r) => `${r.source}${r.note ? `: ${r.note}` : ""}; ${r.tflops ? r.tflops.toFixed(0) : "–"} TFLOP/s`),
    hovertemplate: "%{y}: %{x:.3f} ms (%{customdata})<extra></extra>",
  }], { height: 220, xaxis: { title: { text: "ms, the whole launch" }, rangemode: "tozero" }, yaxis: { autorange: "reversed" }, margin: { l: 120 } });
  const p = body.params;
  $("versions-note").textContent = `batch ${p.batch} × ${p.heads} heads × N ${p.seq}, head_dim ${p.head_dim}${p.causal ? ", causal" : ""}. FA-1 and FA-2 are the timing engine's, 128×64 tiles; FA-3 is the warpgroup model; orange: measured on the GPU.`;
}

function renderExplain(body) {
  const e = body.simulated.explanation;
  $("explain-text").textContent = `On the ${body.gpu_name}: ${e.text} The exponentials take ${(100 * e.exp_over_products).toFixed(0)} % of the products' time per block.`;
  const fig = body.figures.explanation;
  react("explain", fig.data, { ...fig.layout, height: 260, title: undefined, legend: { orientation: "h", y: 1.25, font: { size: 11 } }, margin: { t: 40 } });
}

function renderFp8(body) {
  const f = body.fp8;
  const bars = [{ label: `${f.base.dtype} (model)`, v: f.base.time_us, color: "#1d4ed8" }];
  if (f.simulated) bars.push({ label: "fp8 what-if (model)", v: f.simulated.time_us, color: "#a855f7" });
  react("fp8", [{
    type: "bar", orientation: "h", y: bars.map((b) => b.label), x: bars.map((b) => b.v / 1e3),
    marker: { color: bars.map((b) => b.color) }, text: bars.map((b) => fmtMs(b.v)), textposition: "auto",
    hovertemplate: "%{y}: %{x:.3f} ms (simulated)<extra></extra>",
  }], { height: 150, xaxis: { title: { text: "ms, simulated" }, rangemode: "tozero" }, yaxis: { autorange: "reversed" }, margin: { l: 130 } });
  const order = ["fp32", "fp16", "bf16", "fp8"];
  const trs = order.filter((d) => f.errors[d]).map((d) => {
    const tr = document.createElement("tr");
    if (d === "fp8") tr.className = "current";
    const e = f.errors[d];
    for (const text of [d === "fp8" ? "fp8 e4m3 (emulated)" : d, e.relative_rms.toExponential(1), e.max_abs.toExponential(1)]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    return tr;
  });
  $("fp8-errors").tBodies[0].replaceChildren(...trs);
  $("fp8-note").textContent = `Errors of O against float64 attention on one head of N = 256 standard-normal inputs, with the kernel's rounding points; fp8 with one scale per block. The fp8 time is the model's: twice the tensor rate, one byte per element, extra FP32 work for the scales.${f.why ? ` ${f.why}` : ""}`;
}

function variantLink(v) {
  const c = v.config;
  const p = { ...view.params, consumers: c.consumers, pingpong: c.pingpong, pipeline: c.pipeline, persistent: c.persistent, block_n: c.block_n, stages: c.stages, run: "", step: 0 };
  const q = new URLSearchParams();
  for (const [k, val] of Object.entries(p)) if (val !== "") q.set(k, typeof val === "boolean" ? (val ? "1" : "0") : String(val));
  return `?${q}`;
}

function renderVariants(body) {
  const trs = body.variants.map((v) => {
    const tr = document.createElement("tr");
    if (v.current) tr.className = "current";
    const name = document.createElement("td");
    const a = document.createElement("a");
    a.href = variantLink(v);
    a.textContent = v.variant;
    a.title = `${v.config.consumers} consumers, block_n ${v.config.block_n}, ${v.config.stages} stages${v.config.pipeline ? ", pipelined" : ""}${v.config.pingpong ? ", ping-pong" : ""}${v.config.persistent ? ", persistent" : ""}`;
    name.append(a);
    tr.append(name);
    for (const text of [`${v.measured_ms.toFixed(3)} ms`, `${v.simulated_ms.toFixed(3)} ms`, `${(v.simulated_ms / v.measured_ms).toFixed(2)}×`]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    return tr;
  });
  $("variants").tBodies[0].replaceChildren(...trs);
  const m = body.measured;
  $("variants-note").textContent = !m.available
    ? m.why
    : trs.length
      ? `Measured on ${m.device} (${m.date}), fp16, the papers' protocol; the highlighted row is the configuration on screen. A name sets the toggles to that variant.`
      : `No variant was measured at this shape (the dataset has N = 1024, 4096 and 16384 with batch × N = 16384 and heads × head_dim = 2048, fp16).`;
}
