"""Every live path the pages use, driven through the HTTP API of a server on a GPU.

    python benchmarks/live_gpu.py [--out benchmarks/results] [--port 8765]

Starts `flashscope serve` on this machine (the server and its run-queue worker on its GPU), then
sends the requests the pages send and records what came back: /api/health (the header badge),
timed runs (tiles and the default route, forward and backward: the kernels' GPU time, the whole
call and do_bench's median, beside the engine's prediction), the measured source of /tiles,
/backward and /decode (the kernel against the simulator on the same inputs), /compare's
measure-now (its runs and the dataset it downloads) and /schedule's measured timeline. Writes
live-gpu-<device>-<date>.json (device, date, versions, each request's body, final state, timings
and diffs; traces' per-event arrays are summarized) and the measure-now dataset beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hostinfo import gpu_header, result_path

RUN_TIMEOUT_S = 600


def call(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """(status, JSON) of one request to the server."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def wait_run(base: str, run_id: str) -> dict[str, Any]:
    """Poll a run (as the pages' event streams would) until it ends."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        _, run = call(base, "GET", f"/api/runs/{run_id}")
        if run["state"] in ("done", "failed", "timeout"):
            return run
        time.sleep(0.5)
    raise RuntimeError(f"run {run_id} did not end within {RUN_TIMEOUT_S} s")


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """A run's record without its bulky arrays (per-event states, timeline arrays)."""
    res = dict(run.get("result") or {})
    trace = res.get("trace")
    if trace:
        c = trace["compare"]
        res["trace"] = {
            "events": len(trace["events"]),
            "fields_equal": c["fields_equal"],
            "max_state_diff": c["max_state_diff"],
            "max_ratio": max((r for r in c["ratio_per_step"] if r is not None), default=None),
            "beyond": c["beyond"],
            "tolerance": c["tolerance"],
            "max_abs_err_vs_reference": c["max_abs_err_vs_reference"],
        }
    if res.get("timeline"):
        t = res["timeline"]
        res["timeline"] = {"programs": len(t["start_us"]), "span_us": t["span_us"], "sms": t["sms"]}
    if res.get("decode"):
        d = res["decode"]
        res["decode"] = {
            **{k: d[k] for k in ("splits", "rows", "max_o_diff", "tolerance")},
            "per_split": [
                {k: s[k] for k in ("split", "max_lse_diff", "max_o_diff", "within")}
                for s in d["per_split"]
            ],
        }
    return {k: run.get(k) for k in ("id", "state", "error", "messages")} | {"result": res}


def run_one(base: str, name: str, body: dict[str, Any], log: list[dict[str, Any]]) -> dict:
    status, first = call(base, "POST", "/api/runs", body)
    entry: dict[str, Any] = {"name": name, "request": body, "status": status}
    if status != 202:
        entry["refused"] = first
        log.append(entry)
        print(f"{name}: refused {status}: {first}", flush=True)
        return entry
    t0 = time.monotonic()
    run = wait_run(base, first["id"])
    entry.update(seconds=time.monotonic() - t0, run=summarize(run))
    log.append(entry)
    res = run.get("result") or {}
    timing = res.get("timing") or {}
    sim = (res.get("simulated") or {}).get("time_us")
    print(
        f"{name}: {run['state']} in {entry['seconds']:.0f} s"
        + (f"; kernels {timing['kernel_us']:.1f} µs, call {timing['call_us']:.1f} µs, "
           f"do_bench {timing['median_us']:.1f} µs, simulated {sim}" if timing else "")
        + (f"; error {run['error']}" if run.get("error") else ""),
        flush=True,
    )  # fmt: skip
    return entry


def plans(gpu_key: str | None) -> list[tuple[str, dict[str, Any]]]:
    """The runs the pages ask for, at sizes a GPU user meets."""
    big = {"batch": 4, "heads": 16, "seq": 4096, "head_dim": 128, "causal": True, "dtype": "fp16"}
    small_bwd = {"batch": 2, "heads": 8, "seq": 1024, "head_dim": 64, "dtype": "fp16"}
    tiles_fwd = {"block_m": 128, "block_n": 64, "warps": 8, "stages": 3}
    tiles_bwd = {"block_m": 64, "block_n": 64, "warps": 4, "stages": 3}
    return [
        ("fwd time, tiles", {**big, **tiles_fwd, "mode": "fwd", "what": "time"}),
        ("fwd time, default route", {**big, **tiles_fwd, "mode": "fwd", "what": "time",
                                     "route": "default"}),
        ("bwd time, tiles", {**big, **tiles_bwd, "mode": "bwd", "what": "time"}),
        ("bwd time, small, default route", {**small_bwd, **tiles_bwd, "mode": "bwd",
                                            "what": "time", "route": "default"}),
        ("fwd trace (tiles page)", {"seq": 512, "head_dim": 64, "dtype": "bf16", "causal": True,
                                    "block_m": 64, "block_n": 64, "mode": "fwd",
                                    "what": "trace", "seed": 7}),
        ("bwd check (backward page)", {"seq": 512, "seq_k": 700, "head_dim": 64, "dtype": "fp16",
                                       "causal": True, "block_m": 64, "block_n": 64,
                                       "mode": "bwd", "what": "trace", "seed": 7}),
        ("decode check (decode page)", {"heads": 4, "kv_heads": 1, "seq": 1, "seq_k": 32768,
                                        "head_dim": 128, "dtype": "fp16", "block_m": 16,
                                        "block_n": 64, "mode": "decode", "what": "trace",
                                        "seed": 7}),
    ]  # fmt: skip


def measure_now(base: str, gpu_key: str, log: list[dict[str, Any]], out: Path) -> None:
    """/compare's button on a shipped problem: its runs, then the downloaded dataset."""
    problem = "fwd-d128-causal-n4096-t0"
    status, got = call(base, "POST", "/api/compare/measure", {"gpu": gpu_key, "id": problem})
    entry: dict[str, Any] = {"name": "compare measure-now", "status": status, "problem": problem}
    log.append(entry)
    if status != 202:
        entry["refused"] = got
        print(f"measure-now refused {status}: {got}", flush=True)
        return
    runs = []
    for r in got["runs"]:
        run = wait_run(base, r["id"])
        res = run.get("result") or {}
        t = res.get("timing") or {}
        runs.append({
            "tile": r["tile"], "state": run["state"], "error": run.get("error"),
            "kernel_us": t.get("kernel_us"), "call_us": t.get("call_us"),
            "median_us": t.get("median_us"), "kernel": t.get("kernel"),
            "simulated_us": (res.get("simulated") or {}).get("time_us"),
            "config": res.get("simulated_config"),
        })  # fmt: skip
        print(f"measure-now {r['tile']}: {run['state']} {t.get('kernel_us')}", flush=True)
    entry["runs"] = runs
    status, data = call(
        base, "POST", "/api/compare/dataset", {"runs": [r["id"] for r in got["runs"]]}
    )
    entry["dataset_status"] = status
    if status == 200:
        path = out.with_name(out.stem + "-measure-now.json")
        path.write_text(json.dumps(data, indent=1) + "\n")
        entry["dataset"] = {"file": path.name, "rows": len(data["rows"]),
                            "left_out": data["left_out"],
                            "summary_time": data["summary"]["all"]["time"]}  # fmt: skip


def schedule(base: str, gpu_key: str, log: list[dict[str, Any]]) -> None:
    """/schedule's measured timeline for its default problem on this GPU's preset."""
    params = {"gpu": gpu_key, "algo": "fa2", "batch": 2, "heads": 16, "seq": 4096,
              "head_dim": 128, "causal": True, "block_m": 128, "block_n": 64, "warps": 8,
              "stages": 2}  # fmt: skip
    status, run = call(base, "POST", "/api/schedule/measure", params)
    entry: dict[str, Any] = {
        "name": "schedule measured timeline",
        "status": status,
        "params": params,
    }
    log.append(entry)
    if status != 202:
        entry["refused"] = run
        return
    done = wait_run(base, run["id"])
    entry["run"] = summarize(done)
    query = urllib.parse.urlencode({k: str(v).lower() if isinstance(v, bool) else v
                                    for k, v in params.items()})  # fmt: skip
    status, figs = call(base, "GET", f"/api/schedule/measured/{run['id']}?{query}")
    entry["figures_status"] = status
    if status == 200:
        entry["measured"] = {k: figs[k] for k in ("ctas", "span_us", "simulated_span_us",
                                                  "resident_per_sm")}  # fmt: skip
        print(f"schedule: {entry['measured']}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--port", type=int, default=8765)
    args = ap.parse_args()
    header = gpu_header()
    out = result_path(args.out, "live-gpu", header)
    base = f"http://127.0.0.1:{args.port}"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flashscope.app.cli.main",
            "serve",
            "--port",
            str(args.port),
            "--log-level",
            "warning",
        ],
        env={**os.environ, "FLASHSCOPE_RUNS_MAX_QUEUED": "16"},
    )
    log: list[dict[str, Any]] = []
    doc: dict[str, Any] = {"kind": "flashscope live GPU check", **header, "log": log}
    try:
        for _ in range(240):
            try:
                status, health = call(base, "GET", "/api/health")
                if status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        doc["health"] = health
        print("health:", health, flush=True)
        from flashscope.simulator.core import hardware

        try:
            gpu_key = hardware.resolve(health["gpu"] or "")
        except ValueError:
            gpu_key = None
        for name, body in plans(gpu_key):
            run_one(base, name, body, log)
        if gpu_key:
            measure_now(base, gpu_key, log, out)
            schedule(base, gpu_key, log)
    finally:
        server.terminate()
        server.wait(timeout=30)
        out.write_text(json.dumps(doc, indent=1) + "\n")
        print("wrote", out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
