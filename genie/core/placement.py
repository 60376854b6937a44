"""Where a rank runs (pure): the placement every session, launcher and run target shares."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RankPlacement:
    """Where global rank `rank` runs: namespace (None = current) and the address it listens on."""

    rank: int
    host: str
    netns: str | None
    address: str
