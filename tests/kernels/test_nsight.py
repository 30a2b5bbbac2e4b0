"""Reading Nsight Compute's CSV back: kernel rows to configurations, bytes per configuration."""

from __future__ import annotations

import pytest

from flashscope.kernels.ncu_target import expected_kernels
from flashscope.kernels.nsight import (
    LAUNCH,
    REQUIRED,
    assign,
    parse_raw_csv,
    raw_csv_columns,
    totals,
)

METRICS = [*REQUIRED, "lts__t_sectors_srcunit_tex_op_read.sum"]


def _csv(names: list[str]) -> str:
    cols = ["ID", "Process ID", "Kernel Name", *METRICS, LAUNCH[0]]
    lines = ["==PROF== Connected to process 1", ",".join(f'"{c}"' for c in cols)]
    lines.append(",".join('""' if i < 3 else '"byte"' for i in range(len(cols))))
    for i, name in enumerate(names):
        values = [
            str(i),
            "1",
            name,
            *(f"{1000 * (i + 1) + j:,}" for j in range(len(METRICS))),
            "128",
        ]
        lines.append(",".join(f'"{v}"' for v in values))
    return "\n".join(lines)


def test_rows_map_back_to_configurations_in_launch_order():
    names = ["_attn_fwd", "_bwd_preprocess", "_attn_bwd_dq", "_attn_bwd_dkdv",
             "_bwd_preprocess", "void at::native::fill", "_attn_bwd_dkdv", "mul", "copy",
             "_attn_fwd"]  # fmt: skip
    rows = parse_raw_csv(_csv(names), METRICS)
    assert [r["name"] for r in rows] == names
    assert rows[0]["dram__bytes_read.sum"] == 1000.0  # thousands separators removed
    assert rows[0][LAUNCH[0]] == 128.0
    done = [
        {"index": 0, "kernels": expected_kernels("fa2", None)},
        {"index": 1, "kernels": expected_kernels("fa2-bwd", "separate")},
        {"index": 2, "kernels": expected_kernels("fa2-bwd", "atomic")},
        {"index": 3, "error": "RuntimeError", "kernels": []},
        {"index": 4, "kernels": expected_kernels("fa2", None)},
    ]
    got = assign(rows, done)
    assert [len(g) if g else None for g in got] == [1, 3, 5, None, 1]
    t = totals(got[1])
    assert t["dram_read_bytes"] == 2000.0 + 3000.0 + 4000.0
    assert t["dram_bytes"] == t["dram_read_bytes"] + t["dram_write_bytes"]


def test_the_columns_are_the_tables_header_past_ncus_own_lines():
    assert raw_csv_columns(_csv(["_attn_fwd"])) == ["ID", "Process ID", "Kernel Name", *METRICS,
                                                     LAUNCH[0]]  # fmt: skip
    assert raw_csv_columns("==PROF== no kernels were profiled") == []


def test_a_missing_kernel_costs_only_its_configuration():
    rows = parse_raw_csv(_csv(["_bwd_preprocess", "_attn_bwd_dkdv", "_attn_fwd"]), METRICS)
    done = [
        {"index": 0, "kernels": expected_kernels("fa2-bwd", "separate")},
        {"index": 1, "kernels": expected_kernels("fa2", None)},
    ]
    got = assign(rows, done)
    assert got[0] is None and got[1] is not None and got[1][0]["name"] == "_attn_fwd"


@pytest.mark.parametrize("text", ["", "==PROF== nothing profiled\n"])
def test_no_report_means_no_rows(text):
    assert parse_raw_csv(text, METRICS) == []
