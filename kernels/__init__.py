"""flashscope's Triton kernels: FlashAttention forward, backward, decode, instrumented forward.

On a machine without a CUDA GPU the kernels run through Triton's interpreter on the CPU.
"""

from .device import configure as _configure

_configure()
