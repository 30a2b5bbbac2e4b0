"""Render the attention table of docs/kernels.md (markdown) from a benchmarks/attention.py result.

Usage: python benchmarks/render_attention.py RESULT.json [--dtype fp16] [--min-n 512]
Prints markdown to stdout. (The result is named: several GPUs' and dates' files sit side by
side, and a checkout gives them all one file time.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

IMPLS = ("flashscope", "sdpa-cudnn", "sdpa-flash", "sdpa-efficient")


def render(result: dict, dtype: str, min_n: int) -> str:
    t = {
        (r["impl"], r["mode"], r["head_dim"], r["causal"], r["seq_len"]): r["tflops"]
        for r in result["rows"]
        if r["dtype"] == dtype
    }
    lines = [
        f"{result['device']}, {dtype}, torch {result['torch']}, triton {result['triton']}, "
        f"{result['date']}. TFLOP/s (forward 4·B·H·N²·d, halved when causal; backward 2.5×); "
        "batch × N = 16384, heads = 2048 / d.",
        "",
        "| pass | d | causal | N | flashscope | sdpa-cudnn | sdpa-flash | sdpa-efficient "
        "| ÷ cudnn | ÷ flash |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted({k[1:] for k in t}, key=lambda k: (k[0] != "fwd", k[1], k[2], k[3]))
    for mode, d, causal, n in keys:
        if n < min_n:
            continue
        vals = [t.get((impl, mode, d, causal, n)) for impl in IMPLS]
        cells = [f"{v:.0f}" if v else "–" for v in vals]
        ours, cudnn, flash = vals[0], vals[1], vals[2]
        ratio_c = f"{ours / cudnn:.2f}" if ours and cudnn else "–"
        ratio_f = f"{ours / flash:.2f}" if ours and flash else "–"
        causal_s = "yes" if causal else "no"
        lines.append(
            f"| {mode} | {d} | {causal_s} | {n} | {' | '.join(cells)} | {ratio_c} | {ratio_f} |"
        )
    copy = result["ceilings"]["copy"]["gbs"]
    lines.append("")
    for r in result.get("decode", []):
        lines.append(
            f"- decode ({r['impl']}, batch 1, {r['heads']} heads / {r['kv_heads']} K/V heads, "
            f"d = {r['head_dim']}, cache {r['cache']}): {r['ms'] * 1e3:.0f} µs, "
            f"{r['gbs']:.0f} GB/s of K and V = {r['gbs'] / copy:.0%} of the measured copy "
            f"bandwidth ({copy:.0f} GB/s, read + write)"
        )
    mem = {r["impl"]: r for r in result.get("memory", [])}
    if "flashscope" in mem and "sdpa-flash" in mem:
        ours, theirs = mem["flashscope"]["peak_MiB"], mem["sdpa-flash"]["peak_MiB"]
        lines.append(
            f"- forward peak memory at B = 1, H = 16, N = 65536, d = 64: {ours:.0f} MiB "
            f"(sdpa-flash {theirs:.0f} MiB, ratio {ours / theirs:.2f})"
        )
    inst = result.get("instrumented", [])
    if inst:
        parts = ", ".join(f"{r['variant']} {r['ms']:.3f} ms" for r in inst)
        lines.append(f"- instrumented forward (B = 4, H = 16, N = 4096, d = 128): {parts}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("result", type=Path, help="an attention-<gpu>-<date>.json result")
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--min-n", type=int, default=512)
    args = ap.parse_args()
    print(render(json.loads(args.result.read_text()), args.dtype, args.min_n))


if __name__ == "__main__":
    main()
