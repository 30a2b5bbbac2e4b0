"""The matrix products and waits in each compiled kernel's loops, read from its PTX (GPU).

    python benchmarks/ptx_loops.py --out benchmarks/results

Compiles flashscope's forward and backward kernels at every tile configuration of the shipped
validation sweep (and the atomic route's, from the H200 dataset), full and causal, each in a
fresh Triton cache, and writes for each kernel the sequence of its loops' matrix products
(`wgmma` with its shape and where its A operand comes from: registers or shared memory;
`mma.sync`), waits on them (`wgmma.wait_group N`), exponentials, bulk reduce-adds and copy
waits, as the PTX has them, and each loop's FP32-pipe instructions per thread and iteration.
The timing engine takes three facts from it (simulator/timing/kernelplan.py): how many times an
iteration waits on its products (`Launch.chain`), which products read both operands from
shared memory (`Product.a_smem`), and the FP32 instructions per score element.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KERNELS = ("_attn_fwd", "_attn_bwd_dq", "_attn_bwd_dkdv")
TILE_KEYS = ("algo", "head_dim", "block_m", "block_n", "stages", "warps", "dq_block_m",
             "dq_block_n", "dq_stages", "dq_warps", "route")  # fmt: skip
_OPS = re.compile(
    r"(wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)|wgmma\.wait_group\.sync\.aligned\s+(\d+)"
    r"|mma\.sync\.aligned\.(m\d+n\d+k\d+)|ex2\.approx|cp\.reduce\.async\.bulk"
    r"|cp\.async\.bulk\.wait_group\.read\s+(\d+)|^(\$L__BB\d+_\d+):|bra(?:\.uni)?\s+(\$L__BB\d+_\d+))"
)


def configs() -> list[dict]:
    """Every distinct kernel configuration of the shipped datasets (one problem size)."""
    seen, out = set(), []
    for name in ("validation-h100-2026-11-21.json", "validation-h200-2026-11-21.json"):
        for r in json.loads((ROOT / "app" / "data" / name).read_text())["rows"]:
            c = r["config"]
            key = tuple(c.get(k) for k in TILE_KEYS)
            if key not in seen:
                seen.add(key)
                out.append({k: c[k] for k in TILE_KEYS if k in c} | {"dtype": "fp16"})
    return out


def tokens(ptx: str) -> list[str]:
    """The loop-relevant instructions of a PTX listing, in order, run-length merged."""
    out: list[list] = []
    for line in ptx.splitlines():
        m = _OPS.search(line.strip())
        if not m:
            continue
        if m.group(2):  # wgmma: A from registers has its own brace list ({d…}, {a…}, desc_b)
            tok = f"wgmma.{m.group(2)}.{'A-reg' if line.count('{') >= 2 else 'A-smem'}"
        elif m.group(3) is not None:
            tok = f"wait {m.group(3)}"
        elif m.group(4):
            tok = f"mma.sync.{m.group(4)}"
        elif m.group(0).startswith("ex2"):
            tok = "ex2"
        elif m.group(0).startswith("cp.reduce"):
            tok = "reduce-add"
        elif m.group(5) is not None:
            tok = f"bulk-read-wait {m.group(5)}"
        elif m.group(6):
            tok = f"{m.group(6)}:"
        else:
            tok = f"bra {m.group(7)}"
        if out and out[-1][0] == tok:
            out[-1][1] += 1
        else:
            out.append([tok, 1])
    return [t if n == 1 else f"{t} x{n}" for t, n in out]


def loops(toks: list[str]) -> list[list[str]]:
    """The bodies of the listing's loops: from a label to the branch back to it."""
    out = []
    for i, t in enumerate(toks):
        if t.endswith(":"):
            back = f"bra {t[:-1]}"
            j = next((j for j in range(i + 1, len(toks)) if toks[j].split(" x")[0] == back), None)
            if j is not None:
                out.append([x for x in toks[i + 1 : j] if not x.endswith(":")])
    return out


_FP32 = re.compile(r"^\s*(?:@!?%p\d+\s+)?((?:fma|add|sub|mul|max|min|neg|abs|selp|setp|cvt)\S*)")


def fp32_counts(ptx: str) -> list[int]:
    """Per loop (in the order `loops` finds them): the FP32-pipe instructions one thread
    issues per iteration (arithmetic, compares, selects and conversions on .f32 and .f16x2
    values; not the exponentials, which go to the SFUs)."""
    lines = [line.split("//")[0].rstrip() for line in ptx.splitlines()]
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\$L__BB\d+_\d+):$", line.strip())
        if not m:
            continue
        back = re.compile(r"bra(?:\.uni)?\s+" + re.escape(m.group(1)) + ";")
        j = next((j for j in range(i + 1, len(lines)) if back.search(lines[j])), None)
        if j is None:
            continue
        ops = [_FP32.match(x) for x in lines[i + 1 : j]]
        out.append(sum(1 for o in ops if o and (".f32" in o.group(1) or ".f16x2" in o.group(1))))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import torch

    from benchmarks.hostinfo import gpu_header, result_path
    from flashscope.kernels.measure import Case

    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    header = gpu_header()
    rows = []
    for i, c in enumerate(configs()):
        for causal in (False, True):
            cache = Path(f"/tmp/flashscope-ptx/{i}-{int(causal)}")
            os.environ["TRITON_CACHE_DIR"] = str(cache)
            config = dict(c, batch=1, heads=4, seq=1024, causal=causal, gpu="h100-sxm")
            Case.build(config, sets=1).run()
            torch.cuda.synchronize()
            for path in sorted(glob.glob(f"{cache}/*/*.ptx")):
                name = Path(path).stem
                wanted = ("_attn_fwd",) if c["algo"] == "fa2" else KERNELS[1:]
                if name in wanted:  # (a backward also compiles a forward for its O)
                    ptx = Path(path).read_text()
                    rows.append({"config": config, "kernel": name, "loops": loops(tokens(ptx)),
                                 "fp32_per_thread": fp32_counts(ptx)})  # fmt: skip
        print(f"{i + 1} configurations", flush=True)
    path = result_path(args.out, "ptx-loops", header)
    path.write_text(json.dumps({**header, "rows": rows}, indent=1) + "\n")
    print(f"{len(rows)} kernels → {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
