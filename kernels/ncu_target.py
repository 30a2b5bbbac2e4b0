"""The program Nsight Compute profiles: each configuration's kernels launched once, marked.

    ncu --profile-from-start off … python -m flashscope.kernels.ncu_target CONFIGS.json DONE.json

For every configuration of CONFIGS.json (a list of `flashscope simulate` field dicts) it builds
the inputs, runs the call once outside any profiled region (compiling and loading the kernels),
flushes L2 by reading a buffer twice its size (reading leaves no dirty line whose write-back
the kernel's DRAM writes would include), and then runs the call once more between
cudaProfilerStart and cudaProfilerStop, inside an NVTX push/pop range named "flashscope-profile"
(so Nsight Compute's --nvtx-include "flashscope-profile/" selects the same launches). DONE.json
lists, in order, the configurations that ran and the names of the kernels each one launches
(known from its route), so that Nsight Compute's rows map back to configurations.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RANGE = "flashscope-profile"


def expected_kernels(algo: str, route: str | None) -> list[str]:
    """Kernel-name fragments of one call, in launch order."""
    if algo == "fa2":
        return ["_attn_fwd"]
    if route == "atomic":
        return ["_bwd_preprocess", "", "_attn_bwd_dkdv", "", ""]  # "": PyTorch's fill, mul, cast
    return ["_bwd_preprocess", "_attn_bwd_dq", "_attn_bwd_dkdv"]


def main(argv: list[str]) -> int:
    import torch

    from flashscope.kernels.measure import Case
    from flashscope.kernels.timing import l2_bytes

    configs = json.loads(Path(argv[0]).read_text())  # list of config dicts
    done_path = Path(argv[1])
    flush = torch.ones(l2_bytes() // 2, dtype=torch.float32, device="cuda")  # 2 × L2 bytes
    done = []
    for i, config in enumerate(configs):
        case = None
        try:
            case = Case.build(config, sets=1)
            case.run()
            torch.cuda.synchronize()
            flush.sum()  # read, not written: L2 holds clean lines that are not the kernel's
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
            torch.cuda.nvtx.range_push(RANGE)
            case.run()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            torch.cuda.cudart().cudaProfilerStop()
            done.append(
                {
                    "index": i,
                    "kernels": expected_kernels(case.algo, case.route),
                    "route": case.route,
                }
            )
        except Exception as exc:  # one configuration failing must not lose the others
            done.append({"index": i, "error": f"{type(exc).__name__}: {exc}", "kernels": []})
        del case
        torch.cuda.empty_cache()
        done_path.write_text(json.dumps(done))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
