// The view registry: the page's view (view.js `mountView` registers it) says how to read and
// apply its state, so that features outside any view (instructor-synced rooms, room.js) work
// on every view the same way.
//
// A view's state is { params: {...}, step: number|null }. The view calls `changed()` whenever
// what it shows changes (a step, a parameter); subscribers receive { path, params, step }.

let current = null;
const listeners = new Set();
const appliers = new Set();

/**
 * Register the page's view.
 * @param {object} view
 * @param {string} view.name         short name, e.g. "tiles"
 * @param {() => object} view.getState   returns { params, step }
 * @param {(state: object) => void} view.applyState  shows { params, step } (from a link or a room)
 */
export function registerView(view) {
  current = view;
  const apply = view.applyState;
  view.applyState = (state) => {
    for (const fn of appliers) fn(state);
    return apply.call(view, state);
  };
}

/**
 * Call `fn(state)` before a state is applied to the page's view (a room's, a lesson's): a page
 * that opens on a step of its own choosing must not pick one once a state has named it.
 */
export function onApply(fn) {
  appliers.add(fn);
  return () => appliers.delete(fn);
}

export function currentView() {
  return current;
}

/** Tell subscribers that the view's state changed (call after drawing). */
export function changed() {
  if (!current) return;
  const state = { path: window.location.pathname, ...current.getState() };
  for (const fn of listeners) fn(state);
}

/** Subscribe to state changes; returns an unsubscribe function. */
export function onChange(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}
