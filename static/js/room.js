// Instructor-synced rooms: the room bar in the header, on every page.
//
// A lecturer starts a room and drives it: every change of the page's view (registry.js
// `onChange`) goes to /ws/rooms/{code} as {path, params, step}. Attendees join with the code and
// follow: each state they receive is applied through `currentView().applyState`, after moving to
// the lecturer's page when it differs. An attendee who steps, edits a field or follows a link on
// their own explores alone (the bar says so) until they press "Follow again", which catches up.
// This module knows nothing of any view's internals.
//
// sessionStorage "flashscope.room" keeps {code, token?, detached?, adopt?, expect?, closed?} so
// that the next page of this tab joins the same room: `token` makes it the driver, `adopt` (a
// drive link opened on another device) and `expect` (a page this module navigated to) make it
// take the room's latest state instead of sending its own; `closed` (the reason) keeps saying
// that the room has closed, across reloads, until the reader dismisses it or joins another.
//
// The bar tells the truth about the room: "Following" only while this page shows the room's
// state; "Exploring alone"; "Driver left" once no page holds the drive token (the server pushes
// who is in the room, "presence"); "Room closed". A driver sees how many others are connected,
// pushed by the server as people join and leave.
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
const DRIVER_GRACE_MS = 2500; // a driver changing pages is away this long at most
const LEAVING_MS = 10000; // an attendee's page load for the room, not started again meanwhile
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
  acted: false, // an attendee's own key, pointer or form since the room's state was applied
  applied: null, // the room state this page last applied (an attendee's)
  leaving: null, // {path, at}: the page this one is navigating to for the room, since when
  driverAway: false, // no driver in the room (after DRIVER_GRACE_MS)
  awayTimer: null,
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
  detached: "Exploring alone",
  "driver-left": "Driver left",
  disconnected: "Disconnected",
  lost: "Room lost",
  closed: "Room closed",
};

function show(status, note = "") {
  const bar = $("room-bar");
  if (!bar) return;
  const rec = load();
  bar.dataset.state = status;
  $("room-status").textContent = LABELS[status] + (note ? ` — ${note}` : "");
  const inRoom = status !== "none";
  const open = inRoom && status !== "closed";
  $("room-start").hidden = open;
  $("room-join").hidden = open;
  $("room-help").hidden = open;
  $("room-info").hidden = !inRoom;
  $("room-code").textContent = rec ? rec.code : "";
  const driving = status === "driving";
  $("room-drive").hidden = !driving;
  if (driving) $("room-drive-link").value = driveLink(rec);
  $("room-end").hidden = !(rec && rec.token && open);
  $("room-detach").hidden = status !== "following" && status !== "driver-left";
  $("room-attach").hidden = status !== "detached";
  $("room-leave").hidden = !inRoom;
  $("room-leave").textContent = status === "closed" ? "Dismiss" : "Leave";
  if (!driving) $("room-count").textContent = "";
}

/** An attendee's bar: following, exploring alone, or waiting for a driver who left. */
function showAttendee() {
  const rec = load();
  if (!rec || room.role !== "attendee") return;
  if (rec.detached) show("detached", room.driverAway ? "the lecturer has left" : "");
  else if (room.driverAway) show("driver-left", "this page follows again when the lecturer is back");
  else show("following");
}

/** A driver's count of the others in the room. */
function showCount(clients) {
  if (room.role !== "driver" || !Number.isInteger(clients)) return;
  const others = Math.max(0, clients - 1);
  $("room-count").textContent = `· ${others} other${others === 1 ? "" : "s"} connected`;
}

/** Whether a driver is in the room (the server's count); a driver's absence shows after a grace. */
function drivers(n) {
  if (!Number.isInteger(n)) return;
  clearTimeout(room.awayTimer);
  if (n > 0) {
    const was = room.driverAway;
    room.driverAway = false;
    if (was) showAttendee();
    return;
  }
  room.awayTimer = setTimeout(() => {
    room.driverAway = true;
    showAttendee();
  }, DRIVER_GRACE_MS);
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
    if (r.ok) showCount((await r.json()).clients);
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
    const join = { type: "join", presence: true };
    ws.send(JSON.stringify(rec.token ? { ...join, token: rec.token } : join));
  });
  ws.addEventListener("message", (ev) => receive(JSON.parse(ev.data)));
  ws.addEventListener("close", (ev) => {
    if (room.ws !== ws) return; // replaced or left on purpose
    room.ws = null;
    room.live = false;
    room.role = null;
    clearInterval(room.poll);
    clearTimeout(room.awayTimer);
    closed(ev.code, ev.reason);
  });
}

/** After a close: give up with the server's reason, or join again after a while. */
function closed(code, reason) {
  const rec = load();
  const gone = code === 4404 && rec && rec.welcomed;
  room.goneTries = gone ? room.goneTries + 1 : 0;
  if (rec && (code === 4410 || room.goneTries > GONE_TRIES)) {
    // A room this page was in has closed: the bar says so, across reloads, until dismissed.
    const why = reason || rec.closing || `room ${rec.code} has closed`;
    save({ code: rec.code, closed: why });
    show("closed", why);
    showError("");
    return;
  }
  if (FATAL.has(code) || (code === 4404 && !gone)) {
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
    if (msg.role === "driver") {
      welcomeDriver(rec, msg.state);
      showCount(msg.clients);
    } else {
      room.driverAway = false;
      drivers(msg.drivers);
      welcomeAttendee(rec, msg.state);
    }
  } else if (msg.type === "presence") {
    if (room.role === "driver") showCount(msg.clients);
    else drivers(msg.drivers);
  } else if (msg.type === "room-gone") {
    if (msg.final) {
      update({ closing: msg.reason }); // the close (4410) follows
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
    showAttendee();
  } else if (msg.type === "attached") {
    showAttendee();
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
    showCount(msg.clients);
    room.live = true;
    if (msg.state) {
      passive();
      apply(msg.state);
    } else if (!room.passive) {
      publish(here()); // what this page showed while the room was away
    }
    return;
  }
  showAttendee();
  if (!rec.detached && msg.state) apply(msg.state);
}

function welcomeAttendee(rec, latest) {
  if (rec.detached) {
    room.ws.send(JSON.stringify({ type: "detach" }));
    showAttendee();
    return;
  }
  showAttendee();
  if (latest) apply(latest);
}

/** Show a state of the room: go to its page, or hand it to this page's view. */
function apply(s) {
  if (s.path !== window.location.pathname) {
    const url = new URL(s.path, window.location.origin);
    if (url.origin !== window.location.origin) return;
    // Already on the way there: the next page takes the room's latest state when it joins, and
    // a second assign would only abort the load under way (retried after LEAVING_MS).
    const going = room.leaving;
    if (going && going.path === url.pathname && Date.now() - going.at < LEAVING_MS) return;
    room.leaving = { path: url.pathname, at: Date.now() };
    update({ expect: url.pathname });
    window.location.assign(url.pathname);
    return;
  }
  update({ expect: null });
  room.acted = false;
  room.applied = s;
  const view = currentView();
  if (!view) {
    room.pending = s;
    return;
  }
  room.pending = null;
  view.applyState({ params: s.params || {}, step: s.step ?? null });
}

/** The same page, parameters and step (parameters in any order, 64 and "64" alike). */
function sameState(a, b) {
  if (!a || !b || a.path !== b.path || (a.step ?? null) !== (b.step ?? null)) return false;
  const pa = a.params || {};
  const pb = b.params || {};
  const text = (v) => (v === null || v === undefined ? "" : String(v));
  return [...new Set([...Object.keys(pa), ...Object.keys(pb)])].every((k) => text(pa[k]) === text(pb[k]));
}

/** An attendee who moved on their own explores alone: the room's states stop until they ask. */
function alone() {
  if (room.role !== "attendee" || load()?.detached) return;
  detach(true);
  showAttendee();
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
  if (room.role === "attendee" && room.acted && !sameState(s, room.applied)) {
    alone();
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
  room.driverAway = false;
  clearInterval(room.poll);
  clearTimeout(room.again);
  clearTimeout(room.awayTimer);
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
  for (const kind of ["keydown", "pointerdown", "submit", "input"]) {
    window.addEventListener(kind, (ev) => {
      if (inBar(ev.target)) return;
      room.passive = false; // a driver's own user acts: its changes go to the room again
      room.acted = true; // an attendee's: a change of the view now is their own
    }, { capture: true });
  }
  window.addEventListener("click", leavingAlone, { capture: true });
  fromLink();
  const rec = load();
  if (rec && rec.closed) show("closed", rec.closed);
  else if (rec) connect();
  else show("none");
}

function inBar(node) {
  return node instanceof Node && Boolean($("room-bar")?.contains(node));
}

/** A following attendee who opens another page by a link goes there alone. */
function leavingAlone(ev) {
  const link = ev.target instanceof Element ? ev.target.closest("a[href]") : null;
  if (!link || inBar(link) || ev.defaultPrevented || ev.button !== 0) return;
  if (ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.altKey || link.target === "_blank") return;
  const rec = load();
  if (!rec || rec.token || rec.detached || rec.closed || room.role !== "attendee") return;
  const url = new URL(link.href, window.location.href);
  const now = window.location;
  if (url.origin !== now.origin || (url.pathname === now.pathname && url.search === now.search)) return;
  update({ detached: true });
}

// Views register when their modules run; wait for the page to finish loading so they have.
if (document.readyState === "complete") init();
else window.addEventListener("load", init, { once: true });
