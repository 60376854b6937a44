"""A rank's replay program (pure data): the nodes a rank walks during `genie replay`, each on a lane.

Compute nodes share the rank's compute lane (one at a time, like a GPU's compute stream); collectives run on
the channel of their process group (one op at a time per channel, in program order, like an NCCL
communicator); sends and receives run on a per-peer, per-direction lane in program order. Built from a trace
by the engine's `build_programs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.schedule import CollectiveOp


class Lane(Enum):
    COMPUTE = "compute"
    COLLECTIVE = "collective"
    SEND = "send"
    RECV = "recv"
    NONE = "none"  # nodes that take no time (metadata, memory ops): done as soon as their deps are


@dataclass(frozen=True)
class ProgramNode:
    id: int
    name: str
    lane: Lane
    deps: tuple[int, ...]
    duration_ns: int = 0
    op: CollectiveOp | None = None  # collectives
    channel: int = 0  # collectives: the group's channel; p2p: the p2p channel
    peer: int | None = None  # send / recv
    size_bytes: int = 0  # bytes this rank's op moves per nccl-tests convention (collective) or the message
    group: str = ""


@dataclass(frozen=True)
class RankProgram:
    rank: int
    nodes: tuple[ProgramNode, ...]  # in a topological order
    links: frozenset[tuple[int, int]]  # (channel, peer) connections this rank needs

    @property
    def compute_ns(self) -> int:
        return sum(n.duration_ns for n in self.nodes if n.lane is Lane.COMPUTE)
