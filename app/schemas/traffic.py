"""POST /api/traffic request: the fields of `flashscope traffic`, limits from settings."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flashscope.app.config import Settings
from flashscope.app.middleware.errors import value_error
from flashscope.app.schemas.head_dim import DESCRIPTION as HEAD_DIM
from flashscope.app.schemas.head_dim import head_dim_errors
from flashscope.app.schemas.trace import Algo, Dtype, block_errors, over_limit
from flashscope.simulator.core.problem import AttentionProblem, TileConfig


class TrafficRequest(BaseModel):
    """POST /api/traffic: the fields of `flashscope traffic`, for the whole problem."""

    model_config = ConfigDict(extra="forbid")

    algo: Algo = Field(description="Tile program to count.")
    seq: int = Field(ge=1, description="Query length N.")
    seq_k: int | None = Field(None, ge=1, description="Key/value length; default N.")
    head_dim: int = Field(ge=1, description=HEAD_DIM)
    block_m: int = Field(ge=1, description="Query rows per tile (power of two).")
    block_n: int = Field(ge=1, description="Keys per tile (power of two).")
    batch: int = Field(1, ge=1, description="Batch size.")
    heads: int = Field(1, ge=1, description="Query heads.")
    kv_heads: int | None = Field(None, ge=1, description="K/V heads; default heads.")
    causal: bool = Field(False, description="Causal mask, aligned bottom-right.")
    dtype: Dtype = Field("fp16", description="Storage dtype (bytes per element).")
    splits: int | None = Field(None, ge=1, description="decode: KV splits; default the rule.")
    sms: int = Field(132, ge=1, description="decode: SMs the split rule fills.")

    def problem(self) -> tuple[AttentionProblem, TileConfig]:
        problem = AttentionProblem(
            seq_q=self.seq,
            seq_k=self.seq_k,
            head_dim=self.head_dim,
            batch=self.batch,
            heads=self.heads,
            kv_heads=self.kv_heads,
            causal=self.causal,
            dtype=self.dtype,
        )
        return problem, TileConfig(block_m=self.block_m, block_n=self.block_n)


def check_traffic_request(
    r: TrafficRequest, s: Settings, where: str = "body"
) -> list[dict[str, Any]]:
    """Errors for every field beyond a server limit or inconsistent with another."""
    errs = [
        over_limit(field, value, limit, where)
        for field, value, limit in (
            ("seq", r.seq, s.traffic_max_seq),
            ("seq_k", r.seq_k or 0, s.traffic_max_seq),
            ("batch", r.batch, s.traffic_max_batch),
            ("heads", r.heads, s.traffic_max_heads),
            ("kv_heads", r.kv_heads or 0, s.traffic_max_heads),
            ("splits", r.splits or 0, s.max_splits),
            ("sms", r.sms, s.traffic_max_sms),
        )
        if value > limit
    ]
    errs += head_dim_errors("head_dim", r.head_dim, s.max_head_dim, where)
    errs += block_errors({"block_m": r.block_m, "block_n": r.block_n}, s, where)
    if r.kv_heads is not None and r.heads % r.kv_heads:
        errs.append(
            value_error(
                "kv_heads",
                f"kv_heads must divide heads ({r.heads}), got {r.kv_heads}",
                r.kv_heads,
                where,
            )
        )
    if r.algo == "decode" and r.causal:
        errs.append(
            value_error("causal", "decode has no causal mask: set causal=false", True, where)
        )
    if r.algo != "decode" and r.splits is not None:
        errs.append(value_error("splits", "splits applies to algo decode only", r.splits, where))
    return errs
