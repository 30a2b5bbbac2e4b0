"""The README's screenshot of /compare's Measure now, from a real GPU run, replayed.

    python benchmarks/live_screenshots.py [--results benchmarks/results] [--out docs/screenshots]

The GPU machines that run benchmarks/live_gpu.py have no browser, so the page is shot here: a
server whose run queue replays the measure-now runs that script recorded (their timings and the
engine's predictions, as the GPU returned them), with /api/health answered as the GPU server
answered it. Nothing is invented: every number on the page is the recorded run's. The image's
caption in the README says it is a replay.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TILE_FIELDS = ("block_m", "block_n", "warps", "stages")


def _recorded() -> dict[str, Any]:
    """The newest live-gpu result that holds a measure-now run."""
    for path in sorted(Path(os.environ.get("LIVE_RESULTS", RESULTS)).glob("live-gpu-*.json"),
                       reverse=True):  # fmt: skip
        doc = json.loads(path.read_text())
        if doc.get("kind") == "flashscope live GPU check":
            return doc
    raise FileNotFoundError("no live-gpu-*.json result: run benchmarks/live_gpu.py on a GPU")


def execute(job: dict[str, Any], device: str, progress: Any) -> dict[str, Any]:
    """A run-queue executor that answers a timed run with the recorded one of the same tiles."""
    doc = _recorded()
    entry = next(e for e in doc["log"] if e["name"] == "compare measure-now")
    want = "default" if job.get("route") == "default" else None
    for run in entry["runs"]:
        config = run["config"] or {}
        same = all(config.get(f) == job.get(f) for f in TILE_FIELDS)
        if (want and run["tile"] == "default") or (not want and run["tile"] != "default" and same):
            progress("replaying the recorded run")
            time.sleep(0.3)
            return {
                "backend": "cuda",
                "device": doc["device"],
                "env": {k: doc.get(k) for k in ("device", "date", "python", "torch", "triton")},
                "simulated_config": run["config"],
                "timing": {
                    **{k: run[k] for k in ("kernel_us", "call_us", "median_us", "kernel")},
                    "measured_row": {"ms": run["median_us"] * 1e-3, "route": None},
                    "gluon": run["tile"] == "default" and run["simulated_us"] is None,
                },
                "timing_note": None,
                "simulated": None
                if run["simulated_us"] is None
                else {"gpu": "h100-sxm", "time_us": run["simulated_us"]},
            }
    raise ValueError(f"no recorded run for {job}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = ap.parse_args()
    doc = _recorded()
    problem = next(e for e in doc["log"] if e["name"] == "compare measure-now")["problem"]
    port = 8791
    env = {
        **os.environ,
        "FLASHSCOPE_RUNS_EXECUTOR": "benchmarks.live_screenshots:execute",
        "FLASHSCOPE_RUNS_DEVICES": '["cuda:0"]',
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "flashscope.app.cli.main", "serve", "--port", str(port),
         "--log-level", "warning"], cwd=ROOT, env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                with urllib.request.urlopen(base + "/api/health", timeout=5):
                    break
            except OSError:
                time.sleep(0.5)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                      "--no-first-run", "--disable-background-networking",
                      "--disable-component-update", "--disable-sync"],
            )  # fmt: skip
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            health = json.dumps(doc["health"])
            page.route(
                "**/api/health", lambda r: r.fulfill(body=health, content_type="application/json")
            )
            gpu = "h100-sxm" if "H100" in doc["device"] else "h200"
            page.goto(f"{base}/compare?gpu={gpu}&id={problem}")
            page.locator("#measure:not([disabled])").wait_for(timeout=30000)
            page.locator("#measure").click()
            page.locator("#live-download:not([hidden])").wait_for(timeout=60000)
            time.sleep(1)
            args.out.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out / "compare-live.png"), full_page=True)
            print("wrote", args.out / "compare-live.png")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
