// A lesson of the course (/learn/{id}): the lesson's text comes with the page; this module
// mounts the lesson's live view beside it and answers the check question.
//
// The view is the real page: its markup is fetched from the view's own route and its modules
// are loaded here, so it reads and writes its state in this page's URL (/learn/{id}?n=…&step=…)
// and a 'try this' link is just a URL. An <iframe> would need the views to allow framing, which
// the server's Content-Security-Policy forbids (frame-ancestors 'none', against clickjacking),
// and on a phone a page scrolling inside a page is hard to use; composed this way the lesson
// and its figure flow as one page that stacks on a narrow screen.

const $ = (id) => document.getElementById(id);
const root = $("learn");

/** The lesson's starting state goes into the URL when the URL names none. */
function applyStart() {
  const start = JSON.parse(root.dataset.start || "{}");
  const url = new URL(window.location.href);
  if (url.search || !Object.keys(start).length) return;
  for (const [key, value] of Object.entries(start)) url.searchParams.set(key, String(value));
  window.history.replaceState(null, "", url);
}

/** Load a script like the one in the view's page and wait until it has run (or failed). */
function load(original) {
  return new Promise((resolve, reject) => {
    const script = document.createElement("script");
    for (const { name, value } of original.attributes) script.setAttribute(name, value);
    script.async = false;
    script.addEventListener("load", resolve);
    script.addEventListener("error", () => reject(new Error(`could not load ${original.src}`)));
    document.body.append(script);
  });
}

/** Fetch the view's page, take its content and run its scripts (those this page lacks). */
async function mountFigure() {
  const path = root.dataset.view;
  const figure = $("figure");
  if (!path) return;
  const status = $("figure-status");
  try {
    const res = await fetch(path, { headers: { Accept: "text/html" } });
    if (!res.ok) throw new Error(`${path} answered ${res.status}`);
    const page = new DOMParser().parseFromString(await res.text(), "text/html");
    const content = page.querySelector("main");
    figure.replaceChildren(...[...content.childNodes].map((node) => document.importNode(node, true)));
    const have = new Set([...document.scripts].map((s) => s.src).filter(Boolean));
    for (const script of page.querySelectorAll("body script[src]")) {
      if (!have.has(script.src)) await load(script);
    }
    figure.dataset.loaded = "1";
  } catch (err) {
    if (status) status.textContent = `The live figure did not load (${err.message}). `;
    figure.dataset.loaded = "failed";
  }
}

/** The check question: feedback on the chosen answer, its reason and the explanation. */
function bindCheck() {
  const form = $("lesson-check");
  const feedback = $("check-feedback");
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const chosen = form.querySelector("input[name=answer]:checked");
    for (const why of form.querySelectorAll(".why")) why.hidden = true;
    if (!chosen) {
      feedback.textContent = "Pick one answer first.";
      feedback.className = "check-feedback";
      return;
    }
    const right = chosen.dataset.correct === "1";
    feedback.textContent = right ? "Correct." : "Not quite: try another answer.";
    feedback.className = `check-feedback ${right ? "correct" : "wrong"}`;
    form.querySelector(`.why[data-choice="${chosen.value}"]`).hidden = false;
    $("check-explanation").hidden = !right;
  });
}

applyStart();
bindCheck();
mountFigure();
