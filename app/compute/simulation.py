"""One timing-engine request (POST /api/simulate, GET /api/schedule) in two halves: its parts and
their cheap checks, which the route makes in the server, and its run, which a compute worker
makes (app/compute/tasks.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flashscope.app.schemas.simulate import FA3_MAX_INTERVALS, SimulateRequest, fa3_config
from flashscope.simulator.core import hardware
from flashscope.simulator.core.gpu import GPU
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import compiled, fa3, kernelplan
from flashscope.simulator.timing.engine import simulate_workload
from flashscope.simulator.timing.results import SimResult
from flashscope.simulator.timing.workload import build, ctas_of


class DoesNotFit(ValueError):
    """The kernel cannot launch on this GPU: its tiles overflow shared memory, or its warps the
    SM. The message says which (a warps message starts with "warps")."""


@dataclass(frozen=True)
class Parts:
    """What a request simulates: problem, tiles, GPU and the kernels' options."""

    body: SimulateRequest
    problem: AttentionProblem
    tiles: TileConfig
    gpu: GPU
    kernels: dict[str, Any]

    def ctas(self) -> int:
        """How many CTAs the run would launch in all, without building it (fa3: its tiles)."""
        b = self.body
        if b.algo == fa3.ALGO:
            p = self.problem
            return p.batch * p.heads * -(-p.seq_q // fa3_config(b).tile_m)
        if b.impl == "flashscope":
            return kernelplan.ctas_of(b.algo, self.problem, self.tiles, **self.kernels)
        return ctas_of(b.algo, self.problem, self.tiles, sms=self.gpu.sms, splits=b.splits)

    def compile_candidates(self, root: Path | None) -> list[str]:
        """The keys of the Triton kernels this run launches that neither the shipped tables
        nor the cache under `root` hold (their figures would be the estimate's, or a
        grouped-query key's nearest binary): what compiling them on this machine would add.
        Empty on presets of another architecture than the tables' (sm_90)."""
        b = self.body
        if b.impl != "flashscope" or b.algo not in kernelplan.KERNEL_ALGOS:
            return []
        keys = kernelplan.compiled_keys(b.algo, self.problem, self.tiles, **self.kernels)
        with compiled.local_cache(root):
            return [k for k in keys if compiled.wants_compile(k, self.gpu.key)]

    def run(self) -> SimResult:
        """The simulation (costly: a compute worker's job); DoesNotFit if it cannot launch."""
        b = self.body
        try:
            if b.impl == "flashscope":
                workload = kernelplan.build(b.algo, self.problem, self.tiles, **self.kernels)
            else:
                workload = build(b.algo, self.problem, self.tiles, self.gpu.sms, b.splits)
            return simulate_workload(workload, self.gpu)
        except ValueError as exc:  # tiles that do not fit in shared memory, too many warps
            raise DoesNotFit(str(exc)) from None

    def run_fa3(self) -> fa3.Fa3Result:
        """The FA-3 model's answer (algo fa3): time, busy fractions, a program's timeline."""
        b = self.body
        o = b.fa3_options()
        return fa3.simulate_fa3(self.problem, fa3_config(b), self.gpu, dtype=b.dtype,
                                program=o["program"], shown_tiles=o["shown_tiles"],
                                max_intervals=FA3_MAX_INTERVALS)  # fmt: skip

    def fa3_programs(self) -> int:
        """Programs the fa3 launch would run (one per tile, or one per CTA slot persistent)."""
        cfg = fa3_config(self.body)
        tiles = self.ctas()
        return min(tiles, self.gpu.sms * cfg.ctas) if cfg.persistent else tiles


def gpu_of(body: SimulateRequest) -> GPU:
    """The GPU the request names, edited; ValueError (naming the field first) if it cannot be."""
    gpu = hardware.from_name(body.gpu)
    return hardware.custom(gpu, **body.hardware) if body.hardware else gpu


def parts(body: SimulateRequest, gpu: GPU | None = None) -> Parts:
    """The request's parts (`gpu`: its GPU, when already made)."""
    problem = AttentionProblem(
        seq_q=body.seq,
        seq_k=body.seq_k,
        head_dim=body.head_dim,
        batch=body.batch,
        heads=body.heads,
        kv_heads=body.kv_heads,
        causal=body.causal,
        dtype="fp16" if body.dtype == "fp8" else body.dtype,  # fa3's fp8: `run_fa3` passes it
    )
    tiles = TileConfig(body.block_m, body.block_n, body.stages, body.warps, body.maxnreg)
    gpu = gpu if gpu is not None else gpu_of(body)
    dq = {"block_m": body.dq_block_m, "block_n": body.dq_block_n, "stages": body.dq_stages,
          "warps": body.dq_warps}  # fmt: skip
    given = {k: v for k, v in dq.items() if v is not None}
    dq_tiles = replace(tiles, **given) if given else None  # the register cap carries over
    kernels: dict[str, Any] = {"gpu_key": gpu.key, "route": body.route, "dq_tiles": dq_tiles}
    return Parts(body, problem, tiles, gpu, kernels)
