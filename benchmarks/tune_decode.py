"""Decode's tiles and split count on this GPU, for grouped K/V heads at the bandwidth limit.

    python benchmarks/tune_decode.py [--out benchmarks/results]      # the sweep
    python benchmarks/tune_decode.py --steady 5                      # the chosen entries

The shape of most served models: 32 query heads over 8 K/V heads, d = 128, one new token, a
65,536-key fp16 cache, at batch 1 and 8. The sweep runs every tile configuration of GRID (keys
per step, warps, stages) at split counts that give the GPU one to four CTAs per SM
(`splits_for`), each timed twice (median of do_bench, fresh inputs each pass) beside a
device-to-device copy of the same bytes, so every figure is a fraction of what the GPU copies at
that moment; the three best of each batch then run five more passes. Without a GPU entry in
kernels/tuned.json the kernel autotunes on its first call, one source of run-to-run swings.

`--steady RUNS` times STEADY_CASES (split count by the occupancy rule) on RUNS fresh
allocations each, two ways: back to back from CUDA graphs with no L2 flush, as a serving loop
runs decode (`rotating_ms`), and by do_bench, whose flush before every call leaves the L2 full
of dirty lines that a 100-µs kernel must first write back. The copy is timed both ways too.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from itertools import product
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.decode_gqa_probe import copy_gbs
from benchmarks.hostinfo import gpu_header, result_path
from flashscope.kernels.config import KernelConfig
from flashscope.kernels.decode import flash_decode, sm_count
from flashscope.kernels.timing import median_ms, tensor_bytes
from flashscope.simulator.core.problem import decode_splits

H, H_KV, D, N_CACHE = 32, 8, 128, 65536
GRID = [
    KernelConfig(16, bn, w, s) for bn, w, s in product((32, 64, 128, 256), (2, 4, 8), (2, 3, 4))
]
CTAS_PER_SM = (1, 2, 3, 4)


def splits_for(batch: int, block_n: int, per_sm: int) -> int:
    n_blocks = triton.cdiv(N_CACHE, block_n)
    return max(1, min(n_blocks, triton.cdiv(per_sm * sm_count(), batch * H_KV)))


def inputs(batch: int, seed: int) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(seed)
    q = torch.randn(batch, H, 1, D, device="cuda", dtype=torch.float16)
    k, v = (torch.randn(batch, H_KV, N_CACHE, D, device="cuda", dtype=torch.float16) for _ in "kv")
    return q, k, v


def measure(batch: int, cfg: KernelConfig, splits: int, passes: int, seed0: int) -> list[dict]:
    out = []
    for p in range(passes):
        q, k, v = inputs(batch, seed0 + p)
        nbytes = tensor_bytes(k, v)
        call = partial(flash_decode, q, k, v, config=cfg, splits=splits)
        ms = median_ms([call])
        copy = copy_gbs(nbytes)
        gbs = nbytes / (ms * 1e-3) / 1e9
        out.append({"ms": ms, "gbs": gbs, "copy_gbs": copy, "of_copy": gbs / copy})
        del q, k, v
    torch.cuda.empty_cache()
    return out


STEADY_CASES = [  # (batch, config, splits; None: the occupancy rule's)
    (1, (16, 64, 4, 3), None), (1, (16, 128, 2, 2), None),
    (8, (16, 64, 4, 3), None), (8, (16, 128, 2, 2), None),
]  # fmt: skip
SETS = 3  # input sets rotated in the steady measure: each over 5× the L2 at batch 1


def _graph(fn) -> torch.cuda.CUDAGraph:
    """`fn` captured in a CUDA graph (as serving engines run decode): replays cost no host time.
    Captured on the stream it warmed up on, whose decode counters then exist already (a stream's
    first call zeroes its own, which would add a fill to the graph)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        fn()
    return graph


def rotating_ms(calls: list, reps: int = 60, graphs: bool = True) -> float:
    """Median of CUDA-event times of `reps` calls rotating through `calls` back to back, with no
    L2 flush in between (do_bench's flush zeroes a buffer, leaving the L2 full of dirty lines
    that the next call must write back first); each call's inputs were last touched SETS calls
    ago. `graphs`: each call replayed from a CUDA graph (the host's time per decode call is
    close to the GPU's at batch 1); a captured copy becomes a copy-engine transfer, slower than
    the SMs' copy kernel, so copies run as they are."""
    runs = [_graph(c).replay for c in calls] if graphs else calls
    for r in runs:
        r()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]  # fmt: skip
    for i, (a, b) in enumerate(events):
        a.record()
        runs[i % len(runs)]()
        b.record()
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b in events)
    return float(times[len(times) // 2])


def steady(runs: int) -> list[dict]:
    """Each case `runs` times, each run on freshly allocated inputs: read bandwidth against a
    device copy of the same bytes, both timed from CUDA graphs back to back (`rotating_ms`)
    and by do_bench."""
    rows = []
    for batch, c, splits in STEADY_CASES:
        cfg = KernelConfig(*c)
        got = []
        for run in range(runs):
            sets = [inputs(batch, 1000 * run + i) for i in range(SETS)]
            nbytes = tensor_bytes(*sets[0][1:])
            calls = [partial(flash_decode, *x, config=cfg, splits=splits) for x in sets]
            srcs = [torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").normal_()
                    for _ in range(SETS)]  # fmt: skip
            dsts = [torch.empty_like(x) for x in srcs]
            copies = [partial(d.copy_, s) for s, d in zip(srcs, dsts, strict=True)]
            ms, copy_ms = rotating_ms(calls), rotating_ms(copies, graphs=False)
            flushed_ms, flushed_copy_ms = median_ms(calls), median_ms(copies)
            gbs, copy_gbs = nbytes / ms / 1e6, 2 * nbytes / copy_ms / 1e6
            got.append({"ms": ms, "copy_ms": copy_ms, "gbs": gbs, "copy_gbs": copy_gbs,
                        "of_copy": gbs / copy_gbs, "flushed_ms": flushed_ms,
                        "flushed_copy_ms": flushed_copy_ms})  # fmt: skip
            got[-1]["flushed_of_copy"] = (nbytes / flushed_ms) / (2 * nbytes / flushed_copy_ms)
            del sets, calls, srcs, dsts, copies
            torch.cuda.empty_cache()
        fr = [x["of_copy"] for x in got]
        ff = [x["flushed_of_copy"] for x in got]
        if splits is None:
            blocks = triton.cdiv(N_CACHE, cfg.block_n)
            splits = decode_splits(batch * H_KV, blocks, sm_count())
        rows.append({"batch": batch, "config": cfg.as_list(), "splits": splits, "runs": got,
                     "of_copy_min": min(fr), "of_copy_max": max(fr),
                     "flushed_of_copy_min": min(ff), "flushed_of_copy_max": max(ff)})  # fmt: skip
        print(f"batch {batch} {cfg.as_list()} splits {splits}: steady {min(fr):.1%}–{max(fr):.1%}"
              f", flushed {min(ff):.1%}–{max(ff):.1%}", flush=True)  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--steady", type=int, metavar="RUNS", default=0,
                    help="only the steady measure of STEADY_CASES, RUNS runs each")  # fmt: skip
    args = ap.parse_args()
    header = gpu_header()
    if args.steady:
        rows = steady(args.steady)
        path = result_path(args.out, "decode-steady", header)
        path.write_text(json.dumps({**header, "kind": "decode read bandwidth, steady",
                                    "rows": rows}) + "\n")  # fmt: skip
        print("wrote", path)
        return 0
    rows = []
    for batch in (1, 8):
        for cfg in GRID:
            seen = set()
            for per_sm in CTAS_PER_SM:
                splits = splits_for(batch, cfg.block_n, per_sm)
                if splits in seen:
                    continue
                seen.add(splits)
                try:
                    passes = measure(batch, cfg, splits, 2, 0)
                except Exception as e:  # a tile that does not fit this GPU's shared memory
                    rows.append({"batch": batch, "config": cfg.as_list(), "splits": splits,
                                 "error": f"{type(e).__name__}: {str(e)[:200]}"})  # fmt: skip
                    break
                fracs = [x["of_copy"] for x in passes]
                rows.append({"batch": batch, "config": cfg.as_list(), "splits": splits,
                             "ctas_per_sm": per_sm, "passes": passes,
                             "of_copy_min": min(fracs)})  # fmt: skip
                print(f"batch {batch} {cfg.as_list()} splits {splits:4d}: "
                      f"{min(fracs):.1%}", flush=True)  # fmt: skip
    confirm = []
    for batch in (1, 8):
        ok = [r for r in rows if r["batch"] == batch and "error" not in r]
        for r in sorted(ok, key=lambda r: -r["of_copy_min"])[:3]:
            cfg = KernelConfig(*r["config"][:4])
            passes = measure(batch, cfg, r["splits"], 5, 100)
            fracs = [x["of_copy"] for x in passes]
            confirm.append({"batch": batch, "config": r["config"], "splits": r["splits"],
                            "passes": passes, "of_copy_min": min(fracs),
                            "of_copy_max": max(fracs)})  # fmt: skip
            print(f"confirm batch {batch} {r['config']} splits {r['splits']}: "
                  f"{min(fracs):.1%}–{max(fracs):.1%}", flush=True)  # fmt: skip
    rule = {b: decode_splits(b * H_KV, triton.cdiv(N_CACHE, 64), sm_count()) for b in (1, 8)}
    path = result_path(args.out, "decode-tune", header)
    path.write_text(json.dumps({**header, "kind": "decode tiles and splits", "shape": {
        "heads": H, "kv_heads": H_KV, "head_dim": D, "cache": N_CACHE, "query_tokens": 1},
        "rule_splits_block64": rule, "rows": rows, "confirm": confirm}) + "\n")  # fmt: skip
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
