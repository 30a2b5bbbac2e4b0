"""Backward tile configurations and dQ route per sequence length, timed beside sdpa-cudnn.

Usage (on a GPU machine):  python benchmarks/tune_backward_n.py --out DIR [--workers 12] [--write]

benchmarks/tune.py chooses the backward's tiles and dQ route once per (head_dim, causal), at
N = 4096. This sweep does it at every N of the papers' protocol (batch × N = 16384, heads =
2048 / d, fp16), with more pipeline stages among the candidates (a 32-row query step costs
4–8 KiB of shared memory per stage, so deep rings are cheap). Per (d, causal, N):

1. every candidate of the three kernels (the dK/dV kernel of the separate route, the dK/dV
   kernel of the atomic route with its fp32 dQ sums, the separate dQ kernel) is run once and
   checked against sdpa-cudnn's gradients, then timed alone;
2. the two fastest dK/dV kernels × the two fastest dQ kernels are timed whole (the dQ kernel
   runs on a side stream beside the dK/dV kernel, so the best pair is not always the two
   fastest alone), and the two fastest atomic kernels whole;
3. the fastest whole backward gives the bucket's route and tiles, and sdpa-cudnn's backward is
   timed in the same process for the ratio.

--write stores "bwd…/n<N>" and "bwd-route/…/n<N>" entries in kernels/tuned.json (used by
flashscope.kernels.launch.choose_config and backward.default_dq_mode for lengths up to that N).
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import protocol_inputs
from benchmarks.workers import tuning_main
from flashscope.kernels.backward import launch_backward, preprocess, run_dkdv, run_dq
from flashscope.kernels.config import KernelConfig, table_key
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.timing import median_ms

C = KernelConfig
DKDV = {
    64: [C(64, 64, 4, 3), C(32, 128, 4, 3), C(32, 64, 4, 3), C(64, 64, 4, 2), C(64, 128, 8, 2),
         C(32, 128, 4, 4), C(32, 128, 4, 5), C(32, 64, 4, 5), C(64, 128, 8, 3), C(32, 128, 8, 3)],
    128: [C(64, 64, 4, 2), C(64, 128, 8, 2), C(64, 128, 8, 3), C(32, 64, 4, 3), C(32, 128, 8, 2),
          C(64, 64, 8, 2), C(32, 64, 4, 4), C(32, 64, 4, 5), C(32, 128, 8, 3), C(32, 128, 8, 4),
          C(64, 64, 4, 3)],
}  # fmt: skip
ATOMIC = {
    64: [C(64, 64, 4, 3), C(32, 64, 4, 3), C(32, 128, 4, 3), C(32, 128, 4, 5), C(64, 128, 8, 2)],
    128: [C(64, 128, 8, 3), C(32, 64, 4, 3), C(64, 64, 4, 2), C(32, 128, 8, 3), C(32, 64, 4, 5)],
}  # fmt: skip
DQ = {
    64: [C(128, 32, 4, 3), C(64, 32, 4, 3), C(128, 64, 8, 3), C(64, 64, 4, 3), C(128, 32, 4, 5),
         C(128, 64, 8, 4), C(64, 32, 4, 5)],
    128: [C(128, 32, 4, 3), C(128, 64, 8, 3), C(128, 32, 8, 3), C(64, 64, 4, 2), C(128, 32, 4, 5),
          C(128, 64, 8, 4), C(64, 32, 4, 4)],
}  # fmt: skip
KINDS = {"bwd": DKDV, "bwd-atomic": ATOMIC, "bwd-dq": DQ}
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
TOLERANCE = 6e-2  # fp16 gradients against cuDNN's, as benchmarks/tune.py


class Problem:
    """Rotating fp16 input sets of one protocol shape, their forward, and cuDNN's gradients."""

    def __init__(self, d: int, n: int, causal: bool) -> None:
        self.d, self.n, self.causal, self.scale = d, n, causal, d**-0.5
        self.sets = []
        for q, k, v in protocol_inputs(d, n, torch.float16):
            do = torch.randn_like(q)
            o, lse = launch_forward(q, k, v, causal, self.scale)
            self.sets.append((q, k, v, o, lse, do, preprocess(o, do)))
        q, k, v, *_, do, _ = self.sets[0]
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
            ref = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        self.ref = torch.autograd.grad(ref, leaves, do)

    def kernel(self, kind: str, cfg: KernelConfig, s: tuple) -> tuple:
        q, k, v, _o, lse, do, delta = s
        args = (q, k, v, do, lse, delta, self.causal, self.scale, cfg)
        if kind == "bwd-dq":
            return (run_dq(*args),)
        if kind == "bwd-atomic":
            acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
            dk, dv = run_dkdv(*args, dq_acc=acc)
            return acc * self.scale, dk, dv
        return run_dkdv(*args)

    def error(self, kind: str, cfg: KernelConfig) -> float:
        out = self.kernel(kind, cfg, self.sets[0])
        refs = {"bwd-dq": self.ref[:1], "bwd-atomic": self.ref, "bwd": self.ref[1:]}[kind]
        pairs = zip(out, refs, strict=True)
        return max((a.float() - b.float()).abs().max().item() for a, b in pairs)

    def time_kernel(self, kind: str, cfg: KernelConfig) -> float:
        return median_ms([partial(self.kernel, kind, cfg, s) for s in self.sets], 10, 60)

    def time_whole(self, route: str, cfg: KernelConfig, dq_cfg: KernelConfig | None) -> float:
        def whole(s):
            q, k, v, o, lse, do, _ = s
            return launch_backward(q, k, v, o, lse, do, self.causal, self.scale, cfg,
                                   dq_mode=route, dq_config=dq_cfg)  # fmt: skip

        return median_ms([partial(whole, s) for s in self.sets], 10, 60)

    def time_cudnn(self) -> float:
        calls = []
        for q, k, v, *_ in self.sets:
            leaves = [x.detach().requires_grad_() for x in (q, k, v)]
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
                o = F.scaled_dot_product_attention(*leaves, is_causal=self.causal)
            do = torch.randn_like(o)
            calls.append(partial(torch.autograd.grad, o, leaves, do, retain_graph=True))
        return median_ms(calls, 10, 60)


def compile_worker(index: int, count: int) -> None:
    """Compile a share of the candidates on a small problem (Triton's disk cache is shared)."""
    jobs = [(kind, d, causal, c) for kind, table in KINDS.items() for d in table
            for causal in (False, True) for c in table[d]]  # fmt: skip
    problems: dict[tuple, Problem] = {}
    for kind, d, causal, cfg in jobs[index::count]:
        try:
            p = problems.setdefault((d, causal), Problem(d, 1024, causal))
            p.kernel(kind, cfg, p.sets[0])
            torch.cuda.synchronize()
        except Exception as exc:  # too much shared memory, say: the sweep records it
            print(f"compile {kind} d{d} {causal} {cfg.as_list()}: {type(exc).__name__}", flush=True)


def tune_problem(d: int, n: int, causal: bool) -> tuple[list[dict], dict]:
    p = Problem(d, n, causal)
    base = {"head_dim": d, "seq_len": n, "batch": 16384 // n, "heads": 2048 // d, "causal": causal}
    rows, alone = [], {kind: [] for kind in KINDS}
    for kind, table in KINDS.items():
        for cfg in table[d]:
            row = {**base, "kind": kind, "config": cfg.as_list()}
            try:
                row["max_err"] = p.error(kind, cfg)
                if row["max_err"] < TOLERANCE:
                    row["ms"] = p.time_kernel(kind, cfg)
                    alone[kind].append((row["ms"], cfg))
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    fastest = {kind: [c for _, c in sorted(found, key=lambda x: x[0])[:2]]
               for kind, found in alone.items()}  # fmt: skip
    wholes = [("separate", c, qc) for c in fastest["bwd"] for qc in fastest["bwd-dq"]]
    wholes += [("atomic", c, None) for c in fastest["bwd-atomic"]]
    best = None
    for route, cfg, dq_cfg in wholes:
        ms = p.time_whole(route, cfg, dq_cfg)
        row = {**base, "kind": "whole", "route": route, "config": cfg.as_list(),
               "dq_config": dq_cfg.as_list() if dq_cfg else None, "ms": ms}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
        if best is None or ms < best["ms"]:
            best = row
    cudnn = {**base, "kind": "sdpa-cudnn", "ms": p.time_cudnn()}
    rows.append(cudnn)
    print(json.dumps(cudnn), flush=True)
    chosen = {}
    if best is not None:
        best["vs_cudnn"] = cudnn["ms"] / best["ms"]
        bucket = f"/n{n}"
        chosen[table_key("bwd-route", 16, d, causal) + bucket] = best["route"]
        if best["route"] == "separate":
            chosen[table_key("bwd", 16, d, causal) + bucket] = best["config"]
            chosen[table_key("bwd-dq", 16, d, causal) + bucket] = best["dq_config"]
        else:
            chosen[table_key("bwd-atomic", 16, d, causal) + bucket] = best["config"]
        print(f"d{d} N{n} causal={causal}: {best['route']} {best['config']} {best['dq_config']} "
              f"{best['ms']:.3f} ms, {best['vs_cudnn']:.3f}× cuDNN", flush=True)  # fmt: skip
    del p
    torch.cuda.empty_cache()
    return rows, chosen


def sweep() -> tuple[list[dict], dict[str, object]]:
    """Every (head_dim, causal, N) of the protocol: the rows timed and the choices made."""
    rows, chosen = [], {}
    for d in DKDV:
        for causal in (False, True):
            for n in SEQ_LENS:
                r, c = tune_problem(d, n, causal)
                rows += r
                chosen.update(c)
    return rows, chosen


def main() -> None:
    protocol = "fp16, batch × N = 16384, heads = 2048 / d; median of do_bench (10/60 ms)"
    tuning_main(__file__, "backward-n", protocol, compile_worker, sweep)


if __name__ == "__main__":
    main()
