"""The public attention functions: checked inputs, the forward kernel, autograd to the backward.

    flash_attention(q, k, v, causal=False, sm_scale=None, *, config=None, bwd_config=None) → O
    flash_attention_lse(...) → (O, LSE)

q (B, H, N_q, d), k and v (B, H_kv, N_k, d); O (B, H, N_q, d) in q's dtype; LSE (B, H, N_q) fp32,
natural log, −∞ for a row that sees no key (causal with N_q > N_k), whose O row is 0. `config` fixes
the forward tiles, `bwd_config` the backward's (flashscope.kernels.config); by default each comes
from this GPU's tuned table or is autotuned.
"""

from __future__ import annotations

import torch

from flashscope.kernels.backward import launch_backward
from flashscope.kernels.config import KernelConfig
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.hopper_backward import launch_backward_ws
from flashscope.kernels.hopper_backward import tuned as tuned_bwd
from flashscope.kernels.inputs import check_attention, last_dim_contiguous


def _check_config(name: str, value: object) -> None:
    if value is not None and not isinstance(value, KernelConfig):
        raise ValueError(f"{name} must be a KernelConfig or None, got {type(value).__name__}")


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, config, bwd_config, use_tma):
        o, lse = launch_forward(q, k, v, causal, scale, config, use_tma=use_tma)
        # An output nobody differentiates comes back as None, not as a tensor of zeros (which
        # would cost an allocation, a fill and a subtraction per backward).
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale, ctx.bwd_config, ctx.use_tma = causal, scale, bwd_config, use_tma
        return o, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        if do is None:
            do = torch.zeros_like(o)
        do = last_dim_contiguous(do)
        # the warp-specialized Gluon backward where this GPU's tuned table found it faster, unless
        # the caller chose tiles or the descriptor path
        ws = None if ctx.bwd_config or ctx.use_tma is not None else tuned_bwd(q, k, v, ctx.causal)
        if ws is not None:
            dq, dk, dv = launch_backward_ws(
                q, k, v, o, lse, do, ctx.causal, ctx.scale, ws, dlse=dlse, checked=True
            )
        else:
            dq, dk, dv = launch_backward(
                q, k, v, o, lse, do, ctx.causal, ctx.scale, ctx.bwd_config,
                dlse=dlse, use_tma=ctx.use_tma,
            )  # fmt: skip
        return dq, dk, dv, None, None, None, None, None


def flash_attention_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    *,
    config: KernelConfig | None = None,
    bwd_config: KernelConfig | None = None,
    use_tma: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output and its row log-sum-exp; differentiable in q, k, v (and through LSE)."""
    shapes = check_attention(q, k, v, causal, sm_scale)
    _check_config("config", config)
    _check_config("bwd_config", bwd_config)
    q, k, v = (last_dim_contiguous(x) for x in (q, k, v))
    if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
        return launch_forward(q, k, v, causal, shapes.scale, config, use_tma=use_tma)
    return _FlashAttention.apply(q, k, v, causal, shapes.scale, config, bwd_config, use_tma)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    *,
    config: KernelConfig | None = None,
    bwd_config: KernelConfig | None = None,
    use_tma: bool | None = None,
) -> torch.Tensor:
    """softmax(Q Kᵀ · scale, causal-masked) V; scale defaults to 1/√d."""
    o, _ = flash_attention_lse(
        q, k, v, causal, sm_scale, config=config, bwd_config=bwd_config, use_tma=use_tma
    )
    return o
