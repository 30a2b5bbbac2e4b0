// Exports shared by every view: each figure as PNG (Plotly renders it in the page: no request
// leaves the server), and the view's data as JSON or as a Chrome/Perfetto trace (links to the
// server's JSON twin; the browser saves what the server computed, nothing is rebuilt here).

import { drawWaiting } from "./plot.js";

/** Point the export link `id` at `url`, saved as `filename`. */
function setExportLink(id, url, filename) {
  const a = document.getElementById(id);
  if (!a) return;
  a.href = url;
  a.download = filename;
}

/**
 * Point the page's export links at its data: the JSON link (#export-json) at `json` saved as
 * `name`.json, the Chrome-trace link (#export-chrome) at `chrome` saved as `name`.trace.json.
 */
export function setExports({ name, json, chrome }) {
  if (json) setExportLink("export-json", json, `${name}.json`);
  if (chrome) setExportLink("export-chrome", chrome, `${name}.trace.json`);
}

/** Make every `button[data-png-target]` download its Plotly figure as PNG (2× for slides). */
export function bindPngButtons() {
  for (const button of document.querySelectorAll("button[data-png-target]")) {
    button.addEventListener("click", async () => {
      const div = document.getElementById(button.dataset.pngTarget);
      drawWaiting(div); // a figure below the fold may not show the step yet
      if (!div || !div.data) return;
      button.disabled = true;
      try {
        await Plotly.downloadImage(div, {
          format: "png",
          filename: button.dataset.pngName,
          width: div.clientWidth || 800,
          height: div.clientHeight || 400,
          scale: 2,
        });
      } finally {
        button.disabled = false;
      }
    });
  }
}
