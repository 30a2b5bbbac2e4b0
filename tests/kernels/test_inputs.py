"""Invalid inputs raise ValueError naming the mismatch; nothing reaches a kernel."""

from __future__ import annotations

import math

import pytest
import torch

from flashscope.kernels import KernelConfig, flash_attention, flash_decode

from .conftest import DEV, rand

Q = (1, 4, 8, 16)
KV = (1, 2, 8, 16)


def call(q_shape=Q, kv_shape=KV, v_shape=None, dtypes=(torch.float16,) * 3, **kw):
    q = rand(*q_shape, dtype=dtypes[0])
    k = rand(*kv_shape, dtype=dtypes[1])
    v = rand(*(v_shape or kv_shape), dtype=dtypes[2])
    return flash_attention(q, k, v, **kw)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"q_shape": (4, 8, 16)}, "4-D"),
        ({"kv_shape": (2, 2, 8, 16)}, "batch mismatch"),
        ({"kv_shape": (1, 2, 8, 32)}, "head_dim mismatch"),
        ({"kv_shape": (1, 3, 8, 16)}, "divisible"),
        ({"v_shape": (1, 2, 9, 16)}, "same shape"),
        ({"q_shape": (1, 4, 8, 12), "kv_shape": (1, 2, 8, 12)}, "multiple of 8"),
        ({"q_shape": (1, 1, 8, 264), "kv_shape": (1, 1, 8, 264)}, "at most 256"),
        ({"q_shape": (1, 4, 0, 16)}, "empty"),
        ({"dtypes": (torch.float16, torch.bfloat16, torch.float16)}, "share a dtype"),
        ({"dtypes": (torch.float64,) * 3}, "dtype must be"),
        ({"sm_scale": math.nan}, "finite"),
        ({"sm_scale": math.inf}, "finite"),
        ({"sm_scale": "0.1"}, "number"),
        ({"causal": 1}, "causal must be a bool"),
        ({"config": (64, 64)}, "KernelConfig"),
    ],
)
def test_attention_rejects(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(**kwargs)


def test_not_a_tensor() -> None:
    with pytest.raises(ValueError, match=r"torch\.Tensor"):
        flash_attention([[1.0]], rand(*KV), rand(*KV))


def test_wrong_device() -> None:
    other = "cuda" if DEV == "cpu" else "cpu"
    q = torch.zeros(Q, dtype=torch.float16, device="meta" if other == "cuda" else other)
    with pytest.raises(ValueError, match="must be on"):
        flash_attention(q, q, q)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("block_m", 48, "power of two"),
        ("block_n", 8, "power of two"),
        ("num_warps", 3, "num_warps"),
        ("num_stages", 0, "num_stages"),
        ("prefetch", 1, "prefetch"),
    ],
)
def test_kernel_config_rejects(field: str, value: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        KernelConfig(**{field: value})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_q": 17}, "1 to 16 query tokens"),
        ({"lens": [3.0]}, "int32 or int64"),
        ({"lens": [3, 4]}, "shape"),
        ({"lens": [9]}, r"\[0, 8\]"),
        ({"lens": [-1]}, r"\[0, 8\]"),
        ({"splits": 0}, "splits"),
    ],
)
def test_decode_rejects(kwargs: dict, match: str) -> None:
    n_q = kwargs.pop("n_q", 1)
    lens = kwargs.pop("lens", None)
    seqlens = None if lens is None else torch.tensor(lens, device=DEV)
    with pytest.raises(ValueError, match=match):
        flash_decode(rand(1, 2, n_q, 16), rand(1, 1, 8, 16), rand(1, 1, 8, 16), seqlens, **kwargs)
