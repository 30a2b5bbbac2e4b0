"""The d = 256 Gluon backward: paired key blocks (BwdConfig persistent 2: program j runs key blocks
j and n_kb - 1 - j) and persistent programs (1) against one program per key block.
Check rows against float64 first (persistent candidates), then in one process, passes
interleaved: the routed configuration, the same band persistent, band 0 and 4 persistent;
sdpa-cudnn beside.

Usage (on an H100 or H200): python benchmarks/backward_paired.py OUT.json LENS SECONDS
"""

import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import hopper_backward as hb
from flashscope.kernels import hopper_backward as k
from flashscope.kernels.config import fills_no_tile
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.timing import input_sets, median_ms

out = sys.argv[1]
lens = [int(x) for x in sys.argv[2].split(",")]
budget = float(sys.argv[3])
t0 = time.time()
gpu = torch.cuda.get_device_name()
doc = {
    "what": "d=256 backward: paired key blocks (program j runs blocks j and n_kb-1-j; the "
    "next block's K and V loaded while dK and dV are stored) against one program per key "
    "block; persistent (one per SM) beside; check rows against float64 first",
    "device": gpu,
    "date": time.strftime("%Y-%m-%d"),
    "torch": torch.__version__,
    "protocol": "batch x N = 16384, 8 heads, d = 256; do_bench medians (L2 flushed), three "
    "interleaved passes, row ms = their median",
    "check": [],
    "time": [],
}


def save():
    Path(out).write_text(json.dumps(doc, indent=1))


def P(band, mode=2):
    return k.BwdConfig(2, 64, 2, band, mode)


# beside the benchmark's shapes (at most 132 blocks: one block a program), grids of several
# blocks a program, GQA and lengths that fill no tile among them
hb.CHECK_SHAPES = [
    (1, 4, 2, 1000, 1000, 256, True),
    (1, 3, 3, 777, 2049, 256, True),
    (1, 2, 2, 1, 129, 256, True),
    (2, 8, 2, 3001, 3001, 256, True),
    (4, 8, 8, 1000, 1000, 256, True),
    (4, 8, 8, 1000, 1000, 192, False),
    (2, 6, 3, 2049, 4100, 256, True),
    (3, 5, 5, 2000, 1500, 256, False),
]
k.CANDIDATES[256] = (P(0), P(4))
doc["check"] = hb.check_rows([torch.float16, torch.bfloat16], [256])
bad = [r for r in doc["check"] if not r["ok"]]
print("check failed:", len(bad), "of", len(doc["check"]), flush=True)
save()

for n in lens:
    for causal in (True, False):
        for dtype in (torch.float16, torch.bfloat16):
            if time.time() - t0 > budget:
                break
            b, h, d = max(1, round(16384 / n)), 8, 256
            scale = 1 / math.sqrt(d)
            routed = k.tuned_config(gpu, 256, causal, n, fills_no_tile(n, n)) or k.BwdConfig(
                2, 64, 2
            )
            cfgs = [routed, P(routed.band)] + [P(x) for x in (0, 4) if x != routed.band] + [P(4, 1)]
            kinds = {"sdpa-cudnn": []} | {f"gluon{c.as_list()}": [] for c in cfgs}
            for _ in range(input_sets(4 * b * h * n * d * 2)):
                q, kk, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3))
                do = torch.randn_like(q)
                leaves = [x.detach().clone().requires_grad_() for x in (q, kk, v)]
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    o_ref = F.scaled_dot_product_attention(*leaves, is_causal=causal)
                kinds["sdpa-cudnn"].append(
                    lambda o=o_ref, l=leaves, g=do: torch.autograd.grad(o, l, g, retain_graph=True)
                )
                o, lse = launch_forward(q, kk, v, causal, scale)
                args = (q, kk, v, o, lse, do, causal, scale)
                for c in cfgs:
                    kinds[f"gluon{c.as_list()}"].append(
                        lambda a=args, c=c: k.launch_backward_ws(*a, c)
                    )
            a = kinds[f"gluon{cfgs[0].as_list()}"][0]()
            bb = kinds[f"gluon{cfgs[1].as_list()}"][0]()
            diff = max(
                float((x.float() - y.float()).abs().max()) for x, y in zip(a, bb, strict=True)
            )
            raw = {kind: [] for kind in kinds}
            for i in range(3):
                for kind in list(raw) if i % 2 == 0 else list(raw)[::-1]:
                    raw[kind].append(median_ms(kinds[kind]))
            ms = {k2: sorted(v2)[1] for k2, v2 in raw.items()}
            row = {
                "d": d,
                "n": n,
                "batch": b,
                "heads": h,
                "causal": causal,
                "dtype": str(dtype).removeprefix("torch."),
                "routed": routed.as_list(),
                "ms": ms,
                "raw_ms": raw,
                "persistent_vs_routed_max_abs_diff": diff,
                "vs_cudnn": {k2: round(ms["sdpa-cudnn"] / v2, 3) for k2, v2 in ms.items()},
            }
            doc["time"].append(row)
            print(n, causal, row["dtype"], row["vs_cudnn"], f"diff {diff:.1e}", flush=True)
            save()
            del kinds
            torch.cuda.empty_cache()
save()
