"""How much of a buffer that every SM shares the L2 keeps between two reads of it (GPU + ncu).

Usage (on a GPU machine with Nsight Compute):  python benchmarks/l2_reuse_probe.py --out DIR

The timing engine's L2 model (simulator/timing/l2model.py) keeps a re-read in L2 while the distinct
bytes referenced since its last use stay below a usable capacity, `l2_reuse_fraction` of the
L2. An H100's L2 is two partitions; each caches the accesses of the SMs wired to it, so a line
that SMs on both sides read can sit in both. This probe reads a buffer of S bytes twice in two
launches of many CTAs (each CTA a contiguous chunk; in the second launch either the same CTA
order or the chunks shuffled among the CTAs) and reads with Nsight Compute
(`--cache-control none`, so the second launch finds what the first left) how many bytes the
second launch fetched from DRAM: its miss share at size S. A third case has every CTA of the
first launch read the whole buffer (together, as attention's CTAs read a head's K/V stream):
its lines are then read by SMs on both sides of the L2, and the second launch's misses show
how much more room such lines take; a fourth has every CTA of both launches read it all (a
scan of shared lines: the size where it starts missing, against the one-reader cases', gives
`l2_shared_copies`). Between cases a 512 MiB read scrubs the L2. Writes
DIR/l2-reuse-<gpu>-<date>.json with every kernel's counts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SIZES_MIB = (8, 12, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 40, 44, 48, 56, 64, 80)
SCRUB_MIB = 512
METRICS = ("dram__bytes_read.sum", "lts__t_bytes.sum", "gpu__time_duration.sum")
BLOCK = 512  # fp32 elements one CTA reads per step (2 KiB)
CTAS_PER_SM = 2
# same / shuffled: the first launch's CTAs each read one chunk, the second's the same chunk or
# another; shared: every first-launch CTA reads the whole buffer, the second launch as `same`;
# shared-twice: every CTA of both launches reads the whole buffer (a scan of shared lines)
ORDERS = ("same", "shuffled", "shared", "shared-twice")


def child() -> None:
    """The profiled process: for every size and order, scrub, read once, read again."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def read_chunks(X, OUT, order, chunk, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        c = tl.load(order + pid).to(tl.int64)
        acc = tl.zeros([BLOCK], tl.float32)
        for i in range(0, chunk, BLOCK):
            acc += tl.load(X + c * chunk + i + tl.arange(0, BLOCK))
        tl.store(OUT + pid, tl.sum(acc))

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ctas = CTAS_PER_SM * sms
    out = torch.empty(ctas, device="cuda")
    scrub = torch.ones(SCRUB_MIB << 18, device="cuda")  # fp32 elements
    scrub_chunk = scrub.numel() // ctas // BLOCK * BLOCK
    same = torch.arange(ctas, device="cuda", dtype=torch.int32)
    zeros = torch.zeros(ctas, device="cuda", dtype=torch.int32)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for mib in SIZES_MIB:
        chunk = (mib << 18) // ctas // BLOCK * BLOCK
        x = torch.ones(chunk * ctas, device="cuda")
        for name in ORDERS:
            second = (
                same if name != "shuffled" else torch.randperm(ctas, device="cuda", generator=gen)
            )
            second = second.to(torch.int32)
            read_chunks[(ctas,)](scrub, out, same, scrub_chunk, BLOCK=BLOCK)
            if name.startswith("shared"):  # every CTA reads the whole buffer from its start
                read_chunks[(ctas,)](x, out, zeros, chunk * ctas, BLOCK=BLOCK)
            else:
                read_chunks[(ctas,)](x, out, same, chunk, BLOCK=BLOCK)
            if name == "shared-twice":
                read_chunks[(ctas,)](x, out, zeros, chunk * ctas, BLOCK=BLOCK)
            else:
                read_chunks[(ctas,)](x, out, second, chunk, BLOCK=BLOCK)
            torch.cuda.synchronize()
            print(json.dumps({"mib": mib, "order": name, "bytes": chunk * ctas * 4}), flush=True)
        del x


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child()
        return 0
    from benchmarks.hostinfo import gpu_header, result_path
    from flashscope.kernels.nsight import ncu_path, parse_raw_csv

    ncu = ncu_path()
    if ncu is None or args.out is None:
        print("error: needs Nsight Compute (ncu) and --out", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "probe"
        cmd = [ncu, "--cache-control", "none", "--clock-control", "none", "--metrics",
               ",".join(METRICS), "--export", str(report), "--force-overwrite",
               sys.executable, __file__, "--child"]  # fmt: skip
        run = subprocess.run(cmd, capture_output=True, text=True, env=os.environ, check=False)
        if run.returncode != 0:
            print(run.stdout[-3000:], run.stderr[-3000:], file=sys.stderr)
            return 1
        sizes = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
        csv_text = subprocess.run(
            [ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw",
             "--print-units", "base"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    # torch's own launches (fills, permutations) are profiled too: keep the probe's
    kernels = [k for k in parse_raw_csv(csv_text, list(METRICS)) if "read_chunks" in k["name"]]
    if len(kernels) != 3 * len(sizes):
        print(f"error: {len(kernels)} kernels for {len(sizes)} cases", file=sys.stderr)
        return 1
    rows = []
    for i, case in enumerate(sizes):
        scrub, first, second = kernels[3 * i : 3 * i + 3]
        rows.append({
            **case,
            "first_dram_read": first["dram__bytes_read.sum"],
            "second_dram_read": second["dram__bytes_read.sum"],
            "second_miss_share": second["dram__bytes_read.sum"] / case["bytes"],
            "kernels": [scrub, first, second],
        })  # fmt: skip
        r = rows[-1]
        first_share = r["first_dram_read"] / r["bytes"]
        print(f"{r['mib']:3d} MiB {r['order']:8s}: first read {first_share:.2f} of it from "
              f"DRAM, second {r['second_miss_share']:.2f}")  # fmt: skip
    header = gpu_header()
    doc = {**header, "ctas": CTAS_PER_SM * header["sms"], "rows": rows}
    path = result_path(args.out, "l2-reuse", header)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"→ {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
