"""Random simulation cases for the engine's property tests (hypothesis strategies)."""

from __future__ import annotations

from hypothesis import assume
from hypothesis import strategies as st

from flashscope.simulator.core.hardware import PRESETS
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing.engine import simulate
from flashscope.simulator.timing.workload import ALGOS

HEADS = st.sampled_from([(1, 1), (2, 2), (4, 1), (8, 2), (5, 5)])


@st.composite
def cases(draw, algos=ALGOS):
    algo = draw(st.sampled_from(algos))
    heads, kv = draw(HEADS)
    decode = algo == "decode"
    p = AttentionProblem(
        seq_q=draw(st.integers(1, 4)) if decode else draw(st.integers(1, 3000)),
        seq_k=draw(st.integers(1, 6000)),
        head_dim=draw(st.sampled_from([16, 40, 64, 128])),
        batch=draw(st.integers(1, 3)),
        heads=heads,
        kv_heads=kv,
        causal=False if decode else draw(st.booleans()),
        dtype=draw(st.sampled_from(["fp16", "bf16", "fp32"])),
    )
    t = TileConfig(
        draw(st.sampled_from([16, 32, 64, 128])),
        draw(st.sampled_from([16, 32, 64])),
        draw(st.integers(1, 3)),
        draw(st.sampled_from([2, 4, 8])),
    )
    gpu = PRESETS[draw(st.sampled_from(list(PRESETS)))]
    return algo, p, t, gpu


def run(algo, p, t, gpu, splits=None):
    """Simulate, or reject the example when its tiles do not fit the GPU's shared memory."""
    try:
        return simulate(algo, p, t, gpu, splits=splits)
    except ValueError as exc:
        assume("shared memory" not in str(exc))
        raise
