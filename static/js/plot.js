// Plotly as every view uses it (the vendored static/vendor/plotly-*.min.js defines the global
// `Plotly`): one base layout, legible on a 1280×720 projector, and one config.
//
// The modebar keeps what a figure here is for: zoom, pan and reset. Plotly's "Share chart"
// (it would send the data to a Chart Studio server), box and lasso select (nothing here selects),
// zoom-in/out, autoscale, the hover-mode and spike toggles go; so does its PNG camera where the
// figure's caption has a PNG button (exports.js, 2× for slides). It stands upright in a gutter
// right of the figure (static/css/app.css), outside the drawing: it never covers a legend, a
// colour bar or a title. Axes make room for their tick labels and titles (automargin), so a
// title never runs over the tick labels (margins only grow from one draw to the next); on a
// narrow figure a legend beside the plot moves above it, so the plot keeps its width.

/** Common Plotly layout pieces. */
export const baseLayout = {
  margin: { l: 48, r: 16, t: 8, b: 36 },
  font: { family: "system-ui, sans-serif", size: 13 },
  paper_bgcolor: "rgba(0,0,0,0)",
  plot_bgcolor: "rgba(0,0,0,0)",
  modebar: { orientation: "v", bgcolor: "rgba(255,255,255,0.85)" },
};

const REMOVED = [
  "select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d", "hoverClosestCartesian",
  "hoverCompareCartesian", "toggleSpikelines",
];

export const plotConfig = {
  displaylogo: false,
  responsive: true,
  showSendToCloud: false,
  showEditInChartStudio: false,
  modeBarButtonsToRemove: REMOVED,
  toImageButtonOptions: { format: "png", scale: 2 },
};

/** The config for figure `div`: no PNG camera where its caption has a PNG button. */
function configFor(div, { modebar = true } = {}) {
  if (!modebar) return { ...plotConfig, displayModeBar: false };
  const id = typeof div === "string" ? div : div.id;
  const png = id && document.querySelector(`button[data-png-target="${id}"]`);
  return png ? { ...plotConfig, modeBarButtonsToRemove: [...REMOVED, "toImage"] } : plotConfig;
}

const AXIS = /^[xy]axis\d*$/;

/**
 * `layout` with automargin on every titled axis that does not say otherwise: the margin makes
 * room for the tick labels and the title both. (Untitled axes are left alone: measuring their
 * tick labels on every draw costs a step time for nothing.)
 */
function withAutomargin(layout) {
  const out = { ...layout };
  for (const [key, axis] of Object.entries(layout)) {
    const titled = axis && axis.title && (typeof axis.title === "string" || axis.title.text);
    if (AXIS.test(key) && titled && axis.automargin === undefined) out[key] = { automargin: true, ...axis };
  }
  return out;
}

/**
 * `margin`, each side at least what automargin made it on the figure's last draw. Margins that
 * only grow keep the figure still while stepping, and spare Plotly the second drawing pass it
 * makes whenever automargin moves a margin (a step's tick labels a little wider, say).
 */
function grownMargin(div, margin) {
  const el = typeof div === "string" ? document.getElementById(div) : div;
  const size = el && el._fullLayout && el._fullLayout._size;
  if (!size) return margin;
  const out = { ...margin };
  for (const side of ["l", "r", "t", "b"]) out[side] = Math.max(margin[side] ?? 0, Math.ceil(size[side]));
  return out;
}

/** Narrower than this (px), a figure's legend moves from its right-hand side to above it. */
const NARROW = 640;

/** `layout` with a legend placed right of the plot area moved above it on a narrow figure. */
function fitLegend(div, layout) {
  const legend = layout.legend;
  if (!legend || !(legend.x >= 1)) return layout;
  const el = typeof div === "string" ? document.getElementById(div) : div;
  if (!el || !el.clientWidth || el.clientWidth >= NARROW) return layout;
  return { ...layout, legend: { ...legend, orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom" } };
}

function draw(div, data, layout, { modebar = true } = {}) {
  const margin = grownMargin(div, { ...baseLayout.margin, ...layout.margin });
  const bar = { ...baseLayout.modebar, ...layout.modebar };
  const full = withAutomargin(fitLegend(div, { ...baseLayout, ...layout, margin, modebar: bar }));
  Plotly.react(div, data, full, configFor(div, { modebar }));
}

// A page's first step can show its first figure before the others are drawn (`paintFirst`):
// Plotly's first drawing of each figure on a page costs tens of milliseconds, and the reader
// would see nothing until all of them were done. While `queue` is an array, figures wait in it
// for the next frame; any drawing outside paintFirst's callback empties it first, in order.
let queue = null;
let deferring = false;

function flush() {
  const waiting = queue;
  queue = null;
  for (const args of waiting || []) draw(...args);
}

/**
 * Draw (or redraw) a figure: `layout` on top of the base layout, its `margin` on top of the
 * base margin, with the shared config; `modebar: false` for a figure with nothing to zoom.
 */
export function react(div, data, layout = {}, options = {}) {
  if (deferring && queue) {
    queue.push([div, data, layout, options]);
    return;
  }
  flush();
  draw(div, data, layout, options);
  if (deferring) queue = []; // the first figure of paintFirst is drawn: the others wait
}

/** How long after its current task a page waits for a frame before going on without one. */
const FRAME_WAIT_MS = 250;

/**
 * Run `fn` once the browser has painted what is on screen now: just after the next animation
 * frame, or FRAME_WAIT_MS after the current task where no frame comes (a tab in the background,
 * a headless browser that draws no frames), whichever is first. What waits on a paint must not
 * wait for ever on one.
 */
export function afterPaint(fn) {
  let done = false;
  const run = () => {
    if (done) return;
    done = true;
    fn();
  };
  requestAnimationFrame(() => setTimeout(run, 0));
  setTimeout(() => setTimeout(run, FRAME_WAIT_MS), 0); // counted from the end of this task
}

/**
 * Run `fn`, which draws a step: its first figure is drawn at once, the others after the browser
 * has painted it (`afterPaint`). Resolves once they are all drawn.
 */
export function paintFirst(fn) {
  deferring = true;
  try {
    fn();
  } finally {
    deferring = false;
  }
  return new Promise((resolve) => {
    afterPaint(() => {
      flush();
      resolve();
    });
  });
}

// --- figures off screen -----------------------------------------------------------------------

const widths = new WeakMap();
let resized = null;

/**
 * The width of element `el` in CSS pixels, kept up to date by a ResizeObserver: reading it
 * while a step is drawn forces no layout (a step's text updates would make clientWidth lay out
 * the whole page).
 */
export function widthOf(el) {
  if (!el) return 0;
  if (!widths.has(el)) {
    resized ||= new ResizeObserver((entries) => {
      for (const e of entries) widths.set(e.target, e.contentRect.width);
    });
    widths.set(el, el.clientWidth);
    resized.observe(el);
  }
  return widths.get(el);
}

const lazyPages = new Set(); // every LazyFigures of the page

/** Draw now whatever a LazyFigures keeps for element `el` (before an export of it, say). */
export function drawWaiting(el) {
  for (const lazy of lazyPages) lazy.flush(el);
}

/**
 * Figures drawn only where the reader can see them. `draw(el, fn)` runs `fn` (which draws the
 * figure in `el`, or the figures inside it) at once when it is on screen, or within `margin` of
 * it, or has never been drawn; otherwise it keeps `fn` (the newest only) and runs it when the
 * figure scrolls into view, or once stepping has paused for `quiet` ms, one figure per idle
 * period. A figure counts as on screen when at least `sliver` pixels or half of it show: one
 * peeking in by its title at the bottom edge waits for the pause. A step then costs the
 * figures on screen only. While some figure waits, <body data-offscreen="stale">; "drawn" once
 * every figure shows the step on screen.
 */
export class LazyFigures {
  constructor({ margin = "32px", quiet = 400, sliver = 120 } = {}) {
    lazyPages.add(this);
    this.waiting = new Map(); // element → its newest drawing
    this.seen = new Map(); // element → on screen (as the observer last said)
    this.quiet = quiet;
    this.timer = null;
    this.idle = null;
    const steps = Array.from({ length: 21 }, (_, i) => i / 20);
    this.observer = new IntersectionObserver((entries) => {
      for (const e of entries) {
        const shows = e.isIntersecting
          && (e.intersectionRect.height >= sliver || e.intersectionRatio >= 0.5);
        this.seen.set(e.target, shows);
        if (shows) this.#run(e.target);
      }
      this.#mark();
    }, { rootMargin: margin, threshold: steps });
  }

  /** Draw now if `el` is on screen, else later (see the class). */
  draw(el, fn) {
    if (!this.seen.has(el)) {
      this.seen.set(el, true); // until the observer says otherwise
      this.observer.observe(el);
    }
    const drawn = el.classList.contains("js-plotly-plot") || el.querySelector(".js-plotly-plot");
    if (this.seen.get(el) || !drawn) {
      this.waiting.delete(el);
      fn();
    } else {
      this.waiting.set(el, fn);
      this.#later();
    }
    this.#mark();
  }

  /** Draw the waiting figure that holds `el` now, or every waiting figure. */
  flush(el = null) {
    for (const one of [...this.waiting.keys()]) if (!el || one.contains(el)) this.#run(one);
    this.#mark();
  }

  #run(el) {
    const fn = this.waiting.get(el);
    if (!fn) return;
    this.waiting.delete(el);
    fn();
  }

  #later() {
    clearTimeout(this.timer);
    if (this.idle !== null) cancelIdle(this.idle);
    this.idle = null;
    this.timer = setTimeout(() => this.#drawOne(), this.quiet);
  }

  #drawOne() {
    this.idle = whenIdle(() => {
      this.idle = null;
      if (navigator.scheduling?.isInputPending?.()) {
        this.#later(); // a key is waiting: its step first
        return;
      }
      const el = this.waiting.keys().next().value;
      if (el) this.#run(el);
      this.#mark();
      if (this.waiting.size) this.#drawOne();
    });
  }

  #mark() {
    document.body.dataset.offscreen = this.waiting.size ? "stale" : "drawn";
  }
}

const whenIdle = (fn) => (window.requestIdleCallback ? requestIdleCallback(fn, { timeout: 1000 }) : setTimeout(fn, 50));
const cancelIdle = (id) => (window.cancelIdleCallback ? cancelIdleCallback(id) : clearTimeout(id));
