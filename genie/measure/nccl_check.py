"""What nccl-tests says about its own check of the results (pure). With validation on (``-c 1``, the default) each
row's ``#wrong`` columns count the elements that came out wrong and each table's footer ``# Out of bounds values : N
FAILED`` adds them up (``0 OK`` when none): the footer is what is read from stdout (every release prints it; before
2.13 the column was ``error``, a deviation, not a count); from the ``-J`` JSON, each phase's ``nwrong``. A run that
computed wrong results ran on a broken cluster: its times are still what it measured, so they are kept, and whoever
reads a calibration made from them is told (:meth:`WrongValues.describe`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")


@dataclass(frozen=True)
class WrongValues:
    """Wrong elements nccl-tests counted in one table, and where the output says so."""

    count: int
    at: str  # where: "line 39" (the footer), or the first JSON field with a count

    def describe(self, source: str) -> str:
        return (f"{source}: {self.at}: nccl-tests counted {self.count} wrong value(s) (its check FAILED): the "
                "times are kept, but a cluster that computes wrong results is broken (a GPU, NVLink, NIC or memory "
                "fault); rerun before trusting them")


def footer_wrong(line: str) -> int | None:
    """N of a ``# Out of bounds values : N OK|FAILED`` footer line; None when ``line`` is not that footer."""
    m = _OUT_OF_BOUNDS.match(line)
    return int(m[1]) if m else None


def add_wrong(wrong: WrongValues | None, count: object, at: str) -> WrongValues | None:
    """``wrong`` with ``count`` more wrong elements found at ``at`` (where the first were found is kept); a count that
    is no positive number (0, None, N/A) adds nothing."""
    if isinstance(count, bool) or not isinstance(count, (int, float)) or count <= 0:
        return wrong
    return WrongValues((wrong.count if wrong else 0) + int(count), wrong.at if wrong else at)
