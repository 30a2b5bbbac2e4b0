// The tile stepper's figures of the current tile's numbers, from the forward state the server
// sends: the S and P tiles, the online-softmax statistics of the current rows (m, α and
// ℓ′ = α·ℓ + rowsum P), the accumulator update Õ′ = α·Õ + P·Vⱼ, and the distance of the output
// so far to exact attention. Every number drawn here came from the server; none is recomputed.

import { react, widthOf } from "./plot.js";
import { cellSpans, span } from "./trace_view.js";

const MASKED_BG = "#d1d5db";
// Below this width (a phone) panels that stand side by side are stacked: side by side, their
// titles, tick labels and colour bars would run into each other. (The S and P tiles are stacked
// by a container query of the same width: static/css/app.css.)
const STACK_BELOW_PX = 560;
const stacked = (div) => (widthOf(div) || 800) < STACK_BELOW_PX;
const pairOf = (div) => div.closest(".tile-pair") || div;
const CELL_TEXT_MAX = 16; // print numbers in the cells of tiles up to 16 × 16 shown cells
// How many times the floor u·max|O| still counts as "at the dtype's rounding" (the bounds the
// simulator's tests hold the written output to: fp32 sums a few roundings of its own).
const AT_FLOOR = { fp32: 32, fp16: 4, bf16: 4 };

/** What the S/P panel says when the event has no tile yet (or no longer). */
const NO_TILE = {
  init: "FA-1 starts by writing O = 0, ℓ = 0, m = −∞ to HBM for every row. Press → to load the first K, V block.",
  load_q: "Qᵢ is on chip; no key seen yet, so m = −∞, ℓ = 0, Õ = 0 for every row. Next: load K₀, V₀, then S = QᵢK₀ᵀ·scale.",
  load_kv: "Kⱼ, Vⱼ have arrived in SRAM. Next: S = QᵢKⱼᵀ·scale, one score per (query, key) pair of this tile.",
  store: "The block has met every key it may see: O = Õ / ℓ and the log-sum-exp go to HBM, once.",
};

/** "−0.057", "1.2e−5": short numbers for cells and hovers. */
export function short(x, digits = 3) {
  if (x === null || x === undefined) return "−∞";
  if (x === 0) return "0";
  const a = Math.abs(x);
  const s = a >= 1e-3 && a < 1e4 ? x.toPrecision(digits).replace(/\.?0+$/, "") : x.toExponential(digits - 1);
  return s.replace("-", "−");
}

const MASKED = "−∞: masked, key after query";

/**
 * A tile's hover: what a cell is, with its global query row i and key j ("S[i=19, j=166] =
 * −0.0568"). Plotly fills in the row, key and value of the cell, so no text is made per cell;
 * where a cell averages stride × stride pairs, customdata holds the spans of rows and keys.
 * A masked tile's customdata says, per cell, whether its pair is masked.
 */
function tileHover(trace, name, st, stride, what, masked) {
  const z = trace.z;
  const value = masked ? "%{customdata[2]}" : `%{z:.4~g}${stride > 1 ? ` (mean of ${stride}×${stride})` : ""}<br>${what}`;
  if (stride === 1 && !masked) {
    trace.hovertemplate = `${name}[i=%{y}, j=%{x}] = ${value}<extra></extra>`;
    return trace;
  }
  const rows = cellSpans(st.rows[0], z.length, stride, st.rows[1]);
  const cols = cellSpans(st.cols[0], z[0].length, stride, st.cols[1]);
  const mean = stride > 1 ? ` (mean of ${stride}×${stride})` : "";
  const shown = (v) => (v === null ? MASKED : `${short(v, 4)}${mean}<br>${what}`);
  trace.customdata = z.map((row, r) => row.map((v, c) => (masked ? [rows[r], cols[c], shown(v)] : [rows[r], cols[c]])));
  trace.hovertemplate = `${name}[i=%{customdata[0]}, j=%{customdata[1]}] = ${value}<extra></extra>`;
  return trace;
}

/** Numbers printed in the cells of a small tile (−∞ where masked). */
function cellText(z, small) {
  if (!small) return {};
  return { text: z.map((r) => r.map((v) => short(v, 2))), texttemplate: "%{text}", textfont: { size: 10 } };
}

/** A tile's heatmap figure: its panel title, the key axis and the query-row axis. */
function tileLayout(title, keyTitle, { annotations = [], rowTitle = true } = {}) {
  const axis = { showgrid: false, zeroline: false };
  return {
    height: 280,
    margin: { t: 26, r: 8, b: 40 },
    plot_bgcolor: MASKED_BG,
    annotations: [
      { text: title, x: 0, y: 1.02, xref: "x domain", yref: "paper", showarrow: false, xanchor: "left", yanchor: "bottom" },
      ...annotations,
    ],
    xaxis: { ...axis, title: { text: keyTitle } },
    yaxis: { ...axis, autorange: "reversed", ...(rowTitle ? { title: { text: "query row i" } } : {}) },
  };
}

/**
 * Show the sentence `text` in place of the figure `div` (its place kept, its PNG button off), or
 * (text null) the figure again. The sentence is the page's text, not a Plotly drawing: a step
 * that has no tile costs no redraw, and the next tile updates a figure of the same shape.
 */
function noteInstead(div, text) {
  const on = text !== null;
  div.classList.toggle("blank", on);
  const note = document.getElementById(`${div.id}-note`);
  if (note) {
    note.hidden = !on;
    if (on && note.textContent !== text) note.textContent = text;
  }
  const png = document.querySelector(`button[data-png-target="${div.id}"]`);
  if (png) png.disabled = on;
}

/**
 * The S and P tiles of the current event, S in `div` and P in `pdiv` (side by side; one above
 * the other on a phone), or what happens instead. Each is its own figure, redrawn only when it
 * changes: a new tile redraws S, the softmax step that follows redraws P alone (a figure of two
 * heatmaps costs twice one).
 */
export function drawTile(div, pdiv, ev, figures, { algo = "fa2", measured = false } = {}) {
  const st = ev.state;
  const stride = st.tile_stride || 1;
  const tile = [ev.q_block, ev.kv_block, st.s && st.s.length, stride, ev.masked, algo, measured];
  if (!st.s) {
    if (!figures.stale("tile", ["none", ev.phase])) return;
    figures.stale("tile-p", ["none"]);
    noteInstead(div, NO_TILE[ev.phase] || "No tile at this step.");
    noteInstead(pdiv, "");
    return;
  }
  // Numbers in the cells where each cell is wide enough to hold one.
  const cellPx = ((widthOf(div) || 400) * 0.84) / st.s[0].length;
  const small = st.s.length <= CELL_TEXT_MAX && st.s[0].length <= CELL_TEXT_MAX && cellPx >= 30;
  const y = st.s.map((_, k) => st.rows[0] + k * stride);
  const x = st.s[0].map((_, k) => st.cols[0] + k * stride);
  const keyTitle = `key j (block ${ev.kv_block}${stride > 1 ? `, mean of ${stride}×${stride}` : ""})`;
  if (figures.stale("tile", tile)) {
    const sRange = figures.range("s", st.s, { symmetric: true }) || [-1, 1];
    const extra = measured
      ? [{ text: "tiles: the simulator's (the kernel sends m, ℓ, α, Õ only)", x: 1, y: -0.2, xref: "paper", yref: "paper", showarrow: false, xanchor: "right", font: { size: 11, color: "#4b5563" } }]
      : [];
    react(div, [tileHover({
      type: "heatmap", z: st.s, x, y, zmin: sRange[0], zmax: sRange[1], colorscale: "RdBu",
      colorbar: { thickness: 8, len: 0.9, title: { text: "S", side: "right" } },
      hoverongaps: true, ...cellText(st.s, small),
    }, "S", st, stride, "S = q·k · scale", Boolean(ev.masked))],
    tileLayout(`<b>S = QᵢKⱼᵀ · scale</b>${ev.masked ? " (grey: masked, −∞)" : ""}`, keyTitle, { annotations: extra }));
    noteInstead(div, null);
  }
  if (!figures.stale("tile-p", [...tile, Boolean(st.p)])) return;
  if (!st.p) {
    noteInstead(pdiv, "P comes at the next step: m′ = max(m, rowmax S), then P = e^(S − m′).");
    return;
  }
  const fa1 = algo === "fa1";
  const what = fa1 ? "P̃ = e^(S − m̃), m̃ this tile's row max" : "P = e^(S − m′), m′ the new running max";
  react(pdiv, [tileHover({
    type: "heatmap", z: st.p, x, y, zmin: 0, zmax: 1,
    colorscale: [[0, "#ffffff"], [1, "#b45309"]],
    colorbar: { thickness: 8, len: 0.9, title: { text: "P", side: "right" } },
    ...cellText(st.p, small),
  }, fa1 ? "P̃" : "P", st, stride, what, false)],
  tileLayout(`<b>${fa1 ? "P̃ = e^(S − m̃)" : "P = e^(S − m′)"}</b> (masked pairs: 0)`, keyTitle, { rowTitle: stacked(pairOf(div)) }));
  noteInstead(pdiv, null);
}

/** Break a long sentence into lines of about `width` characters for a Plotly annotation. */
function wrap(text, width) {
  const out = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line && line.length + word.length + 1 > width) {
      out.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) out.push(line);
  return out.join("<br>");
}

/** A y-axis range that starts at 0 and never collapses to nothing (ℓ = 0 at the start). */
function fromZero(figures, name, values) {
  if (!values.some((v) => v > 0)) return figures.ranges[name] || [0, 1];
  return figures.range(name, values, { zero: true });
}

/**
 * The online softmax of the current rows in three panels on one row axis: m (running max),
 * α = e^(m − m′) and ℓ′ stacked from α·ℓ (the old sum, rescaled) and rowsum P (this tile). Trace
 * 0 is m and trace 1 is ℓ, as tests and the measured view read them.
 */
export function drawStats(div, ev, figures) {
  const st = ev.state;
  if (!st.rows || !st.m) return;
  if (!figures.stale("ml", [st.rows, st.m, st.l, st.alpha, st.l_rescaled, st.p_sum])) return;
  const rows = span(st.rows);
  const marker = { size: rows.length > 64 ? 3 : 5 };
  const alpha = st.alpha || rows.map(() => null);
  const lRange = fromZero(figures, "l", st.l);
  const hover = (name) => `row %{x}: ${name} = %{y:.4g}<extra></extra>`;
  const traces = [
    { x: rows, y: st.m, name: "m", mode: "markers", marker: { ...marker, color: "#b45309" }, hovertemplate: hover("m") },
    { x: rows, y: st.l, name: "ℓ′", yaxis: "y3", mode: "markers", marker: { ...marker, symbol: "line-ew-open", size: 10, color: "#111827" }, hovertemplate: hover("ℓ") },
    { x: rows, y: alpha, name: "α", yaxis: "y2", mode: "markers", marker: { ...marker, color: "#7c3aed" }, hovertemplate: hover("α = e^(m − m′)") },
    { x: rows, y: st.l_rescaled || [], name: "α·ℓ (old sum, rescaled)", type: "bar", yaxis: "y3", marker: { color: "#1d4ed8" }, hovertemplate: hover("α·ℓ (old sum, rescaled)") },
    { x: rows, y: st.p_sum || [], name: "rowsum P (this tile)", type: "bar", yaxis: "y3", marker: { color: "#93c5fd" }, hovertemplate: hover("rowsum P (this tile)") },
    { x: rows, y: st.l_prev || [], name: "ℓ before", yaxis: "y3", mode: "markers", marker: { symbol: "x-thin-open", size: 7, color: "#6b7280" }, hovertemplate: hover("ℓ before this tile") },
  ];
  const annotations = [];
  const label = (text, y) => ({ text, x: 0, xref: "paper", y, yref: "paper", xanchor: "left", yanchor: "bottom", showarrow: false, font: { size: 12 } });
  annotations.push(label("<b>m</b>: running max of each row", 0.97));
  annotations.push(label("<b>α = e^(m − m′)</b>: how much the old sum and Õ shrink", 0.59));
  annotations.push(label(st.l_rescaled ? "<b>ℓ′ = α·ℓ + rowsum P</b>" : "<b>ℓ</b>: running sum of e^(S − m)", 0.27));
  if (st.m.every((v) => v === null)) {
    annotations.push({ text: "m = −∞ for every row: no key seen yet", x: 0.5, y: 0.84, xref: "paper", yref: "paper", showarrow: false, font: { color: "#4b5563" } });
  }
  if (!st.alpha) {
    annotations.push({ text: ev.phase === "qk" || ev.phase === "load_kv" ? "α comes with the softmax step" : "no rescale at this step", x: 0.5, y: 0.5, xref: "paper", yref: "paper", showarrow: false, font: { color: "#4b5563" } });
  }
  const mRange = figures.range("m", st.m);
  react(div, traces, {
    height: 360,
    barmode: "stack",
    bargap: rows.length > 32 ? 0 : 0.2,
    showlegend: false,
    margin: { t: 8, b: 40 },
    annotations,
    xaxis: { title: { text: "query row" }, anchor: "y3" },
    yaxis: { domain: [0.7, 0.96], ...(mRange ? { range: mRange } : { range: [-1, 1] }), tickformat: ".3~g" },
    yaxis2: { domain: [0.38, 0.58], range: [0, 1.1], tickvals: [0, 0.5, 1] },
    yaxis3: { domain: [0, 0.26], range: lRange, tickformat: ".3~g", exponentformat: "power" },
  });
}

/** Õ′ = α·Õ + P·Vⱼ at FA-2's P·V step, as three heatmaps (stacked on a phone); a note at
 * other steps. */
export function drawAccumulator(div, ev, figures, algo = "fa2") {
  const st = ev.state;
  // The note between P·V steps is the same at each of them: drawn once, not at every step.
  if (!figures.stale("acc", st.pv ? [ev.step] : ["note", algo])) return;
  const parts = st.pv ? [[st.o_rescaled, "α·Õ (old, rescaled)"], [st.pv, "+ P·Vⱼ (this tile)"], [st.o, "= Õ′"]] : [];
  if (!parts.length) {
    const text = algo === "fa1"
      ? "FA-1 keeps O normalized in HBM: O ← (ℓ·α·O + β·P̃Vⱼ) / ℓ′ at each tile, then writes it back."
      : "The accumulator changes at the P·V step: Õ′ = α·Õ + P·Vⱼ (every row of Õ shrinks by its α, then the tile's P·V is added).";
    react(div, [], {
      height: 200,
      xaxis: { visible: false },
      yaxis: { visible: false },
      annotations: [{ text: wrap(text, 56), showarrow: false, x: 0.5, y: 0.5, xref: "paper", yref: "paper", font: { color: "#374151" } }],
    });
    return;
  }
  const rows = span(st.rows);
  const cols = st.o[0].map((_, c) => c * st.col_stride);
  const range = figures.range("acc", parts.map(([z]) => z), { symmetric: true }) || [-1, 1];
  const w = 0.29;
  const stack = stacked(div);
  const traces = parts.map(([z, name], k) => ({
    type: "heatmap", z, x: cols, y: rows, zmin: range[0], zmax: range[1], colorscale: "RdBu",
    showscale: k === 2, colorbar: stack ? { thickness: 8, len: 0.9 } : { thickness: 8 }, xaxis: k ? `x${k + 1}` : "x", yaxis: k ? `y${k + 1}` : "y",
    hovertemplate: `${name}: row %{y}, column %{x} = %{z:.4g}<extra></extra>`,
  }));
  const layout = {
    height: stack ? 480 : 220,
    margin: { t: 24 },
    annotations: parts.map(([, name], k) => ({
      text: `<b>${name}</b>`, x: 0, y: 1.0, xref: `x${k ? k + 1 : ""} domain`, yref: stack ? `y${k ? k + 1 : ""} domain` : "paper",
      xanchor: "left", yanchor: "bottom", showarrow: false,
    })),
  };
  // Stacked, panel k runs from the top: its rows fill a third of the height less a gap for the
  // next panel's title; only the bottom panel names the head-dim axis.
  const band = (k) => [1 - (k + 1) / 3 + 0.06, 1 - k / 3];
  parts.forEach((_, k) => {
    const sx = k ? `xaxis${k + 1}` : "xaxis";
    const sy = k ? `yaxis${k + 1}` : "yaxis";
    layout[sx] = stack
      ? { domain: [0, 0.9], anchor: k ? `y${k + 1}` : "y", showticklabels: k === 2, title: k === 2 ? { text: "head dim" } : undefined }
      : { domain: [k * (w + 0.04), k * (w + 0.04) + w], anchor: k ? `y${k + 1}` : "y", title: { text: "head dim" } };
    layout[sy] = stack
      ? { domain: band(k), anchor: k ? `x${k + 1}` : "x", autorange: "reversed", title: { text: "query row" } }
      : { anchor: k ? `x${k + 1}` : "x", autorange: "reversed", showticklabels: k === 0, title: k ? undefined : { text: "query row" } };
  });
  react(div, traces, layout);
}

/**
 * How far the output so far is from exact attention: the block's largest |O_so_far − O_exact|
 * after each key block (log scale) against the dtype's floor u·max|O_exact|. It changes once
 * per key block (and when the output is written): redrawn then only.
 */
export function drawError(div, ev, dtype, figures) {
  const st = ev.state;
  if (!st.err_history) return;
  if (figures && !figures.stale("err", [st.rows, st.err_history, Boolean(st.final), st.err_floor, dtype])) return;
  const h = st.err_history;
  const n = h.length;
  const written = st.final;
  const labels = h.map((_, k) => (k === 0 ? "none" : written && k === n - 1 ? "O written" : `K${k - 1}`));
  const x = h.map((_, k) => k);
  const positive = h.map((v) => (v > 0 ? v : null));
  const floor = st.err_floor;
  const traces = [{
    x, y: positive, mode: "lines+markers", name: "max |O so far − exact|", line: { color: "#dc2626" },
    customdata: labels, hovertemplate: "after %{customdata}: max |O − exact| = %{y:.3g}<extra></extra>",
  }];
  const shapes = [];
  const annotations = [];
  if (floor > 0) {
    shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: floor, y1: floor, line: { color: "#059669", dash: "dash", width: 2 } });
    annotations.push({ text: `floor u·max|O| (${dtype})`, xref: "paper", x: 1, y: Math.log10(floor), xanchor: "right", yanchor: "bottom", showarrow: false, font: { size: 11, color: "#059669" } });
  }
  const lo = Math.min(...positive.filter((v) => v !== null), floor > 0 ? floor : Infinity);
  const hi = Math.max(...positive.filter((v) => v !== null), floor);
  react(div, traces, {
    height: 220,
    margin: { l: 64 },
    showlegend: false,
    shapes,
    annotations,
    xaxis: { tickvals: x, ticktext: labels, title: { text: "key blocks folded into the output" }, range: [-0.3, Math.max(n - 0.7, 1)] },
    yaxis: {
      type: "log", title: { text: "max |O − exact|" }, exponentformat: "power",
      range: Number.isFinite(lo) && hi > 0 ? [Math.floor(Math.log10(lo)) - 0.3, Math.ceil(Math.log10(hi)) + 0.2] : undefined,
    },
  });
}

/** The sentence under the error figure: this step's |O so far − exact| against the floor. */
export function errorReadout(readout, ev, dtype, { measured = false } = {}) {
  const st = ev.state;
  if (!st.err_history) {
    readout.textContent = "–";
    return;
  }
  const n = st.err_history.length;
  const written = st.final;
  const floor = st.err_floor;
  const now = st.err.length ? Math.max(...st.err) : 0;
  const rows = `rows ${st.rows[0]}–${st.rows[1] - 1}`;
  const seen = written ? "the output as written" : n === 1 ? "no key yet (Õ = 0)" : `key block${n > 2 ? "s" : ""} 0${n > 2 ? `–${n - 2}` : ""}`;
  const times = floor > 0 ? now / floor : null;
  let verdict = ".";
  if (times !== null) {
    const x = times >= 10 ? Math.round(times).toLocaleString("en-US") : short(times, 2);
    verdict = times <= AT_FLOOR[dtype]
      ? `: ${x}× the floor, as exact as ${dtype} allows.`
      : `: ${x}× the floor; the keys still to come bring it down.`;
  }
  const whose = measured ? " (the simulator's run: the measured panel gives the kernel's own error)" : "";
  readout.textContent = `After ${seen}: max |O so far − exact| = ${short(now, 3)} over ${rows}; ` +
    `the ${dtype} floor u·max|O| is ${short(floor, 3)}${verdict}${whose}`;
}
