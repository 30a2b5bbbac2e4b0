"""A warp-specialized FlashAttention forward for Hopper, written in Gluon (Triton's lower level).

Why a second forward: Triton 3.6 compiles `forward._attn_fwd` into warpgroups that run in
lockstep (shared K/V stages, barriers around them), so the softmax of one warpgroup never
overlaps the tensor-core work of another (docs/kernels.md). Here the schedule
is written by hand, after FlashAttention-3:

- one *loader* warp moves each tile's Q and, step by step, K and V into a ring of shared-memory
  stages with the tensor-memory copy engine, each copy signalling an mbarrier;
- CONSUMERS warpgroups of 4 warps each own BLOCK_M query rows of the CTA's Q tile; each issues
  its own asynchronous warpgroup products (S = Q Kᵀ from shared memory, O += P V with P in
  registers) and runs its own online softmax, so one warpgroup's exponentials overlap another's
  products; each frees a stage's K after its S product and V after its P V product;
- PIPELINE: within a warpgroup, S of the next tile is issued before the softmax of this one
  (FlashAttention-3's intra-warpgroup overlap), at the cost of a second S tile in registers;
- PINGPONG: the warpgroups take turns issuing their products (FlashAttention-3's ping-pong);
- persistent launches (`WsConfig.persistent`): one program per CTA slot loops over the tiles,
  the loader fetching the next tile's Q and K/V while the consumers finish this one; causal
  tiles go heaviest first within bands of heads (`WsConfig.band`);
- unpipelined causal tiles whose last key block is more than half out of sight compute that
  half alone (`HALF_STEPS`; tiles of 128 rows with 256-key blocks, say);
- the loader warp gives its registers up to the consumers (`warp_specialize`'s register
  budgets), which then hold S, P and the O accumulator without spilling.

Limits (`supports` says why a call does not qualify; `flashscope.kernels.forward` runs everything
else): a Hopper GPU, fp16 or bf16, a head_dim that is a multiple of 8 from 40 to 256 (one that is
not 64, 128 or 256 runs padded to the next: the copy engine loads zeros past it and stores none of
it; at 256 only one warpgroup's tiles fit shared memory), inputs that flatten to (B·H·N, d) with
rows on 16-byte boundaries. Any N_q and N_k: a last key block that N_K does not fill is masked (its
rows past N_K belong to the next head, or are zeros past the tensor), and the top tile of a head
may start above row 0: its warpgroups there store nothing, and one that straddles row 0 stores its
rows from 0 on through masked stores rather than the copy engine. Causal is aligned bottom-right as
in the Triton kernel; grouped-query attention reads K/V head h // group. There is no interpreter
path for Gluon: CI compiles this kernel for sm_90a on the CPU
(tests/kernels/test_hopper_forward.py) and the GPU tests run it.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from itertools import product
from typing import Any

import numpy as np
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from flashscope.kernels.config import fills_no_tile, per_table, route, table_key, tuned_entry
from flashscope.kernels.device import interpreting
from flashscope.kernels.fastlaunch import launch, signature
from flashscope.kernels.launch import LOG2E, flat_rows, gpu_name, output, pad_dim
from flashscope.simulator.timing.kernelplan import tuned_keys
from flashscope.simulator.timing.occupancy import pv_columns, qk_columns

_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}
LOADER_REGS = 24  # the fewest registers a warp can be given
_LOADER_REGS = gl.constexpr(LOADER_REGS)
REGS_PER_SM = 65536


@dataclass(frozen=True)
class WsConfig:
    """One launch of the warp-specialized forward.

    consumers: warpgroups computing (each BLOCK_M = 64 query rows; the CTA holds 64·consumers);
    block_n: keys per step; stages: K/V ring depth; pipeline: S of the next tile issued before
    this tile's softmax; ctas: CTAs meant to share an SM (the registers are split that way);
    pingpong (with pipeline, two or more consumers): the warpgroups take turns issuing their
    products (FlashAttention-3's ping-pong), so one's softmax runs under another's products;
    persistent: one program per CTA slot of the GPU (SMs × ctas) loops over the tiles, its
    loader fetching the next tile's Q and K/V while the consumers finish this one; band: causal
    tiles are ordered in bands of that many (batch, head) rows (`_tile`), 0 for one band of all;
    merged (causal): a tile's unmasked and diagonal steps run in one loop, the mask applied in a
    branch of the step (`_softmax`'s MASKED 3), so each consumer holds one copy of the step's
    code rather than two or three (with the half step; benchmarks/results/merged-mask-*.json:
    80 against 113 KiB for three warpgroups at d = 64; faster at short lengths, where the SMs
    stall fetching the larger kernel's instructions, slower in some long launches and with
    64-key steps: tuned per entry).
    """

    consumers: int = 2
    block_n: int = 128
    stages: int = 2
    pipeline: bool = True
    ctas: int = 1
    block_m: int = 64
    pingpong: bool = False
    persistent: bool = False
    band: int = 1
    merged: bool = False

    def __post_init__(self) -> None:
        if self.consumers not in (1, 2, 3):
            raise ValueError(f"consumers must be 1, 2 or 3, got {self.consumers!r}")
        if self.block_n not in (64, 128, 256):
            raise ValueError(f"block_n must be 64, 128 or 256, got {self.block_n!r}")
        if self.stages not in (2, 3, 4):
            raise ValueError(f"stages must be 2, 3 or 4, got {self.stages!r}")
        if self.ctas not in (1, 2):
            raise ValueError(f"ctas must be 1 or 2, got {self.ctas!r}")
        if self.block_m != 64:
            raise ValueError(f"block_m must be 64 (one warpgroup's rows), got {self.block_m!r}")
        if self.band < 0:
            raise ValueError(f"band must be 0 (all rows) or more, got {self.band!r}")
        if self.pingpong and (self.consumers < 2 or not self.pipeline):
            raise ValueError("pingpong needs pipeline and two or more consumers")

    @property
    def tile_m(self) -> int:
        return self.block_m * self.consumers

    def as_list(self) -> list[int]:
        """[consumers, block_n, stages, pipeline, ctas(, pingpong(, persistent(, band(,
        merged))))], flags as 0/1, as tuned.json holds them: trailing entries only where they
        differ from the defaults (older lists stay valid)."""
        entry = [self.consumers, self.block_n, self.stages, int(self.pipeline), self.ctas,
                 int(self.pingpong), int(self.persistent), self.band, int(self.merged)]  # fmt: skip
        while len(entry) > 5 and entry[-1] == (1 if len(entry) == 8 else 0):
            entry.pop()
        return entry

    @classmethod
    def from_list(cls, entry: list[int]) -> WsConfig:
        consumers, block_n, stages, pipeline, ctas, *rest = entry
        if len(rest) > 4:
            raise ValueError(f"a configuration has 5 to 9 entries, got {entry!r}")
        pingpong, persistent, band, merged = (*rest, *(0, 0, 1, 0)[len(rest) :])
        return cls(consumers, block_n, stages, bool(pipeline), ctas, pingpong=bool(pingpong),
                   persistent=bool(persistent), band=band, merged=bool(merged))  # fmt: skip

    def registers(self) -> tuple[int, int]:
        """(registers per thread at launch, registers per consumer thread after the loader's
        warpgroup gives its own up): every warp's registers fit one SM's file."""
        warps = 4 * (self.consumers + 1)  # the loader's warp is placed in a warpgroup of its own
        launch = min(REGS_PER_SM // self.ctas // (32 * warps) // 8 * 8, 248)
        consumer = (launch * warps - LOADER_REGS * 4) // (4 * self.consumers) // 8 * 8
        return launch, min(consumer, 256)

    def o_in_q(self, head_dim: int) -> bool:
        """Whether O leaves through Q's stage rather than one of its own: at 256 columns, where
        a program has one tile (not persistent) and so Q is free once its last S is done."""
        return head_dim > 128 and not self.persistent

    def shared_bytes(self, head_dim: int, elem: int = 2) -> int:
        """Q's and O's stages (`o_in_q`: one for both), the K/V ring and the mbarriers (Q ready
        and free, and the turn, per consumer; K and V ready and free per stage)."""
        q_and_o = (1 if self.o_in_q(head_dim) else 2) * self.tile_m * head_dim * elem
        kv = 2 * self.stages * self.block_n * head_dim * elem
        return q_and_o + kv + 8 * (3 * self.consumers + 4 * self.stages)

    def tiles(self, rows: int, n_q: int) -> int:
        """CTA tiles of `rows` (batch, head) rows of n_q queries each."""
        return rows * -(-n_q // self.tile_m)

    def programs(self, tiles: int, sms: int) -> int:
        """Programs launched for `tiles` tiles on a GPU of `sms` SMs."""
        return min(tiles, sms * self.ctas) if self.persistent else tiles


# Unpipelined causal tiles whose last step sees only its key block's first half compute that
# half alone (`_consumer`, HALF); False computes the whole block, masked (a switch for
# benchmarks). Compiled only where BLOCK_N does not divide the CTA's rows: tiles end at row N_q,
# so where N_k is a multiple of BLOCK_N a tile's last visible key is N_k less a multiple of its
# rows, and with whole blocks only a tile that sees no key at all (N_q > N_k) would have a half
# step. (Pipelined, the half step measured slower on an H200: kept whole there.)
HALF_STEPS = True

# Persistent causal launches share their tiles by a schedule computed on the host (`schedule`)
# rather than in turn; False shares them in turn (a switch for benchmarks). Launches of more
# tiles than MAX_SCHEDULED_TILES share them in turn (the schedule's cost on the host).
SCHEDULE_TILES = True
MAX_SCHEDULED_TILES = 1 << 17
# The schedule's cost of a tile beyond its key blocks, and of each masked (diagonal) step beyond
# a full one (switches for benchmarks/schedule_costs.py: on an H100, costs of 2-3 and 0.5-1
# changed no routed launch by more than the passes' spread).
TILE_FIXED_COST = 1.0
MASKED_STEP_COST = 0.0
COMPILE_SMS = 132  # the SMs compile_sm90's launch arguments are built for (an H100 SXM's)

# Triton 3.6 specializes N_Q = 1 and then fails an assertion while lowering the kernel (seen on
# an H100, not causal); 3.7 compiles it. Such a call goes to the Triton forward there.
_ONE_QUERY_BUG = tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7)

SHARED_LIMIT = 232448  # bytes of shared memory one CTA may use on Hopper
SHARED_PER_SM = 233472  # and all of an SM's CTAs together, 1 KiB of each reserved


# Gluon kernels keep compact argument lists, as Triton's own tutorials do.
# fmt: off
@gluon.jit
def _tile(t, n_tiles, band, N_Q, N_K, H, GROUP, TILE_M: gl.constexpr, BLOCK_N: gl.constexpr,
          CAUSAL: gl.constexpr, HALF: gl.constexpr):
    """Tile t of the launch order: (Q's first flattened row, K/V's, the tile's first query row
    m0, the steps that need no mask, the steps over whole blocks, all steps). HALF (causal): a
    last, masked, step that sees no key past its block's first half is not a whole-block one
    (steps [n_whole, n_steps) run over the half; without HALF n_whole = n_steps). Tiles go
    head by head; causal heads in bands of `band` (batch, head) rows, a band's heaviest query
    block of every row first, then the next heaviest (band 1: head by head, heaviest first),
    so that a program's share of the tiles, taken in turn, is balanced. Tiles end at row N_Q:
    where TILE_M does not divide N_Q, the top tile starts above row 0 and its first warpgroups
    have no rows of this head, or (BLOCK_M not dividing N_Q) only some (their Q copy reads the
    previous head's rows, or zeros before the first). Not causal, the last step covers the
    block N_K does not fill, if any."""
    n_mb = gl.cdiv(N_Q, TILE_M)
    if CAUSAL:
        first = t // (band * n_mb) * band  # the band's first row
        size = gl.minimum(band, n_tiles // n_mb - first)
        within = t - first * n_mb
        rank = within // size  # 0: the heaviest block
        bh = first + within - rank * size
        pid_m = n_mb - 1 - rank
    else:
        bh = t // n_mb
        pid_m = t % n_mb
    m0 = N_Q - (n_mb - pid_m) * TILE_M
    q_row = bh * N_Q + m0
    kv_row = (bh // H * (H // GROUP) + bh % H // GROUP) * N_K
    if CAUSAL:  # bottom-right alignment: key c visible to row r iff c ≤ r + N_K − N_Q
        off = N_K - N_Q
        hi = gl.maximum(gl.minimum(N_K, m0 + TILE_M + off), 0)
        n_full = gl.minimum(gl.maximum(m0 + off + 1, 0) // BLOCK_N, hi // BLOCK_N)
        # A causal block that sees no key at all (N_q > N_k) still takes one step, its rows
        # fully masked: every partition runs the same loop, of at least one tile.
        n_steps = gl.maximum(gl.cdiv(hi, BLOCK_N), 1)
        n_whole = n_steps
        if HALF:
            half = (n_full < n_steps) & (hi - (n_steps - 1) * BLOCK_N <= BLOCK_N // 2)
            n_whole = n_steps - half.to(gl.int32)
    else:  # a last block that N_K does not fill is masked (`_softmax`)
        n_full = N_K // BLOCK_N
        n_steps = gl.maximum(gl.cdiv(N_K, BLOCK_N), 1)
        n_whole = n_steps
    return q_row, kv_row, m0, n_full, n_whole, n_steps


@gluon.jit
def _program(rec_programs, rec_detail, RECORD: gl.constexpr):
    """(this program's number, the programs' count): the grid's, but in a recording's launches
    side by side (`split_launches`: RECORD 7 and 8 for programs 0 … rec_detail − 1, RECORD 5
    for the others) the whole recording's (`rec_programs` programs, RECORD 5's numbered from
    rec_detail on)."""
    if RECORD == 0:
        return gl.program_id(0), gl.num_programs(0)
    elif RECORD == 5:
        return gl.program_id(0) + rec_detail, rec_programs
    else:
        return gl.program_id(0), rec_programs


@gluon.jit
def _share(SCHED, n_tiles, SCHEDULED: gl.constexpr, me):
    """(first, end, stride) of program `me`'s entries (`_program`: its number, the programs'
    count P): launch-order tiles number, + P, …; or, SCHEDULED, the range of the host's
    schedule (`schedule`) that SCHED[number] and SCHED[number + 1] bound."""
    pid, programs = me
    if SCHEDULED:
        first = gl.load(SCHED + pid)
        end = gl.load(SCHED + pid + 1)
        stride = 1
    else:
        first = pid
        end = n_tiles
        stride = programs
    return first, end, stride


@gluon.jit
def _tile_at(k, SCHED, SCHEDULED: gl.constexpr, me):
    """The launch-order tile of entry k (`_share`)."""
    return gl.load(SCHED + me[1] + 1 + k) if SCHEDULED else k


@gluon.jit
def _window(share, rec_tiles, RECORD: gl.constexpr):
    """The part of a program's share (`_share`) this launch runs: a program that stamps its
    steps runs its first rec_tiles entries stamped (RECORD 7) and the rest in a launch after
    it without stamps (RECORD 8, `_launch_split`); any other launch its whole share."""
    first, end, stride = share
    if RECORD == 7:
        end = gl.minimum(end, first + rec_tiles * stride)
    elif RECORD == 8:
        first = first + rec_tiles * stride
    return first, end, stride


# The recording (RECORD, `warpgroup_timeline`): each role of a recorded program (consumer
# warpgroups 0…C−1, then the loader) owns a region of int64 stamps of the SM's cycle counter:
# REC_STEP_EVENTS per ring step for its first `rec_steps` steps, REC_TILE_EVENTS per tile for
# its first `rec_tiles` tiles, then REC_HEADER: the counter and the global timer at its start and
# at its end in the launch that stamps its steps (one SM's counter: `Stamps.ns_per_cycle` scales
# by these), then at the program's last end (its rest's launch's, RECORD 8, where it has one).
# The codes each role writes are listed with `timeline_intervals`, which reads them.
# RECORD modes: 0 none; 1 every stamp a masked store in every program; 2 each role's loop
# compiled twice, taken per program: mode 3 in the programs that stamp their steps (each stamp
# behind a branch on the step or tile being among those kept) and mode 4 in the others (their
# start and end only, so their loop is the plain kernel's); 6 (`Recording.mode`, the default)
# launches side by side on two streams (`_launch_split`): for the programs that stamp their
# steps one of mode 7 (mode 3 over the first rec_tiles entries of each one's share), then one
# of mode 8 (the rest of their shares unstamped, their last end stamped), and beside them one of
# mode 5 (mode 4 numbered from rec_detail on) for the others, so that no kernel holds two
# copies of a loop. The branches in every program, as the kernel first had
# them, cost ping-pong launches 12-47% even where no program took them
# (benchmarks/results/recording-cost-probe-*.json); predicated stores in mode 3 spilled three
# ping-pong warpgroups' stamped loop (48 bytes of stack unmasked, none with branches), whose
# program 0 then ran its steps up to 3.6 times as long as the others; and mode 2's second copy
# alone cost three ping-pong warpgroups causal 10-13% on an H200, where one copy with the
# start and end stamps cost 0-2% (benchmarks/results/recording-modes-*.json).
REC_STEP_EVENTS = 9
REC_TILE_EVENTS = 8
REC_HEADER = 6
_REC_STEP = gl.constexpr(REC_STEP_EVENTS)
_REC_TILE = gl.constexpr(REC_TILE_EVENTS)
_REC_HEADER = gl.constexpr(REC_HEADER)


def record_size(rec_steps: int, rec_tiles: int) -> int:
    """Stamps of one role's region."""
    return rec_steps * REC_STEP_EVENTS + rec_tiles * REC_TILE_EVENTS + REC_HEADER


@gluon.jit
def _clock():
    return gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=gl.int64,
                                     is_pure=False, pack=1)


@gluon.jit
def _globaltimer():
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64,
                                     is_pure=False, pack=1)


@gluon.jit
def _recorder(REC, role, ROLES: gl.constexpr, rec_programs, rec_detail, rec_steps, rec_tiles,
              RECORD: gl.constexpr):
    """This role's stamps: (its region, whether this program stamps its steps and tiles (the
    first rec_detail), steps, tiles, whether it stamps its start and end (the first
    rec_programs))."""
    pid, _ = _program(rec_programs, rec_detail, RECORD)
    size = rec_steps * _REC_STEP + rec_tiles * _REC_TILE + _REC_HEADER
    base = REC + (gl.minimum(pid, rec_programs) * ROLES + role) * size
    edges = pid < rec_programs  # (unused where RECORD is 0)
    return base, _stamps_steps(rec_programs, rec_detail), rec_steps, rec_tiles, edges


@gluon.jit
def _stamp(rec, g, code: gl.constexpr, RECORD: gl.constexpr):
    """Event `code` of ring step g, RECORD only (the modes: above `record_size`)."""
    if RECORD == 3 or RECORD == 7:  # a program that stamps its steps: the first `steps`
        base, _, steps, _, _ = rec
        if g < steps:
            gl.store(base + g * _REC_STEP + code, _clock())
    elif RECORD == 1:  # a masked store in every program
        base, on, steps, _, _ = rec
        gl.store(base + g * _REC_STEP + code, _clock(), mask=on & (g < steps))


@gluon.jit
def _stamp_tile(rec, i, code: gl.constexpr, RECORD: gl.constexpr):
    """Event `code` of the role's tile i, RECORD only (the modes: above `record_size`)."""
    if RECORD == 3 or RECORD == 7:
        base, _, steps, tiles, _ = rec
        if i < tiles:
            gl.store(base + steps * _REC_STEP + i * _REC_TILE + code, _clock())
    elif RECORD == 1:
        base, on, steps, tiles, _ = rec
        at = base + steps * _REC_STEP + i * _REC_TILE + code
        gl.store(at, _clock(), mask=on & (i < tiles))


@gluon.jit
def _stamp_edge(rec, code: gl.constexpr, RECORD: gl.constexpr):
    """The role's start (code 0), end (code 2) or last end (code 4): the cycle counter and the
    global timer."""
    if RECORD:
        base, _, steps, tiles, on = rec
        at = base + steps * _REC_STEP + tiles * _REC_TILE + code
        gl.store(at, _clock(), mask=on)
        gl.store(at + 1, _globaltimer(), mask=on)


@gluon.jit
def _stamp_start(rec, RECORD: gl.constexpr):
    """The role's start (`_stamp_edge`), but for a stamping program's second launch (RECORD 8),
    whose start is the first one's."""
    if RECORD != 8:
        _stamp_edge(rec, 0, RECORD)


@gluon.jit
def _stamp_end(rec, ran, RECORD: gl.constexpr):
    """The role's end and last end (`_stamp_edge`). A stamping program's second launch
    (RECORD 8) may run on another SM, whose cycle counter is not the first launch's: it
    stamps only the last end, and only where it ran any of the program's tiles (`ran`); else the
    first launch's stands."""
    if RECORD != 8:
        _stamp_edge(rec, 2, RECORD)
        _stamp_edge(rec, 4, RECORD)
    elif ran:
        _stamp_edge(rec, 4, RECORD)


@gluon.jit
def _loader(args, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CONSUMERS: gl.constexpr,
            STAGES: gl.constexpr, CAUSAL: gl.constexpr, SCHEDULED: gl.constexpr,
            RECORD: gl.constexpr):
    """The loader's loop (`_loader_loop`), in RECORD mode 2 one copy for the programs that stamp
    their steps and one for those that do not (the modes: above `record_size`)."""
    if RECORD == 2:
        if _stamps_steps(args[20], args[21]):
            _loader_loop(args, BLOCK_M, BLOCK_N, CONSUMERS, STAGES, CAUSAL, SCHEDULED, 3)
        else:
            _loader_loop(args, BLOCK_M, BLOCK_N, CONSUMERS, STAGES, CAUSAL, SCHEDULED, 4)
    else:
        _loader_loop(args, BLOCK_M, BLOCK_N, CONSUMERS, STAGES, CAUSAL, SCHEDULED, RECORD)


@gluon.jit
def _stamps_steps(rec_programs, rec_detail):
    """Whether this program stamps its steps and tiles (the first rec_detail of them)."""
    pid = gl.program_id(0)
    return (pid < rec_programs) & (pid < rec_detail)


@gluon.jit
def _loader_loop(args, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CONSUMERS: gl.constexpr,
                 STAGES: gl.constexpr, CAUSAL: gl.constexpr, SCHEDULED: gl.constexpr,
                 RECORD: gl.constexpr):
    """One warp: for each of the program's tiles, each consumer's Q rows (once that consumer
    has finished with the previous tile's), then K and V of every step into the ring.
    RECORD stamps: per step 0 before K's slot is free, 1 K's copy issued, 2 V's copy issued;
    per tile c < CONSUMERS: consumer c's Q copy issued."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty,
     v_empty, N_Q, N_K, H, GROUP, n_tiles, band, SCHED, REC, rec_programs, rec_detail, rec_steps,
     rec_tiles) = args
    TILE_M: gl.constexpr = BLOCK_M * CONSUMERS
    rec = _recorder(REC, CONSUMERS, CONSUMERS + 1, rec_programs, rec_detail, rec_steps, rec_tiles,
                    RECORD)
    _stamp_start(rec, RECORD)
    g = 0  # steps of the ring so far, over every tile
    i = 0  # tiles so far
    me = _program(rec_programs, rec_detail, RECORD)
    first, end, stride = _window(_share(SCHED, n_tiles, SCHEDULED, me), rec_tiles, RECORD)
    for k in range(first, end, stride):
        t = _tile_at(k, SCHED, SCHEDULED, me)
        q_row, kv_row, _, _, _, n_steps = _tile(t, n_tiles, band, N_Q, N_K, H, GROUP, TILE_M,
                                                BLOCK_N, CAUSAL, False)
        for c in gl.static_range(CONSUMERS):
            mbarrier.wait(q_empty.index(c), (i & 1) ^ 1)  # a fresh barrier counts as freed once
            mbarrier.expect(q_ready.index(c), q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [q_row + c * BLOCK_M, 0], q_ready.index(c),
                                            q_smem.index(c))
            _stamp_tile(rec, i, c, RECORD)
        for j in range(n_steps):
            slot = g % STAGES
            free = ((g // STAGES) & 1) ^ 1
            _stamp(rec, g, 0, RECORD)
            mbarrier.wait(k_empty.index(slot), free)
            mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, 0],
                                            k_ready.index(slot), k_smem.index(slot))
            _stamp(rec, g, 1, RECORD)
            mbarrier.wait(v_empty.index(slot), free)
            mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [kv_row + j * BLOCK_N, 0],
                                            v_ready.index(slot), v_smem.index(slot))
            _stamp(rec, g, 2, RECORD)
            g += 1
        i += 1  # noqa: SIM113 (no enumerate in a kernel)
    _stamp_end(rec, first < end, RECORD)


@gluon.jit
def _scores(q, k_smem, k_ready, g, STAGES: gl.constexpr, s_layout: gl.constexpr,
            BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, KEYS: gl.constexpr,
            QK_DIM: gl.constexpr):
    """Issue S = Q Kᵀ (asynchronous) over the first KEYS of the BLOCK_N keys of the ring's step
    g, once it has landed. Below the tiles' width (QK_DIM, `qk_dim`) the product runs over the
    first QK_DIM columns alone, in two products of power-of-two widths: the columns past it are
    the copy engine's zeros."""
    slot = g % STAGES
    mbarrier.wait(k_ready.index(slot), (g // STAGES) & 1)
    k = k_smem.index(slot)
    if KEYS != BLOCK_N:
        k = k.slice(0, KEYS)
    zero = gl.zeros([BLOCK_M, KEYS], gl.float32, s_layout)
    HEAD_DIM: gl.constexpr = q.shape[1]
    if QK_DIM == HEAD_DIM:
        return warpgroup_mma(q, k.permute((1, 0)), zero, use_acc=False, is_async=True)
    else:
        LOW: gl.constexpr = HEAD_DIM // 2
        s = warpgroup_mma(q.slice(0, LOW, dim=1), k.slice(0, LOW, dim=1).permute((1, 0)), zero,
                          use_acc=False, is_async=True)
        HIGH: gl.constexpr = QK_DIM - LOW
        return warpgroup_mma(q.slice(LOW, HIGH, dim=1),
                             k.slice(LOW, HIGH, dim=1).permute((1, 0)), s, is_async=True)


@gluon.jit
def _softmax(s, m, l, col0, bounds, qk_scale2, s_layout: gl.constexpr, BLOCK_M: gl.constexpr,
             KEYS: gl.constexpr, MASKED: gl.constexpr):
    """Running max and sum for the KEYS keys from col0 (log2 domain): (P unnormalized in fp32,
    m, ℓ, α). MASKED 1 (causal): they cross the diagonal, key c visible to the warpgroup's row
    r iff c ≤ diag + r (which also keeps every key below N_K); MASKED 2 (not causal): they cross
    the end of the keys, c < N_K; MASKED 3 (causal, `WsConfig.merged`): as 1 where col0 is past
    the tile's unmasked steps, a branch decided at run time. bounds = (diag, N_K, the first
    masked column), scalars, so that no row vector stays live through the loop."""
    if MASKED == 3:
        diag, n_k, from_col = bounds
        if col0 >= from_col:
            cols = col0 + gl.arange(0, KEYS, layout=gl.SliceLayout(0, s_layout))
            rows = diag + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
            s = gl.where(cols[None, :] <= rows[:, None], s, float("-inf"))
        m_new = gl.maximum(m, gl.max(s, 1) * qk_scale2)
        m_sub = gl.where(m_new == float("-inf"), 0.0, m_new)  # a row that saw nothing yet
        p = gl.exp2(s * qk_scale2 - m_sub[:, None])
        alpha = gl.exp2(m - m_sub)
    elif MASKED:
        diag, n_k, _ = bounds
        cols = col0 + gl.arange(0, KEYS, layout=gl.SliceLayout(0, s_layout))
        if MASKED == 2:
            keep = (cols < n_k)[None, :]
        else:
            rows = diag + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
            keep = cols[None, :] <= rows[:, None]
        s = gl.where(keep, s * qk_scale2, float("-inf"))
        m_new = gl.maximum(m, gl.max(s, 1))
        m_sub = gl.where(m_new == float("-inf"), 0.0, m_new)  # a row that saw nothing yet
        p = gl.exp2(s - m_sub[:, None])
        alpha = gl.exp2(m - m_sub)
    else:
        m_new = gl.maximum(m, gl.max(s, 1) * qk_scale2)
        p = gl.exp2(s * qk_scale2 - m_new[:, None])
        alpha = gl.exp2(m - m_new)
    l = l * alpha + gl.sum(p, 1)
    return p, m_new, l, alpha


@gluon.jit
def _take_turn(turn, r, C: gl.constexpr, PINGPONG: gl.constexpr):
    """Ping-pong: wait until warpgroup C may issue its products of round r."""
    if PINGPONG:
        mbarrier.wait(turn.index(C), r & 1)


@gluon.jit
def _pass_turn(turn, C: gl.constexpr, CONSUMERS: gl.constexpr, PINGPONG: gl.constexpr):
    """Ping-pong: warpgroup C has issued this round's products; the next one may issue."""
    if PINGPONG:
        mbarrier.arrive(turn.index((C + 1) % CONSUMERS), count=1)


@gluon.jit
def _acc_zeros(BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, PV_DIM: gl.constexpr,
               o_layout: gl.constexpr, oh_layout: gl.constexpr):
    """O's accumulator at zero: one tensor, or (the first half of the tile, the rest)."""
    if PV_DIM == HEAD_DIM:
        return gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    else:
        LOW: gl.constexpr = HEAD_DIM // 2
        return (gl.zeros([BLOCK_M, LOW], gl.float32, o_layout),
                gl.zeros([BLOCK_M, PV_DIM - LOW], gl.float32, oh_layout))


@gluon.jit
def _pv(p, v, acc, PV_DIM: gl.constexpr):
    """Issue O += P V (asynchronous) over PV_DIM of V's columns: one product, or two (the first
    half of the tile's columns, then the rest, each into its part of the accumulator; then
    (the two parts, the second product's P), all three in flight until `_pv_wait`)."""
    HEAD_DIM: gl.constexpr = v.shape[1]
    if PV_DIM == HEAD_DIM:
        return warpgroup_mma(p, v, acc, is_async=True)
    else:
        LOW: gl.constexpr = HEAD_DIM // 2
        low = warpgroup_mma(p, v.slice(0, LOW, dim=1), acc[0], is_async=True)
        p_high = gl.convert_layout(p, gl.DotOperandLayout(operand_index=0,
                                                          parent=acc[1].type.layout, k_width=2))
        high = warpgroup_mma(p_high, v.slice(LOW, PV_DIM - LOW, dim=1), acc[1], is_async=True)
        return low, high, p_high


@gluon.jit
def _pv_wait(acc, p, HEAD_DIM: gl.constexpr, PV_DIM: gl.constexpr):
    """Wait for every product in flight: (the accumulator, P)."""
    if PV_DIM == HEAD_DIM:
        acc, p = warpgroup_mma_wait(0, deps=(acc, p))
        return acc, p
    else:
        low, high, _, p = warpgroup_mma_wait(0, deps=(acc[0], acc[1], acc[2], p))
        return (low, high), p


@gluon.jit
def _by_rows(x, alpha, DIVIDE: gl.constexpr):
    a = gl.convert_layout(alpha, gl.SliceLayout(1, x.type.layout))[:, None]
    return x / a if DIVIDE else x * a


@gluon.jit
def _rescaled(acc, alpha, HEAD_DIM: gl.constexpr, PV_DIM: gl.constexpr,
              DIVIDE: gl.constexpr = False):
    """The accumulator's rows times alpha (DIVIDE: divided by it), part by part."""
    if PV_DIM == HEAD_DIM:
        return _by_rows(acc, alpha, DIVIDE)
    else:
        return _by_rows(acc[0], alpha, DIVIDE), _by_rows(acc[1], alpha, DIVIDE)


@gluon.jit
def _o_to_stage(o_stage, acc, l, dtype: gl.constexpr, HEAD_DIM: gl.constexpr,
                PV_DIM: gl.constexpr):
    """O = acc / l per row, into its shared-memory stage (where P V ran over PV_DIM columns,
    the stage's columns past them are left as they are: the copy engine drops them)."""
    o = _rescaled(acc, l, HEAD_DIM, PV_DIM, True)
    if PV_DIM == HEAD_DIM:
        o_stage.store(o.to(dtype))
    else:
        LOW: gl.constexpr = HEAD_DIM // 2
        o_stage.slice(0, LOW, dim=1).store(o[0].to(dtype))
        o_stage.slice(LOW, PV_DIM - LOW, dim=1).store(o[1].to(dtype))


@gluon.jit
def _o_part_to_rows(O, o, row0, skip, col0, D, BLOCK_M: gl.constexpr, dtype: gl.constexpr):
    """One part of O (its columns from col0) to global memory at rows row0 on, but its first
    `skip` rows and the columns from D on."""
    layout: gl.constexpr = o.type.layout
    r = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    c = col0 + gl.arange(0, o.shape[1], layout=gl.SliceLayout(0, layout))
    row = (row0 + r).to(gl.int64)
    ptrs = O + row[:, None] * D + c[None, :]  # O is (B·H·N_q, D), D ≤ HEAD_DIM
    gl.store(ptrs, o.to(dtype), mask=(r >= skip)[:, None] & (c < D)[None, :])


@gluon.jit
def _o_to_rows(O, acc, l, row0, skip, D, BLOCK_M: gl.constexpr, dtype: gl.constexpr,
               HEAD_DIM: gl.constexpr, PV_DIM: gl.constexpr):
    """O = acc / l per row, stored with masks (`_o_part_to_rows`), a part at a time."""
    o = _rescaled(acc, l, HEAD_DIM, PV_DIM, True)
    if PV_DIM == HEAD_DIM:
        _o_part_to_rows(O, o, row0, skip, 0, D, BLOCK_M, dtype)
    else:
        _o_part_to_rows(O, o[0], row0, skip, 0, D, BLOCK_M, dtype)
        _o_part_to_rows(O, o[1], row0, skip, HEAD_DIM // 2, D, BLOCK_M, dtype)


@gluon.jit
def _pipelined_step(q, p, acc, m, l, j, g0, r0, bounds, qk_scale2, ring, turn, rec,
                    s_layout: gl.constexpr, p_layout: gl.constexpr, BLOCK_M: gl.constexpr,
                    BLOCK_N: gl.constexpr, STAGES: gl.constexpr, MASKED: gl.constexpr,
                    dtype: gl.constexpr, C: gl.constexpr,
                    CONSUMERS: gl.constexpr, PINGPONG: gl.constexpr, RECORD: gl.constexpr,
                    QK_DIM: gl.constexpr, PV_DIM: gl.constexpr):
    """Key block j (ring step g0 + j, round r0 + j) of the pipelined loop: issue Sⱼ, issue
    P_{j-1} V_{j-1}, wait for Sⱼ alone, run its softmax while the P V product is still on the
    tensor cores, then rescale. Returns the state with P of block j (in the operand layout)
    waiting for Vⱼ. RECORD stamps of step g: 0 begin, 1 turn taken, 2 Sⱼ issued (Kⱼ landed),
    3 V_{j-1} landed, 4 P_{j-1} V_{j-1} issued, 5 Sⱼ done, 6 softmax done, 7 P V done,
    8 rescale done."""
    k_smem, v_smem, k_ready, v_ready, k_empty, v_empty = ring
    g = g0 + j
    _stamp(rec, g, 0, RECORD)
    _take_turn(turn, r0 + j, C, PINGPONG)
    _stamp(rec, g, 1, RECORD)
    s = _scores(q, k_smem, k_ready, g, STAGES, s_layout, BLOCK_M, BLOCK_N, BLOCK_N, QK_DIM)
    _stamp(rec, g, 2, RECORD)
    prev = (g - 1) % STAGES
    mbarrier.wait(v_ready.index(prev), ((g - 1) // STAGES) & 1)
    _stamp(rec, g, 3, RECORD)
    acc = _pv(p, v_smem.index(prev), acc, PV_DIM)
    _pass_turn(turn, C, CONSUMERS, PINGPONG)
    _stamp(rec, g, 4, RECORD)
    # Sⱼ alone: the P V products issued after it (one, or two where split) stay in flight
    s = warpgroup_mma_wait(1 if q.shape[1] == PV_DIM else 2, deps=(s,))
    _stamp(rec, g, 5, RECORD)
    mbarrier.arrive(k_empty.index(g % STAGES), count=1)
    p_new, m, l, alpha = _softmax(s, m, l, j * BLOCK_N, bounds, qk_scale2, s_layout, BLOCK_M,
                                  BLOCK_N, MASKED)
    _stamp(rec, g, 6, RECORD)
    acc, p = _pv_wait(acc, p, q.shape[1], PV_DIM)
    _stamp(rec, g, 7, RECORD)
    mbarrier.arrive(v_empty.index(prev), count=1)
    acc = _rescaled(acc, alpha, q.shape[1], PV_DIM)
    p = gl.convert_layout(p_new.to(dtype), p_layout)
    _stamp(rec, g, 8, RECORD)
    return p, acc, m, l


@gluon.jit
def _plain_step(q, acc, m, l, j, g0, bounds, qk_scale2, ring, rec, s_layout: gl.constexpr,
                p_layout: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                STAGES: gl.constexpr, MASKED: gl.constexpr, dtype: gl.constexpr,
                KEYS: gl.constexpr, RECORD: gl.constexpr, QK_DIM: gl.constexpr,
                PV_DIM: gl.constexpr):
    """Key block j (ring step g0 + j) without pipelining: Sⱼ, its softmax, the rescale, then
    P V, each waited for. KEYS < BLOCK_N: only the block's first KEYS keys (the causal
    diagonal's last block, where no row sees the rest; s_layout is then KEYS wide, and m and ℓ
    come and go in its row layout). RECORD stamps of step g: 0 begin, 2 Sⱼ issued (Kⱼ
    landed), 5 Sⱼ done, 6 softmax and rescale done, 3 Vⱼ landed, 4 Pⱼ Vⱼ issued, 7 done."""
    k_smem, v_smem, k_ready, v_ready, k_empty, v_empty = ring
    g = g0 + j
    slot = g % STAGES
    _stamp(rec, g, 0, RECORD)
    s = _scores(q, k_smem, k_ready, g, STAGES, s_layout, BLOCK_M, BLOCK_N, KEYS, QK_DIM)
    _stamp(rec, g, 2, RECORD)
    s = warpgroup_mma_wait(0, deps=(s,))
    _stamp(rec, g, 5, RECORD)
    mbarrier.arrive(k_empty.index(slot), count=1)
    p, m, l, alpha = _softmax(s, m, l, j * BLOCK_N, bounds, qk_scale2, s_layout, BLOCK_M, KEYS,
                              MASKED)
    acc = _rescaled(acc, alpha, q.shape[1], PV_DIM)
    p = gl.convert_layout(p.to(dtype), p_layout)
    _stamp(rec, g, 6, RECORD)
    mbarrier.wait(v_ready.index(slot), (g // STAGES) & 1)
    _stamp(rec, g, 3, RECORD)
    v = v_smem.index(slot)
    if KEYS != BLOCK_N:
        v = v.slice(0, KEYS)
    acc = _pv(p, v, acc, PV_DIM)
    _stamp(rec, g, 4, RECORD)
    acc, p = _pv_wait(acc, p, q.shape[1], PV_DIM)
    _stamp(rec, g, 7, RECORD)
    mbarrier.arrive(v_empty.index(slot), count=1)
    return acc, m, l


@gluon.jit
def _consumer(args, C: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              PIPELINE: gl.constexpr, CONSUMERS: gl.constexpr, PINGPONG: gl.constexpr,
              HALF: gl.constexpr, MERGED: gl.constexpr, SCHEDULED: gl.constexpr,
              RECORD: gl.constexpr, KEY_EDGE: gl.constexpr, Q_EDGE: gl.constexpr,
              QK_DIM: gl.constexpr, PV_DIM: gl.constexpr):
    """Warpgroup C's loop (`_consumer_loop`), in RECORD mode 2 one copy for the programs that
    stamp their steps and one for those that do not (the modes: above `record_size`)."""
    if RECORD == 2:
        if _stamps_steps(args[22], args[23]):
            _consumer_loop(args, C, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL, PIPELINE,
                           CONSUMERS, PINGPONG, HALF, MERGED, SCHEDULED, 3, KEY_EDGE, Q_EDGE,
                           QK_DIM, PV_DIM)
        else:
            _consumer_loop(args, C, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL, PIPELINE,
                           CONSUMERS, PINGPONG, HALF, MERGED, SCHEDULED, 4, KEY_EDGE, Q_EDGE,
                           QK_DIM, PV_DIM)
    else:
        _consumer_loop(args, C, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL, PIPELINE, CONSUMERS,
                       PINGPONG, HALF, MERGED, SCHEDULED, RECORD, KEY_EDGE, Q_EDGE, QK_DIM, PV_DIM)


@gluon.jit
def _consumer_loop(args, C: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                   BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                   PIPELINE: gl.constexpr, CONSUMERS: gl.constexpr, PINGPONG: gl.constexpr,
                   HALF: gl.constexpr, MERGED: gl.constexpr, SCHEDULED: gl.constexpr,
                   RECORD: gl.constexpr, KEY_EDGE: gl.constexpr, Q_EDGE: gl.constexpr,
                   QK_DIM: gl.constexpr, PV_DIM: gl.constexpr):
    """Warpgroup C: for each of the program's tiles, its BLOCK_M query rows through every step,
    then their O and LSE.

    The ring's steps g and the ping-pong rounds r count on over the program's tiles. With
    PINGPONG the warpgroups issue their products in turn, rounds n_steps + 1 per tile (S₀;
    then Sⱼ with P_{j-1} V_{j-1}; then the last P V): C waits for turn C, the previous
    warpgroup's pass, and passes to C + 1; the last one passes round 0 to the first at the start.
    Q's stage is handed back once the tile's last S product is done (the loader fetches the next
    tile's Q under this one's last P V and epilogue); O leaves through a stage of its own, its
    copy waited for only when the stage is next needed.

    RECORD stamps per ring step: `_pipelined_step`'s or `_plain_step`'s (pipelined, the tile's
    S₀ at its first step: 0, 1, 2, 5, 6); per tile: 0 before Q is waited for, 1 Q landed,
    2 the last V landed, 3 the last P V issued, 4 done (pipelined), 5 the epilogue begins,
    6 O's copy issued.
    """
    (o_desc, q_smem, o_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty,
     turn, LSE, N_Q, N_K, H, GROUP, n_tiles, band, qk_scale2, SCHED, REC, rec_programs, rec_detail,
     rec_steps, rec_tiles, O, D) = args
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    # O's accumulator: one part HEAD_DIM wide, or where P V runs over PV_DIM < HEAD_DIM columns
    # (`pv_dim`), one half the tile wide and one for the rest (`_acc_zeros`)
    PV_LOW: gl.constexpr = HEAD_DIM if PV_DIM == HEAD_DIM else HEAD_DIM // 2
    PV_HIGH: gl.constexpr = 16 if PV_DIM == HEAD_DIM else PV_DIM - PV_LOW  # (16: unused)
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, PV_LOW, 16])
    oh_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, PV_HIGH, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    half_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, BLOCK_N // 2, 16])
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_h: gl.constexpr = gl.SliceLayout(1, half_layout)
    dtype: gl.constexpr = o_desc.dtype
    TILE_M: gl.constexpr = BLOCK_M * CONSUMERS
    MASK: gl.constexpr = 1 if CAUSAL else 2  # the masked steps' mask (`_softmax`)
    # the first loop's: merged (causal), that loop runs every step, masking where it must
    FIRST: gl.constexpr = 3 if MERGED else False

    q = q_smem.index(C)
    o_stage = o_smem.index(C)
    ring = (k_smem, v_smem, k_ready, v_ready, k_empty, v_empty)
    rec = _recorder(REC, C, CONSUMERS + 1, rec_programs, rec_detail, rec_steps, rec_tiles, RECORD)
    _stamp_start(rec, RECORD)
    if PIPELINE and C == CONSUMERS - 1:
        _pass_turn(turn, C, CONSUMERS, PINGPONG)  # round 0 starts at the first warpgroup
    g = 0  # ring steps so far
    i = 0  # tiles so far (so g + i rounds so far)
    me = _program(rec_programs, rec_detail, RECORD)
    first, end, stride = _window(_share(SCHED, n_tiles, SCHEDULED, me), rec_tiles, RECORD)
    for k in range(first, end, stride):
        t = _tile_at(k, SCHED, SCHEDULED, me)
        _, _, m0, n_full, n_whole, n_steps = _tile(t, n_tiles, band, N_Q, N_K, H, GROUP, TILE_M,
                                                   BLOCK_N, CAUSAL, HALF)
        # key c visible to row r iff c ≤ diag + r; steps from column n_full·BLOCK_N on masked
        bounds = (m0 + C * BLOCK_M + N_K - N_Q, N_K, n_full * BLOCK_N)
        m = gl.full([BLOCK_M], float("-inf"), gl.float32, row_s)
        l = gl.zeros([BLOCK_M], gl.float32, row_s)
        acc = _acc_zeros(BLOCK_M, HEAD_DIM, PV_DIM, o_layout, oh_layout)
        _stamp_tile(rec, i, 0, RECORD)
        mbarrier.wait(q_ready.index(C), i & 1)
        _stamp_tile(rec, i, 1, RECORD)
        r0 = g + i
        # Steps [0, n_full) need no mask; the causal diagonal's [n_full, n_steps) do, and a last
        # block that N_K does not fill (two loops, so the unmasked one carries none of the
        # mask's registers).
        if PIPELINE:
            # S₀ and its softmax first (masked where causal, as it may cross the diagonal, or
            # where N_K does not fill its last block).
            _stamp(rec, g, 0, RECORD)
            _take_turn(turn, r0, C, PINGPONG)
            _stamp(rec, g, 1, RECORD)
            s = _scores(q, k_smem, k_ready, g, STAGES, s_layout, BLOCK_M, BLOCK_N, BLOCK_N,
                        QK_DIM)
            _pass_turn(turn, C, CONSUMERS, PINGPONG)
            _stamp(rec, g, 2, RECORD)
            s = warpgroup_mma_wait(0, deps=(s,))
            _stamp(rec, g, 5, RECORD)
            mbarrier.arrive(k_empty.index(g % STAGES), count=1)
            p, m, l, _ = _softmax(s, m, l, 0, bounds, qk_scale2, s_layout, BLOCK_M, BLOCK_N,
                                  MASK if CAUSAL or KEY_EDGE else 0)
            p = gl.convert_layout(p.to(dtype), p_layout)
            _stamp(rec, g, 6, RECORD)
            for j in range(1, n_steps if MERGED else n_full):
                p, acc, m, l = _pipelined_step(q, p, acc, m, l, j, g, r0, bounds, qk_scale2,
                                               ring, turn, rec, s_layout, p_layout,
                                               BLOCK_M, BLOCK_N, STAGES, FIRST, dtype, C,
                                               CONSUMERS, PINGPONG, RECORD, QK_DIM, PV_DIM)
            if (CAUSAL or KEY_EDGE) and not MERGED:
                for j in range(gl.maximum(n_full, 1), n_steps):
                    p, acc, m, l = _pipelined_step(q, p, acc, m, l, j, g, r0, bounds,
                                                   qk_scale2, ring, turn, rec, s_layout,
                                                   p_layout, BLOCK_M, BLOCK_N, STAGES,
                                                   MASK, dtype, C, CONSUMERS, PINGPONG, RECORD,
                                                   QK_DIM, PV_DIM)
            mbarrier.arrive(q_empty.index(C), count=1)  # every S product of the tile is done
            last = g + n_steps - 1
            mbarrier.wait(v_ready.index(last % STAGES), (last // STAGES) & 1)
            _stamp_tile(rec, i, 2, RECORD)
            _take_turn(turn, r0 + n_steps, C, PINGPONG)
            acc = _pv(p, v_smem.index(last % STAGES), acc, PV_DIM)
            _pass_turn(turn, C, CONSUMERS, PINGPONG)
            _stamp_tile(rec, i, 3, RECORD)
            acc, p = _pv_wait(acc, p, HEAD_DIM, PV_DIM)
            _stamp_tile(rec, i, 4, RECORD)
            mbarrier.arrive(v_empty.index(last % STAGES), count=1)
        else:
            for j in range(n_whole if MERGED else n_full):
                acc, m, l = _plain_step(q, acc, m, l, j, g, bounds, qk_scale2, ring, rec,
                                        s_layout, p_layout, BLOCK_M, BLOCK_N, STAGES,
                                        FIRST, dtype, BLOCK_N, RECORD, QK_DIM, PV_DIM)
            if (CAUSAL or KEY_EDGE) and not MERGED:
                for j in range(n_full, n_whole):
                    acc, m, l = _plain_step(q, acc, m, l, j, g, bounds, qk_scale2, ring, rec,
                                            s_layout, p_layout, BLOCK_M, BLOCK_N,
                                            STAGES, MASK, dtype, BLOCK_N, RECORD, QK_DIM, PV_DIM)
            # (HALF, a constexpr, leaves the half step out of other kernels altogether)
            if CAUSAL and HALF:  # noqa: SIM102
                if n_whole < n_steps:
                    acc, m_h, l_h = _plain_step(q, acc, gl.convert_layout(m, row_h),
                                                gl.convert_layout(l, row_h), n_whole, g, bounds,
                                                qk_scale2, ring, rec, half_layout, p_layout,
                                                BLOCK_M, BLOCK_N, STAGES, True, dtype,
                                                BLOCK_N // 2, RECORD, QK_DIM, PV_DIM)
                    m = gl.convert_layout(m_h, row_s)
                    l = gl.convert_layout(l_h, row_s)
            mbarrier.arrive(q_empty.index(C), count=1)

        # (recomputed here rather than held through the loops, which have no register to spare)
        _stamp_tile(rec, i, 5, RECORD)
        q_row, _, m0, _, _, _ = _tile(t, n_tiles, band, N_Q, N_K, H, GROUP, TILE_M, BLOCK_N,
                                      CAUSAL, False)
        seen = l > 0
        l_safe = gl.where(seen, l, 1.0)
        lse = gl.where(seen, (m + gl.log2(l_safe)) * 0.6931471805599453, float("-inf"))
        # A warpgroup whose rows all lie above row 0 (the top tile) computed nothing of this
        # head's and stores nothing; where BLOCK_M does not divide N_Q (Q_EDGE), the top tile's
        # warpgroup that straddles row 0 stores its rows from 0 on, with masks.
        first_row = m0 + C * BLOCK_M
        if first_row >= 0:
            local = C * BLOCK_M + gl.arange(0, BLOCK_M, layout=row_s)
            gl.store(LSE + q_row + local, lse)  # LSE is (B·H·N_q) in the same row order as Q
            tma.store_wait(0)  # the previous tile's O has left the stage
            _o_to_stage(o_stage, acc, l_safe, dtype, HEAD_DIM, PV_DIM)
            fence_async_shared()
            tma.async_copy_shared_to_global(o_desc, [q_row + C * BLOCK_M, 0], o_stage)
        elif Q_EDGE:  # noqa: SIM102 (a constexpr, then a runtime test)
            if first_row + BLOCK_M > 0:
                r_s = gl.arange(0, BLOCK_M, layout=row_s)
                gl.store(LSE + q_row + C * BLOCK_M + r_s, lse, mask=r_s >= -first_row)
                _o_to_rows(O, acc, l_safe, q_row + C * BLOCK_M, -first_row, D, BLOCK_M,
                           dtype, HEAD_DIM, PV_DIM)
        _stamp_tile(rec, i, 6, RECORD)
        g += n_steps
        i += 1  # noqa: SIM113 (no enumerate in a kernel)
    tma.store_wait(0)
    _stamp_end(rec, first < end, RECORD)


@gluon.jit
def _attn_fwd_ws(q_desc, k_desc, v_desc, o_desc, LSE, qk_scale2, H, GROUP, N_Q, N_K, n_tiles, band,
                 SCHED, REC, rec_programs, rec_detail, rec_steps, rec_tiles, O, D,
                 HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                 CONSUMERS: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                 PIPELINE: gl.constexpr, PINGPONG: gl.constexpr, HALF: gl.constexpr,
                 MERGED: gl.constexpr, SCHEDULED: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                 RECORD: gl.constexpr, KEY_EDGE: gl.constexpr, Q_EDGE: gl.constexpr,
                 O_IN_Q: gl.constexpr, QK_DIM: gl.constexpr, PV_DIM: gl.constexpr):
    """Programs take tiles t = program_id, + num_programs, … < n_tiles (one each, or, launched
    persistent, one program per SM slot looping over its share; SCHEDULED: the share the host's
    schedule in SCHED gives it). RECORD: programs below rec_detail stamp their phases into REC,
    those below rec_programs their start and end (`_recorder`; none of it is compiled otherwise)."""
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [CONSUMERS, BLOCK_M, HEAD_DIM],
                                       q_desc.layout)
    if O_IN_Q:  # a program's one tile: O leaves through its Q's stage, free after the last S
        o_smem = q_smem
    else:
        o_smem = gl.allocate_shared_memory(o_desc.dtype, [CONSUMERS, BLOCK_M, HEAD_DIM],
                                           o_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for c in gl.static_range(CONSUMERS):
        mbarrier.init(q_ready.index(c), count=1)
        mbarrier.init(q_empty.index(c), count=1)
        mbarrier.init(turn.index(c), count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(k_empty.index(s), count=CONSUMERS)
        mbarrier.init(v_empty.index(s), count=CONSUMERS)

    shared = (o_desc, q_smem, o_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty,
              v_empty, turn, LSE, N_Q, N_K, H, GROUP, n_tiles, band, qk_scale2, SCHED, REC,
              rec_programs, rec_detail, rec_steps, rec_tiles, O, D)
    loads = (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready,
             k_empty, v_empty, N_Q, N_K, H, GROUP, n_tiles, band, SCHED, REC, rec_programs,
             rec_detail, rec_steps, rec_tiles)
    if CONSUMERS == 1:
        gl.warp_specialize([(_consumer, (shared, 0, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL,
                                         PIPELINE, CONSUMERS, PINGPONG, HALF, MERGED,
                                         SCHEDULED, RECORD, KEY_EDGE, Q_EDGE, QK_DIM, PV_DIM)),
                            (_loader, (loads, BLOCK_M, BLOCK_N, CONSUMERS, STAGES, CAUSAL,
                                       SCHEDULED, RECORD))],
                           [1], [_LOADER_REGS])
    elif CONSUMERS == 2:
        gl.warp_specialize([(_consumer, (shared, 0, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL,
                                         PIPELINE, CONSUMERS, PINGPONG, HALF, MERGED,
                                         SCHEDULED, RECORD, KEY_EDGE, Q_EDGE, QK_DIM, PV_DIM)),
                            (_consumer, (shared, 1, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL,
                                         PIPELINE, CONSUMERS, PINGPONG, HALF, MERGED,
                                         SCHEDULED, RECORD, KEY_EDGE, Q_EDGE, QK_DIM, PV_DIM)),
                            (_loader, (loads, BLOCK_M, BLOCK_N, CONSUMERS, STAGES, CAUSAL,
                                       SCHEDULED, RECORD))],
                           [4, 1], [CONSUMER_REGS, _LOADER_REGS])
    else:
        gl.warp_specialize([(_consumer, (shared, 0, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL,
                                         PIPELINE, CONSUMERS, PINGPONG, HALF, MERGED,
                                         SCHEDULED, RECORD, KEY_EDGE, Q_EDGE, QK_DIM, PV_DIM)),
                            (_consumer, (shared, 1, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL,
                                         PIPELINE, CONSUMERS, PINGPONG, HALF, MERGED,
                                         SCHEDULED, RECORD, KEY_EDGE, Q_EDGE, QK_DIM, PV_DIM)),
                            (_consumer, (shared, 2, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL,
                                         PIPELINE, CONSUMERS, PINGPONG, HALF, MERGED,
                                         SCHEDULED, RECORD, KEY_EDGE, Q_EDGE, QK_DIM, PV_DIM)),
                            (_loader, (loads, BLOCK_M, BLOCK_N, CONSUMERS, STAGES, CAUSAL,
                                       SCHEDULED, RECORD))],
                           [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, _LOADER_REGS])
# fmt: on


# Whether S = Q Kᵀ (`qk_dim`) and P V (`pv_dim`) skip the padded columns; switches for
# benchmarks/qk_split.py.
SPLIT_QK = True
SPLIT_PV = True


def qk_dim(d: int) -> int:
    """The columns S = Q Kᵀ runs over for head_dim d (`occupancy.qk_columns`: d rounded up to
    16 where two products of power-of-two widths cover it, else the tile's width; P V's are
    `pv_dim`). SPLIT_QK off: the tile's width always."""
    return qk_columns(d) if SPLIT_QK else pad_dim(d)


def pv_dim(d: int) -> int:
    """The columns P V and O's accumulator cover for head_dim d: `pv_columns` (192 of 256, the
    accumulator then in two parts, half the tile and the rest), or with SPLIT_PV off the tile's
    width."""
    return pv_columns(d) if SPLIT_PV else pad_dim(d)


def supports(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: WsConfig) -> str | None:
    """None when this kernel can run the call with `cfg`, else the reason it cannot."""
    if q.dtype not in _GL_DTYPES:
        return f"needs fp16 or bf16, got {q.dtype}"
    d = q.shape[3]
    if pad_dim(d) not in (64, 128, 256) or d % 8 != 0:
        return f"needs a head_dim that is a multiple of 8 from 40 to 256, got {d}"
    if q.shape[2] == 1 and _ONE_QUERY_BUG:
        return "needs N_q > 1 with Triton 3.6 (its compiler fails on a one-query launch)"
    need = cfg.shared_bytes(pad_dim(d))
    if need > SHARED_LIMIT or cfg.ctas * (need + 1024) > SHARED_PER_SM:
        return f"needs {need} bytes of shared memory per CTA with {cfg} at head_dim {d}"
    return copy_engine_reason(q, k, v)


def copy_engine_reason(*xs: torch.Tensor) -> str | None:
    """Why the copy engine on a Hopper GPU cannot move these (B, H, N, d) tensors as (B·H·N, d)
    tiles, or None (the Gluon kernels' common condition)."""
    if not all(flat_rows(x) and x.stride(3) == 1 for x in xs):
        return "needs inputs that flatten to (B·H·N, d)"
    if not all(x.stride(2) % 8 == 0 and x.data_ptr() % 16 == 0 for x in xs):
        return "needs rows that start on 16-byte boundaries (the copy engine's alignment)"
    if not xs[0].is_cuda or not _hopper(xs[0].device.index or 0):
        return "needs a Hopper GPU (compute capability 9.x)"
    return None


@per_table
def tuned_config(
    gpu: str, d_pad: int, causal: bool, seq_len: int, edge: bool = False
) -> WsConfig | None:
    """The configuration `gpu`'s tuned table gives (head_dim, causal, length bucket), where its
    route there is this kernel ("fwd-route/…" → "ws"); else None (the Triton kernel). `edge`:
    lengths that fill no 64-row tile, which take the bucket's "ws-edge" entry where there is one
    (on an H100 at N = 1000, d = 128, the N = 1024 entries ran 0.83-0.88x sdpa-cudnn, persistent
    ping-pong in bands of 8 heads 0.98-1.05x; benchmarks/results/forward-odd-*.json)."""
    keys = tuned_keys(table_key("fwd-route", 16, d_pad, causal), seq_len)
    if next((r for r in (route(gpu, k) for k in keys) if r is not None), None) != "ws":
        return None
    keys = tuned_keys(table_key("fwd", 16, d_pad, causal), seq_len)
    entry = tuned_entry(gpu, "ws", keys, edge)
    return None if entry is None else WsConfig.from_list(entry)


def tuned(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> WsConfig | None:
    """The tuned configuration for this call where the table routes it here and it qualifies
    (`supports`); else None. FLASHSCOPE_WS=0 in the environment keeps every call on Triton."""
    if interpreting() or not q.is_cuda or os.environ.get("FLASHSCOPE_WS") == "0":
        return None
    if q.dtype not in _GL_DTYPES:
        return None
    n_q, n_k = q.shape[2], k.shape[2]
    edge = fills_no_tile(n_q, n_k)
    cfg = tuned_config(gpu_name(), pad_dim(q.shape[3]), causal, max(n_q, n_k), edge)
    return cfg if cfg is not None and supports(q, k, v, cfg) is None else None


def tuned_configs(gpu: str | None = None) -> list[tuple[WsConfig, int]]:
    """(configuration, head_dim) of every bucket a tuned table routes here: `gpu`'s, or all."""
    from flashscope.kernels.config import tuned_table

    gpus = tuned_table() if gpu is None else {gpu: tuned_table().get(gpu, {})}
    found = {
        (tuple(entry), int(key.split("/")[2].removeprefix("d")))  # "fwd/16/d128/full/n2048"
        for table in gpus.values() for section in ("ws", "ws-edge")
        for key, entry in table.get(section, {}).items()
    }  # fmt: skip
    return [(WsConfig.from_list(list(c)), d) for c, d in sorted(found)]


def _half(cfg: WsConfig, causal: bool) -> bool:
    """Whether the kernel for `cfg` runs a causal tile's last step over half a block where
    that is all the tile sees (`HALF_STEPS`)."""
    return causal and HALF_STEPS and not cfg.pipeline and cfg.tile_m % cfg.block_n != 0


def tile_rows(cfg: WsConfig, rows: int, n_q: int) -> tuple[np.ndarray, np.ndarray]:
    """Each causal tile's (batch, head) row and its rank in that row, in launch order
    (`_tile`'s arithmetic, on the host): rank 0 for the row's heaviest (bottom) query block."""
    t = np.arange(cfg.tiles(rows, n_q))
    n_mb = -(-n_q // cfg.tile_m)
    band = cfg.band or rows
    first = t // (band * n_mb) * band
    size = np.minimum(band, rows - first)
    within = t - first * n_mb
    rank = within // size
    return first + within - rank * size, rank


def tile_ranks(cfg: WsConfig, rows: int, n_q: int) -> np.ndarray:
    """Each causal tile's rank in its (batch, head) row, in launch order (`tile_rows`)."""
    return tile_rows(cfg, rows, n_q)[1]


def tile_costs(cfg: WsConfig, rows: int, n_q: int, n_k: int, halves: bool) -> np.ndarray:
    """The causal tiles of a launch in launch order (`_tile`'s arithmetic, on the host), each
    costed for `schedule`: its key blocks (with `halves`, the kernel's HALF, a half step as
    half), `TILE_FIXED_COST` more for the tile's own work (its Q, O and LSE, the pipeline
    filling and draining) and `MASKED_STEP_COST` more for each step the diagonal crosses."""
    m0 = n_q - (tile_ranks(cfg, rows, n_q) + 1) * cfg.tile_m  # = N_Q − (n_mb − pid_m)·TILE_M
    hi = np.clip(np.minimum(n_k, m0 + cfg.tile_m + n_k - n_q), 0, None)
    steps = np.maximum(-(-hi // cfg.block_n), 1)
    full = np.minimum(np.clip(m0 + n_k - n_q + 1, 0, None) // cfg.block_n, hi // cfg.block_n)
    if halves:
        half = (full < steps) & (hi - (steps - 1) * cfg.block_n <= cfg.block_n // 2)
        steps = steps - 0.5 * half
    masked = np.maximum(np.ceil(steps) - full, 0)
    return steps + TILE_FIXED_COST + MASKED_STEP_COST * masked


def schedule(costs: np.ndarray, programs: int) -> np.ndarray:
    """Tiles (in launch order, with their costs) shared among `programs` programs as a dynamic
    scheduler would share them if the costs were times: each tile, in order, to the program
    that would be free first (ties to the lowest), so that every program's list keeps launch
    order (bands of heads, heaviest first). Returned as one int32 array: programs + 1 offsets,
    then the tiles program by program (the kernel's SCHED)."""
    free = [(0.0, p) for p in range(programs)]
    owner = np.empty(len(costs), dtype=np.int64)
    for t, cost in enumerate(costs.tolist()):
        at, p = heapq.heappop(free)
        owner[t] = p
        heapq.heappush(free, (at + cost, p))
    order = np.argsort(owner, kind="stable")  # each program's tiles, in launch order
    offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=programs))])
    return np.concatenate([offsets, order]).astype(np.int32)


@lru_cache(maxsize=32)
def _schedule_tensor(
    cfg: WsConfig,
    rows: int,
    n_q: int,
    n_k: int,
    halves: bool,
    programs: int,
    device: torch.device,
    costs: tuple[float, float],  # (TILE_FIXED_COST, MASKED_STEP_COST): the cache's key
) -> torch.Tensor:
    sched = schedule(tile_costs(cfg, rows, n_q, n_k, halves), programs)
    return torch.from_numpy(sched).to(device)


@dataclass(frozen=True)
class Recording:
    """Where a recorded launch stamps: `programs` × (consumers + 1) regions of
    `record_size(steps, tiles)` int64 each (-1 where nothing was stamped); the first `detail`
    programs stamp their steps and tiles, the others their roles' start and end only."""

    buffer: torch.Tensor
    programs: int
    steps: int
    tiles: int
    detail: int
    mode: int = 6  # 6: launches side by side, the programs that stamp their steps in their own;
    # 2: one launch, each role's loop in two copies, taken per program; 1: every stamp a
    # masked store (the RECORD modes: above `record_size`)


@lru_cache
def _layout(rows: int, d: int, dtype: torch.dtype):
    """The swizzled shared-memory layout of a (rows, d) tile (the copy engine's and wgmma's)."""
    return gl.NVMMASharedLayout.get_default_for([rows, d], _GL_DTYPES[dtype])


@lru_cache
def _sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@lru_cache
def _hopper(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] == 9


# A Gluon TensorDescriptor checks its geometry when it is built (about 5 µs of the host's time,
# four times a forward call), and a call's descriptors repeat an earlier call's geometry on
# other tensors. So one checked descriptor per geometry is kept, without its tensor (kept, it
# would hold the tensor's memory), and each call gets a copy on its own tensor; the one check
# that depends on the tensor, its 16-byte alignment, is made on every call.
_FRAMES: dict[tuple, dict] = {}
MAX_FRAMES = 256  # geometries remembered; the table starts again when full


def framed(key: tuple, x: torch.Tensor, build: Callable[[], Any]) -> Any:
    """`build()`, a TensorDescriptor of x, or a copy on x of the one built for `key` (which must
    name everything but x that `build` depends on)."""
    fields = _FRAMES.get(key)
    if fields is None or x.data_ptr() % 16:  # unaligned: built, and refused, by Triton
        desc = build()
        if len(_FRAMES) >= MAX_FRAMES:
            _FRAMES.clear()
        _FRAMES[key] = {**vars(desc), "base": None}
        return desc
    desc = object.__new__(TensorDescriptor)
    vars(desc).update(fields)
    desc.base = x
    return desc


def _descriptor(x: torch.Tensor, rows: int):
    """A descriptor of x flattened to (B·H·N, d), moved in (rows, pad_dim(d)) tiles: past column
    d the copy engine fills the tiles it loads with zeros and drops the columns of those it
    stores, so a head_dim that is not a power of two runs at the next one up."""
    return framed((x.shape, x.stride(2), x.dtype, rows), x, partial(_new_descriptor, x, rows))


def _new_descriptor(x: torch.Tensor, rows: int):
    n, d = x.shape[0] * x.shape[1] * x.shape[2], x.shape[3]
    d_pad = pad_dim(d)
    layout = _layout(rows, d_pad, x.dtype)
    return TensorDescriptor(x, [n, d], [x.stride(2), 1], [rows, d_pad], layout)


def _arguments(
    q,
    k,
    v,
    o,
    lse,
    causal: bool,
    scale: float,
    cfg: WsConfig,
    sms: int,
    record: Recording | None = None,
) -> tuple:
    """The kernel's (positional arguments, constexprs, launch options) for one call on a GPU of
    `sms` SMs; `record`: the recorded variant, stamping into its buffer."""
    plan = _geometry(q, k, causal, cfg, sms, record)
    return _planned(plan, q, k, v, o, lse, scale, cfg, record), plan.constexprs, plan.options


def _geometry(q, k, causal: bool, cfg: WsConfig, sms: int, record: Recording | None = None):
    """What the call's shapes, mask, configuration, device and recording fix (`_Plan`, without
    fastlaunch's key)."""
    h, n_q, n_k = q.shape[1], q.shape[2], k.shape[2]
    launch_regs, consumer_regs = cfg.registers()
    rows = q.shape[0] * h
    tiles = cfg.tiles(rows, n_q)
    scheduled = causal and cfg.persistent and SCHEDULE_TILES and tiles <= MAX_SCHEDULED_TILES
    programs = cfg.programs(tiles, sms)
    halves = _half(cfg, causal)
    schedule = (
        _schedule_tensor(
            cfg, rows, n_q, n_k, halves, programs, q.device, (TILE_FIXED_COST, MASKED_STEP_COST)
        )
        if scheduled
        else None
    )
    constexprs = dict(
        HEAD_DIM=pad_dim(q.shape[3]),
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        CONSUMERS=cfg.consumers,
        STAGES=cfg.stages,
        CAUSAL=causal,
        PIPELINE=cfg.pipeline,
        PINGPONG=cfg.pingpong,
        HALF=halves,
        MERGED=causal and cfg.merged,
        SCHEDULED=scheduled,
        CONSUMER_REGS=consumer_regs,
        RECORD=0 if record is None else record.mode,
        KEY_EDGE=n_k % cfg.block_n != 0,
        Q_EDGE=n_q % cfg.block_m != 0,
        O_IN_Q=cfg.o_in_q(pad_dim(q.shape[3])),
        QK_DIM=qk_dim(q.shape[3]),
        PV_DIM=pv_dim(q.shape[3]),
    )
    sizes = (h, h // k.shape[1], n_q, n_k, tiles, cfg.band or rows)
    options = {"num_warps": 4, "maxnreg": launch_regs}
    return _Plan((programs,), sizes, schedule, constexprs, options)


def launch_forward_ws(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float,
    cfg: WsConfig,
    *,
    checked: bool = False,
    record: Recording | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) of checked inputs by the warp-specialized kernel; ValueError where it cannot.

    `checked`: the caller has had `supports` pass for these inputs and `cfg` (`tuned` does);
    `record`: run the recorded variant (`flashscope.kernels.warpgroups`).
    """
    why = None if checked else supports(q, k, v, cfg)
    if why is not None:
        raise ValueError(f"the warp-specialized forward {why}")
    b, h, n_q, _ = q.shape
    o = output(q.shape, q.dtype, q.device)
    lse = output((b, h, n_q), torch.float32, q.device)
    if record is not None:
        plan = _geometry(q, k, causal, cfg, _sms(q.device.index or 0), record)
        args = _planned(plan, q, k, v, o, lse, scale, cfg, record)
        if record.mode == SPLIT_RECORDING:
            _launch_split(plan, args, record)
        else:
            launch(_attn_fwd_ws, plan.grid, args, plan.constexprs, plan.options)
        return o, lse
    where = (q.shape, k.shape, v.shape, q.stride(2), k.stride(2), v.stride(2), q.dtype, causal,
             cfg, q.device, torch.cuda.current_device(), HALF_STEPS, SCHEDULE_TILES,
             MAX_SCHEDULED_TILES, TILE_FIXED_COST, MASKED_STEP_COST,
             SPLIT_QK, SPLIT_PV)  # the switches: benchmarks change them  # fmt: skip
    plan = _PLANS.get(where)
    if plan is None:
        plan = _plan(q, k, v, o, lse, causal, scale, cfg, _sms(q.device.index or 0))
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        _PLANS[where] = plan
    args = _planned(plan, q, k, v, o, lse, scale, cfg)
    launch(_attn_fwd_ws, plan.grid, args, plan.constexprs, plan.options, key=plan.key)
    return o, lse


SPLIT_RECORDING = 6
# A recording's launches wait behind a gate on the GPU (`torch.cuda._sleep`, about 250 µs
# at the H100's and H200's clocks), longer than the host takes to issue them all, so that
# none runs alone while the host issues the next (tens of µs through Triton's launcher).
# Behind the gate launches ran 0-10% faster on an H200 than right after
# do_bench's flush of the L2 (whose dirty lines the gate's time may let the L2 write back; not
# looked into), so a recording is compared with the plain kernel behind the same gate (`gated`).
GATE_CYCLES = 500_000
_SIDE_STREAMS: dict[int, torch.cuda.Stream] = {}


def _gate() -> None:
    """The gate (`GATE_CYCLES`) on the current stream."""
    torch.cuda._sleep(GATE_CYCLES)


def split_launches(programs: int, tiles: int, detail: int) -> list[tuple[int, int, bool]]:
    """The launches of a recording side by side (`Recording.mode` 6), in the order issued:
    (RECORD mode, programs, whether on the side stream). The first `detail` programs stamp
    their first tiles (RECORD 7), then run the rest of their shares (RECORD 8) wherever a
    program may have more tiles than it stamps: with more tiles than programs (a causal host
    schedule's shares are uneven; a program with none left does nothing there). The others run
    beside them (RECORD 5)."""
    out = [(7, detail, False)] if detail else []
    if detail and tiles > programs:
        out.append((8, detail, False))
    if programs > detail:
        out.append((5, programs - detail, True))
    return out


def _launch_split(plan: _Plan, args: tuple, record: Recording) -> None:
    """A recording in launches side by side (`split_launches`), all behind a gate
    (`GATE_CYCLES`): the programs that stamp their steps on the current stream right after the
    gate, so that they take their SMs first, as a grid's first programs do, over the first
    `record.tiles` tiles of their shares, then the rest (a persistent program's share stamped
    through ran 5-10% slower, its stamps' branches in every step, and ended the launch); the
    others on a side stream that waits for the gate, then joins."""
    device = torch.cuda.current_device()
    side = _SIDE_STREAMS.setdefault(device, torch.cuda.Stream(device))
    main = torch.cuda.current_stream(device)
    (programs,) = plan.grid
    _, _, _, _, tiles, _ = plan.sizes
    _gate()
    side.wait_stream(main)  # the gate, not the stamping launch
    for mode, grid, on_side in split_launches(programs, tiles, record.detail):
        with torch.cuda.stream(side if on_side else main):
            launch(_attn_fwd_ws, (grid,), args, {**plan.constexprs, "RECORD": mode},
                   plan.options)  # fmt: skip
    main.wait_stream(side)


def gated(call: Callable[[], Any]) -> Any:
    """`call` behind the gate a recording's launches wait for (`GATE_CYCLES`): what a recording
    is compared with."""
    _gate()
    return call()


def gate_ms() -> float:
    """The gate's own time by do_bench (a recorded call's time includes it)."""
    from flashscope.kernels.timing import median_ms

    return median_ms([_gate])


@dataclass(frozen=True)
class _Plan:
    """What a forward call's shapes, strides, dtype, mask, configuration and device fix (all of
    `_arguments` but the tensors and the scale), worked out once: the grid, the integer
    arguments, the schedule (None: the kernel gets LSE in its place, unread), the constexprs,
    the launch options and fastlaunch's key."""

    grid: tuple[int]
    sizes: tuple[int, ...]  # H, GROUP, N_Q, N_K, tiles, band
    schedule: torch.Tensor | None
    constexprs: dict
    options: dict
    key: tuple | None = None


# A forward's host time matters where its kernel is short: at N = 1000 (d = 128, causal) the
# kernel takes about 165 µs on an H100 and the routed call's host path took 170-230 µs
# (benchmarks/results/host-path-*.json), of which re-deriving `_arguments` and fastlaunch's
# signature from the tensors was a good part. A geometry seen before reuses its plan.
_PLANS: dict[tuple, _Plan] = {}
MAX_PLANS = 256


def _plan(q, k, v, o, lse, causal: bool, scale: float, cfg: WsConfig, sms: int) -> _Plan:
    """The plan of the call's geometry (not recorded), with fastlaunch's key."""
    plan = _geometry(q, k, causal, cfg, sms)
    args = _planned(plan, q, k, v, o, lse, scale, cfg)
    return replace(plan, key=signature(_attn_fwd_ws, args, plan.constexprs, plan.options))


def _planned(
    plan: _Plan, q, k, v, o, lse, scale: float, cfg: WsConfig, record: Recording | None = None
) -> tuple:
    """The kernel's positional arguments for these tensors, from a plan of their geometry."""
    sched = lse if plan.schedule is None else plan.schedule
    descs = (_descriptor(q, cfg.block_m), _descriptor(k, cfg.block_n),
             _descriptor(v, cfg.block_n), _descriptor(o, cfg.block_m))  # fmt: skip
    stamps = (lse, 0, 0, 0, 0) if record is None else (
        record.buffer, record.programs, record.detail, record.steps, record.tiles)  # fmt: skip
    return (*descs, lse, scale * LOG2E, *plan.sizes, sched, *stamps, o, q.shape[3])


class _Sm90Target:
    """Just enough of Triton's driver for its JIT to compile for sm_90a with no GPU present."""

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")

    def is_active(self) -> bool:
        return True


def compile_sm90(
    cfg: WsConfig,
    head_dim: int,
    causal: bool,
    dtype: torch.dtype = torch.float16,
    record: int = 0,
    edges: bool = False,
):
    """Compile the kernel (`record`: its recorded variant of that RECORD mode, above
    `record_size`; a recording as launched by default runs modes 7, 8 and 5; `edges`: for lengths
    that fill neither tile) for an H100/H200 on any machine (CPU tensors stand in for the
    inputs; nothing runs): Triton's CompiledKernel, with its PTX, cubin and shared-memory size.

    Not under Triton's interpreter (TRITON_INTERPRET=1 turns the standard library's functions, which
    Gluon calls, into interpreted ones): `python -m flashscope.kernels.hopper_forward` runs it
    apart.
    """
    if interpreting():
        raise RuntimeError("compile_sm90 needs TRITON_INTERPRET unset (run it in a process apart)")

    n = cfg.tile_m * cfg.block_n  # a multiple of both tiles; `edges`: of neither
    n -= 7 if edges else 0
    q = torch.empty(1, 2, n, head_dim, dtype=dtype)
    lse = torch.empty(1, 2, n)
    rec = Recording(torch.empty(1, dtype=torch.int64), 1, 1, 1, 1, record) if record else None
    args, constexprs, options = _arguments(q, q, q, q, lse, causal, 0.1, cfg, COMPILE_SMS, rec)
    return warmup_sm90(_attn_fwd_ws, args, constexprs, options)


def warmup_sm90(kernel, args: tuple, constexprs: dict, options: dict):
    """Compile a Gluon `kernel` for these arguments for sm_90a, with no GPU present (Triton's
    driver stood in for by `_Sm90Target` meanwhile): Triton's CompiledKernel."""
    from triton.runtime import driver

    saved = driver._active
    driver.set_active(_Sm90Target())
    try:
        return kernel.warmup(*args, **constexprs, **options, grid=(1,))
    finally:
        driver._active = saved


def cuobjdump(cubin: bytes, flag: str) -> str:
    """What the cuobjdump Triton ships prints for a cubin with `flag` ("-sass",
    "--dump-resource-usage")."""
    import subprocess
    import tempfile
    from pathlib import Path

    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run(
            [tool, flag, f.name], capture_output=True, text=True, check=True
        ).stdout


def cubin_resources(cubin: bytes) -> dict[str, int]:
    """A compiled kernel's registers per thread, spill stack and local bytes ("REG", "STACK",
    "LOCAL") as cuobjdump reads them from its cubin."""
    import re

    usage = cuobjdump(cubin, "--dump-resource-usage")
    return {k: int(v) for k, v in re.findall(r"(REG|STACK|LOCAL):(\d+)", usage)}


SETMAXNREG = r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)"


def compile_report(
    configs: list[tuple[WsConfig, int]], record: tuple[int, ...] = (), edges: bool = False
) -> list[dict]:
    """Per (configuration, head_dim), causal and RECORD mode (`record`, none where empty; the
    row's "record"): what the compiled sm_90a kernel holds (its registers and spill stack as
    cuobjdump reads them from the cubin, the bytes of its machine code, the cycle-counter reads
    in its PTX, and its wgmma instructions: how many, and the sum of their widths N, each
    m64 × N × k16, so the work its code issues)."""
    import re

    rows = []
    for (cfg, d), causal, mode in product(configs, (False, True), record or (0,)):
        ptx = (k := compile_sm90(cfg, d, causal, record=mode, edges=edges)).asm["ptx"]
        found = cubin_resources(k.asm["cubin"])
        offsets = re.findall(r"/\*([0-9a-f]{4,})\*/", cuobjdump(k.asm["cubin"], "-sass"))
        rows.append({
            "config": cfg.as_list(), "head_dim": d, "causal": causal, "record": mode,
            "shared": k.metadata.shared, "regs": found["REG"],
            "stack": found["STACK"], "local": found["LOCAL"],
            "wgmma": ptx.count("wgmma.mma_async"),
            "wgmma_n": sum(map(int, re.findall(r"wgmma\.mma_async\S*\.m64n(\d+)k", ptx))),
            "setmaxnreg": sorted({int(x) for x in re.findall(SETMAXNREG, ptx)}),
            "registers": list(cfg.registers()), "clock_reads": ptx.count("%clock64"),
            "code_bytes": max(int(x, 16) for x in offsets) + 16,
        })  # fmt: skip
    return rows


if __name__ == "__main__":
    import json
    import sys

    # Every configuration a tuned table names (with its head_dim), or those given as JSON;
    # "--record" compiles the kernels a recording launches (RECORD 7, 8 and 5), "--record=M"
    # RECORD mode M alone; "--edges" for lengths that fill no tile.
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    given = [a for a in sys.argv[1:] if not a.startswith("--")]
    edges = "--edges" in flags
    record = next(((7, 8, 5) if f == "--record" else (int(f.split("=")[1]),)
                   for f in flags if f.startswith("--record")), ())  # fmt: skip
    if given:
        wanted = [(WsConfig.from_list(c), d) for c, d in json.loads(given[0])]
    else:
        wanted = tuned_configs()
    json.dump(compile_report(wanted, record, edges), sys.stdout)
