"""Chaos benchmark: a classroom server while hostile clients hammer its most costly requests.

Starts `flashscope serve` (CPU default settings) on a loopback port, then for --seconds:

- 200 room followers (--followers) receive a lecturer's steps at 10 per second;
- a probe calls GET /api/health ten times a second;
- 20 clients per kind (--clients), each with its own identity cookie and its own loopback address
  (127.0.k.c), send back-to-back the most
  costly requests the limits allow, fresh seeds and sizes so no cache answers for them:
  `trace` (the backward at N = 1024, d = 256, 32×16 tiles, late steps), `trace_hostile` (the
  exact request that once cost 3.3 s even when refused), `decode` (16 queries of a group of 16
  over a 16,384-token cache, d = 256, near the multiply-add limit),
  `ws_steps` (a /ws/trace stream stepping as fast as the socket is let), `schedule` and
  `chrome` (GET /api/schedule and its Chrome export at the most CTAs allowed), `simulate`
  (POST /api/simulate, same size) and `runs` (POST /api/runs, the request that grew to 8.6 GB,
  and small valid runs with new seeds).

Then every hostile client leaves at once (its connections closed mid-request) while the room
goes on, and the script watches the server's process tree (the server, its compute workers and
run workers) until its CPU use falls back to what the room alone costs.

Figures written to benchmarks/results/chaos-<date>.json: health latency (p50/p95/max), followers'
delivery latency and lost/duplicated/reordered steps, the answers each kind got (status counts
and latency), the process tree's peak resident memory, and how long after the clients left the
tree's CPU use stayed above a quiet threshold. Targets: health p95 ≤ 100 ms, followers' p95 ≤
100 ms with nothing lost, memory ≤ 2 GiB, work stopped within 1 s of the clients leaving.

    .venv/bin/python benchmarks/chaos.py                       # 30 s, 20 clients per kind
    .venv/bin/python benchmarks/chaos.py --seconds 10 --clients 5 --followers 50

Exit status 0 when every target is met.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import multiprocessing as mp
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import room_load as rl  # the module beside this script: server, rooms, attendees
from websockets.asyncio.client import connect

TARGETS = {"health_p95_ms": 100.0, "follower_p95_ms": 100.0, "memory_mib": 2048.0, "stop_s": 1.0}
QUIET_CORES = 0.25  # CPU use of the whole tree (in cores) that counts as "work stopped"

# The largest schedule the limits allow: 16·64·ceil(N/16) CTAs ≤ FLASHSCOPE_SIMULATE_MAX_CTAS.
SCHEDULE = {"batch": 16, "heads": 64, "head_dim": 256, "block_m": 16, "block_n": 16}
HOSTILE_TRACE = "algo=fa2-bwd&n=1024&d=256&bm=2&bn=256&seed=1&start=5000&count=256"
HOSTILE_RUN = {
    "mode": "bwd",
    "what": "trace",
    "batch": 64,
    "heads": 128,
    "seq": 256,
    "head_dim": 256,
    "block_m": 16,
    "block_n": 16,
    "dtype": "fp32",
}


def tree(pid: int) -> list[int]:
    """`pid` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def tree_usage(pid: int) -> tuple[float, float]:
    """(resident MiB, CPU seconds) of the process tree under `pid` (processes that end between
    the listing and the reading are skipped)."""
    rss = cpu = 0.0
    for p in tree(pid):
        try:
            rss += rl.rss_mib(p)
            cpu += rl.cpu_seconds(p)
        except (OSError, RuntimeError, ValueError):
            continue
    return rss, cpu


def per_process(pid: int) -> dict[int, tuple[str, float]]:
    """pid → (its role, CPU seconds) over the tree under `pid`."""
    out = {}
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            out[p] = (role(cmd, p == pid), rl.cpu_seconds(p))
        except (OSError, ValueError):
            continue
    return out


def role(cmd: str, top: bool) -> str:
    """What a process of the server's tree is, from its command line."""
    if top:
        return "server"
    if "multiprocessing" in cmd or "spawn_main" in cmd:
        return "worker process"
    return cmd[:60]


def pct(xs: list[float]) -> dict[str, float | int | None]:
    if not xs:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    a = np.array(xs)
    return {
        "n": len(xs),
        "p50": round(float(np.percentile(a, 50)), 2),
        "p95": round(float(np.percentile(a, 95)), 2),
        "max": round(float(a.max()), 2),
    }


class Tally:
    """Answers one kind of hostile request got: status counts and latencies (ms)."""

    def __init__(self) -> None:
        self.codes: Counter[str] = Counter()
        self.ms: list[float] = []

    def add(self, code: int | str, t0: float) -> None:
        self.codes[str(code)] += 1
        self.ms.append((time.monotonic() - t0) * 1000)

    def summary(self) -> dict:
        return {"answers": dict(self.codes), "latency_ms": pct(self.ms)}


def http_attack(kind: str, rng: random.Random) -> tuple[str, str, dict | None]:
    """(method, path, body) of one costly request of `kind`, fresh each time."""
    seed = rng.randrange(2**31)
    if kind == "trace":
        start = rng.randrange(4000, 14000)
        q = f"algo=fa2-bwd&n=1024&d=256&bm=32&bn=16&seed={seed}&start={start}&count=128"
        return "GET", f"/api/trace?{q}", None
    if kind == "trace_hostile":
        return "GET", f"/api/trace?{HOSTILE_TRACE}", None
    if kind == "decode":
        q = f"algo=decode&n=16&group=16&nk=16384&d=256&bm=256&bn=16&seed={seed}&count=64"
        return "GET", f"/api/trace?{q}", None
    seq = 8192 - rng.randrange(16)  # a new problem each time: nothing cached answers it
    problem = {**SCHEDULE, "seq": seq, "causal": bool(seed % 2)}
    if kind == "schedule":
        return "GET", "/api/schedule?" + "&".join(f"{k}={v}" for k, v in problem.items()), None
    if kind == "chrome":
        return (
            "GET",
            "/api/schedule/chrome?" + "&".join(f"{k}={v}" for k, v in problem.items()),
            None,
        )
    if kind == "simulate":
        return "POST", "/api/simulate", problem
    if kind == "runs":
        if seed % 2:
            return "POST", "/api/runs", HOSTILE_RUN
        body = {"mode": "fwd", "what": "trace", "seq": 64, "block_m": 16, "block_n": 16}
        return "POST", "/api/runs", {**body, "seed": seed}
    raise ValueError(kind)


HTTP_KINDS = ("trace", "trace_hostile", "decode", "schedule", "chrome", "simulate", "runs")


async def http_client(base: str, kind: str, tally: Tally, rng: random.Random, source: str) -> None:
    jar = {"Cookie": await asyncio.to_thread(rl.cookie, base)}
    transport = httpx.AsyncHTTPTransport(local_address=source)
    async with httpx.AsyncClient(
        base_url=base, headers=jar, timeout=120, transport=transport
    ) as client:
        while True:
            method, path, body = http_attack(kind, rng)
            t0 = time.monotonic()
            try:
                r = await client.request(method, path, json=body)
                tally.add(r.status_code, t0)
                if r.status_code == 429:  # a well-behaved client would wait; a hostile one not
                    await asyncio.sleep(0.05)
            except httpx.HTTPError as exc:
                tally.add(type(exc).__name__, t0)


async def ws_stepper(base: str, tally: Tally, rng: random.Random, source: str) -> None:
    """Open the costly backward trace on /ws/trace and step through it as fast as allowed."""
    url = base.replace("http", "ws", 1) + "/ws/trace"
    headers = {"Cookie": await asyncio.to_thread(rl.cookie, base), "Origin": base}
    where = {"local_addr": (source, 0)}
    async with connect(url, max_queue=None, additional_headers=headers, **where) as ws:
        params = {"algo": "fa2-bwd", "n": 1024, "d": 256, "bm": 32, "bn": 16}
        await ws.send(json.dumps({"type": "open", "params": {**params, "seed": rng.randrange(9)}}))
        meta = json.loads(await ws.recv())
        if meta.get("type") != "meta":
            tally.add("open refused", time.monotonic())
            return
        n = int(meta["meta"]["n_events"])
        while True:
            t0 = time.monotonic()
            await ws.send(json.dumps({"type": "step", "step": rng.randrange(n)}))
            reply = json.loads(await ws.recv())
            tally.add(reply.get("type", "?"), t0)


async def hostile(base: str, clients: int, seed: int, leave_at: float) -> tuple[dict, float]:
    """Every hostile client until `leave_at` (monotonic), then all leave at once, mid-request:
    (what each kind got, when they left)."""
    rng = random.Random(seed)
    tallies = {k: Tally() for k in (*HTTP_KINDS, "ws_steps")}
    # Each hostile client from an address of its own (127.0.k.c: loopback takes any), as a
    # room of laptops would be; the followers share 127.0.0.1 (the seat limits are raised).
    tasks = [
        asyncio.create_task(
            http_client(
                base, kind, tallies[kind], random.Random(rng.random()), f"127.0.{k + 1}.{c + 2}"
            )
        )
        for k, kind in enumerate(HTTP_KINDS)
        for c in range(clients)
    ]
    tasks += [
        asyncio.create_task(
            ws_stepper(base, tallies["ws_steps"], random.Random(rng.random()), f"127.0.99.{c + 2}")
        )
        for c in range(clients)
    ]
    await asyncio.sleep(max(0.0, leave_at - time.monotonic()))
    left = time.monotonic()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {k: t.summary() for k, t in tallies.items()}, left


def hostile_main(base: str, clients: int, seed: int, leave_at: float, sink: Any) -> None:
    """The hostile process: its figures and when it left go back through `sink`."""
    sink.send(asyncio.run(hostile(base, clients, seed, leave_at)))


async def prober(base: str, log: list[float], stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        while not stop.is_set():
            t0 = time.monotonic()
            await client.get("/api/health")
            log.append((time.monotonic() - t0) * 1000)
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))


async def sampler(pid: int, log: list[tuple[float, float, float]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        rss, cpu = await asyncio.to_thread(tree_usage, pid)
        log.append((time.monotonic(), rss, cpu))
        await asyncio.sleep(0.1)


def stop_time(samples: list[tuple[float, float, float]], left: float) -> float | None:
    """Seconds after `left` until the tree's CPU use, over 0.5 s windows, falls to the quiet
    threshold for good (None: it never did)."""
    busy_until = left
    for k, (t, _, cpu) in enumerate(samples):
        earlier = [s for s in samples[:k] if t - 0.5 <= s[0]]
        if t < left or not earlier:
            continue
        cores = (cpu - earlier[0][2]) / (t - earlier[0][0])
        if cores > QUIET_CORES:
            busy_until = t - 0.5  # the window began while work still ran
    if busy_until > samples[-1][0] - 1.0:
        return None
    return round(max(0.0, busy_until - left), 3)


async def run(args: argparse.Namespace, base: str, pid: int) -> dict:
    room = rl.create_room(base)
    url = base.replace("http", "ws") + f"/ws/rooms/{room['code']}"
    received: list[list] = [[] for _ in range(args.followers)]
    ready: list[int] = []
    joined = asyncio.Event()
    followers = [
        asyncio.create_task(rl.attendee(url, joined, received[i], ready))
        for i in range(args.followers)
    ]
    deadline = time.monotonic() + 90
    while len(ready) < args.followers:
        if time.monotonic() > deadline or any(t.done() for t in followers):
            raise RuntimeError(f"{len(ready)} of {args.followers} followers joined")
        await asyncio.sleep(0.05)

    stop = asyncio.Event()
    health: list[float] = []
    samples: list[tuple[float, float, float]] = []
    watchers = [asyncio.create_task(prober(base, health, stop))]
    watchers.append(asyncio.create_task(sampler(pid, samples, stop)))
    # The hostile clients run in a process of their own, so that their flood does not delay
    # this one's followers, probe and lecturer (whose latencies are the figures).
    ctx = mp.get_context("spawn")
    results, sink = ctx.Pipe(duplex=False)
    horde = ctx.Process(
        target=hostile_main,
        args=(base, args.clients, args.seed, time.monotonic() + 0.2 + args.seconds, sink),
    )
    horde.start()
    sink.close()

    steps = int(10 * (args.seconds + args.after))
    sent_at = np.zeros(steps)
    left = None
    before: dict[int, tuple[str, float]] = {}
    after: dict[int, tuple[str, float]] | None = None
    async with connect(url, max_queue=None, ping_interval=None) as lecturer:
        await lecturer.send(json.dumps({"type": "join", "token": room["drive_token"]}))
        assert json.loads(await lecturer.recv())["role"] == "driver"
        drain = asyncio.create_task(lecturer.wait_closed())
        start = time.monotonic() + 0.2
        for k in range(steps):
            await asyncio.sleep(max(0.0, start + k / 10 - time.monotonic()))
            if left is None and time.monotonic() >= start + args.seconds:
                left = time.monotonic()  # the hostile process leaves now (same clock)
                before = per_process(pid)
            if left is not None and after is None and time.monotonic() >= left + 3.0:
                after = per_process(pid)
            params = {"n": 256, "bm": 64, "seed": 3, **({"last": True} if k == steps - 1 else {})}
            sent_at[k] = time.monotonic()
            state = {"path": "/tiles", "params": params, "step": k}
            await lecturer.send(json.dumps({"type": "state", "state": state}))
        await asyncio.wait(followers, timeout=15)
        drain.cancel()
    stop.set()
    await asyncio.gather(*watchers, return_exceptions=True)
    summaries, left = await asyncio.to_thread(results.recv)  # when it really left
    horde.join(timeout=30)

    lost, duplicated, reordered, delays = rl.delivery(received, steps, sent_at)
    latencies = [d * 1000 for d in delays]
    peak = max(s[1] for s in samples)
    stopped = stop_time(samples, left) if left is not None else None
    room_cores = None
    tail = [s for s in samples if left is not None and s[0] >= left + 2.0]
    if len(tail) > 1:
        room_cores = round((tail[-1][2] - tail[0][2]) / (tail[-1][0] - tail[0][0]), 3)
    figures = {
        "health_ms": pct(health),
        "followers": {
            "count": args.followers,
            "steps_sent": steps,
            "lost": lost,
            "duplicated": duplicated,
            "reordered": reordered,
            "latency_ms": pct(latencies),
        },
        "hostile": summaries,
        "memory_peak_mib": round(peak, 1),
        "stopped_after_leaving_s": stopped,
        "cores_after_leaving": room_cores,
        "cpu_s_in_3_s_after_leaving": [
            {"pid": p, "role": r, "cpu_s": round(c - before.get(p, (r, 0.0))[1], 3)}
            for p, (r, c) in sorted((after or {}).items())
        ],
    }
    figures["met"] = {
        "health_p95": figures["health_ms"]["p95"] is not None
        and figures["health_ms"]["p95"] <= TARGETS["health_p95_ms"],
        "followers_p95": figures["followers"]["latency_ms"]["p95"] is not None
        and figures["followers"]["latency_ms"]["p95"] <= TARGETS["follower_p95_ms"],
        "nothing_lost": lost == duplicated == reordered == 0,
        "memory": peak <= TARGETS["memory_mib"],
        "stopped": stopped is not None and stopped <= TARGETS["stop_s"],
    }
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="how long the clients hammer")
    ap.add_argument("--after", type=float, default=6.0, help="room time after they leave")
    ap.add_argument("--clients", type=int, default=20, help="hostile clients per kind")
    ap.add_argument("--followers", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    port = rl.free_port()
    base = f"http://127.0.0.1:{port}"
    seats = str(args.followers + 1)  # the followers share one loopback address
    env = {"FLASHSCOPE_ROOM_MAX_CLIENTS": seats, "FLASHSCOPE_ROOM_MAX_CLIENTS_PER_ADDRESS": seats}
    server = rl.start_server(port, env)
    try:
        figures = asyncio.run(run(args, base, server.pid))
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    now = dt.datetime.now(dt.UTC)
    doc = {
        "benchmark": "chaos",
        "what": __doc__.split("\n\n")[0],
        "date": now.isoformat(timespec="seconds"),
        "device": rl.device(),
        "versions": rl.versions(),
        "arguments": vars(args) | {"out": str(args.out) if args.out else None},
        "targets": TARGETS,
        "quiet_cores": QUIET_CORES,
        "server_settings": env,
        **figures,
    }
    out = args.out or rl.RESULTS / f"chaos-{now.date()}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("health_ms", "memory_peak_mib", "met")}, indent=1))
    print(f"followers {doc['followers']}")
    print(f"stopped after leaving: {doc['stopped_after_leaving_s']} s; wrote {out}")
    return 0 if all(doc["met"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
