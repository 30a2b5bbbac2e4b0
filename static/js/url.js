// The URL holds a view's state, so that a link reproduces what the page shows: reading and
// writing the page's parameters, and the query strings of the API requests that load them.

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
