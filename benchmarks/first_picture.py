"""First picture of a page: navigation to the first drawn plot, in headless Chromium on loopback.

Starts `flashscope serve` on a free port and opens the page (default /tiles) in Debian's Chromium
(the flags of the browser tests) at 1440×900, each run in a fresh browser context, so nothing is
cached: every run downloads Plotly and the modules again, as a first visit does. A script that
runs before the page's own stamps, with the page's clock (ms since navigation started):

- first_plot: a Plotly figure holds its first drawn trace (the first useful picture);
- step_drawn: <body data-step> is set, which the views do once every figure of the step is drawn;
- dom_content_loaded, and the bytes each resource took on the wire (gzip shows here).

    .venv/bin/python benchmarks/first_picture.py              # writes benchmarks/results/
    .venv/bin/python benchmarks/first_picture.py --runs 30 --page "/backward?step=60"
    .venv/bin/python benchmarks/first_picture.py --templates /tmp/old/templates --out /tmp/a.json

`--templates` serves another templates/ folder (an earlier commit's, say) for a before/after on
the same machine. Target: first picture of /tiles ≤ 1.5 s (median and p95).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path

from hostinfo import cpu_model, package_versions, summary  # the module beside this script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.app.servers import flashscope_server
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

TARGET_MS = 1500
VIEWPORT = {"width": 1440, "height": 900}

# Runs in the page before any of its scripts (Playwright's init script).
PROBE = """
window.__fp = {};
new MutationObserver(() => {
  const fp = window.__fp;
  if (fp.first_plot === undefined
      && document.querySelector('.js-plotly-plot .trace, .js-plotly-plot .hm')) {
    fp.first_plot = performance.now();
  }
  if (fp.step_drawn === undefined && document.body && document.body.dataset.step !== undefined) {
    fp.step_drawn = performance.now();
  }
}).observe(document, { subtree: true, childList: true, attributes: true });
"""

RESOURCES = """() => performance.getEntriesByType('resource').map((r) => ({
  name: new URL(r.name).pathname, start: r.startTime, end: r.responseEnd,
  wire_bytes: r.encodedBodySize, bytes: r.decodedBodySize,
}))"""


def one_run(browser, url: str) -> dict:
    """One cold visit of `url`: the page's stamps and what each resource cost on the wire."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.add_init_script(PROBE)
        page.goto(url)
        page.locator("body[data-step]").wait_for(state="attached", timeout=60000)
        stamps = page.evaluate("() => window.__fp")
        nav = page.evaluate(
            "() => performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd"
        )
        return {**stamps, "dom_content_loaded": nav, "resources": page.evaluate(RESOURCES)}
    finally:
        context.close()


def _plotly(resources: list[dict]) -> dict:
    r = next((r for r in resources if "/static/vendor/plotly" in r["name"]), None)
    return {} if r is None else {k: r[k] for k in ("name", "wire_bytes", "bytes")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--page", default="/tiles", help="path and query to open (default /tiles)")
    ap.add_argument("--runs", type=int, default=20, help="measured runs (default 20)")
    ap.add_argument("--warmup", type=int, default=2, help="runs first, not counted (default 2)")
    ap.add_argument("--templates", type=Path, default=None, help="serve this templates/ folder")
    ap.add_argument("--out", type=Path, default=None, help="output JSON path")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be ≥ 1")
    from playwright.sync_api import sync_playwright

    env = {"FLASHSCOPE_TEMPLATES_DIR": str(args.templates.resolve())} if args.templates else {}
    load_before = os.getloadavg()
    with flashscope_server(env=env) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for _ in range(args.warmup):  # the server's first trace and imports, Chromium's start
            one_run(browser, base + args.page)
        runs = [one_run(browser, base + args.page) for _ in range(args.runs)]
        chromium = browser.version
        browser.close()
    load_after = os.getloadavg()

    first = [r["first_plot"] for r in runs]
    drawn = [r["step_drawn"] for r in runs]
    dcl = [r["dom_content_loaded"] for r in runs]
    plotly = _plotly(runs[-1]["resources"])
    wire = sum(r["wire_bytes"] for r in runs[-1]["resources"])
    now = dt.datetime.now(dt.UTC)
    doc = {
        "benchmark": "first_picture",
        "what": (
            "navigation to the first drawn Plotly figure, cold cache, headless Chromium, loopback"
        ),
        "page": args.page,
        "templates": str(args.templates) if args.templates else "templates/ of this tree",
        "viewport": VIEWPORT,
        "target_ms": TARGET_MS,
        "date": now.isoformat(timespec="seconds"),
        "device": {"cpu": cpu_model(), "cores": os.cpu_count(), "machine": platform.machine()},
        "versions": {"python": platform.python_version(), "chromium": chromium}
        | package_versions(("fastapi", "starlette", "uvicorn", "playwright", "flashscope"), None),
        "load_average": {"before": load_before, "after": load_after},
        "note": "2-core machine shared with other jobs; load averages recorded as found",
        "plotly": plotly,
        "page_wire_bytes": wire,
        "first_plot_ms": summary(first),
        "step_drawn_ms": summary(drawn),
        "dom_content_loaded_ms": summary(dcl),
        "raw": {"first_plot_ms": first, "step_drawn_ms": drawn, "dom_content_loaded_ms": dcl},
        "last_run_resources": runs[-1]["resources"],
    }
    slug = args.page.strip("/").split("?")[0].replace("/", "-") or "home"
    out = args.out or ROOT / "benchmarks" / "results" / f"first-picture-{slug}-{now:%Y-%m-%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    f, d = doc["first_plot_ms"], doc["step_drawn_ms"]
    print(
        f"{args.page}: first plot p50 {f['p50']:.0f} p95 {f['p95']:.0f} ms; all of step drawn "
        f"p50 {d['p50']:.0f} p95 {d['p95']:.0f} ms ({args.runs} runs); Plotly "
        f"{plotly.get('name')} {plotly.get('wire_bytes', 0) / 1e6:.2f} MB on the wire"
    )
    print(f"load average before {load_before}, after {load_after}; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
