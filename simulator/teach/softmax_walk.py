"""The online softmax block by block, with what each block did: the explorer's data.

`numerics.online_softmax` runs the recurrence and returns m, ℓ and α after every block and the
final softmax. This module adds, per block, the numbers a reader needs to follow one update:

    block b covers x[start:stop];  its own max;  m before → m after;  α = e^(m_before − m_after);
    ℓ before;  the block's sum Σ e^(x − m_after) over its entries;  ℓ after = α·ℓ before + sum;
    and the weights e^(x − m_after) / ℓ after of every entry seen so far (the softmax as it
    stands, which the last block turns into the exact one).

It ends with the standard two-pass softmax of the whole vector in float64 and the largest
difference from the online result. Entries of −∞ weigh nothing; while every entry seen so far is
−∞, m = −∞, ℓ = 0 and the weights are 0. An all −∞ vector has no softmax: the reference here
is then all zeros (the convention for fully masked attention rows); the online result follows
whatever `numerics.online_softmax` returns for it (NaN or zeros), and the difference with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashscope.simulator.teach.numerics import online_softmax


@dataclass(frozen=True)
class BlockStep:
    """One block's update of the running statistics."""

    start: int
    stop: int
    block_max: float
    m_before: float
    m_after: float
    alpha: float
    l_before: float
    block_sum: float
    l_after: float
    weights: np.ndarray  # (stop,) e^(x − m_after) / ℓ_after for every entry seen so far


@dataclass(frozen=True)
class SoftmaxWalk:
    """The whole walk: the input, one step per block, and the comparison at the end."""

    x: np.ndarray  # (n,)
    block: int
    steps: tuple[BlockStep, ...]
    online: np.ndarray  # (n,) softmax from the recurrence
    standard: np.ndarray  # (n,) two-pass softmax in float64
    max_abs_diff: float


def standard_softmax(x: np.ndarray) -> np.ndarray:
    """Two passes over the whole vector: subtract the max, exponentiate, divide by the sum."""
    x = np.asarray(x, dtype=np.float64)
    top = x.max()
    if top == -np.inf:
        return np.zeros_like(x)
    e = np.exp(x - top)
    p: np.ndarray = e / e.sum()
    return p


def _exp_shifted(values: np.ndarray, m: float) -> np.ndarray:
    """e^(values − m), with 0 where values is −∞ (also when m is −∞)."""
    if m == -np.inf:
        return np.zeros_like(values)
    return np.exp(values - m)


def walk(x: np.ndarray, block: int) -> SoftmaxWalk:
    """Run the online softmax on `x` in blocks of `block` and describe every block.

    Any finite float64 is fine: x − m for entries far below the max (1e308 and −1e308) is −∞,
    whose weight e^−∞ = 0 is the right one, so that overflow is not reported.
    """
    with np.errstate(over="ignore"):
        return _walk(np.asarray(x, dtype=np.float64), block)


def _walk(x: np.ndarray, block: int) -> SoftmaxWalk:
    rec = online_softmax(x, block)
    steps = []
    m_before, l_before = -np.inf, 0.0
    for b, (m, l, alpha) in enumerate(zip(rec["m"], rec["l"], rec["alpha"], strict=True)):
        start, stop = b * block, min((b + 1) * block, x.size)
        chunk = x[start:stop]
        m, l, alpha = float(m), float(l), float(alpha)
        seen = _exp_shifted(x[:stop], m)
        steps.append(
            BlockStep(
                start=start,
                stop=stop,
                block_max=float(chunk.max()),
                m_before=m_before,
                m_after=m,
                alpha=alpha,
                l_before=l_before,
                block_sum=float(_exp_shifted(chunk, m).sum()),
                l_after=l,
                weights=seen / l if l > 0 else np.zeros_like(seen),
            )
        )
        m_before, l_before = m, l
    online = np.asarray(rec["softmax"], dtype=np.float64)
    standard = standard_softmax(x)
    diff = float(np.max(np.abs(online - standard)))  # NaN if the recurrence gave NaN
    return SoftmaxWalk(x, block, tuple(steps), online, standard, diff)
