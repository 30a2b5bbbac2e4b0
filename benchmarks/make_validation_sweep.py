"""Write benchmarks/sweeps/validation.json: the configurations `flashscope validate` measures.

    python benchmarks/make_validation_sweep.py

Protocol (the FlashAttention papers'): batch × N = 16384 tokens, heads × d = 2048, fp16,
N ∈ {512 … 16384}, d ∈ {64, 128}, causal and not, forward and backward; three tile
configurations each (kernels.config.CANDIDATES: they fit Hopper's 227 KiB of shared memory;
the backward pairs the i-th dK/dV candidate with the i-th dQ candidate). Calibration may be
fitted on N ∈ {512, 2048, 8192} ("fit"); N ∈ {1024, 4096, 16384} are held out. Nsight Compute
reads the bytes of every entry (one pass of a few metrics takes about a second per kernel).
The backward's route is left to the kernels (recorded when measured).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels.config import CANDIDATES  # noqa: E402

SEQS = (512, 1024, 2048, 4096, 8192, 16384)
FIT = (512, 2048, 8192)


def entries() -> list[dict]:
    out = []
    for algo, mode in (("fa2", "fwd"), ("fa2-bwd", "bwd")):
        for d in (64, 128):
            for causal in (False, True):
                for n in SEQS:
                    for t in range(3):
                        main = CANDIDATES["fwd" if mode == "fwd" else "bwd"][d][t]
                        config = {
                            "algo": algo,
                            "impl": "flashscope",
                            "batch": 16384 // n,
                            "heads": 2048 // d,
                            "seq": n,
                            "head_dim": d,
                            "causal": causal,
                            "dtype": "fp16",
                            "block_m": main.block_m,
                            "block_n": main.block_n,
                            "stages": main.num_stages,
                            "warps": main.num_warps,
                        }
                        if mode == "bwd":
                            dq = CANDIDATES["bwd-dq"][d][t]
                            config.update(
                                dq_block_m=dq.block_m,
                                dq_block_n=dq.block_n,
                                dq_stages=dq.num_stages,
                                dq_warps=dq.num_warps,
                            )
                        kind = "causal" if causal else "full"
                        out.append(
                            {
                                "id": f"{mode}-d{d}-{kind}-n{n}-t{t}",
                                "subset": "fit" if n in FIT else "holdout",
                                "ncu": True,
                                "config": config,
                            }
                        )
    return out


def main() -> None:
    doc = {
        "format": 1,
        "description": (
            "flashscope's forward and backward kernels at fixed tile configurations: "
            "batch·N = 16384, heads·d = 2048, fp16; fit on N ∈ {512, 2048, 8192}, hold out "
            "N ∈ {1024, 4096, 16384}; Nsight Compute on every entry"
        ),
        "entries": entries(),
    }
    path = ROOT / "benchmarks" / "sweeps" / "validation.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(doc['entries'])} entries → {path}")


if __name__ == "__main__":
    main()
