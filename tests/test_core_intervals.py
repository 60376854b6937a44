"""genie.core.intervals.union_ns, the one union of intervals (replay metrics, the timeline, the estimator)."""

from __future__ import annotations

import pytest

from genie.core.intervals import union_ns


@pytest.mark.parametrize("intervals, covered", [
    ([], 0),
    ([(5, 9)], 4),
    ([(0, 10), (2, 3)], 10),  # nested: nothing added
    ([(0, 4), (4, 6)], 6),  # touching: counted once
    ([(7, 9), (0, 2), (1, 5)], 7),  # any order
    ([(0, 3), (3, 3), (10, 12)], 5),  # an empty span adds nothing
])
def test_union_ns(intervals: list[tuple[int, int]], covered: int) -> None:
    got = union_ns(intervals)
    assert got == covered and isinstance(got, int)
    assert union_ns(iter(intervals)) == covered
    assert union_ns([(float(s), float(e)) for s, e in intervals]) == pytest.approx(covered)
