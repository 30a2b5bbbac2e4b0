"""The warp-specialized Gluon backward (kernels/hopper_backward.py) against the Triton backward
and sdpa-cudnn, on a Hopper GPU, in one process.

Two parts, written to one JSON file (device, date, versions, raw passes):

- check: dQ, dK, dV of awkward shapes (odd lengths, N_q ≠ N_k both ways, one query, GQA, fp16
  and bf16) against the float64 reference, with the Triton backward's error on the same inputs
  beside it; a row passes when every error is within twice Triton's (+1e-3);
- time: the papers' protocol (batch × N = 16384, heads × d = 2048), N from 1024 to 16384,
  d 64 and 128 (or `--dims`), causal or not, fp16 and bf16; with `--odd`, lengths that fill no
  tile (N = 1000, 3000, 5000, batch ≈ 16384 / N) at head_dim 80, 96, 128 and 256 instead (80 and
  96 run padded to 128). Per row every implementation is timed in turn, `--passes` times over
  (do_bench medians, L2-sized input rotation); the row's figure is the median pass. The Gluon
  kernel runs with each candidate configuration.

    python benchmarks/hopper_backward.py [--quick] [--dtype fp16|bf16] [--odd] [--dims 80,96]
        [--no-check] [--out FILE]

`--table` prints the tuned-table entries of the buckets where a Gluon configuration beat the
Triton backward by 2% or more in that result: kernels/tuned.json's "bwd-ws" section, or from an
`--odd` result "bwd-ws-edge" (lengths that fill no 64-row tile; head dims padded as run);
`--write` merges them into kernels/tuned.json for the result's GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
CHECK_SHAPES = [  # (batch, heads, kv_heads, n_q, n_k, d, causal)
    (2, 4, 4, 256, 256, 128, False), (2, 4, 4, 256, 256, 128, True),
    (1, 4, 2, 300, 300, 128, True), (1, 8, 2, 1000, 1000, 64, False),
    (1, 3, 3, 777, 2049, 128, True), (1, 3, 3, 2049, 777, 128, True),
    (1, 2, 1, 1000, 3001, 64, False), (2, 2, 2, 64, 64, 64, True),
    (1, 2, 2, 130, 70, 128, False), (1, 2, 2, 1, 129, 128, True),
    (1, 4, 1, 3001, 3001, 64, True), (1, 4, 2, 1000, 1000, 96, True),
    (1, 3, 3, 777, 2049, 80, False), (2, 2, 2, 300, 300, 40, True),
    (2, 4, 4, 256, 256, 256, False), (2, 4, 4, 256, 256, 256, True),
    (1, 4, 2, 1000, 1000, 256, True), (1, 3, 3, 777, 2049, 256, True),
    (1, 3, 3, 2049, 777, 256, False), (1, 2, 2, 1, 129, 256, True),
    (1, 2, 2, 130, 70, 256, False), (1, 4, 1, 1000, 3001, 192, False),
    (1, 2, 2, 300, 300, 160, True),
]  # fmt: skip
ODD_LENS, ODD_DIMS = (1000, 3000, 5000), (80, 96, 128, 256)
WIN = 0.98  # a Gluon configuration is routed where it takes at most this share of Triton's time


def check_rows(dtypes, dims=None) -> list[dict]:
    import torch

    from flashscope.kernels.backward import launch_backward
    from flashscope.kernels.forward import launch_forward
    from flashscope.kernels.hopper_backward import CANDIDATES, launch_backward_ws, supports
    from flashscope.kernels.launch import pad_dim
    from flashscope.kernels.reference import attention_backward

    rows = []
    for b, h, h_kv, n_q, n_k, d, causal in CHECK_SHAPES:
        if dims is not None and pad_dim(d) not in {pad_dim(x) for x in dims}:
            continue
        for dtype in dtypes:
            torch.manual_seed(n_q * 31 + n_k)
            q = torch.randn(b, h, n_q, d, device="cuda", dtype=dtype)
            k, v = (torch.randn(b, h_kv, n_k, d, device="cuda", dtype=dtype) for _ in range(2))
            do = torch.randn_like(q)
            scale = 1 / math.sqrt(d)
            o, lse = launch_forward(q, k, v, causal, scale)
            ref = attention_backward(q, k, v, do, causal, scale)
            tri = launch_backward(q, k, v, o, lse, do, causal, scale)
            for cfg in CANDIDATES[pad_dim(d)]:
                if supports(q, k, v, cfg) is not None:
                    continue
                got = launch_backward_ws(q, k, v, o, lse, do, causal, scale, cfg)
                row = {
                    "shape": [b, h, h_kv, n_q, n_k, d],
                    "causal": causal,
                    "dtype": str(dtype).removeprefix("torch."),
                    "config": cfg.as_list(),
                }
                for name, x, r, t in zip(("dq", "dk", "dv"), got, ref, tri, strict=True):
                    row[name] = [(x.double() - r).abs().max().item(),
                                 (t.double() - r).abs().max().item()]  # fmt: skip
                row["finite"] = all(bool(torch.isfinite(x).all()) for x in got)
                row["ok"] = row["finite"] and all(
                    row[n][0] <= 2 * row[n][1] + 1e-3 for n in ("dq", "dk", "dv")
                )
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def time_rows(dtypes, seq_lens, passes: int, dims=(64, 128)) -> list[dict]:
    """Per (d, N, causal, dtype): batch ≈ 16384 / N, heads = 2048 // d; at a head_dim the Gluon
    kernel does not take (over 128), cuDNN and Triton alone."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashscope.kernels.backward import launch_backward
    from flashscope.kernels.forward import launch_forward
    from flashscope.kernels.hopper_backward import CANDIDATES, launch_backward_ws, supports
    from flashscope.kernels.launch import pad_dim
    from flashscope.kernels.timing import input_sets, median_ms

    rows = []
    for d in dims:
        for n in seq_lens:
            for causal in (False, True):
                for dtype in dtypes:
                    b, h = max(1, round(16384 / n)), 2048 // d
                    scale = 1 / math.sqrt(d)
                    kinds: dict[str, list] = {"sdpa-cudnn": [], "triton": []}
                    configs = CANDIDATES.get(pad_dim(d), ())
                    kinds.update({f"gluon{c.as_list()}": [] for c in configs})
                    for _ in range(input_sets(4 * b * h * n * d * 2)):
                        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype)
                                   for _ in range(3))  # fmt: skip
                        do = torch.randn_like(q)
                        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
                        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                            out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
                        kinds["sdpa-cudnn"].append(
                            lambda out=out, leaves=leaves, do=do: torch.autograd.grad(
                                out, leaves, do, retain_graph=True
                            )
                        )
                        o, lse = launch_forward(q, k, v, causal, scale)
                        args = (q, k, v, o, lse, do, causal, scale)
                        kinds["triton"].append(lambda a=args: launch_backward(*a))
                        for c in configs:
                            if supports(q, k, v, c) is None:
                                kinds[f"gluon{c.as_list()}"].append(
                                    lambda a=args, c=c: launch_backward_ws(*a, c)
                                )
                    raw: dict[str, list[float]] = {k: [] for k, calls in kinds.items() if calls}
                    for _ in range(passes):
                        for kind in raw:
                            raw[kind].append(median_ms(kinds[kind]))
                    flops = 2.5 * 4 * b * h * n * n * d * (0.5 if causal else 1.0)
                    ms = {k: sorted(v)[len(v) // 2] for k, v in raw.items()}
                    row = {
                        "d": d,
                        "n": n,
                        "causal": causal,
                        "dtype": str(dtype).removeprefix("torch."),
                        "ms": ms,
                        "raw_ms": raw,
                        "tflops": {k: round(flops / v / 1e9, 1) for k, v in ms.items()},
                        "vs_cudnn": {k: round(ms["sdpa-cudnn"] / v, 3) for k, v in ms.items()},
                    }
                    rows.append(row)
                    shown = ("d", "n", "causal", "dtype", "vs_cudnn")
                    print(json.dumps({k: row[k] for k in shown}), flush=True)
                    del kinds
                    torch.cuda.empty_cache()
    return rows


def table(doc: dict) -> tuple[str, dict[str, list[int]]]:
    """The tuned-table section this result fills ("bwd-ws", or "bwd-ws-edge" for lengths that
    fill no 64-row tile) and its entries: per (head_dim as run, mask, length bucket) the fastest
    Gluon configuration, where it beats the Triton backward in every row and dtype by WIN."""
    from flashscope.kernels.config import fills_no_tile
    from flashscope.kernels.launch import pad_dim
    from flashscope.simulator.timing.kernelplan import tuned_keys

    worst: dict[tuple[str, str], float] = {}  # (bucket, kind) → its largest share of Triton's
    edge = any(fills_no_tile(row["n"], row["n"]) for row in doc["time"])
    for row in doc["time"]:
        mask = "causal" if row["causal"] else "full"
        key = tuned_keys(f"bwd/16/d{pad_dim(row['d'])}/{mask}", row["n"])[0]
        for kind, ms in row["ms"].items():
            if kind.startswith("gluon"):
                share = ms / row["ms"]["triton"]
                worst[key, kind] = max(share, worst.get((key, kind), 0.0))
    best: dict[str, tuple[float, str]] = {}
    for (key, kind), share in worst.items():
        if share <= WIN and (key not in best or share < best[key][0]):
            best[key] = (share, kind)
    entries = {k: json.loads(kind.removeprefix("gluon")) for k, (_, kind) in sorted(best.items())}
    return ("bwd-ws-edge" if edge else "bwd-ws"), entries


def head_dims(text: str) -> list[int]:
    """One --dims word: a head_dim, or several joined by commas."""
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fp16 only, N 2048 and 16384, 1 pass")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--dtype", choices=("fp16", "bf16"), help="one dtype only (default: both)")
    ap.add_argument(
        "--odd",
        action="store_true",
        help=f"time N in {ODD_LENS} and head_dim in {ODD_DIMS} instead of the protocol",
    )
    ap.add_argument(
        "--dims",
        type=head_dims,
        nargs="+",
        help="head dims of the protocol's rows, by spaces or commas "
        "(default 64 128); the check keeps the shapes run at these",
    )
    ap.add_argument("--no-check", action="store_true", help="time only")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--table", type=Path, help="print the tuned-table entries of this result")
    ap.add_argument("--write", action="store_true", help="with --table: merge them into tuned.json")
    args = ap.parse_args(argv)
    if args.write and args.table is None:
        ap.error("--write needs --table FILE")
    if args.dims:
        args.dims = [d for group in args.dims for d in group]
    if args.table is not None:
        doc = json.loads(args.table.read_text())
        section, entries = table(doc)
        print(json.dumps({section: entries}, indent=1))
        if args.write:
            from flashscope.kernels.config import merge_tuned

            merge_tuned(doc["device"], {f"{section}/{k}": v for k, v in entries.items()})
        return 0
    import torch
    import triton

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("error: this benchmark needs a Hopper GPU (H100 or H200)", file=sys.stderr)
        return 2
    dtypes = [torch.float16] if args.quick else [torch.float16, torch.bfloat16]
    if args.dtype:
        dtypes = [{"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]]
    doc = {
        "what": "the Gluon backward against the Triton backward and sdpa-cudnn (one process)",
        "device": torch.cuda.get_device_name(),
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "protocol": "batch × N = 16384, heads × d = 2048; do_bench medians (L2 flushed, inputs "
        "rotated past L2); row ms = median of the passes; TFLOP/s with 2.5 × 4·B·H·N²·d "
        "(halved when causal)",
        "check": [] if args.no_check else check_rows(dtypes, args.dims),
        "time": time_rows(
            dtypes,
            ODD_LENS if args.odd else (2048, 16384) if args.quick else SEQ_LENS,
            1 if args.quick else args.passes,
            args.dims or (ODD_DIMS if args.odd else (64, 128)),
        ),
    }
    gpu = doc["device"].replace(" ", "-")
    out = args.out or ROOT / "benchmarks" / "results" / f"hopper-backward-{gpu}-{doc['date']}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    return 0 if all(r["ok"] for r in doc["check"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
