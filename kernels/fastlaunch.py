"""Launching a compiled Triton kernel again without Triton's per-call argument binding.

`kernel[grid](*args, **constexprs)` binds and specialises every argument, hashes a cache key,
checks the kernel's globals and only then launches. For a kernel of forty arguments that is
tens of microseconds of the host's time per call, more than the GPU's time for a small
attention call (benchmarks/host_overhead.py). `launch` makes the first call of each
*signature* through Triton, keeps the kernel Triton compiled for it, and sends later calls of
the same signature straight to that kernel's launcher, with the same arguments Triton's own
`JITFunction.run` passes it.

A signature is at least as fine as Triton's specialisation, so two calls that share one would
have got the same compiled kernel from Triton: every integer's value (Triton specialises on 1,
on divisibility by 16 and on the 32-bit range), each tensor's dtype and whether its address is
16-byte aligned (Triton's pointer specialisation), each tensor descriptor's dtype, alignment,
shape, strides, block and padding (and a Gluon descriptor's shared-memory layout), the type
of each float, the constexprs' and launch
options' values and the current device. An argument of any other kind, Triton's launch hooks
(set by profilers), the interpreter or `ENABLED = False` send the call through Triton unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import torch

from flashscope.kernels.device import interpreting

ENABLED = True
MAX_SIGNATURES = 1024  # compiled kernels remembered; the table starts again when full

_kernels: dict[tuple, tuple[Any, tuple] | None] = {}
_stats = {"direct": 0, "triton": 0}


class _Unkeyed(Exception):
    """An argument whose specialisation this module does not know."""


def _descriptor_types() -> tuple[Any, ...]:  # Triton's classes (it ships no types)
    """Triton's host tensor descriptor and Gluon's (which also carries a shared-memory layout)."""
    found = []
    with suppress(ImportError):  # every Triton this project pins has both
        from triton.tools.tensor_descriptor import TensorDescriptor

        found.append(TensorDescriptor)
    with suppress(ImportError):
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

        found.append(GluonDescriptor)
    return tuple(found)


_DESCRIPTORS = _descriptor_types()


def _spec(a: object) -> object:
    """What of one argument can change which kernel Triton compiles."""
    if a is None:
        return None
    kind = type(a)
    if kind is bool:  # bools are i1 in Triton; kept apart from the integers 0 and 1
        return ("b", a)
    if kind is int:
        return a
    if kind is float:
        return float
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.data_ptr() % 16 == 0)
    if isinstance(a, _DESCRIPTORS):
        base = a.base
        return (kind, base.dtype, base.data_ptr() % 16 == 0, tuple(a.shape), tuple(a.strides),
                tuple(a.block_shape), a.padding, repr(getattr(a, "layout", None)))  # fmt: skip
    raise _Unkeyed


def signature(
    fn: object,
    args: Sequence[object],
    constexprs: Mapping[str, object],
    options: Mapping[str, object],
) -> tuple:
    """The key under which a compiled kernel is kept (raises _Unkeyed for unknown arguments)."""
    return (
        id(fn),
        _current_device(),
        tuple(_spec(a) for a in args),
        tuple(constexprs.items()),
        tuple(options.items()),
    )


def _current_device() -> int:
    return torch.cuda.current_device()


def _current_stream() -> int:
    """The stream Triton itself would launch on: the current one of the current device."""
    from triton.runtime import driver

    return driver.active.get_current_stream(driver.active.get_current_device())


def _active(hook: object) -> bool:
    """A launch hook that would do something: Triton 3.6 keeps None when there is none,
    later versions an empty chain of hooks."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return calls is None or len(calls) > 0


def _hooks_set() -> bool:
    from triton import knobs

    return _active(knobs.runtime.launch_enter_hook) or _active(knobs.runtime.launch_exit_hook)


def _direct_form(
    fn: Any, kernel: Any, n_args: int, constexprs: Mapping[str, object]
) -> tuple[Any, tuple] | None:
    """(compiled kernel, the constexprs' values in parameter order), or None where the
    kernel's parameters are not exactly the positional arguments followed by the constexprs."""
    if hasattr(kernel, "result"):  # a future, when Triton compiles asynchronously
        kernel = kernel.result()
    names = list(getattr(fn, "arg_names", ()))
    tail = names[n_args:]
    if getattr(fn, "pre_run_hooks", None) or sorted(tail) != sorted(constexprs):
        return None
    if not all(hasattr(kernel, a) for a in ("run", "function", "packed_metadata")):
        return None
    return kernel, tuple(constexprs[n] for n in tail)


def launch(
    fn: Any,
    grid: tuple[int, ...],
    args: Sequence[object],
    constexprs: Mapping[str, object],
    options: Mapping[str, object],
    key: tuple | None = None,
) -> None:
    """`fn[grid](*args, **constexprs, **options)`, past Triton's binding for a known signature.

    `args` are the kernel's leading parameters in order, `constexprs` all the rest by name,
    `options` Triton's launch options (num_warps, num_stages, maxnreg). `key`: these arguments'
    `signature` where the caller already has it (from an earlier call whose arguments are
    alike in everything a signature holds), to save working it out again.
    """
    if not ENABLED or interpreting() or _hooks_set():
        key = None
    elif key is None:
        with suppress(_Unkeyed):  # an argument of unknown kind: Triton binds every call
            key = signature(fn, args, constexprs, options)
    known = _kernels.get(key) if key is not None else None
    if known is not None:
        kernel, tail = known
        g = (*grid, 1, 1)
        kernel.run(g[0], g[1], g[2], _current_stream(), kernel.function, kernel.packed_metadata,
                   None, None, None, *args, *tail)  # fmt: skip
        _stats["direct"] += 1
        return
    kernel = fn[grid](*args, **constexprs, **options)
    _stats["triton"] += 1
    if key is not None and key not in _kernels:  # None is kept too: a kernel that never goes direct
        if len(_kernels) >= MAX_SIGNATURES:
            _kernels.clear()
        _kernels[key] = _direct_form(fn, kernel, len(args), constexprs)


@contextmanager
def through_triton() -> Iterator[None]:
    """Every launch inside goes through Triton's binding (comparisons, tests)."""
    global ENABLED
    before, ENABLED = ENABLED, False
    try:
        yield
    finally:
        ENABLED = before


def stats() -> dict[str, int]:
    """Launches sent straight to a compiled kernel, and through Triton, in this process."""
    return dict(_stats)


def forget() -> None:
    """Drop every remembered kernel (tests; a changed Triton cache)."""
    _kernels.clear()
