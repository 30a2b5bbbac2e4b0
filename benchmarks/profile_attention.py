"""Run flashscope's forward and backward a few times on one shape, for Nsight Compute to profile.

Usage (on a GPU machine):
  ncu --clock-control none -k regex:_attn --launch-skip 4 --launch-count 3 \\
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \\
      python benchmarks/profile_attention.py --d 128 --n 4096 [--causal]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flashscope.kernels import flash_attention


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    b, h = 16384 // args.n, 2048 // args.d
    q, k, v = (
        torch.randn(b, h, args.n, args.d, device="cuda", dtype=torch.float16).requires_grad_()
        for _ in range(3)
    )
    for _ in range(args.reps):
        o = flash_attention(q, k, v, args.causal)
        torch.autograd.grad(o, (q, k, v), torch.randn_like(o))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
