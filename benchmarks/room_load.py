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

With --restart-redis the script runs its own redis-server and two server processes sharing it,
puts the attendees on both, and restarts Redis (empty, as without persistence) in the middle of
the run: down for --outage seconds, then up on the same port. It records when each attendee is
told "room-gone" and "room-back", checks that every attendee is back within --back-within
seconds of Redis answering again, that no attendee ever gets a step out of order or twice, that
the room holds every attendee again, what /api/health said meanwhile and how many requests got
503 once Redis was back; results go to benchmarks/results/room-load-redis-restart-<date>.json.

    .venv/bin/python benchmarks/room_load.py --restart-redis  # 200 attendees, 10 Hz, 30 s

This file holds both modes (over 400 lines) because they share the server, client and figure
plumbing; the restart mode's own code is the block under "Redis restart".
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import platform
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
sys.path.insert(0, str(ROOT))

from tests.app.servers import RedisProcess, free_port


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


def cookie(base: str) -> str:
    """A browser's identity cookie: every attendee is its own client, as in a classroom."""
    with urllib.request.urlopen(base + "/api/health", timeout=30) as r:
        for header in r.headers.get_all("set-cookie") or []:
            if header.startswith("fs_client="):
                return header.split(";", 1)[0]
    raise RuntimeError("the server issued no identity cookie")


async def attendee(url: str, joined: asyncio.Event, got: list, ready: list) -> None:
    base = url.split("/ws/", 1)[0].replace("ws", "http", 1)
    headers = {"Cookie": await asyncio.to_thread(cookie, base)}
    async with connect(url, max_queue=None, ping_interval=None, additional_headers=headers) as ws:
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


def create_room(base: str) -> dict:
    req = urllib.request.Request(
        base + "/api/rooms", data=b"{}", method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return dict(json.loads(r.read()))


def delivery(
    received: list[list], steps: int, sent_at: np.ndarray
) -> tuple[int, int, int, list[float]]:
    """(lost, duplicated, reordered, delivery latencies in s) over every attendee's log of
    (seq, step, arrival time) for `steps` states sent at `sent_at[step]`."""
    lost = duplicated = reordered = 0
    latencies: list[float] = []
    for got in received:
        seen = [step for _, step, _ in got]
        lost += steps - len(set(seen))
        duplicated += len(seen) - len(set(seen))
        reordered += sum(1 for a, b in itertools.pairwise(seen) if b <= a)
        latencies.extend(t - sent_at[step] for _, step, t in got if 0 <= step < steps)
    return lost, duplicated, reordered, latencies


async def run(args: argparse.Namespace, base: str, pid: int) -> dict:
    room = create_room(base)
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

    lost, duplicated, reordered, latencies = delivery(received, steps, sent_at)
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


# --- Redis restart ----------------------------------------------------------------------------


def http_status(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


async def follower(url: str, log: list, joined: asyncio.Event) -> None:
    """An attendee that records every message with its arrival time, until the "/end" state."""
    base = url.split("/ws/", 1)[0].replace("ws", "http", 1)
    headers = {"Cookie": await asyncio.to_thread(cookie, base)}
    async with connect(url, max_queue=None, ping_interval=None, additional_headers=headers) as ws:
        await ws.send('{"type":"join"}')
        async for raw in ws:
            msg = json.loads(raw)
            log.append((time.monotonic(), msg))
            if msg["type"] == "welcome":
                joined.set()
            if msg.get("state") and msg["state"]["path"] == "/end":
                return


async def burst_503s(bases: list[str], code: str, token: str, n: int) -> dict[str, int]:
    """`n` concurrent look-ups on each server (with the drive token): how each answered."""

    def one(base: str) -> int:
        return http_status(f"{base}/api/rooms/{code}", {"X-Drive-Token": token})[0]

    codes = await asyncio.gather(*(asyncio.to_thread(one, b) for b in bases for _ in range(n)))
    out: dict[str, int] = {}
    for c in codes:
        out[str(c)] = out.get(str(c), 0) + 1
    return out


async def run_restart(args: argparse.Namespace, bases: list[str], redis: RedisProcess) -> dict:
    room = create_room(bases[0])
    code, token = room["code"], room["drive_token"]
    path = f"/ws/rooms/{code}"
    logs: list[list] = [[] for _ in range(args.attendees)]
    joined = [asyncio.Event() for _ in range(args.attendees)]
    t_join = time.monotonic()
    tasks = [
        asyncio.create_task(
            follower(bases[i % len(bases)].replace("http", "ws") + path, logs[i], joined[i])
        )
        for i in range(args.attendees)
    ]
    await asyncio.wait_for(asyncio.gather(*(j.wait() for j in joined)), 120)
    join_s = time.monotonic() - t_join
    # The pool of each process is warm now: a burst of look-ups uses many connections at once.
    warm = await burst_503s(bases, code, token, 40)

    replies: list = []
    lecturer = await connect(
        bases[0].replace("http", "ws") + path, max_queue=None, ping_interval=None
    )
    await lecturer.send(json.dumps({"type": "join", "token": token}))
    assert json.loads(await lecturer.recv())["role"] == "driver"

    async def read_lecturer() -> None:
        async for raw in lecturer:
            replies.append((time.monotonic(), json.loads(raw)))

    reading = asyncio.create_task(read_lecturer())
    steps = int(args.rate * args.seconds)
    down_at = int(steps * 0.4)
    sent_at: list[float] = []
    marks: dict = {}
    health: list = []

    async def restart() -> None:
        redis.stop()
        marks["t_down"] = time.monotonic()
        await asyncio.sleep(args.outage / 2)
        health.extend(
            await asyncio.gather(
                *(asyncio.to_thread(http_status, f"{b}/api/health") for b in bases)
            )
        )
        await asyncio.sleep(args.outage / 2)
        marks["t_up"] = await asyncio.to_thread(redis.start, 0.005)
        marks["after_up"] = await burst_503s(bases, code, token, 40)
        await asyncio.sleep(args.back_within)
        marks["clients"] = [
            http_status(f"{b}/api/rooms/{code}", {"X-Drive-Token": token})[1].get("clients")
            for b in bases
        ]

    restarting = None
    start = time.monotonic() + 0.2
    for k in range(steps):
        await asyncio.sleep(max(0.0, start + k / args.rate - time.monotonic()))
        if k == down_at:
            restarting = asyncio.create_task(restart())
        state = {"path": "/tiles", "params": {"n": 256, "bm": 64, "seed": 3}, "step": k}
        sent_at.append(time.monotonic())
        await lecturer.send(json.dumps({"type": "state", "state": state}))
    if restarting is not None:
        await restarting
    await lecturer.send(json.dumps({"type": "state", "state": {"path": "/end"}}))
    done, pending = await asyncio.wait(tasks, timeout=30)
    for t in pending:
        t.cancel()
    reading.cancel()
    await lecturer.close()
    after = [http_status(f"{b}/api/health")[1]["status"] for b in bases]

    t_up, t_down = marks["t_up"], marks["t_down"]
    kinds = [m["type"] for _, m in replies]
    acked = {m["seq"] for _, m in replies if m["type"] == "ack"}
    back_s: list[float | None] = []
    gone_s: list[float | None] = []
    missed: list[int] = []
    missed_seqs: dict[int, int] = {}
    duplicated = reordered = 0
    for log in logs:
        gone = [t for t, m in log if m["type"] == "room-gone"]
        back = [t for t, m in log if m["type"] == "room-back"]
        gone_s.append(round(gone[0] - t_down, 4) if gone else None)
        back_s.append(round(back[0] - t_up, 4) if back else None)
        # Every state this attendee was shown, in arrival order: states and room-back's state.
        seqs = [m["seq"] for _, m in log if m["type"] in ("state", "room-back") and m.get("state")]
        duplicated += len(seqs) - len(set(seqs))
        reordered += sum(1 for a, b in itertools.pairwise(seqs) if b <= a)
        missed.append(len(acked - set(seqs)))
        for q in acked - set(seqs):
            missed_seqs[q] = missed_seqs.get(q, 0) + 1
    latencies = [
        (t - sent_at[m["state"]["step"]]) * 1000
        for log in logs
        for t, m in log
        if m["type"] == "state" and m["state"]["path"] == "/tiles" and t < t_down
    ]
    back_arr = np.array([b for b in back_s if b is not None])
    missing_back = sum(b is None for b in back_s)
    return {
        "room": code,
        "join_all_s": round(join_s, 3),
        "steps_sent": steps,
        "redis_down_after_step": down_at,
        "outage_s": round(t_up - t_down, 3),
        "lecturer": {
            "acks": kinds.count("ack"),
            "refused_unavailable": kinds.count("error"),
            "room_gone": kinds.count("room-gone"),
            "room_back": kinds.count("room-back"),
        },
        "attendees_back": int(back_arr.size),
        "attendees_never_back": missing_back,
        "back_after_redis_s": {
            "p50": round(float(np.percentile(back_arr, 50)), 4) if back_arr.size else None,
            "p95": round(float(np.percentile(back_arr, 95)), 4) if back_arr.size else None,
            "max": round(float(back_arr.max()), 4) if back_arr.size else None,
        },
        "told_gone_after_redis_down_s": {
            "max": max((g for g in gone_s if g is not None), default=None),
            "not_told": sum(g is None for g in gone_s),
        },
        "duplicated": duplicated,
        "reordered": reordered,
        "acked_states_missed": sum(missed),
        "acked_states_missed_max_per_attendee": max(missed, default=0),
        "acked_states_missed_by_seq": {str(q): n for q, n in sorted(missed_seqs.items())},
        "clients_after": marks["clients"][0],
        "clients_after_seen_by_each_process": marks["clients"],
        "health_while_down": [h[1].get("status") for h in health],
        "health_reasons_while_down": [h[1].get("reasons") for h in health],
        "health_after": after,
        "lookups_before_restart": warm,
        "lookups_after_restart": marks["after_up"],
        "latency_ms_before_restart": {
            f"p{q}": round(float(np.percentile(latencies, q)), 3) for q in (50, 95, 99)
        }
        if latencies
        else None,
        "attendee_failures": [repr(t.exception()) for t in done if t.exception()],
        "back_after_redis_s_per_attendee": back_s,
    }


def main_restart(args: argparse.Namespace) -> int:
    redis = RedisProcess()
    env = {
        "FLASHSCOPE_REDIS_URL": redis.url,
        "FLASHSCOPE_ROOM_MAX_CLIENTS": str(args.attendees + 1),
        "FLASHSCOPE_ROOM_MAX_CLIENTS_PER_ADDRESS": str(args.attendees + 1),
    }
    load_before = load_average()
    started = dt.datetime.now(dt.UTC)
    redis.start()
    procs, bases = [], []
    try:
        for _ in range(2):
            port = free_port()
            procs.append(start_server(port, env))
            bases.append(f"http://127.0.0.1:{port}")
        figures = asyncio.run(run_restart(args, bases, redis))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
        redis.stop()
    back = figures["back_after_redis_s"]["max"]
    ok = (
        figures["attendees_never_back"] == 0
        and back is not None
        and back <= args.back_within
        and figures["duplicated"] == figures["reordered"] == 0
        and figures["clients_after"] == args.attendees + 1
        and "503" not in figures["lookups_after_restart"]
        and not figures["attendee_failures"]
    )
    result = {
        "benchmark": "room_load_redis_restart",
        "date": started.isoformat(timespec="seconds"),
        "device": device(),
        "versions": versions()
        | package_versions(("redis",), None)
        | {"redis-server": redis_version(redis.exe)},
        "config": {
            "attendees": args.attendees,
            "processes": 2,
            "rate_per_s": args.rate,
            "seconds": args.seconds,
            "outage_s": args.outage,
            "back_within_s": args.back_within,
            "transport": "WebSocket over loopback; attendees alternate between the two processes",
            "redis": "redis-server without persistence, restarted empty on the same port",
        },
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "passed": ok,
        **figures,
    }
    out = args.out or RESULTS / f"room-load-redis-restart-{started.date().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    lec = figures["lecturer"]
    print(
        f"{args.attendees} attendees on 2 processes, Redis down {figures['outage_s']} s: "
        f"{figures['attendees_back']} back in the room after Redis answered "
        f"(p50 {figures['back_after_redis_s']['p50']} s, max {back} s); "
        f"duplicated {figures['duplicated']}, reordered {figures['reordered']}, "
        f"acked states missed {figures['acked_states_missed']}; lecturer: {lec['acks']} acked, "
        f"{lec['refused_unavailable']} refused while down; health while down "
        f"{figures['health_while_down']}; look-ups after restart {figures['lookups_after_restart']}"
        f"\n{'PASS' if ok else 'FAIL'}; wrote {out}"
    )
    return 0 if ok else 1


def redis_version(exe: str) -> str | None:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("v=")), out.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attendees", type=int, default=200)
    parser.add_argument("--rate", type=float, default=10.0, help="lecturer steps per second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--p95-target-ms", type=float, default=100.0)
    parser.add_argument("--redis-url", default=None, help="run the server with rooms in Redis")
    parser.add_argument(
        "--restart-redis",
        action="store_true",
        help="run a redis-server and two server processes, and restart Redis mid-run",
    )
    parser.add_argument("--outage", type=float, default=3.0, help="seconds Redis stays down")
    parser.add_argument(
        "--back-within", type=float, default=5.0, help="seconds after Redis answers again"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.attendees < 1 or args.rate <= 0 or args.seconds <= 0:
        parser.error("--attendees, --rate and --seconds must be positive")
    if args.restart_redis:
        if args.seconds == parser.get_default("seconds"):
            args.seconds = 30.0
        return main_restart(args)

    env = {
        "FLASHSCOPE_ROOM_MAX_CLIENTS": str(args.attendees + 1),
        "FLASHSCOPE_ROOM_MAX_CLIENTS_PER_ADDRESS": str(args.attendees + 1),
    }
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
