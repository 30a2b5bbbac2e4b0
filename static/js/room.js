// Instructor-synced rooms: the room bar in the header, on every page.
//
// A lecturer starts a room and drives it: every change of the page's view (registry.js
// `onChange`) goes to /ws/rooms/{code} as {path, params, step}. Attendees join with the code and
// follow: each state they receive is applied through `currentView().applyState`, after moving to
// the lecturer's page when it differs. An attendee can detach to explore alone and re-attach to
// catch up. This module knows nothing of any view's internals.
//
// sessionStorage "flashscope.room" keeps {code, token?, detached?, adopt?, expect?} so that the
// next page of this tab joins the same room: `token` makes it the driver, `adopt` (a drive link
// opened on another device) and `expect` (a page this module navigated to) make it take the
// room's latest state instead of sending its own.
//
// Several drivers (a laptop and a tablet with the drive link) share a room. A driver that shows
// another driver's state turns passive: it sends nothing until its own user acts (a key, a
// pointer, a form), so the churn of its view catching up, in whatever order it lands, is never
// sent back. Each state also carries `base`, the newest seq this page had seen when the state was
// made; the server refuses one built on a state another driver has since replaced.
//
// The bar says what is true of the room: "Room lost" when the server's room store (Redis) lost
// it or does not answer (the connection stays, and the server puts the room back when it can:
// "room-back"); a refusal (full, too many look-ups, ended) with the server's reason. A page that
// was in a room and finds it gone (4404) tries again with backoff for a while before it gives up.

import { currentView, onChange } from "./registry.js";

const KEY = "flashscope.room";
const FATAL = new Set([4400, 4403, 4409, 4410]); // no point in joining again
const SEND_EVERY_MS = 50; // the most a driver sends: one state per 50 ms, the newest one
const GONE_TRIES = 8; // a room this page was in and cannot find: tries before giving up
const $ = (id) => document.getElementById(id);

const room = {
  ws: null,
  role: null,
  live: false, // a driver sends only after its welcome is handled
  passive: false, // a driver showing another driver's state, until its own user acts
  seen: 0, // the newest seq of the room this page knows of (welcome, states, acks)
  pending: null, // a state waiting for the page's view to register
  timer: null,
  queued: null,
  lastSent: 0,
  retry: 0,
  poll: null,
  again: null, // the timer of the next join attempt
  goneTries: 0, // joins in a row that found this page's room gone
};

function load() {
  try {
    return JSON.parse(sessionStorage.getItem(KEY)) || null;
  } catch {
    return null;
  }
}

function save(rec) {
  if (rec) sessionStorage.setItem(KEY, JSON.stringify(rec));
  else sessionStorage.removeItem(KEY);
}

function update(changes) {
  const rec = { ...load(), ...changes };
  save(rec);
  return rec;
}

function here() {
  const view = currentView();
  const base = { path: window.location.pathname, params: {}, step: null };
  return view ? { ...base, ...view.getState() } : base;
}

// --- the bar ---------------------------------------------------------------------------------

const LABELS = {
  none: "No room",
  connecting: "Connecting…",
  driving: "Driving",
  following: "Following",
  detached: "Detached",
  disconnected: "Disconnected",
  lost: "Room lost",
};

function show(status, note = "") {
  const bar = $("room-bar");
  if (!bar) return;
  const rec = load();
  bar.dataset.state = status;
  $("room-status").textContent = LABELS[status] + (note ? ` — ${note}` : "");
  const inRoom = status !== "none";
  $("room-start").hidden = inRoom;
  $("room-join").hidden = inRoom;
  $("room-info").hidden = !inRoom;
  $("room-code").textContent = rec ? rec.code : "";
  const driving = status === "driving";
  $("room-drive").hidden = !driving;
  if (driving) $("room-drive-link").value = driveLink(rec);
  $("room-end").hidden = !(rec && rec.token && inRoom);
  $("room-detach").hidden = status !== "following";
  $("room-attach").hidden = status !== "detached";
  $("room-leave").hidden = !inRoom;
  if (!driving) $("room-count").textContent = "";
}

function showError(text) {
  const box = $("room-error");
  if (!box) return;
  box.textContent = text;
  box.hidden = !text;
}

function driveLink(rec) {
  return `${window.location.origin}/#room=${rec.code}&drive=${encodeURIComponent(rec.token)}`;
}

async function pollCount() {
  const rec = load();
  if (!rec || room.role !== "driver") return;
  try {
    const r = await fetch(`/api/rooms/${rec.code}`, { headers: { "X-Drive-Token": rec.token } });
    if (r.ok) {
      const info = await r.json();
      const others = Math.max(0, info.clients - 1);
      $("room-count").textContent = `· ${others} other${others === 1 ? "" : "s"} connected`;
    }
  } catch {
    // the next poll tries again
  }
}

// --- the connection --------------------------------------------------------------------------

function connect() {
  const rec = load();
  if (!rec) return;
  show("connecting");
  room.seen = 0;
  room.passive = false;
  const proto = window.location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${proto}://${window.location.host}/ws/rooms/${rec.code}`);
  room.ws = ws;
  ws.addEventListener("open", () => {
    ws.send(JSON.stringify(rec.token ? { type: "join", token: rec.token } : { type: "join" }));
  });
  ws.addEventListener("message", (ev) => receive(JSON.parse(ev.data)));
  ws.addEventListener("close", (ev) => {
    if (room.ws !== ws) return; // replaced or left on purpose
    room.ws = null;
    room.live = false;
    room.role = null;
    clearInterval(room.poll);
    closed(ev.code, ev.reason);
  });
}

/** After a close: give up with the server's reason, or join again after a while. */
function closed(code, reason) {
  const rec = load();
  const gone = code === 4404 && rec && rec.welcomed;
  room.goneTries = gone ? room.goneTries + 1 : 0;
  if (FATAL.has(code) || (code === 4404 && !gone) || room.goneTries > GONE_TRIES) {
    save(null);
    show("none");
    showError(reason || `room closed (${code})`);
    return;
  }
  room.retry += 1;
  let wait = 1000 * 2 ** Math.min(room.retry - 1, 4) * (0.75 + Math.random() / 2);
  let note = "trying again";
  if (code === 4429) {
    const secs = Number((/retry after (\d+)/.exec(reason || "") || [])[1]) || 10;
    wait = secs * 1000;
    note = "too many look-ups from here";
  } else if (gone) {
    note = `room ${rec.code} is gone`;
  } else if (code === 1011) {
    note = "rooms are unavailable";
  }
  show(gone ? "lost" : "disconnected", `${note}; trying again in ${Math.round(wait / 1000)} s`);
  clearTimeout(room.again);
  room.again = setTimeout(connect, wait);
}

function receive(msg) {
  const rec = load();
  if (!rec) return;
  if (Number.isInteger(msg.seq)) room.seen = Math.max(room.seen, msg.seq);
  if (msg.type === "welcome") {
    room.retry = 0;
    room.goneTries = 0;
    room.role = msg.role;
    update({ welcomed: true });
    showError("");
    if (msg.role === "driver") welcomeDriver(rec, msg.state);
    else welcomeAttendee(rec, msg.state);
  } else if (msg.type === "room-gone") {
    if (msg.final) {
      showError(msg.reason); // the close (4410) follows
    } else {
      room.live = false;
      show("lost", "waiting for it to come back");
    }
  } else if (msg.type === "room-back") {
    back(rec, msg);
  } else if (msg.type === "state") {
    if (room.role === "driver") passive();
    apply(msg.state);
  } else if (msg.type === "detached") {
    show("detached");
  } else if (msg.type === "attached") {
    show("following");
  } else if (msg.type === "error") {
    showError(msg.errors.map((e) => e.msg).join("; "));
  }
}

function welcomeDriver(rec, latest) {
  show("driving");
  clearInterval(room.poll);
  room.poll = setInterval(pollCount, 5000);
  pollCount();
  const take = latest && (rec.adopt || rec.expect === window.location.pathname);
  update({ adopt: false });
  room.live = true;
  if (take) {
    passive();
    apply(latest);
  } else {
    room.passive = false;
    publish(here());
  }
}

/** The server put the room back (its store had lost it): carry on where the room is. */
function back(rec, msg) {
  showError("");
  if (room.role === "driver") {
    show("driving");
    room.live = true;
    if (msg.state) {
      passive();
      apply(msg.state);
    } else if (!room.passive) {
      publish(here()); // what this page showed while the room was away
    }
    return;
  }
  if (rec.detached) {
    show("detached");
    return;
  }
  show("following");
  if (msg.state) apply(msg.state);
}

function welcomeAttendee(rec, latest) {
  if (rec.detached) {
    room.ws.send(JSON.stringify({ type: "detach" }));
    return;
  }
  show("following");
  if (latest) apply(latest);
}

/** Show a state of the room: go to its page, or hand it to this page's view. */
function apply(s) {
  if (s.path !== window.location.pathname) {
    const url = new URL(s.path, window.location.origin);
    if (url.origin !== window.location.origin) return;
    update({ expect: url.pathname });
    window.location.assign(url.pathname);
    return;
  }
  update({ expect: null });
  const view = currentView();
  if (!view) {
    room.pending = s;
    return;
  }
  room.pending = null;
  view.applyState({ params: s.params || {}, step: s.step ?? null });
}

/** Stop sending until the user acts: this page now shows another driver's state. */
function passive() {
  room.passive = true;
  room.queued = null; // made before that state arrived: the server would refuse it anyway
}

/** Send the driver's state, at most one per SEND_EVERY_MS, always ending on the newest. */
function publish(s) {
  room.queued = { state: s, base: room.seen };
  if (room.timer) return;
  const wait = Math.max(0, room.lastSent + SEND_EVERY_MS - performance.now());
  room.timer = setTimeout(flush, wait);
}

function flush() {
  room.timer = null;
  const q = room.queued;
  room.queued = null;
  if (!q || !room.live || !room.ws || room.ws.readyState !== WebSocket.OPEN) return;
  room.lastSent = performance.now();
  room.ws.send(JSON.stringify({ type: "state", state: q.state, base: q.base }));
}

onChange((s) => {
  if (room.pending && currentView()) {
    const waiting = room.pending;
    room.pending = null;
    apply(waiting);
    return;
  }
  if (room.role !== "driver" || !room.live || room.passive) return;
  publish(s);
});

// --- the buttons -----------------------------------------------------------------------------

function leave() {
  const ws = room.ws;
  room.ws = null;
  room.role = null;
  room.live = false;
  room.retry = 0;
  room.goneTries = 0;
  clearInterval(room.poll);
  clearTimeout(room.again);
  if (ws) ws.close(1000);
  save(null);
  show("none");
}

async function start() {
  showError("");
  const r = await fetch("/api/rooms", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: "{}",
  });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    showError(problem(body) || `could not start a room (HTTP ${r.status})`);
    return;
  }
  leave();
  save({ code: body.code, token: body.drive_token });
  connect();
}

function problem(body) {
  return Array.isArray(body.detail) ? body.detail.map((e) => e.msg).join("; ") : "";
}

/** End the room for everyone in it (a driver only), then leave it. */
async function end() {
  const rec = load();
  if (!rec || !rec.token) return;
  const r = await fetch(`/api/rooms/${rec.code}`, {
    method: "DELETE",
    headers: { "X-Drive-Token": rec.token },
  });
  if (!r.ok && r.status !== 404) {
    const body = await r.json().catch(() => ({}));
    showError(problem(body) || `could not end the room (HTTP ${r.status})`);
    return;
  }
  leave();
  showError(`room ${rec.code} has ended`);
}

function join(code) {
  const clean = code.trim().toUpperCase();
  if (!/^[A-Z0-9]{4,12}$/.test(clean)) {
    showError("a room code is 4 to 12 letters or digits");
    return;
  }
  leave();
  showError("");
  save({ code: clean });
  connect();
}

function detach(on) {
  update({ detached: on });
  if (room.ws && room.ws.readyState === WebSocket.OPEN) {
    room.ws.send(JSON.stringify({ type: on ? "detach" : "attach" }));
  }
}

async function copyLink() {
  const input = $("room-drive-link");
  try {
    await navigator.clipboard.writeText(input.value);
    showError("");
    $("room-copy").textContent = "Copied";
  } catch {
    input.select(); // no clipboard outside a secure context: the link is selected to copy
    $("room-copy").textContent = "Press Ctrl+C";
  }
  setTimeout(() => ($("room-copy").textContent = "Copy"), 2000);
}

/** A join link (?room=CODE) or a drive link (#room=CODE&drive=TOKEN) starts this tab's room. */
function fromLink() {
  const url = new URL(window.location.href);
  const hash = new URLSearchParams(url.hash.slice(1));
  const code = hash.get("room") || url.searchParams.get("room");
  if (!code) return;
  const token = hash.get("drive");
  save(token ? { code: code.toUpperCase(), token, adopt: true } : { code: code.toUpperCase() });
  url.searchParams.delete("room");
  url.hash = "";
  window.history.replaceState(null, "", url.pathname + url.search);
}

function init() {
  if (!$("room-bar")) return;
  $("room-start").addEventListener("click", start);
  $("room-join").addEventListener("submit", (ev) => {
    ev.preventDefault();
    join($("room-code-input").value);
  });
  $("room-detach").addEventListener("click", () => detach(true));
  $("room-attach").addEventListener("click", () => detach(false));
  $("room-leave").addEventListener("click", leave);
  $("room-end").addEventListener("click", end);
  $("room-copy").addEventListener("click", copyLink);
  for (const kind of ["keydown", "pointerdown", "submit"]) {
    window.addEventListener(kind, () => (room.passive = false), { capture: true });
  }
  fromLink();
  if (load()) connect();
  else show("none");
}

// Views register when their modules run; wait for the page to finish loading so they have.
if (document.readyState === "complete") init();
else window.addEventListener("load", init, { once: true });
