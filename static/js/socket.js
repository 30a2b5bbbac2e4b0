// The trace stream of the steppers (/tiles, /backward, /decode): one WebSocket to /ws/trace.

/**
 * A trace stream over /ws/trace. `open(params)` asks for a trace (its metadata goes to
 * `onMeta`); `step(k)` asks for event k. Requests made while one is in flight collapse to the newest, so holding
 * a key down never queues stale steps. Events go to `onEvent`, errors to `onError`.
 */
export class TraceSocket {
  constructor({ onEvent, onError, onMeta }) {
    this.onEvent = onEvent;
    this.onError = onError;
    this.onMeta = onMeta;
    this.ws = null;
    this.ready = null;
    this.inFlight = false;
    this.wanted = null;
    this.sent = []; // kinds of the requests not yet answered, oldest first
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
    this.inFlight = true;
    this.wanted = null;
    this.sent.push("open");
    this.ws.send(JSON.stringify({ type: "open", params }));
  }

  step(k) {
    this.wanted = k;
    if (!this.inFlight) this.#send();
  }

  #send() {
    if (this.wanted === null || !this.ws || this.ws.readyState !== WebSocket.OPEN) return;
    this.inFlight = true;
    this.sent.push("step");
    this.ws.send(JSON.stringify({ type: "step", step: this.wanted }));
    this.wanted = null;
  }

  #receive(msg) {
    this.inFlight = false;
    // The server answers each request once, in order. The answer to a step asked before a newer
    // open belongs to the previous trace: drop it, or it would overwrite the new view's step.
    const kind = this.sent.shift();
    const stale = kind === "step" && this.sent.includes("open");
    if (!stale && msg.type === "meta") this.onMeta(msg.meta);
    else if (!stale && msg.type === "event") this.onEvent(msg.event);
    else if (!stale && msg.type === "error") this.onError(msg.errors);
    if (this.wanted !== null) this.#send();
  }
}
