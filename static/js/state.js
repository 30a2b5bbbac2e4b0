// Shared front-end helpers: URL-held view state, the trace socket, the alert box, number
// formatting and Plotly defaults (the vendored static/vendor/plotly-*.min.js defines `Plotly`).

/** A parameter as a query string writes it: booleans as "1" / "0". */
function encode(value) {
  return typeof value === "boolean" ? (value ? "1" : "0") : value;
}

const empty = (value) => value === null || value === undefined || value === "";

/** Read view parameters from the URL, falling back to `defaults` (numbers stay numbers). */
export function readParams(defaults) {
  const url = new URL(window.location.href);
  const out = { ...defaults };
  for (const [key, value] of Object.entries(defaults)) {
    const raw = url.searchParams.get(key);
    if (raw === null || raw === "") continue;
    if (typeof value === "number") {
      const num = Number(raw);
      out[key] = Number.isFinite(num) ? num : raw;
    } else if (typeof value === "boolean") {
      out[key] = raw === "1" || raw === "true";
    } else {
      out[key] = raw;
    }
  }
  return out;
}

/** Write `params` into the URL without adding history entries (a link reproduces the view). */
export function writeParams(params) {
  const url = new URL(window.location.href);
  for (const [key, value] of Object.entries(params)) {
    if (empty(value)) url.searchParams.delete(key);
    else url.searchParams.set(key, encode(value));
  }
  window.history.replaceState(null, "", url);
}

/** `/api/x` + params → "/api/x?a=1&b=2" (empty values left out). */
export function apiUrl(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (!empty(v)) q.set(k, encode(v));
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

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

/**
 * Show error entries ({msg, field?}) in the alert box (hidden when there are none), each as
 * "field: msg" unless `field` is false.
 */
export function showErrors(errors, { field = true } = {}) {
  const box = document.getElementById("errors");
  const list = errors || [];
  box.hidden = list.length === 0;
  box.replaceChildren(
    ...list.map((e) => {
      const p = document.createElement("p");
      p.textContent = field && e.field ? `${e.field}: ${e.msg}` : e.msg;
      return p;
    }),
  );
}

/** The error entries of a refused request: its `detail` list, or one entry saying what it was. */
export function errorList(body, status) {
  const detail = body && body.detail;
  if (Array.isArray(detail)) return detail;
  return [{ msg: detail ? String(detail) : `HTTP ${status}` }];
}

const fmt = new Intl.NumberFormat("en-US");

/** 17301504 → "17,301,504". */
export function formatCount(n) {
  return n === null || n === undefined ? "–" : fmt.format(n);
}

/** Bytes → "16.5 MB" (decimal units, as bandwidths are quoted). */
export function formatBytes(b) {
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  let v = b;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i += 1;
  }
  return `${v.toFixed(v < 10 && i > 0 ? 2 : v < 100 && i > 0 ? 1 : 0)} ${units[i]}`;
}

/** Common Plotly layout pieces. */
export const baseLayout = {
  margin: { l: 48, r: 16, t: 8, b: 36 },
  font: { family: "system-ui, sans-serif", size: 13 },
  paper_bgcolor: "rgba(0,0,0,0)",
  plot_bgcolor: "rgba(0,0,0,0)",
};

export const plotConfig = { displaylogo: false, responsive: true };

/**
 * Draw (or redraw) a figure: `layout` on top of the base layout, its `margin` on top of the
 * base margin, with the shared config.
 */
export function react(div, data, layout = {}) {
  const margin = { ...baseLayout.margin, ...layout.margin };
  return Plotly.react(div, data, { ...baseLayout, ...layout, margin }, plotConfig);
}
