"""flashscope's Triton kernels: FlashAttention forward, backward, decode, instrumented forward.

On a machine without a CUDA GPU the kernels run through Triton's interpreter on the CPU.

    flash_attention(q, k, v, causal=False, sm_scale=None, *, config=None, bwd_config=None)
    flash_attention_lse(...) → (O, LSE)
    flash_decode(q, k_cache, v_cache, cache_seqlens=None, sm_scale=None, *, config=None,
                 block_table=None)  # block_table: paged caches
    KernelConfig(block_m, block_n, num_warps, num_stages): a fixed tile configuration
"""

from flashscope.kernels.device import configure as _configure

_configure()

from flashscope.kernels.attention import flash_attention, flash_attention_lse  # noqa: E402
from flashscope.kernels.config import KernelConfig  # noqa: E402
from flashscope.kernels.decode import flash_decode  # noqa: E402

__all__ = ["KernelConfig", "flash_attention", "flash_attention_lse", "flash_decode"]
