"""The FA-3 model's one SM in discrete time: a loader and its consumer warpgroups per CTA.

The SM has four shared units. The tensor cores run the products of all warpgroups one at a time
in the order they were issued (a wgmma is a few instructions issued at once, each long on the
tensor cores, so the pipes see them in issue order): products issued together share the rate,
the first issued finishing first, and a warpgroup's issue returns only once its product has
the tensor cores (`Costs.blocking_issue`). The copies in flight, the SFU and the FP32 units serve
their jobs by processor sharing (k jobs at once each run at 1/k of the unit's rate); while any
product runs, the SFU and FP32 units lose `Costs.mma_drag` of their rate:

    tensor  the warpgroup products (wgmma)
    sfu     the exponentials (exp2 on the special-function unit)
    alu     the softmax's FP32 work (max, scale, sum, conversion, rescale, epilogue)
    copy    the copy engine's share of the L2 → SM bandwidth (TMA loads, O's store)

Agents are generators (`_loader`, `_consumer`) that yield what they do next: wait for a
barrier count, use a unit (blocking), issue work to a unit (asynchronous, returns a job), wait
for a job, or pause for a latency of its own (`sleep`). The barriers are the kernel's
(kernels/hopper_forward.py): Q ready and freed per consumer, K and V ready and freed per ring
step (a step's slot is refilled once every consumer has freed the step `stages` earlier), and
the ping-pong turn per consumer; each wait of a consumer lasts at least `Costs.barrier_ns`. Each
agent records its phases as intervals of the schema in `simulator/timing/fa3.py` (`PHASES`), at
the kernel's stamps: an S from its issue's return, a copy until a consumer sees it land.
Pipelined, a step waits for S and then for its own P·V before all but `Costs.under_pv` of its
softmax, as the compiled kernel does (`Fa3Config.softmax_under_pv`).

Work is in nanoseconds at a unit's full rate; `Costs` holds it per block (`fa3.costs`). A tile
is its key blocks, or (blocks, masked, half): its last `masked` steps carry the mask's FP32
work, and with `half` its last step computes half a block (the copies stay whole).
Pure Python over the events of one SM (a few per block and warpgroup), bounded by the caller:
the grid's time is extrapolated from short runs (`fa3.simulate_fa3`). One module past 400
lines: the event loop and the agents share the SM's state and are read together.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

UNITS = ("tensor", "sfu", "alu", "copy")
Tile = tuple[int, int, int]  # key blocks, masked last steps, whether the last step is half


@dataclass(frozen=True)
class Costs:
    """Work of one warpgroup (64 query rows) per key block, in ns at a unit's full rate."""

    qk: float  # S = Q Kᵀ on the tensor cores
    pv: float  # O += P V on the tensor cores
    exp: float  # the block's exp2 (P and α) on the SFU
    alu: float  # the block's other softmax work and the rescale of O
    epilogue: float  # O / ℓ, LSE (alu)
    q_bytes: float  # one warpgroup's Q rows
    kv_bytes: float  # one key block of K (as much again for V)
    o_bytes: float  # one warpgroup's O rows
    copy_rate: float  # bytes per ns the SM's copy engine moves
    mma_latency: float  # ns from a product's last work to its completion being seen
    copy_latency: float  # ns from a copy's last byte to its barrier
    q_latency: float  # ns, the same for Q (a first touch, from DRAM)
    rescale: float = 0.0  # O's rescale by α (alu): after P_{j−1}V_{j−1} is done when pipelined
    mask_alu: float = 0.0  # a masked step's extra FP32 work (column indices, compare, select)
    softmax_ns: float = 0.0  # a softmax's own latency (its row reductions), on no shared unit
    blocking_issue: bool = False  # a product's issue returns when it reaches the tensor cores
    barrier_ns: float = 0.0  # a consumer's wait on an mbarrier, however early the arrival
    mma_drag: float = 0.0  # share of the FP32 and SFU rate lost while products run on the SM
    under_pv: float = 1.0  # pipelined: share of a softmax run before its own P·V is waited for


@dataclass
class _Job:
    work: float
    unit: str
    owner: Any
    latency: float
    done: bool = False
    waiters: list[Any] = field(default_factory=list)
    starters: list[Any] = field(default_factory=list)  # resumed when the job reaches its unit


@dataclass
class _Barrier:
    count: int = 0
    waiters: list[tuple[int, Any]] = field(default_factory=list)


class SM:
    """One SM running `ctas` programs, each a list of tiles (key blocks per tile)."""

    def __init__(
        self,
        costs: Costs,
        consumers: int,
        stages: int,
        pipeline: bool,
        pingpong: bool,
        programs: Sequence[Sequence[int | Tile]],
        record: int | None = 0,
        max_intervals: int = 100_000,
    ) -> None:
        self.c = costs
        self.consumers, self.stages = consumers, stages
        self.pipeline, self.pingpong = pipeline, pingpong
        self.t = 0.0
        self.queues: dict[str, dict[Any, list[_Job]]] = {u: {} for u in UNITS}
        self.busy = dict.fromkeys(UNITS, 0.0)  # ns each unit had work
        self.timers: list[tuple[float, int, Any]] = []
        self.seq = 0
        # agents ready to go on, in the order they became ready
        self.ready: deque[tuple[Generator[Any, Any, None], Any]] = deque()
        self.barriers: dict[tuple[Any, ...], _Barrier] = {}
        self.record, self.max_intervals = record, max_intervals
        self.intervals: list[dict[str, Any]] = []
        self.landed: dict[tuple[Any, ...], tuple[str, int, int, float]] = {}
        self.truncated = False
        self.ends: list[float] = [0.0] * len(programs)
        for p, spec in enumerate(programs):
            tiles: list[Tile] = [(t, 0, 0) if isinstance(t, int) else t for t in spec]
            self.ready.append((self._loader(p, tiles), None))
            for w in range(consumers):
                self.ready.append((self._consumer(p, w, tiles), None))

    # --- the event loop -------------------------------------------------------------------
    def _bar(self, *key: Any) -> _Barrier:
        b = self.barriers.get(key)
        if b is None:
            b = self.barriers[key] = _Barrier()
        return b

    def _arrive(self, key: tuple[Any, ...], n: int = 1) -> None:
        b = self._bar(*key)
        b.count += n
        keep = []
        for need, agent in b.waiters:
            (self.ready.append((agent, None)) if b.count >= need else keep.append((need, agent)))
        b.waiters = keep

    def _step(self, agent: Generator[Any, Any, None], value: Any) -> None:
        try:
            cmd = agent.send(value)
        except StopIteration:
            return
        kind = cmd[0]
        if kind == "wait":  # ("wait", key, count)
            b = self._bar(*cmd[1])
            if b.count >= cmd[2]:
                self.ready.append((agent, None))
            else:
                b.waiters.append((cmd[2], agent))
        elif kind in ("use", "issue"):  # (kind, unit, work, owner, latency)
            job = _Job(cmd[2], cmd[1], cmd[3], cmd[4])
            queue = self.queues[cmd[1]].setdefault(cmd[3], [])
            queue.append(job)
            if kind == "use":
                job.waiters.append(agent)
            elif cmd[1] == "tensor" and self.c.blocking_issue and len(queue) > 1:
                job.starters.append((agent, job))
            else:
                self.ready.append((agent, job))
        elif kind == "sleep":  # ("sleep", ns)
            heapq.heappush(self.timers, (self.t + cmd[1], self.seq, agent))
            self.seq += 1
        elif kind == "join":  # ("join", job)
            job = cmd[1]
            if job.done:
                self.ready.append((agent, None))
            else:
                job.waiters.append(agent)
        else:
            raise ValueError(f"unknown command {kind!r}")

    def _finish(self, job: _Job | Generator[Any, Any, None]) -> None:
        if not isinstance(job, _Job):  # a sleeping agent
            self.ready.append((job, None))
            return
        job.done = True
        for agent in job.waiters:
            self.ready.append((agent, None))
        job.waiters = []

    def run(self) -> SM:
        """Run to the end (or until `max_intervals` intervals are recorded)."""
        while True:
            while self.ready:
                agent, value = self.ready.popleft()
                self._step(agent, value)
            if self.truncated:
                return self
            nxt, heads = float("inf"), []
            drag = self.c.mma_drag if self.queues["tensor"] else 0.0
            for unit, queues in self.queues.items():
                active = [q[0] for q in queues.values() if q]
                if active:
                    rate = 1.0 / len(active)
                    if unit in ("alu", "sfu"):
                        rate *= 1.0 - drag
                    nxt = min(nxt, self.t + min(j.work for j in active) / rate)
                    heads.append((unit, active, rate))
            if self.timers:
                nxt = min(nxt, self.timers[0][0])
            if nxt == float("inf"):
                return self
            dt = nxt - self.t
            for unit, active, rate in heads:
                self.busy[unit] += dt
                for j in active:
                    j.work -= dt * rate
            self.t = nxt
            for unit, active, _ in heads:
                for j in active:
                    if j.work <= 1e-9:
                        queue = self.queues[unit][j.owner]
                        queue.pop(0)
                        if queue:
                            self.ready.extend(queue[0].starters)
                            queue[0].starters = []
                        else:
                            del self.queues[unit][j.owner]
                        if j.latency > 0:
                            heapq.heappush(self.timers, (self.t + j.latency, self.seq, j))
                            self.seq += 1
                        else:
                            self._finish(j)
            while self.timers and self.timers[0][0] <= self.t + 1e-9:
                self._finish(heapq.heappop(self.timers)[2])

    def _log(
        self, p: int, role: str, wg: int, phase: str, tile: int, block: int, start: float
    ) -> None:
        if p != self.record or self.truncated:
            return
        self.intervals.append(
            {
                "role": role,
                "warpgroup": wg,
                "phase": phase,
                "tile": tile,
                "block": block,
                "start_ns": start,
                "end_ns": self.t,
            }
        )
        if len(self.intervals) >= self.max_intervals:
            self.truncated = True

    # --- the agents -----------------------------------------------------------------------
    def _wait(
        self, p: int, w: int, key: tuple[Any, ...], count: int, phase: str, tile: int, block: int
    ) -> Generator[Any, Any, None]:
        start = self.t
        yield ("wait", key, count)
        if self.c.barrier_ns > 0:
            yield ("sleep", self.c.barrier_ns)
        self._seen_copy(key)
        if self.t > start:
            self._log(p, "consumer", w, phase, tile, block, start)

    def _landing(
        self,
        p: int,
        job: _Job,
        ready: tuple[Any, ...],
        phase: str,
        tile: int,
        block: int,
        start: float,
    ) -> Generator[Any, Any, None]:
        """Waits for a copy the loader issued (its own agent: the loader goes on issuing). The
        copy is logged once a consumer sees it (`_seen_copy`), as the kernel's stamps time it:
        the copy engine signals only the barrier."""
        yield ("join", job)
        if p == self.record:
            self.landed[ready] = (phase, tile, block, start)
        self._arrive(ready)

    def _seen_copy(self, key: tuple[Any, ...]) -> None:
        """A consumer got past the barrier `key`: the copy behind it, if not yet seen, is logged
        from its issue to now."""
        copy = self.landed.pop(key, None)
        if copy is not None:
            phase, tile, block, start = copy
            self._log(key[0], "loader", -1, phase, tile, block, start)

    def _copy(
        self,
        p: int,
        nbytes: float,
        latency: float,
        ready: tuple[Any, ...],
        phase: str,
        tile: int,
        block: int,
    ) -> Generator[Any, Any, None]:
        start = self.t
        # Copies in flight share the SM's L2 bandwidth (a K issued after a V may land first,
        # as the recorded timelines show); each is its own job.
        self.seq += 1
        job = yield ("issue", "copy", nbytes / self.c.copy_rate, ("copy", self.seq), latency)
        self.ready.append((self._landing(p, job, ready, phase, tile, block, start), None))

    def _loader(self, p: int, tiles: list[Tile]) -> Generator[Any, Any, None]:
        c = self.c
        g = 0
        for i, (n, _, _) in enumerate(tiles):
            for w in range(self.consumers):
                yield ("wait", (p, "q_empty", w), i)
                yield from self._copy(p, c.q_bytes, c.q_latency, (p, "q_ready", w), "load_q", i, -1)
            for j in range(n):
                if g >= self.stages:
                    yield ("wait", (p, "k_free", g - self.stages), self.consumers)
                yield from self._copy(
                    p, c.kv_bytes, c.copy_latency, (p, "k_ready", g), "load_k", i, j
                )
                if g >= self.stages:
                    yield ("wait", (p, "v_free", g - self.stages), self.consumers)
                yield from self._copy(
                    p, c.kv_bytes, c.copy_latency, (p, "v_ready", g), "load_v", i, j
                )
                g += 1

    def _product(self, work: float) -> Generator[Any, Any, Any]:
        # One queue for the SM: products run one at a time in the order they were issued.
        job = yield ("issue", "tensor", work, "issued", self.c.mma_latency)
        return job

    def _scores(
        self, p: int, w: int, g: int, work: float, tile: int, block: int
    ) -> Generator[Any, Any, Any]:
        """Wait for K of ring step g and issue S on it: logged as wait_k up to the issue's return
        (the kernel stamps S once issued)."""
        start = self.t
        yield ("wait", (p, "k_ready", g), 1)
        if self.c.barrier_ns > 0:
            yield ("sleep", self.c.barrier_ns)
        job = yield from self._product(work)
        self._seen_copy((p, "k_ready", g))
        if self.t > start:
            self._log(p, "consumer", w, "wait_k", tile, block, start)
        return job

    def _seen(
        self, p: int, w: int, job: _Job, phase: str, tile: int, block: int, start: float
    ) -> Generator[Any, Any, None]:
        yield ("join", job)
        self._log(p, "consumer", w, phase, tile, block, start)

    def _softmax(
        self, p: int, w: int, tile: int, block: int, part: float, masked: bool, last: bool = True
    ) -> Generator[Any, Any, None]:
        # Pipelined, O is rescaled only once the product into it is done (`_rescale`); the
        # plain loop rescales inside its softmax (the kernel stamps both as one phase).
        # The exponentials (SFU) and the FP32 work issue from the same warps to different
        # pipes, interleaved: they run side by side, the softmax lasting the longer of the two,
        # then its own latency (the row reductions' shuffles, on no shared unit).
        c = self.c
        start = self.t
        alu = part * c.alu + (c.mask_alu * part if masked else 0.0)
        alu += 0.0 if self.pipeline else c.rescale
        job = yield ("issue", "alu", alu, (p, w), 0.0)
        yield ("use", "sfu", part * c.exp, (p, w), 0.0)
        yield ("join", job)
        if c.softmax_ns > 0 and last:  # its own latency once, at its end (`last`)
            yield ("sleep", c.softmax_ns)
        self._log(p, "consumer", w, "softmax", tile, block, start)

    def _rescale(self, p: int, w: int, tile: int, block: int) -> Generator[Any, Any, None]:
        # Logged as a second softmax interval of the block, as the kernel's stamps show it.
        if self.c.rescale > 0:
            start = self.t
            yield ("use", "alu", self.c.rescale, (p, w), 0.0)
            self._log(p, "consumer", w, "softmax", tile, block, start)

    def _turn(self, p: int, w: int, r: int, tile: int, block: int) -> Generator[Any, Any, None]:
        if self.pingpong:
            yield from self._wait(p, w, (p, "turn", w), r + 1, "wait_turn", tile, block)

    def _pass(self, p: int, w: int) -> None:
        if self.pingpong:
            self._arrive((p, "turn", (w + 1) % self.consumers))

    def _consumer(self, p: int, w: int, tiles: list[Tile]) -> Generator[Any, Any, None]:
        c = self.c
        if self.pipeline and w == self.consumers - 1:
            self._pass(p, w)  # round 0 starts at the first warpgroup
        g = 0
        store = None
        for i, (n, masked, half) in enumerate(tiles):
            first_masked = n - masked  # the tile's masked steps are its last ones

            def part(j: int, n: int = n, half: int = half) -> float:
                return 0.5 if half and j == n - 1 else 1.0

            # The wait for the tile's Q shows as wait_k of block −1 (a per-tile phase).
            yield from self._wait(p, w, (p, "q_ready", w), i + 1, "wait_k", i, -1)
            r0 = g + i
            if self.pipeline:
                yield from self._turn(p, w, r0, i, 0)
                s = yield from self._scores(p, w, g, c.qk, i, 0)
                start = self.t
                self._pass(p, w)
                yield from self._seen(p, w, s, "qk", i, 0, start)
                self._arrive((p, "k_free", g))
                yield from self._softmax(p, w, i, 0, 1.0, first_masked <= 0)
                for j in range(1, n):
                    yield from self._turn(p, w, r0 + j, i, j)
                    s = yield from self._scores(p, w, g + j, c.qk, i, j)
                    s_start = self.t
                    yield from self._wait(p, w, (p, "v_ready", g + j - 1), 1, "wait_v", i, j - 1)
                    o_start = self.t
                    o = yield from self._product(c.pv)
                    self._pass(p, w)
                    yield from self._seen(p, w, s, "qk", i, j, s_start)
                    self._arrive((p, "k_free", g + j))
                    # the compiled kernel waits for P·V before all but `under_pv` of the softmax
                    mask = j >= first_masked
                    if c.under_pv > 0:
                        yield from self._softmax(p, w, i, j, c.under_pv, mask, c.under_pv == 1)
                    yield from self._seen(p, w, o, "pv", i, j - 1, o_start)
                    self._arrive((p, "v_free", g + j - 1))
                    if c.under_pv < 1:
                        yield from self._softmax(p, w, i, j, 1.0 - c.under_pv, mask)
                    yield from self._rescale(p, w, i, j)
                self._arrive((p, "q_empty", w))
                last = g + n - 1
                yield from self._wait(p, w, (p, "v_ready", last), 1, "wait_v", i, n - 1)
                yield from self._turn(p, w, r0 + n, i, n - 1)
                start = self.t
                o = yield from self._product(c.pv)
                self._pass(p, w)
                yield from self._seen(p, w, o, "pv", i, n - 1, start)
                self._arrive((p, "v_free", last))
            else:
                for j in range(n):
                    s = yield from self._scores(p, w, g + j, part(j) * c.qk, i, j)
                    start = self.t
                    yield from self._seen(p, w, s, "qk", i, j, start)
                    self._arrive((p, "k_free", g + j))
                    yield from self._softmax(p, w, i, j, part(j), j >= first_masked)
                    yield from self._wait(p, w, (p, "v_ready", g + j), 1, "wait_v", i, j)
                    start = self.t
                    o = yield from self._product(part(j) * c.pv)
                    yield from self._seen(p, w, o, "pv", i, j, start)
                    self._arrive((p, "v_free", g + j))
                self._arrive((p, "q_empty", w))
            start = self.t
            yield ("use", "alu", c.epilogue, (p, w), 0.0)
            self._log(p, "consumer", w, "epilogue", i, -1, start)
            # O leaves through the copy engine; the warpgroup waits for a store only before its
            # next one and at the end (tma.store_wait: until the copy engine has read O out of
            # shared memory), each time its bytes and then a copy's latency: the model's account
            # of what one CTA per tile costs over a persistent program (fa3.Fa3Terms).
            if store is not None:
                yield ("join", store)
            self.seq += 1
            o_ns = c.o_bytes / c.copy_rate
            store = yield ("issue", "copy", o_ns, ("copy", self.seq), c.copy_latency)
            g += n
        if store is not None:
            yield ("join", store)
        self.ends[p] = max(self.ends[p], self.t)
