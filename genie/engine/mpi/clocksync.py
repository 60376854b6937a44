"""Clock offsets between ranks on different machines, NTP-style (pure functions; see docs/mpi.md).

Rank 0 and rank r exchange a few ping-pongs. For each, rank 0 notes its send time ``t0`` and receive time
``t3``; rank r notes when the ping arrived (``t1``) and when it replied (``t2``), each on its own monotonic
clock. Then

    offset = ((t1 - t0) + (t2 - t3)) / 2      (rank r's clock minus rank 0's)
    rtt    = (t3 - t0) - (t2 - t1)

and the sample with the smallest rtt is kept: the least queueing, so the most symmetric paths. A timestamp
``t`` of rank r lands on rank 0's timeline as ``t - offset``; a start time ``S`` on rank 0's timeline is
``S + offset`` on rank r's clock. The estimate is wrong by half the asymmetry of the one-way delays, at most
rtt / 2 (reported as ``error_bound_ns``).

Ranks that share rank 0's kernel (same boot id: namespaces of one machine) share its CLOCK_MONOTONIC, so
their offset is exactly 0: the estimate is still reported, but not applied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Sequence

from genie.core.protocol import CaseResult, Message

Sample = tuple[int, int, int, int]  # (t0, t1, t2, t3) in ns: rank 0 send, peer receive, peer reply, rank 0 receive


@dataclass(frozen=True)
class ClockOffset:
    """Rank `rank`'s clock minus rank 0's (`offset_ns`), from the min-rtt sample; `applied_ns` is what the run
    subtracts from the rank's timestamps (0 when the rank shares rank 0's clock)."""

    rank: int
    offset_ns: int
    rtt_ns: int
    samples: int
    same_clock: bool

    @property
    def applied_ns(self) -> int:
        return 0 if self.same_clock else self.offset_ns

    @property
    def error_bound_ns(self) -> int:
        return 0 if self.same_clock else self.rtt_ns // 2

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "offset_ns": self.offset_ns, "rtt_ns": self.rtt_ns, "samples": self.samples,
                "same_clock": self.same_clock, "applied_ns": self.applied_ns,
                "error_bound_ns": self.error_bound_ns}


def sample_offset(sample: Sample) -> tuple[int, int]:
    """(offset_ns, rtt_ns) of one ping-pong."""
    t0, t1, t2, t3 = sample
    return ((t1 - t0) + (t2 - t3)) // 2, (t3 - t0) - (t2 - t1)


def estimate_offset(rank: int, samples: Iterable[Sample], *, same_clock: bool = False) -> ClockOffset:
    """The min-rtt sample's offset. Samples with a negative rtt (impossible unless clocks jump) are ignored."""
    best: tuple[int, int] | None = None
    count = 0
    for sample in samples:
        offset, rtt = sample_offset(sample)
        count += 1
        if rtt < 0:
            continue
        if best is None or rtt < best[1]:
            best = (offset, rtt)
    if best is None:
        raise ValueError(f"rank {rank}: no usable clock sample (of {count})")
    return ClockOffset(rank=rank, offset_ns=best[0], rtt_ns=best[1], samples=count, same_clock=same_clock)


def reference_offset(rank: int = 0) -> ClockOffset:
    """Rank 0 against itself."""
    return ClockOffset(rank=rank, offset_ns=0, rtt_ns=0, samples=0, same_clock=True)


def barrier_lead_ns(world: int, rtts_ns: Sequence[int]) -> int:
    """How far ahead of 'now' rank 0 sets a common start time: long enough for the broadcast to reach every
    rank (a tree of ceil(log2 world) hops of rtt/2 each, three times over), never under 2 ms."""
    hops = max(1, (max(world, 2) - 1).bit_length())
    slowest = max(rtts_ns, default=0)
    return max(2_000_000, 150_000 * world, 3 * hops * slowest)


def to_reference(message: Message, offset_ns: int) -> Message:
    """A rank's `CaseResult` with every timestamp moved onto rank 0's timeline (subtract `offset_ns`); other
    messages as they are.

    Both shapes genie's runners send: bench (``iterations`` (start, end), ``steps`` rows (it, step, start, end,
    sent, received, peers)) and replay (``t0_ns``, ``records`` (node, start, end)).
    """
    if not offset_ns or not isinstance(message, CaseResult):
        return message
    return replace(message,
                   iterations=tuple((s - offset_ns, e - offset_ns) for s, e in message.iterations),
                   steps=tuple((row[0], row[1], row[2] - offset_ns, row[3] - offset_ns, *row[4:])
                               for row in message.steps),
                   t0_ns=message.t0_ns - offset_ns if message.t0_ns else message.t0_ns,
                   records=tuple((node, s - offset_ns, e - offset_ns) for node, s, e in message.records))
