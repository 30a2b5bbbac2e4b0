"""`flashscope traffic`: closed-form HBM, SRAM and FLOP counts of one algorithm on one problem.

Imports only the simulator (NumPy): no torch, triton or FastAPI, so it answers at once.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

ALGOS = ("naive", "fa1", "fa2", "fa2-bwd", "decode")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def power_of_two(text: str) -> int:
    value = positive_int(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"must be a power of two, got {value}")
    return value


def head_dim(text: str) -> int:
    """A head dimension by the rule of every page and API (simulator/core/problem.py)."""
    from flashscope.simulator.core.problem import head_dim_refusal

    value = positive_int(text)
    refused = head_dim_refusal(value)
    if refused is not None:
        raise argparse.ArgumentTypeError(refused[0])
    return value


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `traffic` on the CLI's subcommands."""
    cmd = sub.add_parser(
        "traffic",
        help="closed-form memory traffic and FLOPs of one algorithm",
        description="Elements and bytes each algorithm moves for the whole problem "
        "(every batch and head), counted the way the FlashAttention papers count.",
    )
    cmd.add_argument("--algo", required=True, choices=ALGOS, help="tile program")
    cmd.add_argument("--seq", required=True, type=positive_int, help="query length N")
    cmd.add_argument("--seq-k", type=positive_int, help="key/value length (default N)")
    cmd.add_argument(
        "--head-dim", required=True, type=head_dim, help="head dimension d (a multiple of 8)"
    )
    cmd.add_argument("--block-m", required=True, type=power_of_two, help="query rows per tile")
    cmd.add_argument("--block-n", required=True, type=power_of_two, help="keys per tile")
    cmd.add_argument("--batch", type=positive_int, default=1)
    cmd.add_argument("--heads", type=positive_int, default=1, help="query heads")
    cmd.add_argument("--kv-heads", type=positive_int, help="K/V heads (default: heads)")
    cmd.add_argument("--causal", action="store_true", help="causal mask, bottom-right aligned")
    cmd.add_argument("--dtype", choices=("fp16", "bf16", "fp32"), default="fp16")
    cmd.add_argument("--splits", type=positive_int, help="decode: KV splits (default: rule)")
    cmd.add_argument("--sms", type=positive_int, default=132, help="decode: SMs of the GPU")
    cmd.add_argument("--json", action="store_true", help="print one JSON object")
    cmd.set_defaults(func=run, parser=cmd)


def run(args: argparse.Namespace) -> int:
    from flashscope.simulator.core.problem import AttentionProblem, TileConfig
    from flashscope.simulator.teach.traffic import summary

    parser: argparse.ArgumentParser = args.parser
    kv_heads = args.kv_heads if args.kv_heads is not None else args.heads
    if args.heads % kv_heads:
        parser.error(f"argument --kv-heads: must divide --heads ({args.heads}), got {kv_heads}")
    if args.algo == "decode" and args.causal:
        parser.error("argument --causal: decode has no causal mask (a new token sees the cache)")
    if args.algo != "decode" and args.splits is not None:
        parser.error("argument --splits: applies to --algo decode only")
    problem = AttentionProblem(
        seq_q=args.seq,
        seq_k=args.seq_k,
        head_dim=args.head_dim,
        batch=args.batch,
        heads=args.heads,
        kv_heads=kv_heads,
        causal=args.causal,
        dtype=args.dtype,
    )
    tiles = TileConfig(block_m=args.block_m, block_n=args.block_n)
    out = summary(args.algo, problem, tiles, splits=args.splits, sms=args.sms)
    print(json.dumps(out) if args.json else table(out))
    return 0


def table(out: dict[str, Any]) -> str:
    """A readable table: elements and bytes per counter, then FLOPs."""
    p = out["problem"]
    head = (
        f"{out['algo']}: batch {p['batch']} × heads {p['heads']} (kv {p['kv_heads']}), "
        f"N {p['seq_q']} × {p['seq_k']}, d {p['head_dim']}, "
        f"tiles {out['tiles']['block_m']}×{out['tiles']['block_n']}, {p['dtype']}"
        + (", causal" if p["causal"] else "")
    )
    if "splits" in out:
        head += f", splits {out['splits']['used']}"
    lines = [head, f"{'counter':<14}{'elements':>22}{'bytes':>22}"]
    for key, n in out["elements"].items():
        lines.append(f"{key:<14}{n:>22,}{out['bytes'][key]:>22,}")
    lines.append(f"{'global_total':<14}{'':>22}{out['bytes']['global_total']:>22,}")
    lines.append(f"{'flops':<14}{out['flops']:>22,}")
    lines.append(f"{'exps':<14}{out['exps']:>22,}")
    return "\n".join(lines)
