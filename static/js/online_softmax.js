// The online-softmax explorer. GET /api/online-softmax runs the recurrence block by block;
// this module draws step s: s = 0 before any block, s = b + 1 after block b, and a last step
// that compares the result with the standard softmax.

import { react } from "./plot.js";
import { onApply } from "./registry.js";
import { StepPrompt, urlHasStep } from "./step_prompt.js";
import { jsonSource, mountView } from "./view.js";

const DEFAULTS = { x: "1, 2, 3, 6, 2, 1", block: 3, step: 0 };
const COLORS = { processed: "#60a5fa", current: "#f59e0b", pending: "#e5e7eb", m: "#b45309", l: "#1d4ed8" };

const $ = (id) => document.getElementById(id);
const form = $("params");
const prompt = new StepPrompt();
let opening = !urlHasStep(); // a bare link opens where α first rescales ℓ
onApply(() => (opening = false)); // a room's state names its own step

const num = (v, digits = 4) => {
  if (v === null || v === undefined) return "−∞";
  if (v !== 0 && (Math.abs(v) >= 1e5 || Math.abs(v) < 1e-3)) return v.toExponential(digits - 1);
  return Number(v.toPrecision(digits)).toString();
};

function fillForm(params) {
  form.elements.x.value = params.x;
  form.elements.block.value = params.block;
}

function readForm(params) {
  params.x = form.elements.x.value;
  const raw = form.elements.block.value.trim();
  params.block = raw === "" ? NaN : Number(raw);
}

const view = mountView({
  name: "online-softmax",
  defaults: DEFAULTS,
  source: jsonSource("/api/online-softmax"),
  errorFields: false, // the message alone
  fillForm,
  readForm,
  loaded(body) {
    renderTable(body);
    const total = body.blocks.length + 2;
    const step = opening ? openingStep(body) : Math.min(view.params.step, total - 1);
    opening = false;
    prompt.show(step, promptText(body, step, total - 1));
    return { total, step };
  },
  exports: (body, { url }) => ({ name: `online-softmax-block${body.block}`, json: url }),
  draw: (s) => {
    prompt.seen(s);
    render(s);
  },
});

/** The step after the first block that raises the running max (α < 1 rescales ℓ); else the
 * step after the first block. */
function openingStep(d) {
  const b = d.blocks.findIndex((x, i) => i > 0 && x.m_after !== x.m_before);
  return b > 0 ? b + 1 : Math.min(1, d.blocks.length);
}

function promptText(d, s, last) {
  const move = "Press → or Play to step on; Home goes back to the start.";
  const b = d.blocks[s - 1];
  if (s !== openingStep(d) || !b || s < 2 || b.m_after === b.m_before) return `Step ${s} of ${last}. ${move}`;
  return `Step ${s} of ${last}: block ${s - 1} brings a larger maximum (${num(b.m_before)} → ${num(b.m_after)}), ` +
    `so α = ${num(b.alpha)} shrinks the sum ℓ of the blocks before it. ${move}`;
}

function renderTable(d) {
  const rows = d.blocks.map((b, i) => {
    const tr = document.createElement("tr");
    tr.dataset.block = i;
    const cells = [String(i), num(b.block_max), num(b.m_after), num(b.alpha), num(b.block_sum), num(b.l_after)];
    for (const text of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    return tr;
  });
  $("blocks").tBodies[0].replaceChildren(...rows);
}

function describe(s) {
  const d = view.data;
  const n = d.blocks.length;
  if (s === 0) return `Start: m = −∞, ℓ = 0. Nothing seen yet; ${n} block${n === 1 ? "" : "s"} of ${d.block} to go.`;
  if (s <= n) {
    const b = d.blocks[s - 1];
    const entries = d.x.slice(b.start, b.stop).map((v) => num(v)).join(", ");
    const grew = b.m_after !== b.m_before;
    return (
      `Block ${s - 1} [${entries}]: block max ${num(b.block_max)}, so m goes ${num(b.m_before)} → ${num(b.m_after)}` +
      `${grew ? "" : " (unchanged)"}. α = e^(m_old − m_new) = ${num(b.alpha)}, ` +
      `ℓ = α·${num(b.l_before)} + ${num(b.block_sum)} = ${num(b.l_after)}.`
    );
  }
  const diff = d.max_abs_diff === null ? "undefined (no finite entry)" : num(d.max_abs_diff, 3);
  return `Done: divide e^(x − m) by ℓ. Largest difference from the two-pass softmax: ${diff}.`;
}

function status(s) {
  const d = view.data;
  const n = d.blocks.length;
  const cur = s >= 1 && s <= n ? d.blocks[s - 1] : null;
  const seen = s === 0 ? 0 : s > n ? d.x.length : d.blocks[s - 1].stop;
  return d.x.map((_, i) => {
    if (cur && i >= cur.start && i < cur.stop) return "current";
    return i < seen ? "processed" : "pending";
  });
}

function renderVector(s) {
  const d = view.data;
  const st = status(s);
  const idx = d.x.map((_, i) => i);
  const finite = d.x.filter((v) => v !== null);
  const lo = finite.length ? Math.min(0, ...finite) : 0;
  const hi = finite.length ? Math.max(0, ...finite) : 1;
  const pad = (hi - lo) * 0.08 || 1;
  const n = d.blocks.length;
  const last = s === 0 ? null : d.blocks[Math.min(s, n) - 1];
  const traces = [
    {
      type: "bar",
      x: idx,
      y: d.x,
      marker: { color: st.map((k) => COLORS[k]), line: { color: "#6b7280", width: 1 } },
      hovertemplate: "x[%{x}] = %{y}<extra></extra>",
      showlegend: false,
    },
  ];
  const masked = idx.filter((i) => d.x[i] === null);
  if (masked.length) {
    traces.push({
      x: masked,
      y: masked.map(() => lo - pad * 0.5),
      mode: "markers+text",
      text: masked.map(() => "−∞"),
      textposition: "top center",
      marker: { symbol: "x", size: 10, color: "#6b7280" },
      hovertemplate: "x[%{x}] = −∞<extra></extra>",
      showlegend: false,
    });
  }
  const shapes = [];
  if (last && last.m_after !== null) {
    shapes.push({
      type: "line", x0: -0.5, x1: last.stop - 0.5, y0: last.m_after, y1: last.m_after,
      line: { color: COLORS.m, width: 3, dash: "dash" },
    });
  }
  // Block boundaries.
  for (const b of d.blocks.slice(1)) {
    shapes.push({ type: "line", x0: b.start - 0.5, x1: b.start - 0.5, yref: "paper", y0: 0, y1: 1, line: { color: "#9ca3af", width: 1 } });
  }
  react(
    "vector",
    traces,
    {
      height: 230,
      shapes,
      xaxis: { title: { text: "entry" }, dtick: d.x.length <= 32 ? 1 : undefined, range: [-0.6, d.x.length - 0.4] },
      yaxis: { title: { text: "x" }, range: [lo - pad, hi + pad] },
      annotations: last && last.m_after !== null
        ? [{ x: -0.5, y: last.m_after, text: `m = ${num(last.m_after)}`, showarrow: false, xanchor: "left", yanchor: "bottom", font: { color: COLORS.m } }]
        : [],
    },
  );
}

function renderWeights(s) {
  const d = view.data;
  const n = d.blocks.length;
  const idx = d.x.map((_, i) => i);
  const w = s === 0 ? [] : d.blocks[Math.min(s, n) - 1].weights;
  const traces = [
    {
      type: "bar",
      name: "online: e^(x − m) / ℓ so far",
      x: idx.slice(0, w.length),
      y: w,
      marker: { color: COLORS.processed },
      hovertemplate: "entry %{x}: %{y:.6f}<extra></extra>",
    },
  ];
  if (s > n) {
    traces.push({
      name: "standard two-pass softmax",
      x: idx,
      y: d.standard,
      mode: "markers",
      marker: { symbol: "diamond", size: 11, color: "#111827" },
      hovertemplate: "entry %{x}: %{y:.6f}<extra>standard</extra>",
    });
  }
  react(
    "weights",
    traces,
    {
      height: 230,
      showlegend: true,
      legend: { orientation: "h", y: 1.18 },
      xaxis: { title: { text: "entry" }, dtick: d.x.length <= 32 ? 1 : undefined, range: [-0.6, d.x.length - 0.4] },
      yaxis: { title: { text: "weight" }, range: [0, 1.05] },
    },
  );
}

function renderStats(s) {
  const d = view.data;
  const n = d.blocks.length;
  const upto = Math.min(s, n);
  const blocks = d.blocks.slice(0, upto);
  const xs = blocks.map((_, i) => i);
  react(
    "stats",
    [
      { x: xs, y: blocks.map((b) => b.m_after), name: "m", mode: "lines+markers", line: { color: COLORS.m } },
      { x: xs, y: blocks.map((b) => b.l_after), name: "ℓ", yaxis: "y2", mode: "lines+markers", line: { color: COLORS.l } },
    ],
    {
      height: 210,
      legend: { orientation: "h", y: 1.2 },
      xaxis: { title: { text: "after block" }, range: [-0.5, Math.max(n - 0.5, 0.5)], dtick: n <= 32 ? 1 : undefined },
      yaxis: { title: { text: "m" } },
      yaxis2: { title: { text: "ℓ" }, overlaying: "y", side: "right" },
      margin: { r: 56 },
    },
  );
}

function render(s) {
  const d = view.data;
  const n = d.blocks.length;
  $("now").textContent = describe(s);
  for (const tr of $("blocks").tBodies[0].rows) {
    const on = Number(tr.dataset.block) === s - 1;
    tr.classList.toggle("current", on);
    tr.hidden = Number(tr.dataset.block) >= s;
  }
  const list = (xs) => xs.slice(0, 12).map((v) => num(v)).join(", ") + (xs.length > 12 ? ", …" : "");
  $("result").textContent = s > n ? `Online: [${list(d.online)}]; standard: [${list(d.standard)}].` : "";
  renderVector(s);
  renderWeights(s);
  renderStats(s);
}

$("preset").addEventListener("change", (e) => {
  const opt = e.target.selectedOptions[0];
  if (!opt || !opt.value) return;
  form.elements.x.value = opt.dataset.x;
  form.elements.block.value = opt.dataset.block;
  form.requestSubmit();
});
