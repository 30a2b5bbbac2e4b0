// The trace stream of the steppers (/tiles, /backward, /decode): one WebSocket to /ws/trace.

/** How many events a socket keeps: the steps either side of the one on screen. */
const KEPT = 24;
/** How many steps beyond the one on screen it reads ahead. */
const AHEAD = 3;

/**
 * A trace stream over /ws/trace. `open(params)` asks for a trace (its metadata goes to
 * `onMeta`); `step(k)` asks for event k. Steps asked while one is in flight collapse to the
 * newest, so holding a key down never queues stale steps. Events go to `onEvent`, errors to
 * `onError`.
 *
 * Once a step is on screen the socket reads the next few steps ahead (in the direction the
 * reader last moved) and keeps the last events it received: a key press then draws from memory
 * instead of waiting for the server. The server computes each event once either way; reading
 * ahead sends at most AHEAD more requests than stepping does.
 */
export class TraceSocket {
  constructor({ onEvent, onError, onMeta }) {
    this.onEvent = onEvent;
    this.onError = onError;
    this.onMeta = onMeta;
    this.ws = null;
    this.ready = null;
    this.wanted = null; // the step to show once it arrives
    this.sent = []; // the requests not yet answered, oldest first: {kind, step}
    this.events = new Map(); // step → event of the open trace, least recently used first
    this.total = 0; // steps of the open trace
    this.shown = null; // the step last handed to onEvent
    this.direction = 1;
  }

  connect() {
    if (this.ready) return this.ready;
    const proto = window.location.protocol === "https:" ? "wss" : "ws";
    this.ws = new WebSocket(`${proto}://${window.location.host}/ws/trace`);
    this.sent = [];
    this.ws.addEventListener("message", (msg) => this.#receive(JSON.parse(msg.data)));
    this.ws.addEventListener("close", (ev) => {
      this.ready = null;
      if (ev.code !== 1000) this.onError([{ msg: `connection closed (${ev.code}) ${ev.reason}` }]);
    });
    this.ready = new Promise((resolve, reject) => {
      this.ws.addEventListener("open", () => resolve(), { once: true });
      this.ws.addEventListener("error", () => reject(new Error("WebSocket failed")), { once: true });
    });
    return this.ready;
  }

  async open(params) {
    await this.connect();
    this.wanted = null;
    this.events.clear();
    this.total = 0;
    this.shown = null;
    this.#request("open", { type: "open", params });
  }

  step(k) {
    if (this.shown !== null && k !== this.shown) this.direction = k < this.shown ? -1 : 1;
    const kept = this.events.get(k);
    if (kept) {
      this.wanted = null;
      this.#show(kept);
    } else {
      this.wanted = k;
      // A step already asked for comes in its turn; else ask, unless another step is on its way
      // (then the newest wanted step is asked when it arrives).
      if (!this.#asked(k) && !this.sent.some((r) => r.kind === "step")) this.#sendWanted();
    }
    this.#readAhead();
  }

  #asked(k) {
    return this.sent.some((r) => r.kind !== "open" && r.step === k);
  }

  #request(kind, body) {
    this.sent.push({ kind, step: body.step });
    this.ws.send(JSON.stringify(body));
  }

  #sendWanted() {
    if (this.wanted === null || !this.ws || this.ws.readyState !== WebSocket.OPEN) return;
    if (this.sent.some((r) => r.kind === "open")) return; // asked once the trace is open
    this.#request("step", { type: "step", step: this.wanted });
  }

  #keep(event) {
    this.events.delete(event.step); // most recently used last
    this.events.set(event.step, event);
    while (this.events.size > KEPT) this.events.delete(this.events.keys().next().value);
  }

  #show(event) {
    this.#keep(event);
    this.shown = event.step;
    this.onEvent(event);
  }

  /** Ask (quietly) for the steps after the one on screen that are neither kept nor asked. */
  #readAhead() {
    if (this.shown === null || !this.ws || this.ws.readyState !== WebSocket.OPEN) return;
    if (this.sent.some((r) => r.kind === "open")) return;
    let ahead = this.sent.filter((r) => r.kind === "ahead").length;
    for (let i = 1; i <= AHEAD && ahead < AHEAD; i += 1) {
      const k = this.shown + i * this.direction;
      if (k < 0 || k >= this.total) break;
      if (this.events.has(k) || this.#asked(k)) continue;
      this.#request("ahead", { type: "step", step: k });
      ahead += 1;
    }
  }

  #receive(msg) {
    // The server answers each request once, in order. The answer to a step asked before a newer
    // open belongs to the previous trace: drop it, or it would overwrite the new view's step.
    const asked = this.sent.shift() || {};
    const stale = asked.kind !== "open" && this.sent.some((r) => r.kind === "open");
    if (stale) {
      // nothing to keep or show
    } else if (msg.type === "meta") {
      this.total = msg.meta.n_events;
      this.onMeta(msg.meta);
    } else if (msg.type === "event") {
      if (asked.kind === "step" || this.wanted === msg.event.step) {
        if (this.wanted === msg.event.step) this.wanted = null;
        this.#show(msg.event);
      } else this.#keep(msg.event);
    } else if (msg.type === "error" && asked.kind !== "ahead") this.onError(msg.errors);
    // (a step read ahead that failed, e.g. over the server's rate, is asked again when wanted)
    if (this.wanted !== null) {
      const kept = this.events.get(this.wanted);
      if (kept) {
        this.wanted = null;
        this.#show(kept);
      } else if (!this.#asked(this.wanted) && !this.sent.some((r) => r.kind === "step")) this.#sendWanted();
    }
    this.#readAhead();
  }
}
