// /schedule's measured timeline: the schedule on screen run on this server's GPU (the FA-2
// forward's timeline kernel: each program's start, end and SM), drawn beside the simulated one.
// Without a GPU the button stays disabled and says why.

import { errorList } from "./errors.js";
import { backendInfo, followRun, progressText } from "./live.js";
import { react } from "./plot.js";
import { apiUrl } from "./url.js";

const $ = (id) => document.getElementById(id);
const NO_GPU = "A measured timeline needs a GPU (each program's start and end come from its " +
  "timer); this server has none. /compare shows the timelines recorded on an H100 and an H200.";

const us = (x) => (x >= 1000 ? `${(x / 1000).toFixed(2)} ms` : `${x.toFixed(1)} µs`);

/** Wire the measure button; `query()` is the schedule's current parameters. */
export function mountScheduleMeasure({ query }) {
  const button = $("measure-schedule");
  const status = $("schedule-measured-status");
  let generation = 0;
  backendInfo().then((health) => {
    const gpu = health && health.live_timing;
    button.disabled = !gpu;
    status.textContent = gpu ? `runs on this server's ${health.gpu}` : NO_GPU;
  });
  button.addEventListener("click", async () => {
    const mine = ++generation;
    const params = query();
    status.textContent = "queueing…";
    const res = await fetch("/api/schedule/measure", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(params),
    });
    const run = await res.json().catch(() => null);
    if (!res.ok) {
      status.textContent = errorList(run, res.status).map((e) => e.msg).join("; ");
      return;
    }
    try {
      await followRun(run, (p) => {
        if (mine === generation) status.textContent = progressText(p);
      });
    } catch (err) {
      if (mine === generation) status.textContent = (err.errors || [{ msg: String(err) }]).map((e) => e.msg).join("; ");
      return;
    }
    const got = await fetch(apiUrl(`/api/schedule/measured/${run.id}`, params));
    const m = await got.json().catch(() => null);
    if (mine !== generation) return;
    if (!got.ok) {
      status.textContent = errorList(m, got.status).map((e) => e.msg).join("; ");
      return;
    }
    const r = m.resident_per_sm;
    status.textContent = `${m.device}: ${m.ctas.toLocaleString("en-US")} CTAs in ${us(m.span_us)} ` +
      `(simulated ${us(m.simulated_span_us)}); CTAs resident per SM ${r.measured.toFixed(2)} measured, ` +
      `${r.simulated.toFixed(2)} simulated.`;
    for (const id of ["schedule-running", "schedule-measured-gantt"]) $(id).hidden = false;
    react("schedule-running", m.running.data, { ...m.running.layout, height: 240, legend: { orientation: "h", y: 1.15 } });
    react("schedule-measured-gantt", m.gantt.data, {
      ...m.gantt.layout, height: 320, showlegend: false, title: { text: "measured SM timeline (one bar per CTA)", font: { size: 12 } },
    });
  });
}
