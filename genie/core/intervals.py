"""Time intervals (pure): the length a set of possibly overlapping spans covers."""

from __future__ import annotations

from collections.abc import Iterable


def union_ns(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping [start, end) intervals, in their unit (ns throughout genie);
    ints give an int. Touching intervals count once, nested ones add nothing, the order does not matter."""
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total
