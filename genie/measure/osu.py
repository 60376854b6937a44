"""OSU micro-benchmarks' point-to-point figures from a bench sweep's stats (pure): osu_latency's one-way latency
(the ping-pong's round trip / 2), osu_bw's and osu_bibw's MB/s (10^6 B/s), osu_mbw_mr's aggregate MB/s and
messages/s. How each test is run: genie.services.osu."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.errors import InputError
from genie.measure.metrics import CaseStats


class OsuTest(Enum):
    LATENCY = "latency"
    BW = "bw"
    BIBW = "bibw"
    MBW_MR = "mbw_mr"

    @classmethod
    def parse(cls, text: str) -> "OsuTest":
        key = text.strip().lower().removeprefix("osu_")
        try:
            return cls(key)
        except ValueError:
            raise InputError(f"unknown OSU test {text!r} (expected one of: {', '.join(t.value for t in cls)})",
                             path="osu") from None


@dataclass(frozen=True)
class OsuRow:
    size_bytes: int
    latency_us: float | None = None
    bandwidth_MBps: float | None = None  # 10^6 bytes per second, as OSU's MB/s
    messages_per_s: float | None = None


def osu_row(test: OsuTest, stats: CaseStats, pairs: int = 1) -> OsuRow:
    """OSU's figure for one size from the sweep's time (the mean iteration time, us)."""
    t_us = stats.time_us
    if test is OsuTest.LATENCY:
        return OsuRow(stats.size_bytes, latency_us=t_us / 2)
    if test is OsuTest.BIBW:
        return OsuRow(stats.size_bytes, bandwidth_MBps=2 * stats.size_bytes / t_us)
    if test is OsuTest.MBW_MR:
        return OsuRow(stats.size_bytes, bandwidth_MBps=pairs * stats.size_bytes / t_us,
                      messages_per_s=pairs * 1e6 / t_us)
    return OsuRow(stats.size_bytes, bandwidth_MBps=stats.size_bytes / t_us)
