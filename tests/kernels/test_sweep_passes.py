"""Several timing passes of a validation sweep: a row's time is the median of its passes."""

from __future__ import annotations

import random
import statistics

import pytest

from flashscope.kernels.sweep import _take_median


def test_the_median_of_the_passes_becomes_the_rows_time_and_rates_follow():
    rng = random.Random()
    passes = [rng.uniform(0.5, 2.0) for _ in range(rng.choice((2, 3, 5)))]
    first = passes[0]
    row = {"ms": first, "ms_passes": list(passes), "tflops": 100.0 / first, "gbs": 7.0 / first}
    _take_median(row)
    mid = statistics.median(passes)
    assert row["ms"] == pytest.approx(mid)
    assert row["tflops"] == pytest.approx(100.0 / mid)
    assert row["gbs"] == pytest.approx(7.0 / mid)
    assert row["ms_passes"] == passes


def test_a_row_with_one_pass_is_left_as_it_is():
    row = {"ms": 1.5, "ms_passes": [1.5], "tflops": 3.0}
    _take_median(row)
    assert row == {"ms": 1.5, "ms_passes": [1.5], "tflops": 3.0}
