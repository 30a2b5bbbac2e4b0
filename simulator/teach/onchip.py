"""What one CTA holds on chip at each step of a tile program: shared-memory tiles and registers.

A step's contents follow from its phase and the sizes of its tile (r query rows, c keys), so
the table is built once per distinct (phase, pseudocode line, r, c) and looked up per event.
Where each buffer lives follows the kernels and simulator/timing/occupancy.py's footprints (one
pipeline stage here: the stepper shows one tile at a time):

    fa2 / decode split   smem Qᵢ, Kⱼ, Vⱼ (dtype)      regs S/P (fp32), Õ (fp32), m, ℓ, α
    fa1                  smem Kⱼ, Vⱼ, Qᵢ, Oᵢ (dtype)  regs S/P, m, ℓ, m̃, α, β
    fa2-bwd main         smem Kⱼ, Vⱼ, Qᵢ, dOᵢ, dS     regs dK, dV (fp32), S/P, dP, LSEᵢ, Dᵢ,
                                                      the dQᵢ partial (fp32)
    row-wise kernels     regs only (preprocess Oᵢ, dOᵢ, D; dQ conversion; decode's reduce)
    naive                as its tile program counts SRAM: kernel 1 holds Qᵢ and all of K,
                         kernel 3 Pᵢ and all of V; the score rows sit in registers

With stages = 1 and full tiles, the shared-memory bytes equal occupancy.footprint's for the
kinds fwd, fa1 and bwd (tests hold them to it). Registers are shown as bytes of fp32 values;
a compiler may keep part of them in shared memory or spill them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from flashscope.simulator.core.problem import STATS_BYTES, AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import TileGrid
from flashscope.simulator.core.trace import PHASES, OpTable

SMEM, REGS = "smem", "regs"
F32 = 4


@dataclass(frozen=True)
class Buffer:
    """One tile or vector held on chip: rows × cols elements of `elem_bytes` each."""

    name: str
    where: str  # SMEM or REGS
    rows: int
    cols: int
    elem_bytes: int
    what: str

    @property
    def bytes(self) -> int:
        return self.rows * self.cols * self.elem_bytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "where": self.where,
            "shape": [self.rows, self.cols],
            "elem_bytes": self.elem_bytes,
            "bytes": self.bytes,
            "what": self.what,
        }


Contents = tuple[Buffer, ...]
# (phase, line, r, c) → the buffers on chip during that op
Layout = Callable[[str, int, int, int], Contents]


def forward_layout(d: int, e: int, q_name: str = "Qᵢ") -> Layout:
    """FA-2 forward and the split CTAs of Flash-Decoding: head dim `d`, `e` bytes an element."""

    def layout(phase: str, _line: int, r: int, c: int) -> Contents:
        q = Buffer(q_name, SMEM, r, d, e, "query tile, loaded once")
        acc = Buffer("Õ", REGS, r, d, F32, "unnormalized output accumulator")
        stats = (
            Buffer("m", REGS, r, 1, STATS_BYTES, "running max"),
            Buffer("ℓ", REGS, r, 1, STATS_BYTES, "running sum"),
        )
        kv = (
            Buffer("Kⱼ", SMEM, c, d, e, "key tile"),
            Buffer("Vⱼ", SMEM, c, d, e, "value tile"),
        )
        if phase in ("load_q", "store", "store_partial"):
            return (q, acc, *stats)
        if phase == "load_kv":
            return (q, *kv, acc, *stats)
        if phase == "qk":
            return (q, *kv, Buffer("S", REGS, r, c, F32, "scores of this tile"), acc, *stats)
        alpha = Buffer("α", REGS, r, 1, STATS_BYTES, "rescale factor e^(m − m′)")
        p = Buffer("P", REGS, r, c, F32, "probabilities of this tile (S overwritten)")
        return (q, *kv, p, acc, *stats, alpha)  # softmax, pv

    return layout


def fa1_layout(d: int, e: int) -> Layout:
    """FA-1 forward: K/V of the outer loop, the query block's rows read back from HBM."""

    def layout(phase: str, _line: int, r: int, c: int) -> Contents:
        kv = (
            Buffer("Kⱼ", SMEM, c, d, e, "key tile (outer loop)"),
            Buffer("Vⱼ", SMEM, c, d, e, "value tile (outer loop)"),
        )
        if phase == "init":
            return ()
        if phase == "load_kv":
            return kv
        rows = (
            Buffer("Qᵢ", SMEM, r, d, e, "query tile, loaded again for every key block"),
            Buffer("Oᵢ", SMEM, r, d, e, "output so far, read back from HBM"),
            Buffer("mᵢ", REGS, r, 1, STATS_BYTES, "running max, read back from HBM"),
            Buffer("ℓᵢ", REGS, r, 1, STATS_BYTES, "running sum, read back from HBM"),
        )
        if phase in ("load_q", "store"):
            return (*kv, *rows)
        if phase == "qk":
            return (*kv, *rows, Buffer("S", REGS, r, c, F32, "scores of this tile"))
        return (
            *kv,
            *rows,
            Buffer("P̃", REGS, r, c, F32, "block probabilities e^(S − m̃)"),
            Buffer("m̃, α, β", REGS, r, 3, STATS_BYTES, "block max and both rescale factors"),
        )

    return layout


def backward_layout(d: int, e: int) -> Layout:
    """FA-2 backward: the row-wise pre- and postprocess, and the main kernel's K/V-resident CTA."""
    steps = ("load_q_bwd", "recompute_p", "dv", "dp", "ds", "dq", "dk")

    def layout(phase: str, _line: int, r: int, c: int) -> Contents:
        if phase == "preprocess_d":
            return (
                Buffer("Oᵢ", REGS, r, d, e, "forward output"),
                Buffer("dOᵢ", REGS, r, d, e, "upstream gradient"),
                Buffer("Dᵢ", REGS, r, 1, STATS_BYTES, "rowsum(dO ∘ O)"),
            )
        if phase == "convert_dq":
            return (Buffer("dQᵢ", REGS, r, d, F32, "fp32 accumulator, scaled and cast"),)
        kv = (
            Buffer("Kⱼ", SMEM, c, d, e, "key tile, resident for the whole CTA"),
            Buffer("Vⱼ", SMEM, c, d, e, "value tile, resident for the whole CTA"),
            Buffer("dK", REGS, c, d, F32, "dKⱼ accumulator"),
            Buffer("dV", REGS, c, d, F32, "dVⱼ accumulator"),
        )
        if phase in ("load_kv_bwd", "store_dkdv"):
            return kv
        k = steps.index(phase)
        out = [
            *kv,
            Buffer("Qᵢ", SMEM, r, d, e, "query tile"),
            Buffer("dOᵢ", SMEM, r, d, e, "upstream gradient tile"),
            Buffer("LSEᵢ", REGS, r, 1, STATS_BYTES, "log-sum-exp saved by the forward"),
            Buffer("Dᵢ", REGS, r, 1, STATS_BYTES, "rowsum(dO ∘ O)"),
        ]
        if k >= steps.index("recompute_p"):
            out.append(Buffer("P", REGS, r, c, F32, "rebuilt from LSE: e^(S − LSE)"))
        if k >= steps.index("dp"):
            out.append(Buffer("dP", REGS, r, c, F32, "dO Vᵀ"))
        if k >= steps.index("ds"):
            out.append(Buffer("dS", SMEM, r, c, e, "P ∘ (dP − D), staged for dSᵀ Q"))
        if phase == "dq":
            out.append(Buffer("dQᵢ part", REGS, r, d, F32, "dS Kⱼ, added to HBM"))
        return tuple(out)

    return layout


def _decode_reduce(d: int) -> Layout:
    """The reduce CTA of Flash-Decoding: the merged output and one split's partial."""

    def layout(phase: str, _line: int, r: int, _c: int) -> Contents:
        merged = (
            Buffer("O", REGS, r, d, F32, "merged output so far"),
            Buffer("LSE", REGS, r, 1, STATS_BYTES, "merged log-sum-exp so far"),
        )
        if phase == "store":
            return merged
        return (
            *merged,
            Buffer("Oₛ", REGS, r, d, F32, "partial output of split s"),
            Buffer("LSEₛ", REGS, r, 1, STATS_BYTES, "its log-sum-exp"),
        )

    return layout


def decode_layout(d: int, e: int) -> Layout:
    """Flash-Decoding: the split CTAs as the FA-2 forward (Q of all R rows), then the reduce."""
    split, reduce = forward_layout(d, e, "Q"), _decode_reduce(d)
    reducing = {"reduce", "store"}

    def layout(phase: str, line: int, r: int, c: int) -> Contents:
        return (reduce if phase in reducing else split)(phase, line, r, c)

    return layout


def naive_layout(d: int, e: int, nk: int, k_line: int) -> Layout:
    """Naive attention's three kernels over `nk` keys; `k_line`: the pseudocode line of the load
    of K (the other load is V's)."""

    def layout(phase: str, line: int, r: int, _c: int) -> Contents:
        k_all = Buffer("K", SMEM, nk, d, e, "all keys (kernel 1)")
        v_all = Buffer("V", SMEM, nk, d, e, "all values (kernel 3)")
        if phase == "load_kv":
            return (k_all,) if line == k_line else (v_all,)
        if phase == "load_q":
            return (k_all, Buffer("Qᵢ", SMEM, r, d, e, "query rows"))
        if phase == "naive_qk":
            return (
                k_all,
                Buffer("Qᵢ", SMEM, r, d, e, "query rows"),
                Buffer("Sᵢ", REGS, r, nk, F32, "a whole row block of scores"),
            )
        if phase == "naive_softmax":
            return (Buffer("Sᵢ → Pᵢ", REGS, r, nk, F32, "a whole row block, read from HBM"),)
        return (
            v_all,
            Buffer("Pᵢ", SMEM, r, nk, e, "a whole row block of P, read from HBM"),
            Buffer("Oᵢ", REGS, r, d, F32, "output rows"),
        )

    return layout


class OnChip:
    """The on-chip contents of every event of one trace, and the peak over the trace."""

    def __init__(self, ops: OpTable, rows: np.ndarray, cols: np.ndarray, layout: Layout):
        c = ops.columns
        keys = np.stack([c["phase"], c["line"], rows, cols], axis=1)  # (n, 4)
        uniq, self._index = np.unique(keys, axis=0, return_inverse=True)
        self._index = self._index.reshape(-1)
        self._contents = [
            layout(PHASES[int(ph)], int(line), int(r), int(cc)) for ph, line, r, cc in uniq
        ]
        smem = np.array([sum(b.bytes for b in x if b.where == SMEM) for x in self._contents])
        regs = np.array([sum(b.bytes for b in x if b.where == REGS) for x in self._contents])
        self.smem_bytes = smem[self._index] if len(uniq) else np.zeros(0, np.int64)  # (n,)
        self.reg_bytes = regs[self._index] if len(uniq) else np.zeros(0, np.int64)  # (n,)

    def contents(self, i: int) -> Contents:
        return self._contents[int(self._index[i])]

    def at(self, i: int) -> dict[str, Any]:
        """JSON of event i: its buffers and the bytes in shared memory and in registers."""
        return {
            "buffers": [b.as_dict() for b in self.contents(i)],
            "smem_bytes": int(self.smem_bytes[i]),
            "reg_bytes": int(self.reg_bytes[i]),
        }

    def peak(self) -> dict[str, int]:
        """The largest shared-memory and register bytes of any step, and the first such step."""
        if self.smem_bytes.size == 0:
            return {"smem_bytes": 0, "smem_step": 0, "reg_bytes": 0, "reg_step": 0}
        return {
            "smem_bytes": int(self.smem_bytes.max()),
            "smem_step": int(self.smem_bytes.argmax()),
            "reg_bytes": int(self.reg_bytes.max()),
            "reg_step": int(self.reg_bytes.argmax()),
        }


def onchip(
    problem: AttentionProblem,
    tiles: TileConfig,
    ops: OpTable,
    layout: Layout,
    rows: int | None = None,
) -> OnChip:
    """The on-chip contents of every op of the tile program `ops` on `problem`, laid out by
    `layout` (each algorithm's trace hook picks it); `rows`: the query rows every CTA holds,
    where they do not follow the query blocks (Flash-Decoding's packed rows)."""
    grid = TileGrid(problem, tiles)
    qb, kb = ops.columns["q_block"], ops.columns["kv_block"]
    if rows is None:
        sizes = np.where(qb >= 0, grid.rows[np.clip(qb, 0, grid.n_q - 1)], 0)  # (n,)
    else:
        sizes = np.full(len(ops), rows, dtype=np.int64)  # (n,)
    cols = np.where(kb >= 0, grid.cols[np.clip(kb, 0, grid.n_kv - 1)], 0)  # (n,)
    return OnChip(ops, sizes, cols, layout)
