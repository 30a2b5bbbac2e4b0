"""How many CTAs of a kernel fit on one SM: shared memory, registers, warps, CTA slots.

Shared memory per CTA is the tiles the kernel keeps there, with `stages` buffers for the tiles
it streams (Triton's software pipeline: one buffer per stage), for the forward and dQ kernels
with two stages or more 1 KiB of Triton's own (`PIPELINE_SMEM`), plus the 1 KiB per CTA that
CUDA reserves on compute capability 8.0 and later. Register use is an estimate: the fp32 tiles
a kernel keeps in registers (accumulators and score tiles), spread over the CTA's threads, plus
a fixed overhead per thread (`Efficiency.reg_overhead`: addresses, loop state, m and ℓ),
rounded up to the allocation unit of 8 and capped at 255 — beyond that a compiler spills, which
the result flags (`spills`; the engine charges `spill_penalty` for it). The tiles' `maxnreg`
(Triton's register cap, which lets more CTAs share an SM) caps it lower; under such a cap the
fixed overhead counts as slack the compiler gives up first, so the flag is raised only when
the tiles alone exceed the cap. The head dimension is padded to a power of two ≥ 16 for these
estimates, as Triton pads it. The dK/dV kernel's accumulators and score tiles are BN rows tall,
and a warpgroup's products are at least 64 rows: with 32-key tiles they hold 64 rows' worth
(such tiles compiled to 168–204 registers where BN rows would give 88).

Footprints by kernel kind (e = dtype bytes, d = padded head dim, R = rows per CTA):
    fwd            smem (R·d + stages·2·BN·d)·e          regs R·d + R·BN·(1 + e/4)
                   (flashscope's with warp-level products: `warp_level_forward_smem`)
    fa1            smem (2·BN·d + stages·2·R·d)·e        regs R·d + R·BN·(1 + e/4)
    bwd            smem (2·BN·d + stages·2·R·d + R·BN)·e regs 2·M·d + 3·R·M, M = max(BN, 64)
    bwd_dq         smem (2·R·d + stages·2·BN·d)·e        regs R·d + 2·R·BN
    naive_qk       smem (R·d + stages·BN·d)·e            regs R·BN
    naive_softmax  smem 0                                regs R·BN
    naive_pv       smem stages·(R·BN + BN·d)·e           regs R·d
    rowwise        smem 0                                regs R·d
"""

from __future__ import annotations

from dataclasses import dataclass

from flashscope.simulator.core.hardware import GPU

RESERVED_SMEM = 1024  # bytes per CTA that CUDA keeps for itself (CC ≥ 8.0)
# Triton's own shared memory beside the tiles of a pipelined loop (the copy engine's barriers,
# and the padding that keeps swizzled tiles 1 KiB-aligned after them): ncu measured the
# forward's and the dQ kernel's dynamic shared memory at the tiles' + 16 to 1024 bytes; the
# model takes the larger (it decides the d = 64 64×64 three-stage forward: 3 CTAs, not 4).
PIPELINE_SMEM = 1024
PIPELINED_KINDS = ("fwd", "bwd_dq")
REG_UNIT = 8  # registers per thread are allocated in multiples of this
SUBPARTITIONS = 4  # an SM's warp schedulers, each with a quarter of its registers
MAX_REGS = 255
WGMMA_ROWS = 64  # rows of one warpgroup's matrix-multiply instruction on Hopper
WARPGROUP_WARPS = 4


def pad_head_dim(d: int) -> int:
    return max(16, 1 << (d - 1).bit_length())


def qk_columns(d: int) -> int:
    """The columns the Gluon forward's S = Q Kᵀ runs over at head_dim d: d rounded up to 16
    (wgmma's step) where half the padded width plus a power of two covers it (192 = 128 + 64,
    96 = 64 + 32, 80 = 64 + 16: two products), else the padded width. Its P V product and O
    stay `pv_columns(d)` wide. On an H200 (benchmarks/results/qk-split-*.json) that cut the
    forward's time by 2-12% against the padded product at d = 80, 96, 160 and 192."""
    full = pad_head_dim(d)
    used = -(-d // 16) * 16
    rest = used - full // 2
    return used if 0 < rest < full // 2 and rest & (rest - 1) == 0 else full


def pv_columns(d: int) -> int:
    """The columns the Gluon forward's P V product and O's accumulator cover at head_dim d:
    `qk_columns` where its second part is at least 64 wide (192 = 128 + 64, the accumulator
    then in those two parts), else the padded width. Measured on an H200
    (benchmarks/results/qk-split-*.json): at d = 192 two parts ran 1.01-1.06x faster than
    one 256-wide accumulator in all 12 cases; at d = 80 and 96 (parts of 64 + 16 and 64 + 32)
    1.01-1.06x in 8 cases and 0.93-0.95x in the other 4 (all of one configuration)."""
    cols, full = qk_columns(d), pad_head_dim(d)
    return cols if cols - full // 2 >= 64 else full


@dataclass(frozen=True)
class Footprint:
    """What one CTA of a kernel asks of an SM."""

    smem_bytes: int
    regs_per_thread: int
    warps: int
    spills: bool


@dataclass(frozen=True)
class Occupancy:
    """Resident CTAs per SM and the resource that sets the number."""

    ctas_per_sm: int
    limiter: str  # "smem", "regs", "warps" or "ctas"
    limits: dict[str, int]
    footprint: Footprint


def _elements(
    kind: str, rows: int, block_n: int, head_dim: int, stages: int, dtype_bytes: int, warps: int
) -> tuple[float, float]:
    """(shared-memory elements, fp32 register elements) of one CTA (the module docstring)."""
    d, r, bn, e, s = pad_head_dim(head_dim), rows, block_n, dtype_bytes, stages
    # the dK/dV kernel's products are BN rows tall, padded to a warpgroup's 64 where the CTA
    # has one (fewer than 4 warps issue warp-level products: the 16×16 dK/dV tile on 2 warps
    # compiled to 206 registers without spilling, where 64 padded rows would ask for 336)
    bm = max(bn, WGMMA_ROWS) if warps >= WARPGROUP_WARPS else bn
    return {
        "fwd": (r * d + s * 2 * bn * d, r * d + r * bn * (1 + e / 4)),
        "fa1": (2 * bn * d + s * 2 * r * d, r * d + r * bn * (1 + e / 4)),
        "bwd": (2 * bn * d + s * 2 * r * d + r * bn, 2 * bm * d + 3 * r * bm),
        "bwd_dq": (2 * r * d + s * 2 * bn * d, r * d + 2 * r * bn),
        "naive_qk": (r * d + s * bn * d, r * bn),
        "naive_softmax": (0, r * bn),
        "naive_pv": (s * (r * bn + bn * d), r * d),
        "rowwise": (0, r * d),
    }[kind]


def register_demand(
    kind: str, rows: int, block_n: int, head_dim: int, warps: int, dtype_bytes: int, overhead: int
) -> int:
    """Registers per thread one CTA's live tiles ask for, before any cap: the fp32 tile
    elements of `kind` spread over its 32·warps threads plus `overhead`, in whole allocation
    units of 8. Beyond 255 (or a `maxnreg` cap) the compiler spills (`spill_excess`)."""
    _, reg_elems = _elements(kind, rows, block_n, head_dim, 1, dtype_bytes, warps)
    threads = 32 * warps
    return int(-(-(overhead + -(-reg_elems // threads)) // REG_UNIT) * REG_UNIT)


def warp_level(rows: int, warps: int) -> bool:
    """Whether a CTA's matrix products are warp-level (`mma.sync`): fewer than 4 warps, or
    fewer than 64 rows, where Hopper's warpgroup products do not apply."""
    return warps < WARPGROUP_WARPS or rows < WGMMA_ROWS


def warp_level_forward_smem(
    rows: int, block_n: int, head_dim: int, stages: int, dtype_bytes: int
) -> int:
    """Shared memory of a CTA of flashscope's forward kernel whose products are warp-level
    (`warp_level`; the engine takes it in place of `footprint`'s for such launches).

    Such a kernel takes Q into registers as its products' A operand, so Q's buffer is free
    once the loop starts and the loop's buffers reuse it: the CTA needs the larger of Q's tile
    and the loop's. The loop keeps stages − 1 buffers of K and of V (one of each at one stage)
    and, where the score tile must change hands between warps, the tile P itself (bm × bn): at
    one stage, and where bm < bn, as Triton then spreads a chain of products' warps along the
    keys, so P·V's rows are not where S left them. No copy-engine barriers. Nsight Compute's
    dynamic shared memory on the users' sweep (H100, 2026-11-26: 67 such forwards) is within
    5% of this for 57 of them (within 1% for 54; the worst 20% under), where the warpgroup
    estimate (Q beside `stages` buffers of each) was a median 80% over and none within 5%, so
    the engine held fewer of these CTAs on an SM than ran; the warpgroup kernels keep that
    estimate, within 5% on all 193 of theirs.
    """
    d, e = pad_head_dim(head_dim), dtype_bytes
    q, kv, p = rows * d * e, block_n * d * e, rows * block_n * e
    ring = 2 * (stages - 1) * kv if stages >= 2 else kv
    return max(q, ring + (p if stages < 2 or rows < block_n else 0))


def footprint(
    kind: str,
    rows: int,
    block_n: int,
    head_dim: int,
    stages: int,
    warps: int,
    dtype_bytes: int,
    gpu: GPU,
    maxnreg: int | None = None,
) -> Footprint:
    """Shared memory and registers of one CTA of `kind` (see the module docstring)."""
    smem_elems, _ = _elements(kind, rows, block_n, head_dim, stages, dtype_bytes, warps)
    smem = int(smem_elems * dtype_bytes)
    if kind in PIPELINED_KINDS and stages >= 2:  # a loop pipelined through the copy engine
        smem += PIPELINE_SMEM
    threads = 32 * warps
    overhead = gpu.efficiency.reg_overhead
    want = register_demand(kind, rows, block_n, head_dim, warps, dtype_bytes, overhead)
    # The compiler never asks for more than fits one CTA on the SM, nor more than 255.
    limit = min(MAX_REGS, gpu.regs_per_sm // threads // REG_UNIT * REG_UNIT)
    if maxnreg is not None and maxnreg < limit:
        # Under an explicit cap it first gives up the slack the estimate keeps (the fixed
        # overhead: addresses and loop state are recomputed), and spills only beyond that: the
        # forward estimated at 144–160 registers compiled to 122–128 under a cap of 128 with
        # little or no local traffic (benchmarks/results/register-cap-h200-*.json).
        return Footprint(smem, min(want, maxnreg), warps, want - overhead > maxnreg)
    return Footprint(smem, min(want, limit), warps, want > limit)


def regs_warps(regs_per_thread: int, gpu: GPU) -> int:
    """Warps an SM's register file holds at `regs_per_thread` registers a thread: each of the
    SM's `SUBPARTITIONS` schedulers holds its own share of the file and the warps it runs, so
    the count is a multiple of them. Nsight Compute's register limit on the users' sweep (H100,
    2026-11-26) says so for 2-warp CTAs: 139 and 143 registers (144 allocated) let 6 CTAs run,
    not the 7 that 65536 / (144 × 64) gives; 194 (200) let 4, not 5."""
    per_part = gpu.regs_per_sm // SUBPARTITIONS // (regs_per_thread * 32)
    return per_part * SUBPARTITIONS


def occupancy(fp: Footprint, gpu: GPU) -> Occupancy:
    """CTAs per SM; ValueError when one CTA's tiles do not fit in shared memory at all."""
    if fp.smem_bytes > gpu.smem_per_block:
        raise ValueError(
            f"the tiles need {fp.smem_bytes / 1024:.0f} KiB of shared memory per CTA, more than "
            f"the {gpu.smem_per_block_kib} KiB a CTA may use on {gpu.name}: use smaller "
            "block_m/block_n, fewer stages or a smaller head_dim"
        )
    threads = 32 * fp.warps
    if threads > 1024 or fp.warps > gpu.max_warps_per_sm:
        raise ValueError(f"warps: {fp.warps} warps exceed the 1024 threads a CTA may have")
    smem = fp.smem_bytes + RESERVED_SMEM if fp.smem_bytes else 0
    limits = {
        "smem": gpu.smem_per_sm // smem if smem else gpu.max_ctas_per_sm,
        "regs": regs_warps(fp.regs_per_thread, gpu) // fp.warps,
        "warps": gpu.max_warps_per_sm // fp.warps,
        "ctas": gpu.max_ctas_per_sm,
    }
    limiter = min(limits, key=limits.__getitem__)
    return Occupancy(max(1, limits[limiter]), limiter, limits, fp)
