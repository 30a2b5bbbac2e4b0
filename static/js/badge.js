// The header's backend badge on every page: what this server runs on, from /api/health.

import { backendInfo } from "./live.js";

const badge = document.getElementById("backend-badge");

backendInfo().then((health) => {
  if (!health) {
    badge.textContent = "backend: unknown";
    return;
  }
  badge.textContent = health.label;
  badge.dataset.backend = health.backend;
  document.body.dataset.backend = health.backend;
  badge.title = health.backend === "cuda"
    ? "Live runs execute and are timed on this GPU"
    : "No GPU here: live runs execute the kernels in Triton's interpreter (small sizes, no " +
      "timing); measured GPU figures come from the shipped datasets";
});
