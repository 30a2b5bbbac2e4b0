// Live runs of flashscope's kernels from a page: what the server runs on (GET /api/health),
// queueing a run (POST /api/runs) and following it (its server-sent events) until it ends.

import { errorList } from "./errors.js";

let health = null;

/** What the server runs on: /api/health's answer ({backend, gpu, label, live_timing}), once. */
export function backendInfo() {
  if (!health) {
    health = fetch("/api/health")
      .then((res) => (res.ok ? res.json() : null))
      .catch(() => null);
  }
  return health;
}

/** A refused or failed run: its error entries ({msg, field?}) for the page to show. */
export class RunError extends Error {
  constructor(errors) {
    super(errors.map((e) => e.msg).join("; "));
    this.errors = errors;
  }
}

/** How many times a run the server cancelled as unfollowed is queued again (see startRun). */
const REQUEUES = 3;

/**
 * Queue a run and follow it: `onProgress({state, position, messages})` on every change; resolves
 * with the finished run (GET /api/runs/{id}'s body), rejects with a RunError when the server
 * refuses the request or the run fails or times out. Identical requests share one run.
 *
 * The server cancels a run nobody follows within a second or so of its queueing
 * (FLASHSCOPE_RUNS_UNWATCHED_S); a page on a slow link or a busy machine can open the run's
 * stream later than that. This page did follow it, so such a run is queued again (at most
 * REQUEUES times) rather than shown as cancelled.
 */
export async function startRun(body, { onProgress = () => {} } = {}) {
  for (let attempt = 0; ; attempt += 1) {
    const res = await fetch("/api/runs", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const first = await res.json().catch(() => null);
    if (!res.ok) throw new RunError(errorList(first, res.status));
    try {
      return await followRun(first, onProgress);
    } catch (err) {
      if (!(err instanceof RunError && err.unfollowed && attempt < REQUEUES)) throw err;
    }
  }
}

/** Follow a queued run (its POST answer or GET body) until it ends; see startRun. */
export function followRun(run, onProgress = () => {}) {
  const messages = [...(run.messages || [])];
  onProgress({ state: run.state, position: run.position, messages });
  if (["done", "failed", "timeout", "cancelled"].includes(run.state)) return finished(run);
  return new Promise((resolve, reject) => {
    const source = new EventSource(`/api/runs/${run.id}/events`);
    source.addEventListener("progress", (msg) => {
      const data = JSON.parse(msg.data);
      messages.push(...data.messages);
      onProgress({ state: data.state, position: data.position, messages });
    });
    source.addEventListener("end", (msg) => {
      source.close();
      finished(JSON.parse(msg.data)).then(resolve, reject);
    });
    source.addEventListener("error", () => {
      // The stream broke (a proxy, a restart): read the run's state instead of hanging.
      source.close();
      fetch(`/api/runs/${run.id}`)
        .then((res) => (res.ok ? res.json() : Promise.reject(new Error(`HTTP ${res.status}`))))
        .then((body) => (["done", "failed", "timeout", "cancelled"].includes(body.state)
          ? finished(body).then(resolve, reject)
          : followRun(body, onProgress).then(resolve, reject)))
        .catch((err) => reject(new RunError([{ msg: `lost the run's progress: ${err.message}` }])));
    });
  });
}

function finished(run) {
  if (run.state === "done") return Promise.resolve(run);
  const why = run.state === "timeout" ? "the run took longer than the server allows" : run.error;
  const err = new RunError([{ msg: `the run ${run.state}: ${why || "no reason given"}` }]);
  // cancelled because nobody followed it (app/runs/queue.py): the caller may queue it again
  err.unfollowed = run.state === "cancelled" && run.cause === "unfollowed";
  return Promise.reject(err);
}

/** "queued: 2 runs ahead" / "running: compiling…" / "done": one line for a run's progress. */
export function progressText({ state, position, messages }) {
  if (state === "queued") {
    return position ? `queued: ${position} run${position === 1 ? "" : "s"} ahead of it` : "queued: next";
  }
  const last = messages.length ? messages[messages.length - 1] : "";
  return last ? `${state}: ${last}` : state;
}

/**
 * The measured source of a stepper: one run for the view's current request at a time. `ask(body)`
 * starts following the run for `body` unless it is the one already shown (an answer to an older
 * request is dropped); `show` receives {state: "idle" | "running" | "done" | "failed", …}.
 */
export class MeasuredRun {
  constructor(show) {
    this.show = show;
    this.key = null;
    this.result = null;
  }

  ask(body) {
    const key = JSON.stringify(body);
    if (key === this.key) return;
    this.key = key;
    this.result = null;
    this.show({ state: "running", text: "asking the server…" });
    startRun(body, {
      onProgress: (p) => this.key === key && this.show({ state: "running", text: progressText(p), position: p.position }),
    }).then(
      (run) => {
        if (this.key !== key) return;
        this.result = run.result;
        this.show({ state: "done", run });
      },
      (err) => this.key === key && this.show({ state: "failed", errors: err.errors || [{ msg: String(err) }] }),
    );
  }

  clear() {
    this.key = null;
    this.result = null;
    this.show({ state: "idle" });
  }
}
