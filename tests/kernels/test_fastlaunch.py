"""flashscope.kernels.fastlaunch: which calls go straight to a compiled kernel, and with what
arguments.

Triton is replaced by a fake JIT function that records how it was called, so the caching rules
are checked on the CPU; tests/kernels/test_gpu.py checks real kernels launched both ways.
"""

from __future__ import annotations

import pytest
import torch

from flashscope.kernels import fastlaunch


class _Kernel:
    def __init__(self) -> None:
        self.function, self.packed_metadata, self.calls = "fn-handle", ("meta",), []

    def run(self, *args):
        self.calls.append(args)


class _Jit:
    """Stands for a @triton.jit function of parameters (X, n, flag, BLOCK, MODE)."""

    arg_names = ("X", "n", "flag", "BLOCK", "MODE")

    def __init__(self) -> None:
        self.pre_run_hooks: list = []
        self.kernel, self.triton_calls = _Kernel(), []

    def __getitem__(self, grid):
        def call(*args, **kwargs):
            self.triton_calls.append((grid, args, kwargs))
            return self.kernel

        return call


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(fastlaunch, "interpreting", lambda: False)
    monkeypatch.setattr(fastlaunch, "_current_device", lambda: 0)
    monkeypatch.setattr(fastlaunch, "_current_stream", lambda: 77)
    fastlaunch.forget()
    yield _Jit()
    fastlaunch.forget()


def _go(fn, x, n=64, flag=True, block=32, mode="a", warps=4, grid=(3, 2)):
    fastlaunch.launch(fn, grid, (x, n, flag), {"MODE": mode, "BLOCK": block}, {"num_warps": warps})


def test_second_call_of_a_signature_goes_straight_to_the_compiled_kernel(fake):
    x, y = torch.empty(64), torch.empty(64)
    _go(fake, x)
    assert len(fake.triton_calls) == 1 and not fake.kernel.calls
    grid, args, kwargs = fake.triton_calls[0]
    assert grid == (3, 2) and args[0] is x and kwargs == {"MODE": "a", "BLOCK": 32, "num_warps": 4}
    _go(fake, y, grid=(5, 1))
    assert len(fake.triton_calls) == 1
    (call,) = fake.kernel.calls
    # grid padded to three, the stream, handle, metadata, no launch metadata or hooks, then
    # every parameter in the kernel's order (the constexprs by name, not as given)
    assert call[:9] == (5, 1, 1, 77, "fn-handle", ("meta",), None, None, None)
    assert call[9] is y and call[10:] == (64, True, 32, "a")


@pytest.mark.parametrize(
    "change",
    [
        {"n": 65},  # an integer's value (Triton specialises on 1 and on divisibility by 16)
        {"n": 1},
        {"flag": False},
        {"block": 64},  # a constexpr
        {"mode": "b"},
        {"warps": 8},  # a launch option
    ],
)
def test_any_change_of_specialisation_goes_back_through_triton(fake, change):
    x = torch.empty(64)
    _go(fake, x)
    _go(fake, x, **change)
    assert len(fake.triton_calls) == 2 and not fake.kernel.calls
    _go(fake, x, **change)  # now known too
    assert len(fake.triton_calls) == 2 and len(fake.kernel.calls) == 1


def test_tensor_alignment_and_dtype_are_part_of_the_signature(fake):
    base = torch.empty(64, dtype=torch.float16)
    _go(fake, base)
    _go(fake, base[1:])  # 2 bytes off: not 16-byte aligned
    _go(fake, torch.empty(64, dtype=torch.float32))
    assert len(fake.triton_calls) == 3 and not fake.kernel.calls
    _go(fake, torch.empty(32, dtype=torch.float16))  # another aligned fp16 tensor: a hit
    assert len(fake.kernel.calls) == 1


def test_bools_are_not_the_integers_one_and_zero(fake):
    x = torch.empty(8)
    fastlaunch.launch(fake, (1,), (x, 1, True), {"MODE": "a", "BLOCK": 32}, {})
    fastlaunch.launch(fake, (1,), (x, True, True), {"MODE": "a", "BLOCK": 32}, {})
    assert len(fake.triton_calls) == 2 and not fake.kernel.calls


def test_descriptors_key_on_shape_strides_and_block():
    from triton.tools.tensor_descriptor import TensorDescriptor

    x = torch.empty(256, 64, dtype=torch.float16)
    one = fastlaunch._spec(TensorDescriptor(x, [256, 64], [64, 1], [64, 64]))
    assert one == fastlaunch._spec(
        TensorDescriptor(torch.empty_like(x), [256, 64], [64, 1], [64, 64])
    )
    assert one != fastlaunch._spec(TensorDescriptor(x, [128, 64], [64, 1], [64, 64]))
    assert one != fastlaunch._spec(TensorDescriptor(x, [256, 64], [64, 1], [32, 64]))
    assert one != fastlaunch._spec(TensorDescriptor(x.float(), [256, 64], [64, 1], [64, 64]))


def test_unknown_arguments_are_never_cached(fake):
    for _ in range(3):
        fastlaunch.launch(fake, (1,), ([1, 2], 4, True), {"MODE": "a", "BLOCK": 32}, {})
    assert len(fake.triton_calls) == 3 and not fake.kernel.calls


def test_a_kernel_whose_parameters_do_not_line_up_stays_with_triton(fake):
    x = torch.empty(8)
    for _ in range(3):  # MODE left to a default: the direct call could not supply it
        fastlaunch.launch(fake, (1,), (x, 4, True), {"BLOCK": 32}, {})
    assert len(fake.triton_calls) == 3 and not fake.kernel.calls


def test_hooks_the_switch_and_the_interpreter_send_every_call_through_triton(fake, monkeypatch):
    from triton import knobs

    x = torch.empty(8)
    _go(fake, x)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda *a: None)
    _go(fake, x)
    if not hasattr(knobs, "HookChain"):  # Triton 3.6 keeps None for no hook
        return
    chain = knobs.HookChain()  # what a profiler adds to in Triton ≥ 3.7
    chain.add(lambda *a: None)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", chain)
    _go(fake, x)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", knobs.HookChain())
    _go(fake, x)  # an empty chain: straight to the kernel
    assert len(fake.kernel.calls) == 1
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(fastlaunch, "ENABLED", False)
    _go(fake, x)
    monkeypatch.setattr(fastlaunch, "ENABLED", True)
    with fastlaunch.through_triton():
        _go(fake, x)
    assert fastlaunch.ENABLED
    monkeypatch.setattr(fastlaunch, "interpreting", lambda: True)
    _go(fake, x)
    assert len(fake.triton_calls) == 6 and len(fake.kernel.calls) == 1


def test_a_key_given_by_the_caller_stands_for_its_signature(fake, monkeypatch):
    """A caller that has the arguments' signature from an earlier call passes it as `key`: the
    call goes where that signature's kernel is, without working it out; with fastlaunch off or
    a hook set, such a call still goes through Triton."""
    x, y = torch.empty(64), torch.empty(64)
    args, constexprs, options = (x, 64, True), {"MODE": "a", "BLOCK": 32}, {"num_warps": 4}
    key = fastlaunch.signature(fake, args, constexprs, options)
    fastlaunch.launch(fake, (1,), args, constexprs, options, key=key)
    assert len(fake.triton_calls) == 1 and not fake.kernel.calls

    def worked_out(*a):
        raise AssertionError("the key was given")

    monkeypatch.setattr(fastlaunch, "signature", worked_out)
    fastlaunch.launch(fake, (2,), (y, 64, True), constexprs, options, key=key)
    (call,) = fake.kernel.calls
    assert call[:3] == (2, 1, 1) and call[9] is y
    monkeypatch.setattr(fastlaunch, "ENABLED", False)
    fastlaunch.launch(fake, (2,), (y, 64, True), constexprs, options, key=key)
    assert len(fake.triton_calls) == 2 and len(fake.kernel.calls) == 1


def test_the_table_starts_again_when_full(fake, monkeypatch):
    monkeypatch.setattr(fastlaunch, "MAX_SIGNATURES", 3)
    x = torch.empty(8)
    for n in range(5):
        _go(fake, x, n=n + 100)
    assert len(fastlaunch._kernels) <= 3
    _go(fake, x, n=104)  # the newest is still known
    assert len(fake.kernel.calls) == 1


def test_every_kernel_launch_lines_up_for_the_direct_path(monkeypatch):
    """Each launch site passes the kernel's leading parameters in order and exactly its
    constexprs by name (else the direct path would silently stay with Triton's binding)."""
    from flashscope.kernels import backward, decode, forward
    from flashscope.kernels.attention import flash_attention_lse
    from flashscope.kernels.device import device

    seen = set()

    def spy(fn, grid, args, constexprs, options):
        names = list(fn.arg_names)
        assert len(args) + len(constexprs) == len(names), fn.arg_names
        assert sorted(names[len(args) :]) == sorted(constexprs), fn.arg_names
        seen.add(fn)
        return fastlaunch.launch(fn, grid, args, constexprs, options)

    for module in (forward, backward, decode):
        monkeypatch.setattr(module, "launch", spy)
    q, k, v, do = (torch.randn(1, 2, 40, 16, device=device()) for _ in range(4))
    o, lse = flash_attention_lse(q, k, v, True)
    for route in ("separate", "atomic"):
        backward.launch_backward(q, k, v, o, lse, do, True, 0.25, dq_mode=route)
    decode.flash_decode(q[:, :, :2], k, v)
    assert seen == {forward._attn_fwd, backward._bwd_preprocess, backward._attn_bwd_dkdv,
                    backward._attn_bwd_dq, decode._decode_split}  # fmt: skip


def test_the_host_side_cdiv_and_powers_of_two_are_tritons() -> None:
    """kernels/launch.py's plain-Python cdiv and next_pow2 (Triton's own are constexpr functions,
    about 5 µs a call on the host) give what Triton's give, on every small value and fresh large
    ones; pad_dim keeps its floor of 16."""
    import random

    import triton

    from flashscope.kernels.launch import cdiv, next_pow2, pad_dim

    values = list(range(1, 2100)) + [random.randint(1, 1 << 40) for _ in range(200)]
    for n in values:
        assert next_pow2(n) == triton.next_power_of_2(n), n
        b = random.randint(1, 5000)
        assert cdiv(n, b) == triton.cdiv(n, b), (n, b)
    assert [pad_dim(d) for d in (1, 16, 17, 80, 96, 128, 129, 192, 256)] == [
        16, 16, 32, 128, 128, 128, 256, 256, 256
    ]  # fmt: skip
