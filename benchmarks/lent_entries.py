"""What another Hopper GPU's tuned entries cost: the routes as tuned here against the routes the
other GPU's table gives, both run on this GPU (GPU only).

Usage (on an H100 or H200):  python benchmarks/lent_entries.py --out FILE [--lend-from NAME]

A Hopper GPU without entries of its own at a head dim takes another's
(simulator/timing/tuned_tables.py). Where two GPUs were both tuned (the H100 and the H200 at
head dims 64 and 128), timing each one's choices on the same GPU measures what a borrower gives
up. For every bucket of the protocol (batch × N = 16384, heads = 2048 / d, fp16, causal and
not) where the two tables choose differently, `flash_attention`'s forward, and its backward
through autograd, are timed with the GPU's name reported as this GPU's and as the lender's
(the kernels read their tables by that name), in one process: medians of do_bench over three
passes, every other one in reverse order.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hostinfo import gpu_header
from flashscope.kernels import flash_attention, launch
from flashscope.kernels.config import first_tuned, lookup, route, table_key
from flashscope.kernels.hopper_backward import tuned_config as bwd_config
from flashscope.kernels.hopper_forward import tuned_config as fwd_config
from flashscope.kernels.timing import input_sets, median_ms, tensor_bytes

LENGTHS = (1024, 2048, 4096, 8192, 16384)


def choices(gpu: str, d: int, n: int, causal: bool) -> dict:
    """What `gpu`'s table runs for the bucket: the Gluon configurations, else Triton's tiles
    (and, backward, its dQ route)."""
    fwd, bwd = fwd_config(gpu, d, causal, n), bwd_config(gpu, d, causal, n)
    tiles = {m: first_tuned(lookup, gpu, table_key(m, 16, d, causal), n) for m in ("fwd", "bwd")}
    dq = first_tuned(route, gpu, table_key("bwd-route", 16, d, causal), n) or "separate"
    triton = {m: ["triton", t.as_list() if t else None] for m, t in tiles.items()}
    return {
        "fwd": fwd.as_list() if fwd else triton["fwd"],
        "bwd": bwd.as_list() if bwd else [*triton["bwd"], dq],
    }


def as_gpu(name: str) -> None:
    """Make the kernels read their tables as `name`'s."""
    launch._cuda_name = lambda: name  # gpu_name() reads it at each call


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--lend-from", default=None, help="the lender (default: the other tuned GPU)")
    args = ap.parse_args()
    here = torch.cuda.get_device_name()
    lender = args.lend_from or ("NVIDIA H200" if "H100" in here else "NVIDIA H100 80GB HBM3")
    doc = {**gpu_header(), "lender": lender, "date": time.strftime("%Y-%m-%d"), "rows": []}
    for d in (64, 128):
        for n in LENGTHS:
            for causal in (False, True):
                own, lent = choices(here, d, n, causal), choices(lender, d, n, causal)
                if own == lent:
                    continue
                b, h = 16384 // n, 2048 // d
                probe = torch.randn(b, h, n, d, device="cuda", dtype=torch.float16)
                sets = []
                for _ in range(input_sets(3 * tensor_bytes(probe))):
                    q, k, v, do = (torch.randn_like(probe) for _ in range(4))
                    sets.append([x.requires_grad_() for x in (q, k, v)] + [do])

                def fwd(s, causal=causal):
                    with torch.no_grad():
                        return flash_attention(s[0], s[1], s[2], causal)

                def bwd(s, causal=causal):
                    o = flash_attention(s[0], s[1], s[2], causal)
                    return torch.autograd.grad(o, s[:3], s[3])

                raw: dict[str, list[float]] = {}
                kinds = [(p, who) for p in ("fwd", "bwd") for who in ("own", "lent")]
                for i in range(3):
                    for p, who in kinds if i % 2 == 0 else kinds[::-1]:
                        as_gpu(here if who == "own" else lender)
                        f = fwd if p == "fwd" else bwd
                        ms = median_ms([lambda s=s, f=f: f(s) for s in sets])
                        raw.setdefault(f"{p}/{who}", []).append(ms)
                as_gpu(here)
                ms = {key: sorted(v)[1] for key, v in raw.items()}
                row = {"head_dim": d, "seq_len": n, "batch": b, "heads": h, "causal": causal,
                       "own": own, "lent": lent, "ms": ms, "raw_ms": raw,
                       "lent_vs_own": {p: round(ms[f"{p}/own"] / ms[f"{p}/lent"], 3)
                                       for p in ("fwd", "bwd") if own[p] != lent[p]}}  # fmt: skip
                doc["rows"].append(row)
                print(d, n, causal, row["lent_vs_own"], own, lent, flush=True)
                args.out.write_text(json.dumps(doc, indent=1))
    args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
