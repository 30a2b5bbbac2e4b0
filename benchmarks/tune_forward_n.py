"""Forward tile configurations per sequence length, each timed beside sdpa-cudnn in one process.

Usage (on a GPU machine):  python benchmarks/tune_forward_n.py --out DIR [--workers 12] [--write]

benchmarks/tune.py picks one forward configuration per (head_dim, causal) at N = 4096. With few key
blocks per program (N ≤ 2048) a different tile can win: shorter loops make the pipeline's fill and
the epilogue a larger share of each program. This sweep times every candidate at each N of the
papers' protocol (batch × N = 16384, heads = 2048 / d, fp16), checks it against cuDNN's output, and
records the ratio to sdpa-cudnn measured in the same process. --write stores the winner per N bucket
in kernels/tuned.json as "fwd/16/d<d>/<full|causal>/n<N>" (used by
flashscope.kernels.launch.choose_config for sequence lengths up to that N, bf16 sharing fp16's
choice).
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import attention_fn, protocol_inputs
from benchmarks.workers import tuning_main
from flashscope.kernels.config import KernelConfig, table_key
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.timing import median_ms

C = KernelConfig
# The last entries cap the registers per thread (maxnreg) so that one more CTA fits on an SM
# (65536 registers): 168 × 128 threads → 3 CTAs, 80 × 256 → 3, 128 × 256 → 2; each one's shared
# memory allows that many.
CANDIDATES = {
    64: [C(128, 64, 4, 3), C(64, 64, 4, 3), C(128, 64, 4, 4), C(128, 64, 4, 2), C(128, 128, 8, 2),
         C(128, 128, 8, 3), C(128, 32, 4, 3), C(64, 128, 4, 3), C(128, 64, 8, 3),
         C(128, 64, 4, 3, False, 168), C(128, 64, 4, 2, False, 168), C(128, 64, 8, 3, False, 80),
         C(128, 128, 8, 2, False, 128)],
    128: [C(128, 128, 8, 3), C(64, 64, 4, 3), C(128, 64, 8, 3), C(128, 64, 8, 2), C(128, 64, 8, 4),
          C(128, 128, 8, 2), C(64, 128, 4, 3), C(64, 64, 4, 4), C(128, 32, 8, 3), C(64, 32, 4, 3),
          C(64, 128, 4, 2), C(128, 64, 8, 2, False, 128)],
}  # fmt: skip
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)


def jobs() -> list[tuple[int, bool, KernelConfig]]:
    return [(d, causal, c) for d in CANDIDATES for causal in (False, True) for c in CANDIDATES[d]]


def compile_worker(index: int, count: int) -> None:
    """Compile a share of the candidates on a small problem (Triton's disk cache is shared)."""
    for d, causal, cfg in jobs()[index::count]:
        q, k, v = (torch.randn(1, 2, 512, d, device="cuda", dtype=torch.float16) for _ in range(3))
        try:
            launch_forward(q, k, v, causal, d**-0.5, cfg)
            torch.cuda.synchronize()
        except Exception as exc:  # too much shared memory, say: the timing pass records it
            print(f"compile {d} {causal} {cfg.as_list()}: {type(exc).__name__}", flush=True)


cudnn = attention_fn("sdpa-cudnn")


def sweep() -> list[dict]:
    rows = []
    for d in CANDIDATES:
        for n in SEQ_LENS:
            b, h = 16384 // n, 2048 // d
            inputs = protocol_inputs(d, n, torch.float16)
            for causal in (False, True):
                ref = cudnn(*inputs[0], causal)
                base = {"head_dim": d, "seq_len": n, "batch": b, "heads": h, "causal": causal}
                ms = median_ms([partial(cudnn, *x, causal) for x in inputs])
                rows.append({**base, "impl": "sdpa-cudnn", "ms": ms})
                for cfg in CANDIDATES[d]:
                    row = {**base, "impl": "flashscope", "config": cfg.as_list()}
                    try:
                        o, _ = launch_forward(*inputs[0], causal, d**-0.5, cfg)
                        row["max_err"] = (o.float() - ref.float()).abs().max().item()
                        if row["max_err"] < 2e-2:
                            calls = [
                                partial(launch_forward, *x, causal, d**-0.5, cfg) for x in inputs
                            ]
                            row["ms"] = median_ms(calls)
                    except Exception as exc:
                        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            del inputs
            torch.cuda.empty_cache()
    return rows


def winners(rows: list[dict]) -> dict[str, list[int]]:
    best: dict[str, tuple[float, list[int]]] = {}
    for r in rows:
        if r["impl"] != "flashscope" or "ms" not in r:
            continue
        key = table_key("fwd", 16, r["head_dim"], r["causal"]) + f"/n{r['seq_len']}"
        if key not in best or r["ms"] < best[key][0]:
            best[key] = (r["ms"], r["config"])
    return {k: cfg for k, (_, cfg) in best.items()}


def sweep_and_choose() -> tuple[list[dict], dict[str, list[int]]]:
    rows = sweep()
    return rows, winners(rows)


def main() -> None:
    protocol = "fp16, batch × N = 16384, heads = 2048 / d; median of do_bench"
    tuning_main(__file__, "forward-n", protocol, compile_worker, sweep_and_choose)


if __name__ == "__main__":
    main()
