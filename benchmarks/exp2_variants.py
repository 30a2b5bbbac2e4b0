"""Flush-to-zero exponentials against Triton's exp2, in the forward and backward kernels.

Usage (on a GPU machine):  python benchmarks/exp2_variants.py --out DIR

Triton lowers tl.math.exp2 to `ex2.approx.f32`, which ptxas wraps in subnormal handling (a
compare and two multiplies around MUFU.EX2); `ex2.approx.ftz.f32` is the bare instruction.
The kernels pick one with the compile-time flag FTZ (kernels.launch.fast_exp2, switched off by
FLASHSCOPE_EXP2=precise). This script times both beside sdpa-cudnn in one process (fp16,
the papers' protocol, kernels' default tiles), checks each against cuDNN's outputs, and counts
the SASS instructions of the compiled kernels (cuobjdump over Triton's cache). Writes
DIR/exp2-variants-<gpu>-<date>.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="exp2-cache-")

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import attention_fn, protocol_inputs  # noqa: E402
from kernels import flash_attention  # noqa: E402
from kernels.timing import median_ms  # noqa: E402

VARIANTS = ("precise", "ftz")
SEQ_LENS = (2048, 4096, 16384)
OPS = ("MUFU.EX2", "FSETP", "FMUL", "FFMA", "FADD", "HGMMA", "BAR")


def grads(fn, q, k, v, do, causal):
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    o = fn(*leaves, causal)
    return o, torch.autograd.grad(o, leaves, do)


def case(d: int, n: int, causal: bool) -> list[dict]:
    sets = protocol_inputs(d, n, torch.float16)
    cudnn = attention_fn("sdpa-cudnn")
    base = {"head_dim": d, "seq_len": n, "batch": 16384 // n, "heads": 2048 // d, "causal": causal}
    q, k, v = sets[0]
    do = torch.randn_like(q)
    ref_o, ref_g = grads(cudnn, q, k, v, do, causal)
    rows = []
    for impl in ("sdpa-cudnn", *VARIANTS):
        if impl in VARIANTS:
            os.environ["FLASHSCOPE_EXP2"] = impl
            fn = flash_attention
            o, g = grads(fn, q, k, v, do, causal)
            err = max((a.float() - b.float()).abs().max().item()
                      for a, b in zip((o, *g), (ref_o, *ref_g), strict=True))  # fmt: skip
        else:
            fn, err = cudnn, 0.0
        fwd = median_ms([partial(fn, *x, causal) for x in sets])
        calls = []
        for x in sets:
            leaves = [t.detach().requires_grad_() for t in x]
            o = fn(*leaves, causal)
            calls.append(partial(torch.autograd.grad, o, leaves, torch.randn_like(o),
                                 retain_graph=True))  # fmt: skip
        bwd = median_ms(calls)
        row = {**base, "impl": impl, "fwd_ms": fwd, "bwd_ms": bwd, "max_err_vs_cudnn": err}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def sass_counts() -> list[dict]:
    """Per compiled attention kernel in this run's Triton cache: its flag and op counts."""
    out = []
    for cubin in Path(os.environ["TRITON_CACHE_DIR"]).rglob("*.cubin"):
        if not cubin.stem.startswith("_attn"):
            continue
        ptx = cubin.with_suffix(".ptx").read_text()
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True,
                              text=True).stdout  # fmt: skip
        ops = collections.Counter()
        for line in sass.splitlines():
            m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
            if m:
                ops[m.group(1).split(".")[0] if not m.group(1).startswith("MUFU") else
                    m.group(1)] += 1  # fmt: skip
        warps = re.search(r"\.maxntid (\d+)", ptx)
        out.append({
            "kernel": cubin.stem,
            "ftz": "ex2.approx.ftz.f32" in ptx,
            "threads": int(warps.group(1)) if warps else None,
            "instructions": sum(ops.values()),
            **{op: ops.get(op, 0) for op in OPS},
        })  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = []
    for d in (64, 128):
        for causal in (False, True):
            for n in SEQ_LENS:
                rows += case(d, n, causal)
                torch.cuda.empty_cache()
    sass = sass_counts()
    for s in sass:
        print(json.dumps(s), flush=True)
    gpu = torch.cuda.get_device_name()
    result = {
        "device": gpu,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "protocol": "fp16, batch × N = 16384, heads = 2048 / d, default tiles; median of do_bench",
        "rows": rows,
        "sass": sass,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"exp2-variants-{gpu.replace(' ', '-')}-{result['date']}.json"
    (args.out / name).write_text(json.dumps(result, indent=1) + "\n")
    for r in rows:
        if r["impl"] == "sdpa-cudnn":
            c = r
            continue
        print(f"d{r['head_dim']} N{r['seq_len']} causal={r['causal']} {r['impl']:8s} "
              f"fwd {c['fwd_ms'] / r['fwd_ms']:.3f}× bwd {c['bwd_ms'] / r['bwd_ms']:.3f}× cuDNN "
              f"err {r['max_err_vs_cudnn']:.2e}")  # fmt: skip


if __name__ == "__main__":
    main()
