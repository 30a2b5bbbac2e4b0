"""Sweep tile configurations on one GPU and write the winners into kernels/tuned.json.

Usage (on a GPU machine):  python benchmarks/tune.py --out DIR [--workers 12] [--write]

Every candidate is first compiled and checked against PyTorch SDPA in parallel worker processes
(compilation dominates a sweep; a configuration that fails or crashes is dropped), then timed in
this process with flashscope.kernels.timing (median of do_bench). Shapes follow the papers' protocol
at N = 4096 (batch 4, heads 2048 / d, fp16); decode uses batch 1, 32 heads, d = 128, a 65536-key
cache. The backward's two dQ routes are timed whole with their best configurations and the faster is
recorded per (head_dim, causal). Results: DIR/tune-<gpu>.json with every raw time; --write also
merges the choices into kernels/tuned.json (16-bit dtypes share them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.workers import run_workers
from flashscope import kernels
from flashscope.kernels.backward import launch_backward, preprocess, run_dkdv, run_dq
from flashscope.kernels.config import KernelConfig, table_key
from flashscope.kernels.decode import flash_decode
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.timing import median_ms

C = KernelConfig
# Round 3 of the sweep (rounds 1 and 2's winners included, so a rerun keeps or beats them).
FWD = {
    64: [C(128, 64, 4, 3), C(64, 64, 4, 3), C(256, 64, 16, 2), C(256, 128, 16, 2),
         C(256, 64, 8, 2)],
    128: [C(128, 64, 8, 3), C(64, 64, 4, 3), C(256, 64, 16, 2), C(256, 64, 16, 3),
          C(256, 128, 16, 2), C(128, 128, 8, 3), C(256, 32, 16, 3)],
}  # fmt: skip
DKDV = {
    64: [C(64, 64, 4, 3), C(32, 128, 4, 3), C(32, 64, 4, 3), C(64, 64, 4, 2), C(64, 128, 8, 2)],
    128: [C(64, 64, 4, 2), C(64, 128, 8, 2), C(64, 128, 8, 3), C(32, 64, 4, 3), C(32, 128, 8, 2),
          C(64, 64, 8, 2)],
}  # fmt: skip
DQ = {
    64: [C(128, 32, 4, 3), C(64, 32, 4, 3), C(128, 64, 8, 3), C(64, 64, 4, 3)],
    128: [C(128, 32, 4, 3), C(128, 64, 8, 3), C(128, 32, 8, 3), C(64, 64, 4, 2)],
}  # fmt: skip
DECODE = [C(16, 64, 4, 3), C(16, 128, 4, 2)]
FWD_FOR_BWD = C(128, 64, 8, 2)


def jobs() -> list[dict]:
    out = []
    for d in (64, 128):
        for causal in (False, True):
            for kind, table in (("fwd", FWD), ("bwd", DKDV), ("bwd-atomic", DKDV), ("bwd-dq", DQ)):
                out += [
                    {"kind": kind, "d": d, "causal": causal, "cfg": c.as_list()} for c in table[d]
                ]
    out += [{"kind": "decode", "d": 128, "causal": False, "cfg": c.as_list()} for c in DECODE]
    return out


class Problem:
    """Random fp16 inputs of one (head_dim, causal) shape, with SDPA's outputs as the check."""

    def __init__(self, d: int, causal: bool, decode: bool = False) -> None:
        g = torch.Generator(device="cuda").manual_seed(d + causal)
        self.d, self.causal, self.scale = d, causal, d**-0.5
        if decode:
            shape_q, shape_kv = (1, 32, 1, d), (1, 32, 65536, d)
        else:
            n = 4096
            shape_q = shape_kv = (16384 // n, 2048 // d, n, d)

        def rnd(shape):
            return torch.randn(shape, generator=g, device="cuda", dtype=torch.float16)

        self.q, self.k, self.v = rnd(shape_q), rnd(shape_kv), rnd(shape_kv)
        self.do = rnd(shape_q)
        leaves = [x.detach().requires_grad_() for x in (self.q, self.k, self.v)]
        ref = F.scaled_dot_product_attention(*leaves, is_causal=causal and not decode)
        self.ref_o = ref.detach()
        if not decode:
            self.ref_g = torch.autograd.grad(ref, leaves, self.do)
            self.o, self.lse = launch_forward(
                self.q, self.k, self.v, causal, self.scale, FWD_FOR_BWD
            )
            self.delta = preprocess(self.o, self.do)

    def call(self, kind: str, cfg: KernelConfig):
        """(callable that launches the kernel, callable that returns the error vs SDPA)."""
        a = (self.q, self.k, self.v)
        s = self.scale
        if kind == "fwd":
            box = {}
            run = lambda: box.__setitem__("o", launch_forward(*a, self.causal, s, cfg)[0])  # noqa: E731
            err = lambda: (box["o"] - self.ref_o).abs().max().item()  # noqa: E731
        elif kind == "decode":
            box = {}
            run = lambda: box.__setitem__("o", flash_decode(*a, config=cfg))  # noqa: E731
            err = lambda: (box["o"] - self.ref_o).abs().max().item()  # noqa: E731
        elif kind == "bwd-dq":
            box = {}
            args = (*a, self.do, self.lse, self.delta, self.causal, s, cfg)
            run = lambda: box.__setitem__("g", run_dq(*args))  # noqa: E731
            err = lambda: (box["g"] - self.ref_g[0]).abs().max().item()  # noqa: E731
        else:
            box = {}
            atomic = kind == "bwd-atomic"

            def run() -> None:
                acc = torch.zeros(self.q.shape, device="cuda") if atomic else None
                args = (*a, self.do, self.lse, self.delta, self.causal, s, cfg)
                box["g"] = (acc, *run_dkdv(*args, dq_acc=acc))

            def err() -> float:
                acc, dk, dv = box["g"]
                e = max(
                    (dk - self.ref_g[1]).abs().max().item(), (dv - self.ref_g[2]).abs().max().item()
                )
                if atomic:
                    e = max(e, (acc * s - self.ref_g[0]).abs().max().item())
                return e

        return run, err


def check_worker(index: int, count: int, path: Path) -> None:
    """Compile and check jobs[index::count]; write {job id: error or failure text}."""
    result, problems = {}, {}
    for i, job in list(enumerate(jobs()))[index::count]:
        key = (job["d"], job["causal"], job["kind"] == "decode")
        try:
            if key not in problems:
                problems[key] = Problem(*key)
            run, err = problems[key].call(job["kind"], KernelConfig.from_list(job["cfg"]))
            run()
            torch.cuda.synchronize()
            result[i] = err()
        except Exception as e:
            result[i] = f"{type(e).__name__}: {str(e)[:300]}"
        path.write_text(json.dumps(result))  # after each job: a crash loses only the rest


def precheck(workers: int, out: Path) -> dict[int, float | str]:
    run_workers(__file__, "--check-worker", workers, "--out", str(out))
    merged: dict[int, float | str] = {}
    for w in range(workers):
        path = out / f"check-{w}.json"
        if path.exists():
            merged.update({int(k): v for k, v in json.loads(path.read_text()).items()})
            path.unlink()
    return merged


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--check-worker")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.check_worker:
        i, n = map(int, args.check_worker.split("/"))
        check_worker(i, n, args.out / f"check-{i}.json")
        return
    t0 = time.time()
    checked = precheck(args.workers, args.out)
    print(f"compiled and checked {len(checked)} candidates in {time.time() - t0:.0f} s", flush=True)
    all_jobs = jobs()
    problems: dict[tuple, Problem] = {}
    rows = []
    for i, job in enumerate(all_jobs):
        status = checked.get(i, "missing (worker crashed)")
        row = {**job, "check": status}
        tol = 2e-2 if job["kind"] in ("fwd", "decode") else 6e-2
        if isinstance(status, float) and status < tol:
            key = (job["d"], job["causal"], job["kind"] == "decode")
            problems.setdefault(key, Problem(*key))
            run, _ = problems[key].call(job["kind"], KernelConfig.from_list(job["cfg"]))
            row["ms"] = median_ms([run], warmup_ms=10, rep_ms=60)
        rows.append(row)
        print(json.dumps(row), flush=True)
    best: dict[tuple, dict] = {}
    for row in rows:
        k = (row["kind"], row["d"], row["causal"])
        if "ms" in row and (k not in best or row["ms"] < best[k]["ms"]):
            best[k] = row
    configs, routes, route_rows = {}, {}, []
    for (kind, d, causal), row in sorted(best.items(), key=str):
        configs[table_key(kind, 16, d, causal)] = row["cfg"]
    for d in (64, 128):
        for causal in (False, True):
            p = problems.get((d, causal, False))
            times = {}
            for mode, kind in (("separate", "bwd"), ("atomic", "bwd-atomic")):
                if p is None or (kind, d, causal) not in best:
                    continue
                cfg = KernelConfig.from_list(best[(kind, d, causal)]["cfg"])
                dq_cfg = best.get(("bwd-dq", d, causal))
                dq_cfg = KernelConfig.from_list(dq_cfg["cfg"]) if dq_cfg else None

                def full(cfg=cfg, mode=mode, dq_cfg=dq_cfg, p=p) -> object:
                    return launch_backward(p.q, p.k, p.v, p.o, p.lse, p.do, p.causal, p.scale, cfg,
                                           dq_mode=mode, dq_config=dq_cfg)  # fmt: skip

                times[mode] = median_ms([full], warmup_ms=10, rep_ms=60)
            if times:
                routes[table_key("bwd-route", 16, d, causal)] = min(times, key=times.get)
                route_rows.append({"d": d, "causal": causal, **times})
    name = torch.cuda.get_device_name()
    result = {
        "device": name,
        "date": datetime.now(UTC).date().isoformat(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "shape": "fp16, batch 16384/N, heads 2048/d, N = 4096; decode 1 x 32 x 65536 x 128",
        "rows": rows,
        "routes": route_rows,
        "chosen": {"configs": configs, "routes": routes},
    }
    tag = name.replace(" ", "-")
    (args.out / f"tune-{tag}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["chosen"], indent=1))
    print(json.dumps(route_rows))
    if args.write:
        path = ROOT / "kernels" / "tuned.json"
        table = json.loads(path.read_text()) if path.exists() else {"gpus": {}}
        table["gpus"][name] = {**result["chosen"], "measured": result["date"]}
        path.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    print("kernels from", kernels.__file__, flush=True)
    main()
