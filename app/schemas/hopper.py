"""Query parameters of the Hopper view (GET /api/hopper) and their checks against the settings.

The view runs the FA-3 model on one launch of the warp-specialized forward and, on the same
problem, the timing engine's FA-1 and FA-2. Left out, batch and heads follow the papers'
protocol (16,384 tokens: batch = 16384 / N; heads × head_dim = 2048), the shapes the shipped
warpgroup measurements were taken on.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from flashscope.app.config import Settings
from flashscope.app.middleware.errors import limit_error, value_error
from flashscope.simulator.core import hardware
from flashscope.simulator.timing import fa3

HOPPER_GPUS = ("h100-sxm", "h100-pcie", "h200")  # the presets the FA-3 model is for
HEAD_DIMS = (64, 128)  # the head dimensions the kernel's recorded variants cover
PROTOCOL_TOKENS = 16384  # batch × N of the papers' protocol
PROTOCOL_WIDTH = 2048  # heads × head_dim of the papers' protocol
FA2_TILES = {"block_m": 128, "block_n": 64, "stages": 2, "warps": 8}  # FA-1 and FA-2 beside it


class HopperParams(BaseModel):
    """One launch of the warp-specialized forward on a Hopper GPU, and what to show of it."""

    gpu: str = Field("h100-sxm", description="h100-sxm, h100-pcie or h200 (or an alias).")
    head_dim: int = Field(128, description="64 or 128.")
    causal: bool = False
    seq: int = Field(4096, ge=1, description="N (queries and keys).")
    batch: int | None = Field(None, ge=1, description="Default: 16384 / N (at least 1).")
    heads: int | None = Field(None, ge=1, description="Default: 2048 / head_dim.")
    dtype: Literal["fp16", "bf16", "fp8"] = Field(
        "fp16", description="fp8 (e4m3) is a simulated what-if: the kernel runs fp16 and bf16."
    )
    consumers: int = Field(2, ge=1, le=3, description="Consumer warpgroups of 64 query rows.")
    pipeline: bool = Field(True, description="S of the next block issued before this P·V.")
    pingpong: bool = Field(True, description="The warpgroups take turns with their products.")
    persistent: bool = Field(False, description="One program per CTA slot, looping over tiles.")
    block_n: int = Field(128, description="Keys per step: 64, 128 or 256.")
    stages: int = Field(2, ge=1, description="Slots of the K/V ring: 2 to 4.")
    run: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[0-9a-f]+$",
        description="A finished live recording of this configuration (POST /api/runs, what "
        "warpgroups) to show in place of the shipped one.",
    )

    def problem_sizes(self) -> tuple[int, int]:
        """(batch, heads), the protocol's where left out."""
        batch = self.batch if self.batch is not None else max(1, PROTOCOL_TOKENS // self.seq)
        heads = self.heads if self.heads is not None else max(1, PROTOCOL_WIDTH // self.head_dim)
        return batch, heads

    def gpu_key(self) -> str:
        return hardware.resolve(self.gpu)

    def config_tuple(self) -> tuple[int, int, int, int, int, int, int]:
        """As the measured dataset writes a configuration: consumers, block_n, stages,
        pipeline, ctas, pingpong, persistent."""
        return (self.consumers, self.block_n, self.stages, int(self.pipeline), 1,
                int(self.pingpong), int(self.persistent))  # fmt: skip

    def simulate_body(self, algo: str) -> dict[str, Any]:
        """The POST /api/simulate body of this problem for `algo` (fa3, or fa1 / fa2 with the
        engine's usual tiles)."""
        batch, heads = self.problem_sizes()
        common = {"gpu": self.gpu_key(), "batch": batch, "heads": heads, "seq": self.seq,
                  "head_dim": self.head_dim, "causal": self.causal}  # fmt: skip
        if algo != fa3.ALGO:
            dtype = "fp16" if self.dtype == "fp8" else self.dtype
            return {**common, "algo": algo, "dtype": dtype, **FA2_TILES}
        return {
            **common,
            "algo": algo,
            "dtype": self.dtype,
            "block_n": self.block_n,
            "stages": self.stages,
            "consumers": self.consumers,
            "pipeline": self.pipeline,
            "pingpong": self.pingpong,
            "persistent": self.persistent,
        }

    def run_request(self) -> dict[str, Any]:
        """The POST /api/runs body that records this launch live on the server's GPU (what
        warpgroups); fp8 has none (the kernel runs fp16 and bf16)."""
        batch, heads = self.problem_sizes()
        return {"mode": "fwd", "what": "warpgroups", "batch": batch, "heads": heads,
                "seq": self.seq, "head_dim": self.head_dim, "causal": self.causal,
                "dtype": self.dtype, "block_n": self.block_n, "stages": self.stages,
                "consumers": self.consumers, "pipeline": self.pipeline,
                "pingpong": self.pingpong, "persistent": self.persistent}  # fmt: skip


def check_hopper(p: HopperParams, s: Settings) -> list[dict[str, Any]]:
    """Errors for every field out of the kernel's ranges or beyond this server's limits."""
    errs: list[dict[str, Any]] = []
    try:
        key = hardware.resolve(p.gpu)
    except ValueError:
        key = None
    if key not in HOPPER_GPUS:
        msg = f"gpu must be a Hopper GPU ({', '.join(HOPPER_GPUS)}), got {p.gpu!r}"
        errs.append(limit_error("gpu", msg, p.gpu, list(HOPPER_GPUS)))
    if p.head_dim not in HEAD_DIMS or p.head_dim > s.simulate_max_head_dim:
        allowed = [d for d in HEAD_DIMS if d <= s.simulate_max_head_dim]
        msg = f"head_dim must be one of {', '.join(map(str, allowed))}, got {p.head_dim}"
        errs.append(limit_error("head_dim", msg, p.head_dim, allowed))
        return errs  # the protocol's heads (2048 / head_dim) need a head_dim to divide by
    batch, heads = p.problem_sizes()
    for field, value, limit in (
        ("seq", p.seq, s.simulate_max_seq),
        ("batch", batch, s.simulate_max_batch),
        ("heads", heads, s.simulate_max_heads),
    ):
        if value > limit:
            errs.append(limit_error(field, f"{field} must be ≤ {limit}, got {value}", value, limit))
    if p.block_n not in (64, 128, 256) or p.block_n > s.simulate_max_block:
        allowed = [b for b in (64, 128, 256) if b <= s.simulate_max_block]
        msg = f"block_n must be one of {', '.join(map(str, allowed))}, got {p.block_n}"
        errs.append(limit_error("block_n", msg, p.block_n, allowed))
    if not 2 <= p.stages <= 4:
        msg = f"stages must be from 2 to 4, got {p.stages}"
        errs.append(limit_error("stages", msg, p.stages, [2, 4]))
    if p.pingpong and (p.consumers < 2 or not p.pipeline):
        why = "pingpong needs pipeline and two or more consumers"
        errs.append(value_error("pingpong", why, p.pingpong))
    if errs:
        return errs
    cfg = fa3.Fa3Config(p.consumers, p.block_n, p.stages, p.pipeline, 1, pingpong=p.pingpong,
                        persistent=p.persistent)  # fmt: skip
    why_not = cfg.fits(p.head_dim, fa3.ELEMENT_BYTES[p.dtype])
    if why_not is not None:
        errs.append(limit_error("stages", why_not, p.stages, fa3.SHARED_PER_CTA))
        return errs
    tiles = batch * heads * -(-p.seq // cfg.tile_m)
    fa2_ctas = batch * heads * -(-p.seq // FA2_TILES["block_m"])
    ctas = max(tiles, fa2_ctas)
    if ctas > s.simulate_max_ctas:
        msg = (
            f"these sizes launch {ctas} CTAs; the limit is {s.simulate_max_ctas}: "
            "use a smaller batch, fewer heads or a shorter N"
        )
        errs.append(limit_error("seq", msg, p.seq, s.simulate_max_ctas))
    return errs
