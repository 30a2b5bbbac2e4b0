"""What the benchmarks record about the machine they ran on (imported by the scripts beside it)."""

from __future__ import annotations

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
