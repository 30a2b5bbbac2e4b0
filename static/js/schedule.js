// The GPU schedule: the timing engine's run of one configuration (GET /api/schedule), drawn as
// CTAs on SMs, and a time cursor stepped through it. The server simulates; this module draws.

import { showErrors } from "./errors.js";
import { formatBytes, formatCount } from "./format.js";
import { react } from "./plot.js";
import { StepPrompt } from "./step_prompt.js";
import { apiUrl } from "./url.js";
import { mountScheduleMeasure } from "./schedule_live.js";
import { jsonSource, mountView } from "./view.js";

const SPECS = ["sms", "hbm_gbs", "clock_ghz", "smem_per_sm_kib", "smem_per_block_kib", "l2_mib"];
const DEFAULTS = {
  gpu: "h100-sxm", algo: "fa2", batch: 2, heads: 16, kv_heads: "", seq: 4096, seq_k: "", head_dim: 128, causal: true,
  dtype: "fp16", block_m: 128, block_n: 64, stages: 2, warps: 8, splits: "",
  ...Object.fromEntries(SPECS.map((s) => [s, ""])),
  step: -1, // −1: the first cursor position worth seeing (`openingStep`)
};
const FIELDS = Object.keys(DEFAULTS).filter((k) => k !== "step");
const TEXT = new Set(["gpu", "algo", "dtype"]);
const LIMITER_COLORS = {
  tensor: "#1d4ed8", sfu: "#7c3aed", alu: "#0891b2", memory: "#dc2626", latency: "#f59e0b", launch: "#6b7280", tail: "#d1d5db",
};

const $ = (id) => document.getElementById(id);
const form = $("params");
const presets = {}; // preset key → specs (GET /api/hardware)
const prompt = new StepPrompt();

function dataParams(params) {
  const out = {};
  for (const f of FIELDS) if (params[f] !== "") out[f] = params[f];
  return out;
}

function fillForm(params) {
  for (const f of FIELDS) {
    const el = form.elements[f];
    if (!el) continue;
    if (el.type === "checkbox") el.checked = Boolean(params.causal);
    else el.value = params[f];
  }
  fillPlaceholders();
}

function readForm(params) {
  for (const f of FIELDS) {
    const el = form.elements[f];
    if (el.type === "checkbox") params[f] = el.checked;
    else if (TEXT.has(f)) params[f] = el.value;
    else {
      const raw = el.value.trim();
      params[f] = raw === "" ? "" : Number(raw);
    }
  }
}

function fillPlaceholders() {
  const g = presets[form.elements.gpu.value];
  for (const s of SPECS) form.elements[s].placeholder = g ? String(g[s]) : "";
}

const view = mountView({
  name: "schedule",
  defaults: DEFAULTS,
  source: jsonSource("/api/schedule", { failure: "the simulation failed" }),
  query: dataParams,
  fillForm,
  readForm,
  firstStep: -1,
  loaded(body) {
    view.params.gpu = body.gpu.replace(/\+custom$/, ""); // an alias ("H100") becomes the preset's key
    form.elements.gpu.value = view.params.gpu;
    renderSummary(body);
    renderFigures(body);
    renderOccupancy(body);
    renderWaves(body);
    const c = body.cursor;
    const last = c.times_us.length - 1;
    const chosen = view.params.step < 0;
    const step = chosen ? openingStep(c) : Math.min(view.params.step, last);
    prompt.show(step, chosen
      ? `The cursor opens at ${step} % of the run: ${formatCount(c.done[step])} CTAs have finished, ${formatCount(c.running[step])} run and ${formatCount(c.waiting[step])} wait for a free slot. Press → or Play to move it on; End shows the finish.`
      : `Cursor at ${step} % of the run. Press → or Play to move it on.`);
    return { total: c.times_us.length, step };
  },
  exports: (body, { url, query }) => ({
    name: `schedule-${body.algo}-${body.gpu}-b${body.problem.batch}-h${body.problem.heads}-n${body.problem.seq}-d${body.problem.head_dim}${body.problem.causal ? "-causal" : ""}`,
    json: url,
    chrome: apiUrl("/api/schedule/chrome", query),
  }),
  draw: render,
});

/**
 * The first cursor position worth seeing: the first at which some CTAs have finished while
 * others still run or wait (the waves and the causal tail at work); else the middle of the run.
 */
function openingStep(c) {
  const k = c.done.findIndex((done, i) => i > 0 && done > 0 && c.running[i] + c.waiting[i] > 0);
  return k > 0 ? k : Math.floor((c.times_us.length - 1) / 2);
}

function us(x) {
  return x >= 1000 ? `${(x / 1000).toFixed(2)} ms` : `${x.toFixed(1)} µs`;
}

function renderSummary(d) {
  const edited = d.edited.length ? ` (edited: ${d.edited.join(", ")})` : "";
  $("time").textContent = `${us(d.time_us)} on ${d.gpu_name.replace(/^NVIDIA /, "")}${edited}`;
  $("tflops").textContent = `${d.tflops.toFixed(0)} TFLOP/s useful (${d.tflops_executed.toFixed(0)} executed)`;
  $("floor").textContent = `${us(d.floor_us)}, ${d.floors.bound}-bound (${((100 * d.floor_us) / d.time_us).toFixed(0)} % of the time)`;
  $("waves").textContent = `${d.waves.toFixed(2)} (${d.main_kernel})`;
  $("occupancy").textContent = `${d.ctas_per_sm} CTA${d.ctas_per_sm > 1 ? "s" : ""} per SM, limited by ${d.occupancy_limiter}`;
  $("dram").textContent = `${formatBytes(d.dram_read_bytes)} read, ${formatBytes(d.dram_write_bytes)} written`;
  const top = Object.entries(d.limiter).sort((a, b) => b[1] - a[1])[0];
  $("limiter").textContent = `${top[0]} (${(100 * top[1]).toFixed(0)} % of the time)`;
  const imb = d.imbalance;
  $("imbalance-text").textContent = imb.ratio && imb.ratio > 1.05
    ? `${imb.kernel}: the slowest ${imb.axis} takes ${imb.ratio.toFixed(1)}× as long as the fastest (first ${us(imb.first_us)}, last ${us(imb.last_us)})${d.problem.causal ? ": under the causal mask early blocks finish first." : "."}`
    : `${imb.kernel}: every ${imb.axis} takes about as long (${us(imb.first_us)}).`;
}

function cursorShape(t) {
  return { type: "line", x0: t, x1: t, yref: "paper", y0: 0, y1: 1, line: { color: "#111827", width: 2, dash: "dash" } };
}

function renderFigures(d) {
  const f = d.figures;
  const meta = f.gantt.layout.meta;
  const shown = meta.sms_shown < meta.sms ? ` (first ${meta.sms_shown} of ${meta.sms} SMs)` : "";
  react("gantt", f.gantt.data, {
    ...f.gantt.layout,
    height: 380,
    legend: { orientation: "h", x: 0, y: 1.01, yanchor: "bottom", traceorder: "normal", font: { size: 11 } },
    margin: { t: 48 },
    yaxis: { ...f.gantt.layout.yaxis, title: { text: `SM${shown}` } },
    shapes: [cursorShape(0)],
  });
  react("utilization", f.utilization.data, {
    ...f.utilization.layout, height: 140, margin: { t: 4 }, shapes: [cursorShape(0)],
  });
  react("imbalance", f.imbalance.data, { ...f.imbalance.layout, height: 240 });
  const limiter = f.limiter.data.map((t) => ({ ...t, marker: { color: LIMITER_COLORS[t.name] } }));
  react("limiter-plot", limiter, {
    ...f.limiter.layout, height: 240, legend: { x: 1.02, y: 1, font: { size: 11 } },
    margin: { l: 110, r: 8 }, yaxis: { autorange: "reversed" },
  });
  const roof = f.roofline.data.map((t, i) => (i === 1 ? { ...t, marker: { size: 14, color: "#dc2626", symbol: "star" } } : t));
  react("roofline", roof, {
    ...f.roofline.layout, height: 240, legend: { x: 0.98, xanchor: "right", y: 0.05, bgcolor: "rgba(255,255,255,0.8)", font: { size: 11 } },
  });
}

/** The waves of the run on screen, in the page's explanation (its numbers, not an example's). */
function renderWaves(d) {
  const k = d.occupancy.find((o) => o.kernel === d.main_kernel) || d.occupancy[0];
  if (!k) return;
  const sms = k.slots / k.ctas_per_sm;
  const full = Math.floor(k.ctas / k.slots);
  const last = k.ctas - full * k.slots;
  const slots = `${formatCount(k.slots)} slots (${formatCount(sms)} SMs × ${k.ctas_per_sm} CTA${k.ctas_per_sm > 1 ? "s" : ""})`;
  const run = `this run's ${formatCount(k.ctas)} ${k.kernel} CTAs on ${slots} make ${k.waves.toFixed(2)} waves`;
  $("waves-example").textContent = last === 0
    ? `${run}, all full: no SM waits for a last partial wave`
    : `${run}: the last wave fills only ${formatCount(last)} of the ${formatCount(k.slots)} slots, so ${formatCount(k.slots - last)} stand idle while it runs`;
}

function renderOccupancy(d) {
  const body = $("occupancy-body");
  body.replaceChildren(
    ...d.occupancy.map((k) => {
      const tr = document.createElement("tr");
      tr.className = "limiter";
      const cells = [
        [k.kernel, ""], [formatCount(k.ctas), ""],
        [k.smem_bytes ? `${k.limits.smem} (${(k.smem_bytes / 1024).toFixed(0)} KiB)` : "—", "smem"],
        [`${k.limits.regs} (${k.regs_per_thread}/thread)`, "regs"], [String(k.limits.warps), "warps"],
        [String(k.limits.ctas), "ctas"], [String(k.ctas_per_sm), ""],
      ];
      for (const [text, key] of cells) {
        const td = document.createElement("td");
        td.textContent = text;
        if (key && key === k.limiter) {
          td.classList.add("limit");
          td.title = "the binding limit";
        }
        tr.append(td);
      }
      return tr;
    }),
  );
  const main = d.occupancy.find((k) => k.kernel === d.main_kernel) || d.occupancy[0];
  $("occupancy-note").textContent =
    `${main.kernel}: ${formatCount(main.ctas)} CTAs over ${formatCount(main.slots)} slots (${d.gpu_specs.sms} SMs × ${main.ctas_per_sm}) = ${main.waves.toFixed(2)} waves. ` +
    `Shared memory per SM: ${(main.smem_per_sm_bytes / 1024).toFixed(0)} KiB.`;
}

function render(k) {
  prompt.seen(k);
  const c = view.data.cursor;
  const t = c.times_us[k];
  Plotly.relayout("gantt", { shapes: [cursorShape(t)] });
  Plotly.relayout("utilization", { shapes: [cursorShape(t)] });
  const what = c.kernel[k] ? `${c.kernel[k]}, wave ${c.wave[k]}` : k === 0 ? "launching" : k === c.times_us.length - 1 ? "finished" : "between launches";
  $("now").textContent =
    `t = ${us(t)} (${k} %): ${what}. CTAs waiting ${formatCount(c.waiting[k])}, running ${formatCount(c.running[k])}, ` +
    `done ${formatCount(c.done[k])} of ${formatCount(c.ctas)}; ${c.sms_busy[k]} of ${c.sms} SMs busy.`;
}

form.elements.gpu.addEventListener("change", fillPlaceholders);

async function loadPresets() {
  try {
    const res = await fetch("/api/hardware");
    for (const g of (await res.json()).gpus) presets[g.key] = g;
  } catch (err) {
    showErrors([{ msg: `GPU presets unavailable: ${err}` }]);
  }
  fillPlaceholders();
}

loadPresets();

mountScheduleMeasure({ query: () => dataParams(view.params) });
