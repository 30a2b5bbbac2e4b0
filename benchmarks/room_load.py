"""Load benchmark of instructor-synced rooms: many attendees follow one lecturer over WebSockets.

Starts `flashscope serve` as a subprocess on a loopback port, creates a room, connects the
attendees (default 200) and a lecturer who sends one state per step at a fixed rate (default 10
per second for 60 s). Every attendee must receive every step, in order, once. The script records
the delivery latency of each (attendee, step) — from just before the lecturer's send to the
attendee's receive, both on this machine's monotonic clock — the server's resident memory once a
second, its CPU time, and the machine's load average, and writes them all to
benchmarks/results/room-load-<date>.json.

    .venv/bin/python benchmarks/room_load.py                  # 200 attendees, 10 Hz, 60 s
    .venv/bin/python benchmarks/room_load.py --attendees 50 --seconds 10

Exit status 0 when no step was lost, duplicated or reordered and p95 latency ≤ the target.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import platform
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
from hostinfo import cpu_model, package_versions  # the module beside this script
from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def device() -> dict:
    return {
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "machine": platform.machine(),
        "kernel": platform.release(),
    }


def versions() -> dict:
    dists = ("flashscope", "fastapi", "starlette", "uvicorn", "websockets", "numpy")
    return {"python": platform.python_version()} | package_versions(dists, None)


def start_server(port: int, env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen(
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
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=5):
                return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("flashscope serve exited early") from None
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("flashscope serve did not start within 60 s")


async def attendee(url: str, joined: asyncio.Event, got: list, ready: list) -> None:
    async with connect(url, max_queue=None, ping_interval=None) as ws:
        await ws.send('{"type":"join"}')
        welcome = json.loads(await ws.recv())
        assert welcome["type"] == "welcome", welcome
        ready.append(1)
        joined.set()
        async for raw in ws:
            now = time.monotonic()
            msg = json.loads(raw)
            if msg["type"] == "state":
                got.append((msg["seq"], msg["state"]["step"], now))
                if msg["state"]["params"].get("last"):
                    return


async def run(args: argparse.Namespace, base: str, pid: int) -> dict:
    req = urllib.request.Request(base + "/api/rooms", method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        room = json.loads(r.read())
    url = base.replace("http", "ws") + f"/ws/rooms/{room['code']}"

    received: list[list] = [[] for _ in range(args.attendees)]
    ready: list[int] = []
    joined = asyncio.Event()
    t_join = time.monotonic()
    tasks = [
        asyncio.create_task(attendee(url, joined, received[i], ready))
        for i in range(args.attendees)
    ]
    while len(ready) < args.attendees:
        await asyncio.sleep(0.05)
        failed = [t for t in tasks if t.done() and t.exception() is not None]
        late = time.monotonic() - t_join > 60
        if failed or late:
            for t in tasks:
                t.cancel()
            why = repr(failed[0].exception()) if failed else "60 s passed"
            raise RuntimeError(f"{len(ready)} of {args.attendees} attendees joined: {why}")
    join_s = time.monotonic() - t_join

    samples: list[dict] = []
    stop = asyncio.Event()

    async def sampler() -> None:
        t0 = time.monotonic()
        while not stop.is_set():
            samples.append(
                {
                    "t_s": round(time.monotonic() - t0, 3),
                    "rss_mib": round(rss_mib(pid), 2),
                    "cpu_s": round(cpu_seconds(pid), 3),
                    "loadavg": load_average(),
                }
            )
            await asyncio.sleep(1.0)

    sampling = asyncio.create_task(sampler())
    steps = int(args.rate * args.seconds)
    sent_at = np.zeros(steps)
    acks = 0
    async with connect(url, max_queue=None, ping_interval=None) as lecturer:
        await lecturer.send(json.dumps({"type": "join", "token": room["drive_token"]}))
        assert json.loads(await lecturer.recv())["role"] == "driver"

        async def read_acks() -> None:
            nonlocal acks
            async for raw in lecturer:
                if json.loads(raw)["type"] == "ack":
                    acks += 1

        ack_reader = asyncio.create_task(read_acks())
        start = time.monotonic() + 0.2
        for k in range(steps):
            await asyncio.sleep(max(0.0, start + k / args.rate - time.monotonic()))
            params = {"n": 256, "bm": 64, "seed": 3}
            if k == steps - 1:
                params["last"] = True
            state = {"path": "/tiles", "params": params, "step": k}
            message = json.dumps({"type": "state", "state": state})
            sent_at[k] = time.monotonic()
            await lecturer.send(message)
        drive_s = time.monotonic() - start
        done, pending = await asyncio.wait(tasks, timeout=10)
        ack_reader.cancel()
    stop.set()
    await sampling
    for t in pending:
        t.cancel()
    failures = [repr(t.exception()) for t in done if t.exception()]

    lost = duplicated = reordered = 0
    latencies = []
    for got in received:
        seen = [step for _, step, _ in got]
        lost += steps - len(set(seen))
        duplicated += len(seen) - len(set(seen))
        reordered += sum(1 for a, b in itertools.pairwise(seen) if b <= a)
        latencies.extend(t - sent_at[step] for _, step, t in got if 0 <= step < steps)
    lat_ms = np.array(latencies) * 1000
    per_second_p95 = []
    for s in range(int(args.seconds)):
        lo, hi = int(s * args.rate), int((s + 1) * args.rate)
        window = [
            (t - sent_at[step]) * 1000 for got in received for _, step, t in got if lo <= step < hi
        ]
        per_second_p95.append(round(float(np.percentile(window, 95)), 3) if window else None)
    hist_edges = [*range(0, 201), 300, 500, 1000, 1e9]
    hist, _ = np.histogram(lat_ms, bins=hist_edges)
    rss = [s["rss_mib"] for s in samples]
    ts = [s["t_s"] for s in samples]
    slope = float(np.polyfit(ts, rss, 1)[0] * 60) if len(rss) > 2 else None
    cpu_used = samples[-1]["cpu_s"] - samples[0]["cpu_s"] if len(samples) > 1 else None
    pct = {f"p{q}": round(float(np.percentile(lat_ms, q)), 3) for q in (50, 90, 95, 99, 99.9)}
    return {
        "room": room["code"],
        "join_all_s": round(join_s, 3),
        "drive_s": round(drive_s, 3),
        "steps_sent": steps,
        "acks": acks,
        "deliveries_expected": steps * args.attendees,
        "deliveries": int(lat_ms.size),
        "lost": lost,
        "duplicated": duplicated,
        "reordered": reordered,
        "attendee_failures": failures,
        "latency_ms": {
            **pct,
            "mean": round(float(lat_ms.mean()), 3),
            "min": round(float(lat_ms.min()), 3),
            "max": round(float(lat_ms.max()), 3),
        },
        "latency_p95_ms_per_second": per_second_p95,
        "latency_histogram_ms": {"edges": [*hist_edges[:-1], "inf"], "counts": hist.tolist()},
        "max_latency_ms_per_attendee": [
            round(max((t - sent_at[step]) * 1000 for _, step, t in got), 3) if got else None
            for got in received
        ],
        "server": {
            "rss_mib_start": rss[0],
            "rss_mib_end": rss[-1],
            "rss_mib_max": max(rss),
            "rss_slope_mib_per_min": round(slope, 4) if slope is not None else None,
            "cpu_s": round(cpu_used, 3) if cpu_used is not None else None,
            "cpu_share_of_one_core": round(cpu_used / ts[-1], 4) if cpu_used else None,
        },
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attendees", type=int, default=200)
    parser.add_argument("--rate", type=float, default=10.0, help="lecturer steps per second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--p95-target-ms", type=float, default=100.0)
    parser.add_argument("--redis-url", default=None, help="run the server with rooms in Redis")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.attendees < 1 or args.rate <= 0 or args.seconds <= 0:
        parser.error("--attendees, --rate and --seconds must be positive")

    env = {"FLASHSCOPE_ROOM_MAX_CLIENTS": str(args.attendees + 1)}
    if args.redis_url:
        env["FLASHSCOPE_REDIS_URL"] = args.redis_url
    port = free_port()
    load_before = load_average()
    started = dt.datetime.now(dt.UTC)
    proc = start_server(port, env)
    try:
        figures = asyncio.run(run(args, f"http://127.0.0.1:{port}", proc.pid))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    ok = (
        figures["lost"] == figures["duplicated"] == figures["reordered"] == 0
        and not figures["attendee_failures"]
        and figures["latency_ms"]["p95"] <= args.p95_target_ms
    )
    result = {
        "benchmark": "room_load",
        "date": started.isoformat(timespec="seconds"),
        "device": device(),
        "versions": versions(),
        "config": {
            "attendees": args.attendees,
            "rate_per_s": args.rate,
            "seconds": args.seconds,
            "transport": "WebSocket over loopback, one process of attendees and lecturer",
            "rooms_store": "redis" if args.redis_url else "memory",
            "p95_target_ms": args.p95_target_ms,
        },
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "client_rss_mib": round(rss_mib(os.getpid()), 2),
        "passed": ok,
        **figures,
    }
    out = args.out or RESULTS / f"room-load-{started.date().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    lat = figures["latency_ms"]
    srv = figures["server"]
    print(
        f"{args.attendees} attendees × {figures['steps_sent']} steps: "
        f"lost {figures['lost']}, duplicated {figures['duplicated']}, "
        f"reordered {figures['reordered']}; latency p50 {lat['p50']} ms, p95 {lat['p95']} ms, "
        f"p99 {lat['p99']} ms, max {lat['max']} ms; server RSS {srv['rss_mib_start']} → "
        f"{srv['rss_mib_end']} MiB (max {srv['rss_mib_max']}, slope "
        f"{srv['rss_slope_mib_per_min']} MiB/min), CPU {srv['cpu_share_of_one_core']} of a core; "
        f"load average {result['load_average_before']} → {result['load_average_after']}\n"
        f"{'PASS' if ok else 'FAIL'}; wrote {out}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
