// Memory scaling: peak memory of naive and flash attention over N on one GPU.
// GET /api/memory-scaling computes every figure; this module draws N number `step` of the sweep.

import { formatCount } from "./format.js";
import { react } from "./plot.js";
import { onApply } from "./registry.js";
import { StepPrompt, urlHasStep } from "./step_prompt.js";
import { jsonSource, mountView } from "./view.js";

const DEFAULTS = { gpu: "h200", batch: 1, heads: 16, d: 64, dtype: "fp16", n_min: 1024, n_max: 131072, step: 0 };
const FIELDS = ["gpu", "batch", "heads", "d", "dtype", "n_min", "n_max"];
const TEXT = new Set(["gpu", "dtype"]);
const COLORS = { naive: "#dc2626", flash: "#1d4ed8", cap: "#111827" };
const PART_COLORS = { Q: "#94a3b8", K: "#64748b", V: "#475569", S: "#dc2626", P: "#f97316", O: "#0f766e", LSE: "#a855f7" };
const GIB = 2 ** 30;

const $ = (id) => document.getElementById(id);
const form = $("params");
const prompt = new StepPrompt();
let opening = !urlHasStep(); // a bare link opens at the largest N naive attention still fits
onApply(() => (opening = false)); // a room's state names its own step

/** Bytes → "64.2 GiB" (binary units, as allocators report memory). */
function gib(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  let v = b;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v >= 100 || i === 0 ? v.toFixed(0) : v.toFixed(1)} ${units[i]}`;
}

function fillForm(params) {
  for (const f of FIELDS) form.elements[f].value = params[f];
}

function readForm(params) {
  for (const f of FIELDS) {
    const raw = String(form.elements[f].value).trim();
    params[f] = TEXT.has(f) ? raw : raw === "" ? NaN : Number(raw);
  }
}

const view = mountView({
  name: "memory-scaling",
  defaults: DEFAULTS,
  source: jsonSource("/api/memory-scaling"),
  errorFields: false, // the message alone
  fillForm,
  readForm,
  loaded(body) {
    view.params.gpu = body.gpu.key; // an alias in the URL ("H100") becomes the preset's key
    form.elements.gpu.value = body.gpu.key;
    const gpuName = body.gpu.name.replace(/^NVIDIA /, "");
    const note = $("dataset-note");
    note.hidden = !body.measured;
    if (body.measured) note.querySelector(".dataset-device").textContent = body.measured.device;
    const edge = body.naive_first_oom === null
      ? `Naive attention fits on the ${gpuName} over this whole sweep (up to N = ${formatCount(body.naive_max_n)}).`
      : `Naive attention runs out of memory on the ${gpuName} from N = ${formatCount(body.naive_first_oom)} in this sweep; the largest N that fits is ${formatCount(body.naive_max_n ?? 0)}.`;
    const flashEdge = body.flash_max_n === body.n_search_max
      ? `beyond N = ${formatCount(body.n_search_max)}, the end of the search`
      : `up to N = ${formatCount(body.flash_max_n ?? 0)}`;
    $("edge").textContent = `${edge} Flash fits ${flashEdge}.`;
    renderPeaks();
    const last = body.ns.length - 1;
    const step = opening ? openingPoint(body) : Math.min(view.params.step, last);
    opening = false;
    prompt.show(step, promptText(body, step, last, gpuName));
    return { total: body.ns.length, step };
  },
  exports: (body, { url }) => {
    const p = body.params;
    return { name: `memory-scaling-${body.gpu.key}-b${p.batch}-h${p.heads}-d${p.d}-${p.dtype}`, json: url };
  },
  draw: (k) => {
    prompt.seen(k);
    render(k);
  },
});

/** The last point of the sweep at which naive attention still fits (the next one would not):
 * S and P already fill most of the GPU. Without such an edge, the last point. */
function openingPoint(d) {
  const fits = d.naive.fits;
  const k = fits.findIndex((ok, i) => ok && i + 1 < fits.length && !fits[i + 1]);
  return k >= 0 ? k : fits.every(Boolean) ? fits.length - 1 : 0;
}

function promptText(d, k, last, gpuName) {
  const move = "Press → or Play to step on; Home goes back to the smallest N.";
  if (k !== openingPoint(d)) return `Point ${k} of ${last}. ${move}`;
  const n = formatCount(d.ns[k]);
  const sp = d.naive.parts.S[k] + d.naive.parts.P[k];
  const pct = (100 * sp) / d.naive.total[k];
  const share = pct >= 99 && pct < 100 ? pct.toFixed(1) : Math.round(pct); // never "100 %" short of it
  const next = k < last && !d.naive.fits[k + 1]
    ? `one doubling more and naive attention no longer fits on the ${gpuName}`
    : "the sweep goes no further";
  return `Point ${k} of ${last}: at N = ${n} naive attention needs ${gib(d.naive.total[k])}, ${share} % of it the scores S and P; ` +
    `flash needs ${gib(d.flash.total[k])}. Press → or Play: ${next}. Home goes back to the smallest N.`;
}

function renderPeaks(k = 0) {
  const d = view.data;
  const cap = d.gpu.capacity_bytes / GIB;
  const toG = (xs) => xs.map((b) => b / GIB);
  const oom = d.ns.map((_, i) => !d.naive.fits[i]);
  const traces = [
    { x: d.ns, y: toG(d.naive.total), name: "naive: peak", mode: "lines+markers", line: { color: COLORS.naive, width: 3 } },
    { x: d.ns, y: toG(d.flash.total), name: "flash: peak", mode: "lines+markers", line: { color: COLORS.flash, width: 3 } },
    { x: d.ns, y: toG(d.naive.beyond_inputs), name: "naive: beyond Q, K, V", mode: "lines", line: { color: COLORS.naive, dash: "dot" } },
    { x: d.ns, y: toG(d.flash.beyond_inputs), name: "flash: beyond Q, K, V", mode: "lines", line: { color: COLORS.flash, dash: "dot" } },
    {
      x: d.ns.filter((_, i) => oom[i]),
      y: toG(d.naive.total.filter((_, i) => oom[i])),
      name: "naive: out of memory",
      mode: "markers",
      marker: { symbol: "x", size: 14, color: COLORS.naive, line: { width: 2 } },
    },
  ];
  if (d.measured) {
    for (const impl of ["naive", "sdpa-flash"]) {
      const rows = d.measured.rows.filter((r) => r.impl === impl && !r.oom);
      traces.push({
        x: rows.map((r) => r.n),
        y: rows.map((r) => r.peak_mib / 1024),
        name: `${impl} measured on ${d.measured.device} (shipped)`,
        mode: "markers",
        marker: { symbol: "circle-open", size: 13, line: { width: 2 }, color: impl === "naive" ? COLORS.naive : COLORS.flash },
      });
    }
  }
  const n = d.ns[k];
  react(
    "peaks",
    traces,
    {
      height: 330,
      legend: { x: 1.02, y: 1, font: { size: 12 } },
      xaxis: { type: "log", title: { text: "sequence length N" } },
      yaxis: { type: "log", title: { text: "GiB" }, exponentformat: "power" },
      margin: { l: 64, r: 8 },
      shapes: [
        { type: "line", xref: "paper", x0: 0, x1: 1, y0: cap, y1: cap, line: { color: COLORS.cap, width: 2, dash: "dash" } },
        { type: "line", x0: n, x1: n, yref: "paper", y0: 0, y1: 1, line: { color: "#6b7280", dash: "dot" } },
      ],
      annotations: [
        { xref: "paper", x: 0, y: Math.log10(cap), text: `${d.gpu.name.replace(/^NVIDIA /, "")}: ${gib(d.gpu.capacity_bytes)}`, showarrow: false, xanchor: "left", yanchor: "bottom", font: { color: COLORS.cap } },
      ],
    },
  );
}

function renderParts(k) {
  const d = view.data;
  const parts = Object.keys(d.naive.parts);
  const traces = parts.map((name) => ({
    type: "bar",
    orientation: "h",
    name,
    y: ["naive", "flash"],
    x: [d.naive.parts[name][k] / GIB, d.flash.parts[name][k] / GIB],
    marker: { color: PART_COLORS[name] },
    hovertemplate: `${name}: %{x:.3f} GiB<extra>%{y}</extra>`,
  }));
  const cap = d.gpu.capacity_bytes / GIB;
  react(
    "parts",
    traces,
    {
      height: 170,
      barmode: "stack",
      legend: { orientation: "h", y: 1.35 },
      xaxis: { title: { text: "GiB at N = " + formatCount(d.ns[k]) }, rangemode: "tozero" },
      yaxis: { autorange: "reversed" },
      margin: { l: 56, t: 28 },
      shapes: [{ type: "line", x0: cap, x1: cap, yref: "paper", y0: 0, y1: 1, line: { color: COLORS.cap, dash: "dash" } }],
    },
  );
}

function render(k) {
  const d = view.data;
  const n = d.ns[k];
  const nv = d.naive.total[k];
  const fl = d.flash.total[k];
  $("now").textContent =
    `N = ${formatCount(n)}: naive needs ${gib(nv)}${d.naive.fits[k] ? "" : " — out of memory"}, ` +
    `flash ${gib(fl)} (${(nv / fl).toFixed(1)}× less).`;
  renderPeaks(k);
  renderParts(k);
}
