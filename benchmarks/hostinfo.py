"""What the benchmarks record about the machine they ran on (imported by the scripts beside it)."""

from __future__ import annotations

import statistics
from importlib import metadata
from pathlib import Path


def cpu_model(fallback: str = "unknown") -> str:
    """The CPU's model name from /proc/cpuinfo, or `fallback` where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return fallback


def package_versions(dists: tuple[str, ...], missing: str | None) -> dict[str, str | None]:
    """Installed version of each distribution, `missing` for those not installed."""
    out: dict[str, str | None] = {}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = missing
    return out


def gpu_header() -> dict:
    """The fields every GPU benchmark result opens with: device, SMs, L2, date and versions."""
    import platform
    from datetime import UTC, datetime

    import torch
    import triton

    props = torch.cuda.get_device_properties(0)
    return {
        "device": torch.cuda.get_device_name(),
        "sms": props.multi_processor_count,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "date": datetime.now(UTC).date().isoformat(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
    }


def result_path(out: Path, kind: str, header: dict, suffix: str = ".json") -> Path:
    """out/<kind>-<device>-<date><suffix> for a result opened by `gpu_header` (out is made)."""
    out.mkdir(parents=True, exist_ok=True)
    tag = header["device"].replace(" ", "-").replace("/", "-")
    return out / f"{kind}-{tag}-{header['date']}{suffix}"


def percentile(xs: list[float], q: float) -> float:
    """The `q` quantile (0–1) of `xs`, linear between the two nearest ranks."""
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(xs: list[float]) -> dict[str, float]:
    """Count, median, p95, mean, min and max of timings."""
    return {
        "n": len(xs),
        "p50": percentile(xs, 0.5),
        "p95": percentile(xs, 0.95),
        "mean": statistics.fmean(xs),
        "min": min(xs),
        "max": max(xs),
    }
