// A view's fields drive its figures only once applied. A reader who edits a field and does not
// press Apply would otherwise look at a picture of the old values without knowing it: this module
// says so under the form ("Not applied yet: N changed …") until the fields match the picture
// again, or are applied.
//
// What the picture shows is read from the form each time the view reports a new state
// (registry.js `onChange`: the view has drawn, and its form holds what it drew). Events are
// taken at the document, so a form that arrives later (a lesson mounts its view) works the same.

import { onChange } from "./registry.js";

const FORM = "params";
let shown = null; // the form's values when the view last drew: name → value

/** The form's values, name → value (checkboxes as "1"/"0"); nameless controls left out. */
function values(form) {
  const out = new Map();
  for (const el of form.elements) {
    if (!el.name || el.type === "submit" || el.type === "button" || el.dataset.staleIgnore !== undefined) continue;
    out.set(el.name, el.type === "checkbox" ? (el.checked ? "1" : "0") : String(el.value).trim());
  }
  return out;
}

/** What the reader would call a field: its label without the control's own text. */
function fieldName(form, name) {
  const el = form.elements[name];
  const control = el instanceof RadioNodeList ? el[0] : el;
  const label = control && control.labels && control.labels[0];
  if (!label) return name;
  const own = [...label.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE || (n.nodeType === Node.ELEMENT_NODE && !n.matches("input, select, textarea")));
  const text = own.map((n) => n.textContent).join(" ").replace(/\s+/g, " ").trim();
  return text || name;
}

function hintBox(form) {
  let box = document.getElementById("stale-hint");
  if (!box) {
    box = document.createElement("p");
    box.id = "stale-hint";
    box.className = "stale-hint";
    box.setAttribute("role", "status");
    box.hidden = true;
    const apply = form.querySelector("button[type=submit]");
    if (apply && apply.parentElement === form) apply.after(box); // the row under Apply
    else form.append(box);
  }
  return box;
}

function check() {
  const form = document.getElementById(FORM);
  if (!form || !shown) return;
  const now = values(form);
  const changed = [...now.keys()].filter((k) => shown.has(k) && shown.get(k) !== now.get(k));
  const box = hintBox(form);
  box.hidden = changed.length === 0;
  if (!changed.length) return;
  const names = changed.map((k) => fieldName(form, k));
  const list = names.length > 3 ? `${names.slice(0, 3).join(", ")} and ${names.length - 3} more` : names.join(", ");
  box.textContent = `Not applied yet: ${list} changed. The figures still show the old values; press Apply (or Enter) to redraw.`;
}

function remember() {
  const form = document.getElementById(FORM);
  if (!form) return;
  shown = values(form);
  check();
}

onChange(remember);
for (const kind of ["input", "change"]) {
  document.addEventListener(kind, (ev) => {
    if (ev.target && ev.target.form && ev.target.form.id === FORM) check();
  });
}
document.addEventListener("submit", (ev) => {
  if (ev.target.id !== FORM) return;
  const box = document.getElementById("stale-hint");
  if (box) box.hidden = true; // applied: the next drawing shows these values
}, true);
