"""Tensor descriptors made on the host against descriptors built in every program (forward).

Usage (on a GPU machine):  python benchmarks/forward_descriptors.py --out DIR

Each program of the forward kernel can build its own descriptors for its (batch, head) (four
descriptors written to global scratch and fenced before the first copy), or take descriptors
made once on the host over the flattened (B·H·N, d) matrices. The fixed cost matters most
where programs are short (few key blocks per program). Same protocol as benchmarks/attention.py
(fp16, batch × N = 16384, heads = 2048 / d, median of do_bench), sdpa-cudnn timed in the same
process for the ratio. Writes DIR/forward-descriptors-<gpu>-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import attention_fn, protocol_inputs
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.timing import median_ms

SEQ_LENS = (1024, 2048, 4096, 8192, 16384)


cudnn = attention_fn("sdpa-cudnn")


def flashscope(q, k, v, causal, host_desc):
    return launch_forward(q, k, v, causal, q.shape[-1] ** -0.5, host_desc=host_desc)[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for d in (64, 128):
        for n in SEQ_LENS:
            b, h = 16384 // n, 2048 // d
            inputs = protocol_inputs(d, n, torch.float16)
            for causal in (False, True):
                ref = cudnn(*inputs[0], causal).float()
                base = {"head_dim": d, "seq_len": n, "batch": b, "heads": h, "causal": causal}
                impls = {
                    "sdpa-cudnn": cudnn,
                    "flashscope host descriptors": partial(flashscope, host_desc=True),
                    "flashscope in-kernel descriptors": partial(flashscope, host_desc=False),
                }
                for name, fn in impls.items():
                    err = (fn(*inputs[0], causal).float() - ref).abs().max().item()
                    ms = median_ms([partial(fn, *x, causal) for x in inputs])
                    rows.append({**base, "impl": name, "ms": ms, "max_err_vs_cudnn": err})
                    print(json.dumps(rows[-1]), flush=True)
            del inputs
            torch.cuda.empty_cache()
    gpu = torch.cuda.get_device_name(0)
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    result = {"device": gpu, "date": date, "torch": torch.__version__,
              "triton": triton.__version__, "rows": rows}  # fmt: skip
    (args.out / f"forward-descriptors-{gpu.replace(' ', '-')}-{date}.json").write_text(
        json.dumps(result, indent=1)
    )


if __name__ == "__main__":
    main()
