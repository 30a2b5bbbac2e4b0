"""Write benchmarks/sweeps/users.json: configurations drawn from the space users meet.

    python benchmarks/make_user_sweep.py [--seed 30] [--count 440] [--out SWEEP]

The papers' protocol (make_validation_sweep.py) holds one family of shapes; this sweep draws, with
a seeded generator, from what models and users run:

    batch      1–16 (log-uniform)            heads       1–64, K/V heads dividing them (groups 1–8)
    N          128–32768, log-uniform; half of the draws not a power of two, a quarter with
               N_k ≠ N_q (causal included: the mask is aligned at the bottom right)
    head_dim   32, 64, 80, 96, 128, 192, 256 fp16 or bf16, causal or not, forward or backward
    tiles      half from the kernels' candidates for the head_dim (kernels/config.py), half from
               a wider spread (block sizes 16–256, warps 2–8, stages 1–4), each checked to fit
               the GPU's shared memory by the engine

Each entry is assigned at random, with the same seed, to the half the calibration is fitted on
("fit") or to the half it is judged on ("holdout"). The problem's work is bounded so that a sweep
of 440 entries times in a few minutes per GPU: at most MAX_TFLOP per call and MAX_GIB of tensors;
a draw beyond either has its batch (then heads) brought down. Nsight Compute reads the bytes of
every entry.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashscope.kernels.config import CANDIDATES, KernelConfig
from flashscope.simulator.calibrate.validation import simulate_config
from flashscope.simulator.core.problem import AttentionProblem

HEAD_DIMS = (32, 64, 80, 96, 128, 192, 256)
HEADS = (1, 2, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64)
MAX_TFLOP = 4.0  # useful work of one call (forward FLOPs; the backward counts 2.5×)
MAX_GIB = 6.0  # Q, K, V, O (and gradients) of one input set
MIN_N, MAX_N = 128, 32768
SPREAD_M = (16, 32, 64, 128, 256)
SPREAD_N = (16, 32, 64, 128)
GPUS = ("h100-sxm", "h200")


def log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return round(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def seq_length(rng: random.Random) -> int:
    """A sequence length: a power of two half the time, any length in between otherwise."""
    n = log_uniform(rng, MIN_N, MAX_N)
    if rng.random() < 0.5:
        return 2 ** round(math.log2(n))
    return n


def shape(rng: random.Random) -> dict:
    """The problem part of one draw (before bounding its work)."""
    heads = rng.choice(HEADS)
    groups = [g for g in (1, 2, 4, 8) if heads % g == 0]
    seq = seq_length(rng)
    seq_k = seq_length(rng) if rng.random() < 0.25 else None
    return {
        "batch": log_uniform(rng, 1, 16),
        "heads": heads,
        "kv_heads": heads // rng.choice(groups),
        "seq": seq,
        "seq_k": seq_k if seq_k != seq else None,
        "head_dim": rng.choice(HEAD_DIMS),
        "causal": rng.random() < 0.5,
        "dtype": rng.choice(("fp16", "bf16")),
    }


def bounded(c: dict, backward: bool) -> dict:
    """`c` with batch, then heads, brought down until its work and memory are within bounds."""
    c = dict(c)
    while True:
        p = AttentionProblem(
            seq_q=c["seq"], seq_k=c["seq_k"], head_dim=c["head_dim"], batch=c["batch"],
            heads=c["heads"], kv_heads=c["kv_heads"], causal=c["causal"], dtype=c["dtype"],
        )  # fmt: skip
        flops = 4.0 * p.batch * p.heads * p.seq_q * p.seq_k * p.head_dim
        flops *= (0.5 if p.causal else 1.0) * (2.5 if backward else 1.0)
        q = p.batch * p.heads * p.seq_q * p.head_dim
        kv = p.batch * p.kv_heads * p.seq_k * p.head_dim
        gib = (2 if not backward else 4) * (q + kv) * 2 / 2**30
        if flops <= MAX_TFLOP * 1e12 and gib <= MAX_GIB:
            return c
        if c["batch"] > 1:
            c["batch"] = max(1, c["batch"] // 2)
        elif c["heads"] > c["heads"] // c["kv_heads"]:  # keep the group, fewer K/V heads
            group = c["heads"] // c["kv_heads"]
            c["kv_heads"] = max(1, c["kv_heads"] // 2)
            c["heads"] = c["kv_heads"] * group
        else:
            return c  # one head of a long sequence: as large as it gets


def pad(d: int) -> int:
    return max(64, 1 << (d - 1).bit_length())


def tiles(rng: random.Random, mode: str, d: int) -> tuple[str, dict]:
    """(tile set, tile fields) for one draw."""
    if rng.random() < 0.5:
        main = rng.choice(CANDIDATES[mode][pad(d)])
        out = {"block_m": main.block_m, "block_n": main.block_n}
        out |= {"stages": main.num_stages, "warps": main.num_warps}
        if mode == "bwd":
            dq = rng.choice(CANDIDATES["bwd-dq"][pad(d)])
            out |= {"dq_block_m": dq.block_m, "dq_block_n": dq.block_n}
            out |= {"dq_stages": dq.num_stages, "dq_warps": dq.num_warps}
        return "candidate", out
    m, n = rng.choice(SPREAD_M), rng.choice(SPREAD_N)
    cfg = KernelConfig(m, n, rng.choice((2, 4, 8)), rng.choice((1, 2, 3, 4)))
    out = {"block_m": cfg.block_m, "block_n": cfg.block_n}
    out |= {"stages": cfg.num_stages, "warps": cfg.num_warps}
    if mode == "bwd":  # the dQ kernel: its own spread draw
        out |= {"dq_block_m": rng.choice(SPREAD_M), "dq_block_n": rng.choice(SPREAD_N)}
        out |= {"dq_stages": rng.choice((1, 2, 3)), "dq_warps": rng.choice((4, 8))}
    return "spread", out


def fits(config: dict) -> bool:
    """Whether the engine finds room for every kernel of `config` on both GPUs."""
    for gpu in GPUS:
        try:
            result = simulate_config({**config, "gpu": gpu})
        except ValueError:
            return False
        if any(k.occupancy.ctas_per_sm < 1 for k in result.kernels):
            return False
    return True


def entries(seed: int, count: int) -> list[dict]:
    rng = random.Random(seed)
    out: list[dict] = []
    while len(out) < count:
        mode = "bwd" if rng.random() < 0.4 else "fwd"
        problem = bounded(shape(rng), mode == "bwd")
        kind, tile_fields = tiles(rng, mode, problem["head_dim"])
        config = {
            "algo": "fa2-bwd" if mode == "bwd" else "fa2",
            "impl": "flashscope",
            **{k: v for k, v in problem.items() if v is not None},
            **tile_fields,
        }
        if not fits(config):
            continue
        c = config
        group = c["heads"] // c["kv_heads"]
        nk = f"-nk{c['seq_k']}" if "seq_k" in c else ""
        eid = (
            f"u{len(out):03d}-{mode}-{c['dtype']}-d{c['head_dim']}-"
            f"{'causal' if c['causal'] else 'full'}-b{c['batch']}h{c['heads']}g{group}-"
            f"n{c['seq']}{nk}-{kind}"
        )
        subset = "fit" if rng.random() < 0.5 else "holdout"
        out.append({"id": eid, "subset": subset, "ncu": True, "tiles": kind, "config": config})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--count", type=int, default=440)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "sweeps" / "users.json")
    args = ap.parse_args(argv)
    doc = {
        "format": 1,
        "description": (
            "flashscope's forward and backward kernels over the space users meet, drawn with "
            f"seed {args.seed} by benchmarks/make_user_sweep.py: batch 1-16, heads 1-64 with "
            "K/V groups 1-8, N 128-32768 (half not powers of two, a quarter with N_k != N_q), "
            "head_dim 32-256, fp16/bf16, causal or not; candidate and spread tiles; a random "
            "half to fit on, the other half held out; Nsight Compute on every entry"
        ),
        "seed": args.seed,
        "entries": entries(args.seed, args.count),
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    subsets = [e["subset"] for e in doc["entries"]]
    print(f"wrote {args.out}: {len(subsets)} entries, {subsets.count('fit')} to fit on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
