"""Step latency of the tile stepper: key press → plots updated, in headless Chromium on loopback.

Starts `flashscope serve` on a free port, opens /tiles in Debian's Chromium (the flags of the
browser tests) at 1280×720 (the browser tests' window; `--viewport 1440x900` for another) and
presses → once per step. A capture-phase keydown listener in the page stamps the press; a
MutationObserver on <body data-step> (which the view sets once the figures on screen show the
step: those below the fold, or peeking in by a sliver, are drawn when they scroll into view or
stepping pauses) stamps the redraw, and the next animation frame after it stamps "on screen".
The page's own clock measures all three, so Playwright's transport is not counted; the round
trip seen from Python is recorded too.

    .venv/bin/python benchmarks/step_latency.py            # writes benchmarks/results/
    .venv/bin/python benchmarks/step_latency.py --steps 50 --out /tmp/x.json
    .venv/bin/python benchmarks/step_latency.py --viewport 1440x900

Scenarios: N = 1024 with 64×64 tiles (16 × 16 tiles, the issue's target) and N = 1024 with
16×16 tiles (a 64 × 64 tile grid: is the grid still responsive?). Target: ≤ 50 ms p95.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from hostinfo import cpu_model, package_versions, summary  # the module beside this script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

SCENARIOS = (
    {"name": "n1024-tiles64", "query": "n=1024&d=64&bm=64&bn=64&seed=0"},
    {"name": "n1024-tiles16-grid64x64", "query": "n=1024&d=64&bm=16&bn=16&seed=0"},
)

# Installed in the page: stamps per step in window.__lat.
PROBE = """() => {
  window.__lat = [];
  let pending = null;
  window.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowRight') pending = performance.now();
  }, true);
  new MutationObserver(() => {
    if (pending === null) return;
    const t0 = pending;
    pending = null;
    const drawn = performance.now();
    requestAnimationFrame(() => {
      window.__lat.push({
        step: Number(document.body.dataset.step), t0, drawn, frame: performance.now(),
      });
    });
  }).observe(document.body, { attributes: true, attributeFilter: ['data-step'] });
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _versions(browser_version: str) -> dict[str, str]:
    out = {"python": platform.python_version(), "chromium": browser_version}
    out["plotly.js"] = "4.1.1, cartesian partial bundle"
    return out | package_versions(
        ("numpy", "fastapi", "uvicorn", "playwright", "flashscope"), "absent"
    )


def _device() -> dict[str, object]:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "machine": platform.machine(), "gpu": None}


def run_scenario(page, base: str, scenario: dict, steps: int) -> dict:
    page.goto(f"{base}/tiles?{scenario['query']}&step=0")
    page.locator("body[data-step='0']").wait_for(state="attached", timeout=60000)
    n_events = int(page.locator("#step").get_attribute("max")) + 1
    page.evaluate(PROBE)
    outside = []
    for k in range(1, steps + 1):
        t = time.perf_counter()
        page.keyboard.press("ArrowRight")
        while page.evaluate("() => window.__lat.length") < k:
            pass
        outside.append((time.perf_counter() - t) * 1000)
    rec = page.evaluate("() => window.__lat")
    assert [r["step"] for r in rec] == list(range(1, steps + 1)), "a step was missed"
    to_drawn = [r["drawn"] - r["t0"] for r in rec]
    to_frame = [r["frame"] - r["t0"] for r in rec]
    return {
        "name": scenario["name"],
        "url": f"/tiles?{scenario['query']}",
        "trace_steps": n_events,
        "steps_measured": steps,
        "key_to_drawn_ms": summary(to_drawn),
        "key_to_frame_ms": summary(to_frame),
        "round_trip_from_python_ms": summary(outside),
        "raw": {"key_to_drawn_ms": to_drawn, "key_to_frame_ms": to_frame, "python_ms": outside},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=250, help="steps per scenario (default 250)")
    ap.add_argument("--out", type=Path, default=None, help="output JSON path")
    ap.add_argument("--viewport", default="1280x720", help="browser window, WxH (1280x720)")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be ≥ 1")
    try:
        width, height = (int(x) for x in args.viewport.lower().split("x"))
    except ValueError:
        ap.error(f"--viewport must be WIDTHxHEIGHT, got {args.viewport!r}")
    viewport = {"width": width, "height": height}
    from playwright.sync_api import sync_playwright

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flashscope.app.cli.main",
            "serve",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/api/health", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("server did not start") from None
                time.sleep(0.2)
        load_before = os.getloadavg()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_context(viewport=viewport).new_page()
            results = [run_scenario(page, base, s, args.steps) for s in SCENARIOS]
            versions = _versions(browser.version)
            browser.close()
        load_after = os.getloadavg()
    finally:
        server.terminate()
        server.wait(timeout=10)
    now = dt.datetime.now(dt.UTC)
    doc = {
        "benchmark": "step_latency",
        "what": "key press (→) to updated plots on /tiles, measured in the page; loopback",
        "target_p95_ms": 50,
        "date": now.isoformat(timespec="seconds"),
        "device": _device(),
        "viewport": viewport,
        "versions": versions,
        "load_average": {"before": load_before, "after": load_after},
        "note": "2-core machine shared with other jobs; load averages recorded as found",
        "scenarios": results,
    }
    out = args.out or ROOT / "benchmarks" / "results" / f"step-latency-{now:%Y-%m-%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for r in results:
        d, f = r["key_to_drawn_ms"], r["key_to_frame_ms"]
        print(
            f"{r['name']:>26}: key→drawn p50 {d['p50']:6.1f} p95 {d['p95']:6.1f} ms; "
            f"key→frame p50 {f['p50']:6.1f} p95 {f['p95']:6.1f} ms  ({r['steps_measured']} steps)"
        )
    print(f"load average before {load_before}, after {load_after}; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
