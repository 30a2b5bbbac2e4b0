// /hopper's live recording: the launch on screen recorded on this server's GPU (an H100 or
// H200) through the run queue (POST /api/runs, what "warpgroups"), then shown in place of the
// shipped recording. GET /api/hopper says whether this server can record the launch (`record`:
// the run's body, or why not) and, given the view's `run` parameter, shows a finished run's
// recording (`measured.live`). Without a Hopper GPU the button stays disabled and says why.

import { progressText, startRun } from "./live.js";

const $ = (id) => document.getElementById(id);

const signed = (x) => `${x >= 0 ? "+" : "−"}${Math.abs(100 * x).toFixed(1)} %`;

/** "+4.2 % time with the recording on": what recording cost the kernel. */
export function costText(rec) {
  return `${signed(rec.overhead)} time with the recording on`;
}

/**
 * "; the recorded launch spans 0.924 ms by the GPU's timer, +1.1 % against the plain kernel":
 * how far the timeline shown is from the plain kernel's time ("" without a span).
 */
export function spanText(rec) {
  if (!(rec.span_ms > 0) || !(rec.plain_ms > 0)) return "";
  return `; the recorded launch spans ${rec.span_ms.toFixed(3)} ms by the GPU's timer, ` +
    `${signed(rec.span_ms / rec.plain_ms - 1)} against the plain kernel`;
}

/**
 * " behind the recording's 257 µs gate (0.883 ms without it)": where the launches of a recording
 * side by side waited behind a gate on the GPU, the plain kernel was timed behind it too ("" for
 * a recording without one).
 */
export function gateText(rec) {
  if (!(rec.gate_ms > 0) || !(rec.plain_ungated_ms > 0)) return "";
  return ` behind the recording's ${Math.round(rec.gate_ms * 1e3)} µs gate ` +
    `(${rec.plain_ungated_ms.toFixed(3)} ms without it)`;
}

/** "recorded live on …: plain kernel …, recorded … (+x % …); … spans …": a live recording. */
export function liveSummary(rec) {
  return `recorded live on ${rec.device}: plain kernel ${rec.plain_ms.toFixed(3)} ms${gateText(rec)}, ` +
    `recorded ${rec.recorded_branch_ms.toFixed(3)} ms (${costText(rec)})${spanText(rec)}`;
}

const sentence = (text) => `${text[0].toUpperCase()}${text.slice(1)}.`;

/**
 * Wire the "Record on this GPU" button. `recorded(runId)` is called when a run finishes for the
 * launch still on screen; `show(body)` after every load of /api/hopper sets the button and the
 * line beside it.
 */
export function mountRecord({ recorded }) {
  const button = $("record-live");
  const status = $("record-status");
  let request = null; // the run body of the launch on screen (null: it cannot be recorded)
  let asking = null; // the JSON of the body of the run being followed

  button.addEventListener("click", () => {
    if (!request) return;
    const body = request;
    const key = JSON.stringify(body);
    asking = key;
    button.disabled = true;
    status.textContent = "asking the server…";
    startRun(body, {
      onProgress: (p) => {
        if (asking === key) status.textContent = progressText(p);
      },
    }).then(
      (run) => {
        if (asking !== key) return; // another launch is on screen now
        asking = null;
        recorded(run.id);
      },
      (err) => {
        if (asking !== key) return;
        asking = null;
        button.disabled = false;
        status.textContent = (err.errors || [{ msg: String(err) }]).map((e) => e.msg).join("; ");
      },
    );
  });

  return {
    show(body) {
      const r = body.record;
      const rec = body.measured.timeline;
      const live = body.measured.live;
      request = r.available ? r.request : null;
      if (asking !== null && (!request || JSON.stringify(request) !== asking)) asking = null;
      if (asking !== null) return; // the run of this launch goes on: its progress stays
      button.disabled = !request;
      button.title = request
        ? `Record this launch on this server's ${r.device || "GPU"} and show it in place of the shipped recording`
        : sentence(r.why);
      if (rec && rec.live) status.textContent = `Shown below the model: run ${live.run}, recorded live on ${rec.device}.`;
      else if (live && live.why) status.textContent = sentence(live.why);
      else if (!request) status.textContent = sentence(r.why);
      else status.textContent = `Records this launch on this server's ${r.device || "GPU"}: the kernel compiled plain and recorded, then both timed.`;
    },
  };
}
