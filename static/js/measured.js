// What the steppers' measured source shares: the panel (#measured) that says where the kernel
// ran and how far its run has come, small tables, and the strip of each step's gap to the
// simulator against the dtype's tolerance.

import { backendInfo } from "./live.js";
import { react } from "./plot.js";

const $ = (id) => document.getElementById(id);

/** Where the kernel runs, in one sentence for the panel (the server's GPU or the interpreter). */
export async function whereText() {
  const health = await backendInfo();
  if (health && health.backend === "cuda") return `on this server's ${health.gpu}`;
  return "in Triton's interpreter on this server's CPU (no GPU here): the kernel's own code, " +
    "executed by NumPy, on small sizes only; nothing is timed";
}

/**
 * Show a MeasuredRun's state in the panel: hidden when idle, the progress line while the run is
 * queued or running, the errors when it failed; `done` draws the result with `drawDone(run)`.
 */
export function showRun(update, drawDone) {
  const panel = $("measured");
  const status = $("measured-status");
  panel.hidden = update.state === "idle";
  panel.dataset.state = update.state;
  whereText().then((text) => {
    $("measured-where").textContent = `(${text})`;
  });
  if (update.state === "running") {
    status.textContent = update.text;
    status.classList.remove("beyond");
    $("measured-body").replaceChildren();
  } else if (update.state === "failed") {
    status.textContent = update.errors.map((e) => (e.field ? `${e.field}: ${e.msg}` : e.msg)).join("; ");
    status.classList.add("beyond");
    $("measured-body").replaceChildren();
  } else if (update.state === "done") {
    status.classList.remove("beyond");
    drawDone(update.run);
  } else if (update.state === "note") {
    status.textContent = update.text;
    status.classList.remove("beyond");
    $("measured-body").replaceChildren();
  }
}

/** A table element from a header row and body rows; a cell is text or {text, cls}. */
export function table(head, rows, label) {
  const t = document.createElement("table");
  if (label) t.setAttribute("aria-label", label);
  const tr = document.createElement("tr");
  for (const h of head) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = h;
    tr.append(th);
  }
  const thead = document.createElement("thead");
  thead.append(tr);
  const tbody = document.createElement("tbody");
  for (const row of rows) {
    const r = document.createElement("tr");
    for (const cell of row) {
      const td = document.createElement("td");
      const c = typeof cell === "object" && cell !== null ? cell : { text: cell };
      td.textContent = c.text;
      if (c.cls) td.className = c.cls;
      r.append(td);
    }
    tbody.append(r);
  }
  t.append(thead, tbody);
  return t;
}

/** 1.23e-4, or "–" for a missing number (JSON's −∞ or NaN). */
export function sci(x) {
  return x === null || x === undefined ? "–" : Number(x).toExponential(2);
}

/**
 * Every step's gap to the simulator over its tolerance (a ratio above 1 is beyond it), on a log
 * axis, with the steps beyond it marked and a line at the step on screen.
 */
export function drawStrip(div, ratios, beyond, k) {
  const steps = ratios.map((_, i) => i);
  const floor = 1e-6;
  const y = ratios.map((r) => (r === null ? 1e3 : Math.max(r, floor)));
  const marked = new Set(beyond);
  react(div, [
    {
      type: "scatter", mode: "lines", x: steps, y, name: "gap / tolerance", line: { color: "#2563eb", width: 1 },
      hovertemplate: "step %{x}: gap = %{y:.2e} × the tolerance<extra></extra>",
    },
    {
      type: "scatter", mode: "markers", x: beyond, y: beyond.map((i) => y[i]), name: "beyond the tolerance",
      marker: { color: "#dc2626", size: 7, symbol: "x" }, hovertemplate: "step %{x}: beyond the tolerance<extra></extra>",
    },
  ], {
    height: 130,
    showlegend: false,
    margin: { t: 4, b: 30, l: 64 },
    xaxis: { title: { text: "step" }, range: [-0.5, Math.max(ratios.length - 0.5, 0.5)] },
    yaxis: { type: "log", title: { text: "gap ÷ tolerance" }, range: [Math.log10(floor), 1] },
    shapes: [
      { type: "line", xref: "paper", x0: 0, x1: 1, y0: 1, y1: 1, line: { color: "#dc2626", dash: "dash", width: 1 } },
      { type: "line", x0: k, x1: k, yref: "paper", y0: 0, y1: 1, line: { color: marked.has(k) ? "#dc2626" : "#f59e0b", width: 2 } },
    ],
  });
}
