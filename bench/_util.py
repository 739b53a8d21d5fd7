"""Small timing helpers shared by the benchmarks."""

from __future__ import annotations

import statistics


def pct(samples: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(samples)
    idx = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[idx]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def median(samples: list[float]) -> float:
    return statistics.median(samples)
