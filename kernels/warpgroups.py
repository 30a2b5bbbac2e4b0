"""The measured timeline of the Hopper forward's warpgroups (GPU only for the run; the decoding
is plain NumPy).

The Gluon forward (kernels/hopper_forward.py) compiled with RECORD stamps the SM's cycle counter
(%clock64) at each phase boundary of its loader and consumer warpgroups, for the first
`detail` programs, their first `steps` ring steps and `tiles` tiles; and every program stamps
the counter and the global timer (%globaltimer, ns) where each of its roles starts and ends.
Without RECORD none of it is compiled (tests/kernels/test_hopper_forward.py checks the PTX).
A recording is launches side by side on two streams: the first `detail` programs in a kernel
that stamps every phase of their first `tiles` tiles and one after it for the rest of their
tiles, the others in one that runs the plain kernel's code with only its roles' start and end
stamped (`Recording.mode` 6), so that no kernel holds two copies of a loop (one that did cost
three ping-pong warpgroups causal 10-13% on an H200).

`timeline_intervals` turns one program's stamps into intervals of the schema the simulator's
FA-3 model also emits: {"role", "warpgroup", "phase", "tile", "block", "start_ns", "end_ns"},
times from the program's first stamp. Per role, which stamp is which (the kernel's docstrings
say where each is taken):

- consumer, pipelined, ring step g of key block j: 0 begin, 1 turn taken (ping-pong), 2 Sⱼ
  issued (Kⱼ landed), 3 V_{j−1} landed, 4 P_{j−1}V_{j−1} issued, 5 Sⱼ done, 6 softmax done,
  7 P V done, 8 rescale done (block 0: 0, 1, 2, 5, 6 only); per tile: 0 before Q is waited
  for, 1 Q landed, 2 the last V landed, 3 its P V issued, 4 done, 5 epilogue begins, 6 O's copy
  issued;
- consumer, not pipelined: 0 begin, 2 Sⱼ issued, 5 Sⱼ done, 6 softmax and rescale done, 3 Vⱼ
  landed, 4 Pⱼ Vⱼ issued, 7 done; per tile as above without 2–4;
- loader: per step 0 before K's slot is free, 1 K's copy issued, 2 V's copy issued; per tile c
  (< consumers): consumer c's Q copy issued.

A copy's interval runs from the loader's issue to the first consumer that saw it land: the copy
engine signals only the barrier, so the landing itself is not stamped.

`record_and_time` (GPU) runs one configuration plain and recorded and times both (the
recording's overhead); `recorded_programs` decodes the stamps of chosen programs. The benchmark
(benchmarks/warpgroups.py) and the live run of /hopper (app/runs/jobs.py) both use them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashscope.kernels.hopper_forward import (
    MAX_SCHEDULED_TILES,
    REC_HEADER,
    REC_STEP_EVENTS,
    REC_TILE_EVENTS,
    SCHEDULE_TILES,
    WsConfig,
    record_size,
    schedule,
    tile_costs,
)

PHASES = ("load_q", "load_k", "load_v", "wait_k", "wait_v", "wait_turn", "qk", "softmax", "pv",
          "epilogue")  # fmt: skip


@dataclass(frozen=True)
class Stamps:
    """The recorded buffer, shaped (programs, consumers + 1, record_size(steps, tiles)), with
    what is needed to read it."""

    raw: np.ndarray
    cfg: WsConfig
    steps: int
    tiles: int

    def role(self, program: int, role: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(step stamps (steps, REC_STEP_EVENTS), tile stamps (tiles, REC_TILE_EVENTS), header:
        counter and global timer at the start, at the end of the launch that stamped the steps,
        and at the program's last end)."""
        region = self.raw[program, role]
        n_step = self.steps * REC_STEP_EVENTS
        n_tile = self.tiles * REC_TILE_EVENTS
        return (
            region[:n_step].reshape(self.steps, REC_STEP_EVENTS),
            region[n_step : n_step + n_tile].reshape(self.tiles, REC_TILE_EVENTS),
            region[n_step + n_tile : n_step + n_tile + REC_HEADER],
        )

    def ns_per_cycle(self, program: int) -> float:
        """The SM's clock over the program's longest-lived role, from the global timer."""
        best = (0, 1.0)
        for r in range(self.cfg.consumers + 1):
            clk0, gt0, clk1, gt1 = self.role(program, r)[2][:4]
            if min(clk0, gt0, clk1, gt1) >= 0 and clk1 - clk0 > best[0]:
                best = (int(clk1 - clk0), (gt1 - gt0) / (clk1 - clk0))
        if best[0] == 0:
            raise ValueError(f"program {program} left no start and end stamps")
        return best[1]

    def span_ns(self) -> float:
        """The launch's span by the global timer: the first role's start to the last one's
        last end (every recorded program, its rest's launch included)."""
        head = self.raw[:, :, -REC_HEADER:]
        starts, ends = head[..., 1], head[..., 5]
        if (starts < 0).any() or (ends < 0).any():
            raise ValueError("some recorded roles left no start or end stamp")
        return float(ends.max() - starts.min())


def program_tiles(
    cfg: WsConfig, rows: int, n_q: int, n_k: int, causal: bool, sms: int, program: int
) -> list[int]:
    """Key blocks (ring steps) of each tile `program` computes, in its order: the kernel's
    `_share` and `_tile` on the host."""
    steps = (tile_costs(cfg, rows, n_q, n_k, False) - 1).astype(int)
    if not causal:
        steps[:] = max(-(-n_k // cfg.block_n), 1)
    tiles = cfg.tiles(rows, n_q)
    programs = cfg.programs(tiles, sms)
    if causal and cfg.persistent and SCHEDULE_TILES and tiles <= MAX_SCHEDULED_TILES:
        halves = causal and not cfg.pipeline and cfg.tile_m % cfg.block_n != 0
        sched = schedule(tile_costs(cfg, rows, n_q, n_k, halves), programs)
        order = sched[programs + 1 + sched[program] : programs + 1 + sched[program + 1]]
    else:
        order = np.arange(program, tiles, programs)
    return [int(steps[t]) for t in order]


def timeline_intervals(stamps: Stamps, tile_steps: list[int], program: int = 0) -> list[dict]:
    """Intervals of one program (see the module docstring), in ns from its first stamp, for its
    tiles whose every step was recorded."""
    cfg = stamps.cfg
    scale = stamps.ns_per_cycle(program)
    loader_steps, loader_tiles, _ = stamps.role(program, cfg.consumers)
    roles = [stamps.role(program, c) for c in range(cfg.consumers)]
    starts = [stamps.role(program, r)[2][0] for r in range(cfg.consumers + 1)]
    origin = min(int(x) for x in starts if x >= 0)
    out: list[dict] = []

    def add(role: str, wg: int, phase: str, tile: int, block: int, a: int, b: int) -> None:
        if a >= 0 and b >= 0:
            out.append({"role": role, "warpgroup": wg, "phase": phase, "tile": tile,
                        "block": block, "start_ns": (int(a) - origin) * scale,
                        "end_ns": (max(int(a), int(b)) - origin) * scale})  # fmt: skip

    g0 = 0
    for i, n in enumerate(tile_steps):
        if i >= stamps.tiles or g0 + n > stamps.steps:
            break
        seen_k = [min(r[0][g0 + j, 2] for r in roles) for j in range(n)]
        if cfg.pipeline:
            v_seen = [min(r[0][g0 + j + 1, 3] for r in roles) for j in range(n - 1)]
            v_seen.append(min(r[1][i, 2] for r in roles))
        else:
            v_seen = [min(r[0][g0 + j, 3] for r in roles) for j in range(n)]
        for c, (steps, tiles, _) in enumerate(roles):
            add("loader", -1, "load_q", i, -1, loader_tiles[i, c], tiles[i, 1])
            for j in range(n):
                e = steps[g0 + j]
                if cfg.pipeline:
                    if cfg.pingpong:
                        add("consumer", c, "wait_turn", i, j, e[0], e[1])
                    add("consumer", c, "wait_k", i, j, e[1], e[2])
                    add("consumer", c, "qk", i, j, e[2], e[5])
                    add("consumer", c, "softmax", i, j, e[5], e[6])
                    if j > 0:
                        add("consumer", c, "wait_v", i, j - 1, e[2], e[3])
                        add("consumer", c, "pv", i, j - 1, e[3], e[7])
                        add("consumer", c, "softmax", i, j, e[7], e[8])
                else:
                    add("consumer", c, "wait_k", i, j, e[0], e[2])
                    add("consumer", c, "qk", i, j, e[2], e[5])
                    add("consumer", c, "softmax", i, j, e[5], e[6])
                    add("consumer", c, "wait_v", i, j, e[6], e[3])
                    add("consumer", c, "pv", i, j, e[3], e[7])
            if cfg.pipeline:
                last = steps[g0 + n - 1]
                add("consumer", c, "wait_v", i, n - 1, last[8] if n > 1 else last[6], tiles[i, 2])
                add("consumer", c, "pv", i, n - 1, tiles[i, 2], tiles[i, 4])
            add("consumer", c, "epilogue", i, -1, tiles[i, 5], tiles[i, 6])
        for j in range(n):
            e = loader_steps[g0 + j]
            add("loader", -1, "load_k", i, j, e[1], seen_k[j])
            add("loader", -1, "load_v", i, j, e[2], v_seen[j])
        g0 += n
    return sorted(out, key=lambda x: (x["role"] != "loader", x["warpgroup"], x["start_ns"]))


def busy_fractions(intervals: list[dict]) -> dict[str, float]:
    """Share of the span during which at least one warpgroup had a product in flight ("tensor")
    or was in its softmax ("softmax"), and the loader a copy ("copy")."""
    if not intervals:
        return {"tensor": 0.0, "softmax": 0.0, "copy": 0.0}
    end = max(x["end_ns"] for x in intervals)
    start = min(x["start_ns"] for x in intervals)
    span = max(end - start, 1e-9)

    def union(phases: tuple[str, ...]) -> float:
        spans = sorted((x["start_ns"], x["end_ns"]) for x in intervals if x["phase"] in phases)
        total, cur_a, cur_b = 0.0, None, None
        for a, b in spans:
            if cur_b is None or a > cur_b:
                total += 0.0 if cur_b is None else cur_b - cur_a
                cur_a, cur_b = a, b
            else:
                cur_b = max(cur_b, b)
        return (total + (0.0 if cur_b is None else cur_b - cur_a)) / span

    return {"tensor": union(("qk", "pv")), "softmax": union(("softmax",)),
            "copy": union(("load_q", "load_k", "load_v"))}  # fmt: skip


def new_recording(q, cfg: WsConfig, *, detail: int = 2, steps: int = 64, tiles: int = 4):
    """A buffer for a recorded launch of `cfg` over q's rows, every stamp -1: the first `detail`
    programs stamp their first `steps` ring steps and `tiles` tiles, every program its roles'
    start and end (`Stamps.span_ns`)."""
    import torch

    from flashscope.kernels.hopper_forward import Recording, _sms

    if not q.is_cuda:
        raise ValueError("a warpgroup timeline needs a CUDA GPU: the interpreter has no clock")
    tiles_all = cfg.tiles(q.shape[0] * q.shape[1], q.shape[2])
    programs = cfg.programs(tiles_all, _sms(q.device.index or 0))
    shape = (programs, cfg.consumers + 1, record_size(steps, tiles))
    buf = torch.full(shape, -1, dtype=torch.int64, device=q.device)
    return Recording(buf, programs, steps, tiles, min(detail, programs))


def stamps_of(rec, cfg: WsConfig) -> Stamps:
    """What a recorded launch left in `rec` (waits for the GPU)."""
    return Stamps(rec.buffer.cpu().numpy(), cfg, rec.steps, rec.tiles)


def warpgroup_timeline(q, k, v, causal: bool, cfg: WsConfig, *, detail: int = 2,
                       steps: int = 64, tiles: int = 4, warmup: int = 3) -> Stamps:  # fmt: skip
    """Run the recorded Gluon forward `warmup` times, then once more, and return its stamps
    (`new_recording` says which). GPU only."""
    from flashscope.kernels.hopper_forward import launch_forward_ws

    rec = new_recording(q, cfg, detail=detail, steps=steps, tiles=tiles)
    for _ in range(warmup + 1):
        rec.buffer.fill_(-1)
        launch_forward_ws(q, k, v, causal, q.shape[3] ** -0.5, cfg, record=rec)
    return stamps_of(rec, cfg)


def recorded_programs(
    stamps: Stamps, rows: int, n_q: int, n_k: int, causal: bool, sms: int,
    programs: tuple[int, ...] = (0, 1),
) -> list[dict]:  # fmt: skip
    """Of each of `programs` (recorded in detail): its tiles' key blocks, its clock against the
    global timer, its intervals (`timeline_intervals`) and busy fractions."""
    out = []
    for p in programs:
        tiles = program_tiles(stamps.cfg, rows, n_q, n_k, causal, sms, p)
        iv = timeline_intervals(stamps, tiles, p)
        out.append({"program": p, "tile_steps": tiles[: stamps.tiles],
                    "ns_per_cycle": stamps.ns_per_cycle(p), "intervals": iv,
                    "busy": busy_fractions(iv)})  # fmt: skip
    return out


def record_and_time(
    q, k, v, causal: bool, cfg: WsConfig, *, detail: int = 2, steps: int = 96, tiles: int = 4,
    masked: bool = True, progress=None, rounds: int = 3, mode: int | None = None,
) -> tuple[Stamps, dict]:  # fmt: skip
    """Run `cfg` plain and recorded (GPU only): (the stamps of the last recorded run, figures).

    The figures: whether the recorded output equals the plain one bit for bit (`same_output`),
    the plain kernel's time (`plain_ms`) and the recorded one's (`recorded_branch_ms`, a name
    from when each stamp stood behind a branch; `overhead` = their ratio less one), in the
    recording's RECORD `mode` (`Recording.mode`, the figures' `mode`), the launch's span by the
    global timer (`span_ms`, `span_vs_plain`), the plain call as a user times it
    (`plain_ungated_ms`), with `masked` also each stamp as a masked store in one launch
    (`recorded_ms`, `overhead_masked`, against `plain_ungated_ms`), and the first recorded
    run's wall time, its compilation included (`first_run_s`). A recording in launches side by
    side (the default) waits behind a gate on the GPU (`hopper_forward.GATE_CYCLES`), timed
    alone each round (`gate_ms`) and taken off the recorded time; its plain time is taken
    behind the same gate (`plain_gated_passes`), under which launches ran 0-10% faster on an
    H200.
    The timings alternate, plain then recorded, `rounds` times: the
    plain time of one launch moved by 14% between two runs of benchmarks/warpgroups.py on an
    H200 (two pipelined warpgroups at d = 128, 0.807 and 0.920 ms; recording-cost-*.json),
    more than most recordings cost, and one plain timing followed by one recorded one reads
    such drift as the recording's cost. Each figure is the median of its rounds (do_bench
    medians; a span per recorded round, of its last run), every round kept under `…_passes`.
    `progress(message)` hears each stage."""
    import dataclasses
    import statistics
    import time
    from functools import partial

    import torch

    from flashscope.kernels.hopper_forward import (
        SPLIT_RECORDING,
        gate_ms,
        gated,
        launch_forward_ws,
    )
    from flashscope.kernels.timing import median_ms

    if rounds < 1:
        raise ValueError(f"rounds must be 1 or more, got {rounds!r}")
    say = progress or (lambda _: None)
    scale = q.shape[3] ** -0.5
    say("compiling and running the plain kernel")
    plain = launch_forward_ws(q, k, v, causal, scale, cfg)
    branch = new_recording(q, cfg, detail=detail, steps=steps, tiles=tiles)
    if mode is not None:
        branch = dataclasses.replace(branch, mode=mode)
    say("compiling and running the recorded kernel")
    t0 = time.perf_counter()
    recorded = launch_forward_ws(q, k, v, causal, scale, cfg, record=branch)
    torch.cuda.synchronize()
    first_run_s = time.perf_counter() - t0
    same = all(torch.equal(a, b) for a, b in zip(plain, recorded, strict=True))
    call = partial(launch_forward_ws, q, k, v, causal, scale, cfg)
    split = branch.mode == SPLIT_RECORDING
    passes: dict[str, list[float]] = {k: [] for k in ("plain", "branch", "span", "masked", "gate",
                                                       "plain_gated", "branch_raw")}  # fmt: skip
    stores = dataclasses.replace(branch, mode=1)  # the same buffer, stamps as masked stores
    for r in range(rounds):
        say(f"timing the plain and the recorded kernel, round {r + 1} of {rounds} (do_bench)")
        passes["plain"].append(median_ms([call]))
        if split:  # behind the gate the recording's launches wait for, taken off
            passes["gate"].append(gate := gate_ms())
            passes["plain_gated"].append(median_ms([partial(gated, call)]) - gate)
        if masked:
            passes["masked"].append(median_ms([partial(call, record=stores)]))
        passes["branch_raw"].append(median_ms([partial(call, record=branch)]))
        passes["branch"].append(passes["branch_raw"][-1] - (gate if split else 0.0))
        stamps = stamps_of(branch, cfg)  # of this round's last run
        passes["span"].append(stamps.span_ns() * 1e-6)
    med = {k: statistics.median(v) for k, v in passes.items() if v}
    plain_ms = med["plain_gated" if split else "plain"]  # under the recording's conditions
    figures: dict = {"same_output": same, "plain_ms": plain_ms, "plain_ungated_ms": med["plain"],
                     "recorded_branch_ms": med["branch"], "gate_ms": med.get("gate", 0.0),
                     "overhead": med["branch"] / plain_ms - 1, "mode": branch.mode}  # fmt: skip
    if masked:
        figures["recorded_ms"] = med["masked"]
        figures["overhead_masked"] = med["masked"] / med["plain"] - 1
    figures.update(span_ms=med["span"], span_vs_plain=med["span"] / plain_ms - 1,
                   first_run_s=first_run_s)  # fmt: skip
    figures.update({f"{k}_passes": v for k, v in passes.items() if v})
    return stamps, figures
