"""Which global requests of a launch hit in L2 and which reach DRAM, from its schedule.

Every request goes through L2 (L2 bytes are exactly the launch's requests); the question is
which reads miss and which writes reach DRAM. A re-reference hits when little enough other data
passed through L2 since the last reference: the reuse distance, estimated as

    distance = ρ · gap,     ρ = distinct bytes the whole GPU references per second

and the hit chance is min(1, (C / distance)^γ) with C the usable capacity (L2 size ×
`l2_reuse_fraction`) and γ `l2_reuse_exponent` (1: a random-replacement-like fall-off past the
capacity; large: an LRU-like cliff; the default 2 lies between). ρ counts each CTA's cold
reads, writes (less rewrites of lines it already holds) and self re-reads, and for a shared
stream only the one frontier its CTAs advance together (CTAs reading the same K/V block at
the same time fetch it once: near-simultaneous misses to a line merge), times
`l2_shared_copies`: a Hopper or Ampere L2 is two partitions, each caching what the SMs on its
side read, so a line that CTAs on both sides read takes more room than one a single CTA reads
(benchmarks/l2_reuse_probe.py measures C with lines of one reader each, and shows the misses
of lines that every SM read starting at a smaller size).

Reference classes (see `workload.py`):
    cold     first touch in the launch → DRAM (unless carried: see below)
    stream   CTAs sorted by start within their stream; block j of CTA B was last read by the
             previous CTA P around gap = |t_B(j) − t_P(j)| (each CTA walks its range at a steady
             pace through its loop); blocks no earlier CTA covered are compulsory misses
    self     re-reads of a CTA's own data one outer pass later (gap = loop time / passes)
    carry    reads of the previous launch's output: distance = what the producer referenced
             after writing it plus what this launch referenced before reading it
    seen     reads of inputs the previous launch read too (`seen_read`, and the share
             `stream_seen` of a stream's first reads): the same distance as carry
    merge    rewrites of a recently touched line reach DRAM only when it was evicted in between
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from flashscope.simulator.core.hardware import MAX_SHARED_COPIES
from flashscope.simulator.timing.launch import Launch


@dataclass(frozen=True)
class L2Split:
    """Per-CTA DRAM traffic of a launch and what the next launch needs to know."""

    dram_read: np.ndarray  # (n,) bytes
    dram_write: np.ndarray  # (n,) bytes
    refs: np.ndarray  # (n,) distinct bytes each CTA referenced (for the next launch's carry)
    footprint: float  # distinct bytes the whole launch touched


_POWER_SHORTCUTS = (-1.0, 0.0, 0.5, 1.0, 2.0)  # exponents numpy's `**` computes otherwise


def hit_chance(distance: np.ndarray, capacity: float, exponent: float) -> np.ndarray:
    """min(1, (capacity / distance)^exponent), 1 at distance 0 or infinite capacity."""
    out = np.ones_like(distance, dtype=np.float64)
    if math.isinf(capacity):
        return out
    far = distance > capacity
    if exponent in _POWER_SHORTCUTS:  # `**` takes a shortcut of its own for these
        out[far] = (capacity / distance[far]) ** exponent
        return out
    # np.power on the far elements in place (what `**` calls for other exponents), without
    # gathering and scattering them
    np.divide(capacity, distance, out=out, where=far)
    np.power(out, exponent, out=out, where=far)
    return out


def _shift(x: np.ndarray, fill: float) -> np.ndarray:
    """x moved one place later (the previous element of each), `fill` first."""
    out = np.empty_like(x)
    out[0] = fill
    out[1:] = x[:-1]
    return out


def _grouped_cummax(group: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Running max of `value` within runs of equal `group` (groups sorted, values ≥ 0; whole
    numbers here, block indices, so the shifted sum below is exact)."""
    step = value[1:] >= value[:-1]
    if step.all() or (step | (group[1:] != group[:-1])).all():  # already rising in each
        return value
    big = float(value.max(initial=0)) + 1.0
    shifted = group * big + value
    return np.maximum.accumulate(shifted) - group * big


@dataclass(frozen=True)
class Streams:
    """What of a launch's stream reads its order alone decides (not its schedule): which bytes
    each CTA reads first and which it re-reads, and where it meets the CTA before it.

    `idx`: the CTAs that read a stream, sorted by stream id (stably: start times never decrease
    in launch order, as list scheduling starts CTAs in order, so this is "sorted by start
    within a stream"); the other arrays are in that order but `new` and `reacc` (per CTA).
    """

    new: np.ndarray  # (n,) bytes no earlier CTA of the stream read
    reacc: np.ndarray  # (n,) bytes an earlier CTA of the stream read
    idx: np.ndarray  # (m,)
    first: np.ndarray  # (m,) the stream's first CTA
    span: np.ndarray  # (m,) blocks of its range, hi − lo
    mid_lo: np.ndarray  # (m,) the middle of the blocks it shares with the previous CTA, − lo
    mid_prev_lo: np.ndarray  # (m,) the same middle less the previous CTA's lo
    every: bool = False  # idx is every CTA in launch order (0, 1, …, n − 1)


def streams(w: Launch) -> Streams:
    """The stream layout of launch `w` (see `Streams`). Every block of a stream holds the same
    bytes but its last one (`stream_tail` of a full block: ragged lengths)."""
    n = w.n_ctas
    new = np.zeros(n)
    reacc = np.zeros(n)
    idx = np.flatnonzero((w.stream >= 0) & (w.stream_hi > w.stream_lo))
    if idx.size == 0:
        empty = np.zeros(0)
        return Streams(new, reacc, idx, np.zeros(0, dtype=bool), empty, empty, empty)
    sid = w.stream[idx]
    every = idx.size == n
    if np.any(sid[1:] < sid[:-1]):
        every = False
        key = sid - sid.min()
        if key.max() < 1 << 16:  # a stable sort of 16-bit keys is a radix sort: linear
            key = key.astype(np.uint16)
        idx = idx[np.argsort(key, kind="stable")]
        sid = w.stream[idx]

    def at(col: np.ndarray) -> np.ndarray:  # a column in the order of idx
        return col if every else col[idx]

    first = np.ones(idx.size, dtype=bool)
    first[1:] = sid[1:] != sid[:-1]
    last, short = float(w.stream_blocks), 1.0 - w.stream_tail

    def blocks(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # full-block equivalents of [a, b)
        full: np.ndarray = np.maximum(b - a, 0.0) - short * ((b >= last) & (b > a))
        return full

    read = at(w.stream_read)
    if w.stream_lo.strides == (0,) and w.stream_hi.strides == (0,) and w.stream_lo[0] >= 0:
        return _same_range(w, idx, first, read, blocks, every)
    g = sid.astype(np.float64)
    lo, hi = at(w.stream_lo).astype(np.float64), at(w.stream_hi).astype(np.float64)
    # Union of the ranges of earlier CTAs of the same stream (an interval: prefixes/suffixes).
    top = float(hi.max()) + 1.0
    prev_hi = np.where(first, 0.0, _shift(_grouped_cummax(g, hi), 0.0))
    prev_lo = np.where(first, top, top - _shift(_grouped_cummax(g, top - lo), 0.0))
    # Blocks no earlier CTA read lie below the union or above it (one side or both).
    unit = read / blocks(lo, hi)  # bytes of one full block
    fresh = blocks(lo, np.minimum(hi, prev_lo)) + blocks(np.maximum(lo, prev_hi), hi)
    got = unit * np.where(first, blocks(lo, hi), fresh)
    if every:
        new, reacc = got, read - got
    else:
        new[idx] = got
        reacc[idx] = read - got
    # The middle of the blocks a CTA shares with the previous CTA of its stream.
    p_lo, p_hi = _shift(lo, 0.0), _shift(hi, 0.0)
    both_lo, both_hi = np.maximum(lo, p_lo), np.minimum(hi, p_hi)
    mid = np.where(both_hi > both_lo, 0.5 * (both_lo + both_hi), 0.5 * (lo + hi))
    return Streams(new, reacc, idx, first, hi - lo, mid - lo, mid - p_lo, every)


def _same_range(
    w: Launch,
    idx: np.ndarray,
    first: np.ndarray,
    read: np.ndarray,
    blocks: Any,
    every: bool,
) -> Streams:
    """`streams` where every CTA reads the same blocks [lo, hi) of its stream (one value each,
    broadcast; hi > lo ≥ 0): the first CTA of a stream reads all of them first, every later one
    re-reads them all, and the blocks two CTAs share are the whole range. The general case's
    figures, element for element, without its per-CTA running unions."""
    n, m = w.n_ctas, idx.size
    lo, hi = w.stream_lo[:1].astype(np.float64), w.stream_hi[:1].astype(np.float64)
    whole = blocks(lo, hi)  # (1,)
    # a later CTA's blocks below and above the union of the earlier ones' (the same range)
    none = blocks(lo, np.minimum(hi, lo)) + blocks(np.maximum(lo, hi), hi)
    unit = read / whole
    got = unit * np.where(first, whole, none)
    if every:
        new, reacc = got, read - got
    else:
        new, reacc = np.zeros(n), np.zeros(n)
        new[idx] = got
        reacc[idx] = read - got
    # the previous CTA's range is the same (the first CTA's, none before it, is [0, 0))
    mid = 0.5 * (lo + hi)
    mid_prev_lo = np.empty(m)
    mid_prev_lo[0] = (mid - 0.0)[0]
    mid_prev_lo[1:] = (mid - lo)[0]
    span, mid_lo = (np.broadcast_to(x, (m,)) for x in (hi - lo, mid - lo))
    return Streams(new, reacc, idx, first, span, mid_lo, mid_prev_lo, every)


def _stream_gap(s: Streams, loop_start: np.ndarray, loop_time: np.ndarray) -> np.ndarray:
    """Gap (s) to the previous reference of each CTA's re-read stream bytes: to the previous
    CTA of its stream at the middle of the blocks they share (each CTA walks its range at a
    steady pace through its loop)."""
    n = len(s.new)
    if s.idx.size == 0:
        return np.zeros(n)
    every = s.every
    a = loop_start if every else loop_start[s.idx]
    tb = (loop_time if every else loop_time[s.idx]) / s.span  # seconds per block
    p_a, p_tb = _shift(a, 0.0), _shift(tb, 0.0)
    gap = np.where(s.first, 0.0, np.abs((a + s.mid_lo * tb) - (p_a + s.mid_prev_lo * p_tb)))
    if every:
        return gap
    out = np.zeros(n)
    out[s.idx] = gap
    return out


def _loop_hit(w: Launch, dram_read: np.ndarray) -> np.ndarray:
    """The fraction of each CTA's loop reads L2 served, given the bytes it read from DRAM."""
    loop_read = np.maximum(w.read_bytes - w.edge_read, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        loop_miss = np.clip(dram_read - w.edge_read, 0.0, None) / loop_read
    hit: np.ndarray = np.where(loop_read > 0, 1.0 - np.minimum(loop_miss, 1.0), 1.0)
    return hit


def compulsory_hits(w: Launch, s: Streams | None = None) -> np.ndarray:
    """`split_traffic`'s loop hit rates with an L2 that never evicts: only first touches miss
    (cold reads, carried ones included, and stream blocks no earlier CTA read)."""
    s = s if s is not None else streams(w)
    return _loop_hit(w, (w.cold_read - w.carry_read) + w.carry_read + s.new)


def split_traffic(
    w: Launch,
    start: np.ndarray,
    end: np.ndarray,
    edge_time: np.ndarray,
    capacity: float,
    exponent: float,
    carry: L2Split | None = None,
    copies: float = 1.0,
    layout: Streams | None = None,
) -> L2Split:
    """DRAM reads and writes per CTA of launch `w` run on the schedule (start, end).

    `capacity` in bytes (np.inf: every re-reference hits); `carry` is the previous launch's
    split (None: nothing carried over); `copies` the room a shared stream's line takes
    (`l2_shared_copies`); `layout` the launch's `streams` where already known. A reuse
    distance never exceeds the footprint: the room all the distinct bytes touched take (so a
    launch whose data fits in L2 misses only once).
    """
    read, write = w.read_bytes, w.write_bytes
    loop_start = start + edge_time
    loop_time = end - loop_start
    np.maximum(loop_time, 0.0, out=loop_time)
    span = float(end.max() - start.min()) if w.n_ctas else 0.0

    # The rate of distinct references: cold + writes + self per CTA, one frontier per stream.
    frontier = np.zeros(w.n_ctas)
    if w.stream_read.any():
        inv, k = w.groups
        busy = np.bincount(inv, weights=end - start, minlength=k)
        s_lo = np.full(k, np.inf)
        s_hi = np.full(k, -np.inf)
        if w.group_runs is not None:  # each stream's CTAs in one run: reduce each run
            begins, group = w.group_runs
            s_lo[group] = np.minimum.reduceat(start, begins)
            s_hi[group] = np.maximum.reduceat(end, begins)
        else:
            np.minimum.at(s_lo, inv, start)
            np.maximum.at(s_hi, inv, end)
        sharers = busy / np.maximum(s_hi - s_lo, 1e-300)  # mean CTAs on the stream at once
        frontier = w.stream_read / np.maximum(sharers[inv], 1.0)
    cold = w.cold_read
    # Rewrites of lines already referenced (merge_write) bring no new data into L2.
    # (Below, sums of per-CTA terms are taken in place, term by term in the same order.)
    written = write - w.merge_write
    written_sum = written.sum()
    refs = np.add(cold, written, out=written)  # cold + written + self + copies · frontier
    refs += w.self_read
    refs += copies * frontier
    rho = float(refs.sum()) / span if span > 0 else 0.0
    cap, gamma = capacity, exponent

    layout = layout if layout is not None else streams(w)
    new, reacc = layout.new, layout.reacc
    gap = _stream_gap(layout, loop_start, loop_time)
    footprint = float(cold.sum() + written_sum + copies * new.sum())

    def chance(distance: np.ndarray) -> np.ndarray:  # (distance: a temporary, overwritten)
        return hit_chance(np.minimum(distance, footprint, out=distance), cap, gamma)

    p_stream = chance(rho * gap)
    dram_stream = 1.0 - p_stream  # new + reacc · (1 − p_stream)
    np.multiply(reacc, dram_stream, out=dram_stream)
    np.add(new, dram_stream, out=dram_stream)

    self_read = w.self_read.any()  # (none but fa1's)
    p_self = chance(rho * loop_time / w.passes) if self_read else p_stream
    dram_self = w.self_read * (1.0 - p_self) if self_read else 0.0

    carried, seen = w.carry_read, w.seen_read
    dram_carry, dram_seen = carried, seen
    if carry is not None and (carried.any() or seen.any() or w.stream_seen > 0):
        n, m = w.n_ctas, len(carry.refs)
        after = np.concatenate([np.cumsum(carry.refs[::-1])[::-1], [0.0]])  # producer suffix
        x = np.arange(n, dtype=np.float64)  # ⌈(k + ½)·m / n⌉, at most m
        x += 0.5
        x *= m
        x /= n
        pos = np.ceil(x, out=x).astype(np.int64)
        np.minimum(pos, m, out=pos)
        before = np.empty(n)  # this launch's references before each CTA
        before[:1] = 0.0
        np.cumsum((read + write)[:-1], out=before[1:])
        distance = np.add(after[pos], before, out=before)
        np.minimum(distance, carry.footprint + footprint, out=distance)
        kept = hit_chance(distance, cap, gamma)
        dram_carry = carried * (1.0 - kept)
        # What the previous launch read, this one reads again at the same distance: its
        # inputs stay in L2 between the two where little enough passed through in between.
        dram_seen = seen * (1.0 - kept)
        if w.stream_seen > 0:
            dram_stream -= new * w.stream_seen * kept

    dram_read = cold - carried  # less seen, plus each DRAM share, in this order
    dram_read -= seen
    dram_read += dram_carry
    dram_read += dram_seen
    dram_read += dram_stream
    dram_read += dram_self
    dram_write = write
    if w.merge_write.any():
        p_merge = np.where(w.self_read > 0, p_self, p_stream)
        dram_write = write - w.merge_write * p_merge
    return L2Split(dram_read, dram_write, refs, footprint)


# The probe's cases (benchmarks/l2_reuse_probe.py): lines of one reader each, and a scan of
# lines every SM reads in both launches.
PROBE_ONE_READER = ("same", "shuffled")
PROBE_SHARED = "shared-twice"


@dataclass(frozen=True)
class ProbeFit:
    """The L2 room a probe of re-reads measured, in the engine's hit-chance curve."""

    fraction: float  # usable capacity / L2 size for lines of one reader (`l2_reuse_fraction`)
    exponent: float  # the probe's own fall-off past it (sharper than a launch's spread of gaps)
    worst: float  # largest |curve − measured hit share| over those sizes
    sizes: int  # measured points fitted
    shared_fraction: float | None  # the same for the scan of shared lines (None: not probed)
    ratio: float | None  # fraction / shared_fraction: how much more room a shared line takes
    copies: float  # `l2_shared_copies`: the ratio, at least 1 (1 where not probed)


def _curve(size: list[float], hit: list[float], l2_bytes: int) -> tuple[float, float, float]:
    """(fraction, exponent, worst deviation) of min(1, (C / S)^γ), C = fraction × `l2_bytes`,
    nearest (least squares) to the hit shares `hit` at sizes `size`, on a grid."""
    s, h = np.array(size), np.array(hit)
    fractions = np.arange(0.2, 1.0 + 1e-9, 0.0025)
    exponents = 2.0 ** np.arange(0.0, 6.0 + 1e-9, 0.125)
    cap = fractions[:, None, None] * l2_bytes
    curve = np.where(s > cap, (cap / s) ** exponents[None, :, None], 1.0)
    sse = ((curve - h) ** 2).sum(axis=2)
    i, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
    return round(float(fractions[i]), 4), float(exponents[j]), float(np.abs(curve[i, j] - h).max())


def fit_probe(doc: dict[str, Any], l2_bytes: int) -> ProbeFit:
    """The usable capacity a probe measured: the hit-chance curve nearest to the hit shares of
    its second reads of S bytes over its rows of one-reader lines, and the same over its scan
    of shared lines where it has one. ValueError naming what is wrong where `doc` is not such
    a probe of this L2."""
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ValueError('not an L2 reuse probe: expected an object with "rows"')
    if doc.get("l2_bytes") != l2_bytes:
        raise ValueError(
            f"the probe ran on a GPU with {doc.get('l2_bytes')!r} B of L2, this one has {l2_bytes}"
        )
    points: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
    for r in doc["rows"]:
        order = r.get("order") if isinstance(r, dict) else None
        if order not in (*PROBE_ONE_READER, PROBE_SHARED):
            continue
        b, miss = r.get("bytes"), r.get("second_miss_share")
        if not all(isinstance(x, int | float) and math.isfinite(x) for x in (b, miss)) or b <= 0:
            raise ValueError(f"probe row without positive bytes and a miss share: {r}")
        size, hit = points[order == PROBE_SHARED]
        size.append(float(b))
        hit.append(1.0 - min(1.0, max(0.0, float(miss))))
    one, shared = points[False], points[True]
    if len(one[0]) < 4:
        raise ValueError(f"the probe has {len(one[0])} rows of one-reader lines; 4 are needed")
    fraction, exponent, worst = _curve(*one, l2_bytes)
    shared_fraction = ratio = None
    if len(shared[0]) >= 4:
        shared_fraction = _curve(*shared, l2_bytes)[0]
        ratio = fraction / shared_fraction
    copies = 1.0 if ratio is None else min(MAX_SHARED_COPIES, max(1.0, ratio))
    return ProbeFit(fraction, exponent, worst, len(one[0]), shared_fraction, ratio, copies)
