// The page's alert box (<div id="errors">): what the server refused, or what failed.

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
