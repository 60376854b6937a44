"""Schedules: what each rank of a collective sends and receives, step by step.

A rank executes its steps in order. Within one step every send, receive and local copy runs concurrently and
the step ends when all of them are done. Sends read the buffer as it was when the step began; receives land
(or, with ``reduce=True``, are summed into their region) when the step ends. A plain (non-reducing) receive
or copy never targets a region that anything else touches in the same step, so an executor may receive
straight into the destination; reducing receives may overlap sends and each other (each is received into
scratch memory and summed in at the end of the step).

Every rank of a schedule has the same number of steps: step ``i`` is the same moment of the algorithm on all
ranks, and a rank with nothing to do at that moment has an empty Step.

Buffers: every rank holds a ``DATA`` buffer of the op's nccl-tests size; all-to-all also holds an ``OUTPUT``
buffer of the same size (it is not in place); a barrier holds one element in each (its token out and in). Offsets and sizes are in bytes and always multiples of the op's
element size.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.collective import Algorithm, Collective


class Buffer(Enum):
    DATA = "data"
    OUTPUT = "output"


@dataclass(frozen=True)
class Send:
    peer: int
    offset_bytes: int
    size_bytes: int
    buffer: Buffer = Buffer.DATA


@dataclass(frozen=True)
class Recv:
    peer: int
    offset_bytes: int
    size_bytes: int
    buffer: Buffer = Buffer.DATA
    reduce: bool = False


@dataclass(frozen=True)
class Copy:
    """A local copy within one rank (e.g. all-to-all keeping its own block)."""

    src_buffer: Buffer
    src_offset_bytes: int
    dst_buffer: Buffer
    dst_offset_bytes: int
    size_bytes: int


@dataclass(frozen=True)
class Step:
    sends: tuple[Send, ...] = ()
    recvs: tuple[Recv, ...] = ()
    copies: tuple[Copy, ...] = ()

    @property
    def sent_bytes(self) -> int:
        return sum(s.size_bytes for s in self.sends)

    @property
    def received_bytes(self) -> int:
        return sum(r.size_bytes for r in self.recvs)


@dataclass(frozen=True)
class CollectiveOp:
    """One collective call. ``group`` lists global ranks; ``root`` is a global rank (broadcast and scatter source,
    reduce and gather destination, p2p sender); ``peer`` is the p2p receiver. ``size_bytes`` follows nccl-tests'
    convention for the collective (a barrier's is 0). ``split_bytes`` makes an all-to-all uneven (all-to-allv):
    ``split_bytes[i][j]`` bytes go from group position ``i`` to position ``j`` (genie.core.alltoallv); then
    ``size_bytes`` is the largest input or output of a member (every member's DATA and OUTPUT buffer)."""

    collective: Collective
    size_bytes: int
    group: tuple[int, ...]
    algorithm: Algorithm = Algorithm.AUTO
    root: int = 0
    peer: int | None = None
    chunks: int = 1
    dtype_bytes: int = 4
    split_bytes: tuple[tuple[int, ...], ...] = ()

    @property
    def sends_messages(self) -> bool:
        """Does the op put anything on the wire: a non-empty buffer, or a barrier (tokens of one element)."""
        return self.size_bytes > 0 or self.collective is Collective.BARRIER


@dataclass(frozen=True)
class RankSchedule:
    rank: int
    steps: tuple[Step, ...]

    @property
    def sent_bytes(self) -> int:
        return sum(s.sent_bytes for s in self.steps)

    @property
    def received_bytes(self) -> int:
        return sum(s.received_bytes for s in self.steps)


@dataclass(frozen=True)
class Schedule:
    op: CollectiveOp
    algorithm: Algorithm
    ranks: tuple[RankSchedule, ...]

    def for_rank(self, rank: int) -> RankSchedule:
        for rs in self.ranks:
            if rs.rank == rank:
                return rs
        raise KeyError(rank)

    def peers_of(self, rank: int) -> frozenset[int]:
        rs = self.for_rank(rank)
        return frozenset(t.peer for s in rs.steps for t in (*s.sends, *s.recvs))
