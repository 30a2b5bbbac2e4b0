// /compare's "measure now": the problem on screen timed live on this server's GPU. The server
// queues one timed run per tile configuration of the problem and one of flash_attention's own
// choice (POST /api/compare/measure); each point is handed to the page as its run ends, and the
// finished runs download as a dataset (POST /api/compare/dataset).

import { errorList } from "./errors.js";
import { backendInfo, followRun, progressText } from "./live.js";
import { table } from "./measured.js";

const $ = (id) => document.getElementById(id);
const NO_GPU = "Timing needs a GPU, and this server has none (its kernels run in Triton's " +
  "interpreter): the shipped datasets, measured on an H100 and an H200, stand in.";

const us = (x) => (x === null || x === undefined ? "–" : `${x.toLocaleString("en-US", { maximumFractionDigits: 1 })} µs`);

/** Ranks (1 = fastest) of `values` (null last). */
function ranks(values) {
  const order = values.map((v, i) => [v ?? Infinity, i]).sort((a, b) => a[0] - b[0]);
  const out = new Array(values.length);
  order.forEach(([, i], r) => {
    out[i] = values[i] === null || values[i] === undefined ? null : r + 1;
  });
  return out;
}

/**
 * Wire the measure-now panel. `problem()` is the page's current {gpu, id}; `onPoints(points)`
 * redraws the page's figures with the live points so far ({tile, kernel_us, call_us,
 * median_us, simulated_us, kernel, device}).
 */
export function mountMeasureNow({ problem, onPoints }) {
  const button = $("measure");
  let generation = 0;
  let points = [];

  backendInfo().then((health) => {
    const gpu = health && health.live_timing;
    button.disabled = !gpu;
    $("live-why").textContent = gpu
      ? `Times the kernels of the problem on screen on this server's ${health.gpu}: each tile configuration of the dataset, and what flash_attention picks by default. Each run queues behind others on the GPU.`
      : NO_GPU;
  });

  button.addEventListener("click", async () => {
    const mine = ++generation;
    points = [];
    onPoints(points);
    $("live-ranking").replaceChildren();
    $("live-download").hidden = true;
    const status = $("live-status");
    status.textContent = "queueing…";
    const res = await fetch("/api/compare/measure", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(problem()),
    });
    const body = await res.json().catch(() => null);
    if (!res.ok) {
      status.textContent = errorList(body, res.status).map((e) => e.msg).join("; ");
      return;
    }
    const progress = $("live-progress");
    progress.hidden = false;
    progress.max = body.runs.length;
    progress.value = 0;
    const finished = [];
    // The queue runs them in order: follow one at a time (few connections, points in order).
    for (const [i, run] of body.runs.entries()) {
      try {
        const done = await followRun({ id: run.id, state: "queued", messages: [] }, (p) => {
          if (mine === generation) status.textContent = `${run.tile} (${i + 1} of ${body.runs.length}): ${progressText(p)}`;
        });
        if (mine !== generation) return;
        finished.push(run.id);
        points.push({ ...point(run.tile, done.result), problem: body.problem });
        onPoints(points);
      } catch (err) {
        if (mine !== generation) return;
        points.push({ tile: run.tile, problem: body.problem, error: (err.errors || [{ msg: String(err) }]).map((e) => e.msg).join("; ") });
      }
      progress.value = i + 1;
      drawRanking(points);
    }
    status.textContent = `${finished.length} of ${body.runs.length} runs measured on ${points.find((p) => p.device)?.device ?? "the GPU"}`;
    if (finished.length) offerDataset(finished, body.problem);
  });
}

function point(tile, result) {
  const t = result.timing;
  return {
    tile,
    kernel_us: t.kernel_us,
    call_us: t.call_us,
    median_us: t.median_us,
    simulated_us: result.simulated ? result.simulated.time_us : null,
    kernel: t.kernel,
    device: result.device,
    note: result.timing_note,
  };
}

function drawRanking(points) {
  const ok = points.filter((p) => !p.error);
  const predicted = ranks(ok.map((p) => p.simulated_us));
  const measured = ranks(ok.map((p) => p.kernel_us));
  const ranked = (x, r) => (x === null || x === undefined ? "–" : `${us(x)} (${r})`);
  const rows = ok.map((p, i) => [
    p.tile === "default" ? `default: ${p.kernel.split(" ")[0]}` : p.tile,
    ranked(p.simulated_us, predicted[i]), ranked(p.kernel_us, measured[i]), us(p.call_us),
  ]);
  for (const p of points.filter((x) => x.error)) rows.push([p.tile, { text: p.error, cls: "beyond" }, "", ""]);
  const t = table(["tiles", "predicted (rank)", "kernels (rank)", "whole call"], rows,
    "Predicted and measured ranking of the tile configurations");
  const kernels = ok.filter((p) => p.tile === "default").map((p) => `default: ${p.kernel}`);
  const note = document.createElement("p");
  note.className = "muted small";
  note.textContent = ["kernels: the kernels' own GPU time; whole call: flash_attention as a user calls it, host included.", ...kernels].join(" ");
  $("live-ranking").replaceChildren(t, note);
}

async function offerDataset(ids, problem) {
  const res = await fetch("/api/compare/dataset", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ runs: ids }),
  });
  if (!res.ok) return;
  const blob = new Blob([await res.text()], { type: "application/json" });
  const link = $("live-download");
  link.href = URL.createObjectURL(blob);
  link.download = `live-${problem}.json`;
  link.hidden = false;
}
