"""Half the forward's exponentials on the FMA units (`KernelConfig.poly_exp`) against none.

Usage (on a GPU machine):  python benchmarks/poly_exp.py --out DIR [--repeats 3]

At d = 64 a score costs the tensor cores 2·2·64 FLOPs and the special-function units one
exp2: on an H100 or H200 (about 16 exp2 per cycle per SM against 4096 FLOPs) the two take the
same time, so the forward is bound by both at once. FlashAttention-4 moves part of the
exponentials to a polynomial on the FMA units; `poly_exp` does that for the odd columns of every
unmasked tile (`kernels.forward.exp2_mixed`). This times, in one process, the tuned
configuration of every protocol shape (batch × N = 16384, heads = 2048 / d) with and without
it, and sdpa-flash and sdpa-cudnn for the ratios, each row's median over `--repeats` passes
(every other pass in reverse order), and checks each output against cuDNN's. Writes
DIR/poly-exp-<gpu>-<date>.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import attention_fn, protocol_inputs  # noqa: E402
from kernels.forward import launch_forward  # noqa: E402
from kernels.launch import choose_config  # noqa: E402
from kernels.timing import median_ms  # noqa: E402

SEQ_LENS = (2048, 4096, 8192, 16384)
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def flashscope(q, k, v, causal, cfg):
    return launch_forward(q, k, v, causal, q.shape[-1] ** -0.5, cfg)[0]


def cases(d: int, n: int, dtype: torch.dtype, causal: bool) -> dict:
    run = partial(flashscope, causal=causal)
    tuned = choose_config("fwd", dtype, d, causal, lambda c: None, seq_len=n)
    poly = dataclasses.replace(tuned, poly_exp=True)
    return {
        "sdpa-flash": attention_fn("sdpa-flash"),
        "sdpa-cudnn": attention_fn("sdpa-cudnn"),
        "flashscope": lambda q, k, v, c: run(q, k, v, cfg=tuned),
        "flashscope poly-exp": lambda q, k, v, c: run(q, k, v, cfg=poly),
    }, tuned


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--head-dims", default="64,128", help="comma-separated head dims")
    args = ap.parse_args()
    head_dims = [int(x) for x in args.head_dims.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    problems = [
        (d, n, name, causal)
        for d in head_dims
        for n in SEQ_LENS
        for name in DTYPES
        for causal in (False, True)
    ]
    rows: dict[tuple, dict] = {}
    for rep in range(args.repeats):
        for d, n, name, causal in problems if rep % 2 == 0 else problems[::-1]:
            dtype = DTYPES[name]
            inputs = protocol_inputs(d, n, dtype)
            impls, tuned = cases(d, n, dtype, causal)
            ref = impls["sdpa-cudnn"](*inputs[0], causal).float()
            for impl, fn in impls.items():
                key = (d, n, name, causal, impl)
                row = rows.setdefault(key, {
                    "impl": impl, "head_dim": d, "seq_len": n, "dtype": name, "causal": causal,
                    "batch": 16384 // n, "heads": 2048 // d, "config": tuned.as_list(),
                    "ms_passes": [],
                })  # fmt: skip
                if rep == 0:
                    out = fn(*inputs[0], causal).float()
                    row["max_err_vs_cudnn"] = (out - ref).abs().max().item()
                row["ms_passes"].append(median_ms([partial(fn, *x, causal) for x in inputs]))
            del inputs, ref
            torch.cuda.empty_cache()
        print(f"pass {rep + 1} of {args.repeats} done", flush=True)
    out_rows = []
    for row in rows.values():
        row["ms"] = sorted(row["ms_passes"])[len(row["ms_passes"]) // 2]
        f = 4.0 * row["batch"] * row["heads"] * row["seq_len"] ** 2 * row["head_dim"]
        row["tflops"] = f * (0.5 if row["causal"] else 1.0) / (row["ms"] * 1e-3) / 1e12
        out_rows.append(row)
    by = {(r["head_dim"], r["seq_len"], r["dtype"], r["causal"], r["impl"]): r for r in out_rows}
    for d, n, name, causal in problems:
        base = by[(d, n, name, causal, "flashscope")]["ms"]
        poly = by[(d, n, name, causal, "flashscope poly-exp")]["ms"]
        flash = by[(d, n, name, causal, "sdpa-flash")]["ms"]
        cudnn = by[(d, n, name, causal, "sdpa-cudnn")]["ms"]
        print(f"d={d} N={n} {name} causal={causal}: poly/plain {poly / base:.3f}; "
              f"÷cudnn {cudnn / base:.3f} → {cudnn / poly:.3f}; "
              f"÷flash {flash / base:.3f} → {flash / poly:.3f}")  # fmt: skip
    gpu = torch.cuda.get_device_name(0)
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    result = {"device": gpu, "date": date, "torch": torch.__version__,
              "triton": triton.__version__, "repeats": args.repeats, "rows": out_rows}  # fmt: skip
    path = args.out / f"poly-exp-{gpu.replace(' ', '-')}-{date}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"→ {path}")


if __name__ == "__main__":
    main()
