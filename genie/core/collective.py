"""Collective kinds and algorithms, shared by schedules, traces and reports."""

from __future__ import annotations

from enum import Enum


class Collective(Enum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    SEND_RECV = "send_recv"
    REDUCE = "reduce"
    GATHER = "gather"
    SCATTER = "scatter"
    BARRIER = "barrier"  # no payload: one-element tokens only

    @classmethod
    def parse(cls, text: str) -> "Collective":
        key = text.strip().lower().replace("-", "_")
        aliases = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
                   "alltoall": "all_to_all", "a2a": "all_to_all", "bcast": "broadcast", "p2p": "send_recv",
                   "sendrecv": "send_recv"}
        key = aliases.get(key, key)
        try:
            return cls(key)
        except ValueError:
            names = ", ".join(c.value for c in cls)
            raise ValueError(f"unknown collective {text!r} (expected one of: {names})") from None


#: the collectives with a root rank (broadcast and scatter send from it, reduce and gather end at it)
ROOTED = frozenset({Collective.BROADCAST, Collective.REDUCE, Collective.GATHER, Collective.SCATTER})


class Algorithm(Enum):
    AUTO = "auto"
    RING = "ring"
    DIRECT = "direct"
    HALVING_DOUBLING = "halving_doubling"
    RECURSIVE_DOUBLING = "recursive_doubling"
    DOUBLE_BINARY_TREE = "double_binary_tree"
    PIPELINED_RING = "pipelined_ring"
    P2P = "p2p"
    PING_PONG = "ping_pong"  # send_recv there and back (OSU's latency test)
    DISSEMINATION = "dissemination"  # barrier: ceil(log2 n) rounds of tokens at distance 1, 2, 4...
    PAT = "pat"  # NCCL's log-step all-gather / reduce-scatter for one rank per node (genie.collectives.pat)

    @classmethod
    def parse(cls, text: str) -> "Algorithm":
        key = text.strip().lower().replace("-", "_")
        aliases = {"hd": "halving_doubling", "rd": "recursive_doubling", "halvingdoubling": "halving_doubling", "tree": "double_binary_tree",
                   "doublebinarytree": "double_binary_tree", "dbt": "double_binary_tree"}
        key = aliases.get(key, key)
        try:
            return cls(key)
        except ValueError:
            names = ", ".join(a.value for a in cls)
            raise ValueError(f"unknown algorithm {text!r} (expected one of: {names})") from None
