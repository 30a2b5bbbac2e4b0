// Stepping controls shared by every view (templates/_partials/controls.html): play / pause,
// speed, first / previous / next / last, a box to jump to a step, and the keys ← → Home End
// (Shift+← → where the view has coarser marks) and Space.
//
// The view owns the drawing. It passes `goto(k)`, which must eventually draw step k and then
// call `controls.shown(k)`; playback schedules the next step only after the previous one is on
// screen, so a slow server or a big figure never piles up stale steps.

const $ = (id) => document.getElementById(id);

/** True when a key press belongs to something else: a form field, or a shortcut with a modifier. */
function notForUs(ev, tags) {
  const tag = ev.target && ev.target.tagName;
  return tags.includes(tag) || ev.altKey || ev.ctrlKey || ev.metaKey;
}

/** Bind ← → Home End (and Shift+← →) to callbacks, ignoring keys typed into form fields. */
function bindStepKeys({ prev, next, first, last, nextTile, prevTile }) {
  window.addEventListener("keydown", (ev) => {
    if (notForUs(ev, ["INPUT", "TEXTAREA", "SELECT"])) return;
    const actions = {
      ArrowRight: ev.shiftKey ? nextTile : next,
      ArrowLeft: ev.shiftKey ? prevTile : prev,
      Home: first,
      End: last,
    };
    const action = actions[ev.key];
    if (action) {
      ev.preventDefault();
      action();
    }
  });
}

export class Controls {
  /**
   * @param {object} o
   * @param {(k: number) => void} o.goto  show step k (clamped by the controls)
   * @param {(direction: number) => void} [o.jump]  Shift+→ / Shift+← (e.g. the next tile)
   */
  constructor({ goto, jump }) {
    this.view = goto;
    this.jump = jump || ((dir) => this.goto(this.target + dir));
    this.total = 0;
    this.target = 0;
    this.timer = null;
    this.playing = false;
    this.els = {
      play: $("play"),
      speed: $("speed"),
      step: $("step"),
      total: $("step-total"),
    };
    $("first").addEventListener("click", () => this.goto(0));
    $("prev").addEventListener("click", () => this.goto(this.target - 1));
    $("next").addEventListener("click", () => this.goto(this.target + 1));
    $("last").addEventListener("click", () => this.goto(this.total - 1));
    this.els.step.addEventListener("change", (e) => this.goto(Number(e.target.value)));
    this.els.play.addEventListener("click", () => this.toggle());
    this.els.speed.addEventListener("change", () => this.#schedule());
    bindStepKeys({
      prev: () => this.goto(this.target - 1),
      next: () => this.goto(this.target + 1),
      first: () => this.goto(0),
      last: () => this.goto(this.total - 1),
      nextTile: () => this.jump(1),
      prevTile: () => this.jump(-1),
    });
    window.addEventListener("keydown", (ev) => {
      if (ev.key !== " " || notForUs(ev, ["INPUT", "TEXTAREA", "SELECT", "BUTTON", "A"])) return;
      ev.preventDefault();
      this.toggle();
    });
  }

  /** The number of steps (0 … n−1); clamps the current target. */
  setTotal(n) {
    this.total = Math.max(0, n | 0);
    this.els.step.max = Math.max(0, this.total - 1);
    this.els.total.textContent = `of ${Math.max(0, this.total - 1)}`;
  }

  clamp(k) {
    const n = Number.isFinite(k) ? Math.trunc(k) : 0;
    return Math.min(Math.max(0, n), Math.max(0, this.total - 1));
  }

  /** Ask the view for step k (user input, keys, playback). */
  goto(k) {
    if (this.total === 0) return;
    this.target = this.clamp(k);
    this.view(this.target);
  }

  /** The view has drawn step k. */
  shown(k) {
    this.els.step.value = k;
    if (this.playing) this.#schedule();
  }

  play() {
    if (this.total === 0) return;
    this.playing = true;
    this.els.play.textContent = "Pause";
    this.els.play.setAttribute("aria-pressed", "true");
    if (this.target >= this.total - 1) this.goto(0);
    else this.#schedule();
  }

  pause() {
    this.playing = false;
    clearTimeout(this.timer);
    this.timer = null;
    this.els.play.textContent = "Play";
    this.els.play.setAttribute("aria-pressed", "false");
  }

  toggle() {
    if (this.playing) this.pause();
    else this.play();
  }

  #schedule() {
    clearTimeout(this.timer);
    if (!this.playing) return;
    const perSecond = Number(this.els.speed.value) || 5;
    this.timer = setTimeout(() => {
      if (this.target >= this.total - 1) this.pause();
      else this.goto(this.target + 1);
    }, 1000 / perSecond);
  }
}
