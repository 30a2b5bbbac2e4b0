// Mounting a view: the start-up every page shares. A page's module says what differs (its
// parameters, where its data comes from, what it shows once loaded and how it draws a step);
// `mountView` does the rest the same way on every page:
//
// - URL state: the parameters (and the step) come from the URL and go back into it, so a link
//   reproduces the view;
// - the stepping controls and keys (controls.js), the form's submit (a new load from the first
//   step), the alert box, the PNG buttons and the JSON / Chrome-trace export links;
// - the registry (registry.js): the view's state for rooms, and states from a room applied.
//
// A source says where the data comes from: `jsonSource(path)` (the page's JSON twin, drawn
// step by step in the page) or trace_view.js `traceSource` (/ws/trace, one event per step).

import { Controls } from "./controls.js";
import { errorList, showErrors } from "./errors.js";
import { bindPngButtons, setExports } from "./exports.js";
import { afterPaint, paintFirst } from "./plot.js";
import { changed, registerView } from "./registry.js";
import { apiUrl, readParams, writeParams } from "./url.js";

/** At most one write of a step into the URL in this many ms (mountView's `urlAfterPaint`). */
const URL_EVERY_MS = 250;

/** The entries of `params` named in `keys`. */
function pick(params, keys) {
  return Object.fromEntries(keys.map((k) => [k, params[k]]));
}

/**
 * The page's JSON twin at `path`, fetched with the view's query: every step is drawn from it.
 * Only the answer to the newest request is shown (a room state or a second submit may ask again
 * before the first answer arrives). `failure` opens the message shown when a request fails.
 */
export function jsonSource(path, { failure = "the request failed" } = {}) {
  return (host) => {
    let newest = 0;
    return {
      async open(query) {
        const asked = ++newest;
        const url = apiUrl(path, query);
        let res;
        let body;
        try {
          res = await fetch(url);
          body = await res.json();
        } catch (err) {
          if (asked === newest) host.failed([{ msg: `${failure}: ${err}` }]);
          return;
        }
        if (asked !== newest) return;
        if (res.ok) host.loaded(body, { url });
        else host.failed(errorList(body, res.status));
      },
      step: (k) => host.drawn(k),
    };
  };
}

/**
 * Mount the page's view and load what its URL asks for.
 * @param {object} o
 * @param {string} o.name  the view's name, e.g. "tiles"
 * @param {object} o.defaults  the parameters the URL holds, with their defaults (their types are
 *   the parameters' types); with a `step`, the URL holds the step on screen too
 * @param {(host: object) => object} o.source  where the data comes from: jsonSource(path) or
 *   traceSource(figures)
 * @param {(params: object) => object} [o.query]  the request's parameters (default: every
 *   parameter but the step)
 * @param {(data: object, info: object) => number | {total: number, step: number}} o.loaded
 *   shows what does not change with the step (info: the request's `url`, the `previous` data)
 *   and returns the number of steps, or that and the step to show where the data chose it
 * @param {(k: number, event?: object) => void} o.draw  draws step k (event: the trace's event)
 * @param {(data: object, info: object) => {name: string, json?: string, chrome?: string}} [o.exports]
 *   where the export links point and the name of the files they save (info: `url`, `query`)
 * @param {string[]} [o.fields]  the parameters that identify the data: a shared state that
 *   changes one loads again (default: every parameter but the step)
 * @param {object} [o.blank]  the values of parameters a shared state leaves out (default: "" for
 *   those whose default is "")
 * @param {(params: object) => object} [o.share]  the parameters a room shares (default: query)
 * @param {(params: object) => void} [o.fillForm]  shows the parameters in the form (#params)
 * @param {(params: object) => void} [o.readForm]  copies the form into the parameters; without
 *   it the form only stops its submit
 * @param {number} [o.firstStep=0]  the step a submitted form opens on
 * @param {boolean} [o.errorFields=true]  name each error's field before its message
 * @param {(k: number, show: (k: number) => void) => void} [o.goto]  how stepping reaches step k
 *   (default: the source's step); `show(k)` draws step k of the data on screen
 * @param {boolean} [o.progressive=false]  the page's first step shows its first figure as soon
 *   as it is drawn and the others a frame later (plot.js `paintFirst`); <body data-step> is set
 *   once all are drawn
 * @param {boolean} [o.urlAfterPaint=false]  a step goes into the URL after it is painted, at
 *   most every URL_EVERY_MS (writing the address costs a step milliseconds); <body data-url>
 *   says "pending" meanwhile
 * @returns {{params: object, data: object|null, step: number, reload: () => void}} the view's
 *   state: the parameters, what the source loaded, the step on screen
 */
export function mountView({
  name, defaults, source, query, loaded, draw, exports, fields, blank, share, goto,
  fillForm = () => {}, readForm, firstStep = 0, errorFields = true, progressive = false,
  urlAfterPaint = false,
}) {
  const keys = Object.keys(defaults).filter((k) => k !== "step");
  const urlStep = "step" in defaults;
  const request = query || ((params) => pick(params, keys));
  const shared = share || request;
  const identity = fields || keys;
  const missing = blank || Object.fromEntries(keys.filter((k) => defaults[k] === "").map((k) => [k, ""]));
  const view = { params: readParams(defaults), data: null, step: 0, reload: open };
  const show = (errors) => showErrors(errors, { field: errorFields });
  const form = document.getElementById("params");

  const from = source({
    loaded(data, { url } = {}) {
      const previous = view.data;
      view.data = data;
      show([]);
      const got = loaded(data, { url, previous });
      const { total, step = urlStep ? view.params.step : 0 } = typeof got === "number" ? { total: got } : got;
      if (exports) setExports(exports(data, { url, query: request(view.params) }));
      controls.setTotal(total);
      controls.goto(step);
    },
    drawn,
    failed: show,
  });

  let painted = !progressive;
  let urlTimer = null;
  let urlWritten = 0;

  /** The step into the URL: at once, or (urlAfterPaint) once the step is painted. */
  function writeStep() {
    if (!urlAfterPaint) {
      writeParams(view.params);
      return;
    }
    document.body.dataset.url = "pending";
    if (urlTimer !== null) return;
    urlTimer = "painting";
    afterPaint(() => {
      urlTimer = setTimeout(() => {
        urlTimer = null;
        urlWritten = performance.now();
        writeParams(view.params);
        delete document.body.dataset.url;
      }, Math.max(0, urlWritten + URL_EVERY_MS - performance.now()));
    });
  }

  /** Step k of the data is on screen: the URL, the controls and the registry follow. */
  function drawn(k, event) {
    view.step = k;
    if (urlStep) view.params.step = k;
    writeStep();
    if (!painted) {
      painted = true;
      paintFirst(() => draw(k, event)).then(() => view.step === k && shown(k));
      return;
    }
    draw(k, event);
    shown(k);
  }

  function shown(k) {
    document.body.dataset.step = k;
    controls.shown(k);
    changed();
  }

  const step = goto ? (k) => goto(k, drawn) : (k) => from.step(k);
  const controls = new Controls({
    goto: (k) => view.data && step(k),
    jump: from.jump && ((dir) => view.data && controls.goto(from.jump(view.data, controls.target, dir))),
  });

  function open() {
    show([]);
    writeParams(view.params);
    from.open(request(view.params));
  }

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (!readForm) return;
    readForm(view.params);
    if (urlStep) view.params.step = firstStep;
    open();
  });

  registerView({
    name,
    getState: () => ({ params: shared(view.params), step: view.step }),
    applyState(state) {
      const next = { ...missing, ...state.params };
      const differs = (f) => String(next[f] ?? "") !== String(view.params[f] ?? "");
      const sameData = !identity.some(differs);
      const sameParams = !keys.some(differs);
      for (const f of keys) if (f in next) view.params[f] = next[f];
      if (urlStep) view.params.step = state.step ?? 0;
      if (!sameParams) fillForm(view.params);
      if (sameData && view.data) controls.goto(state.step ?? 0);
      else open();
    },
  });

  bindPngButtons();
  fillForm(view.params);
  open();
  return view;
}
