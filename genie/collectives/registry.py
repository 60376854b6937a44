"""Which algorithm builds which collective, and how ``Algorithm.AUTO`` picks one.

Supported (collective: algorithms; the first is what AUTO falls back to for large sizes):

- all_reduce: ring, halving_doubling, recursive_doubling, double_binary_tree
- all_gather, reduce_scatter: ring, pat, halving_doubling, direct
- all_to_all: direct
- broadcast: pipelined_ring (``ring`` is accepted as a synonym)
- send_recv: p2p
- reduce: pipelined_ring (``ring``); gather, scatter: direct; barrier: dissemination (genie.collectives.rooted)
"""

from __future__ import annotations

from collections.abc import Callable

from genie.core.collective import Algorithm, Collective
from genie.core.errors import GenieError
from genie.core.schedule import CollectiveOp, Schedule
from genie.collectives.direct import (direct_allgather, direct_alltoall, direct_reduce_scatter, p2p_send_recv,
                                      ping_pong_send_recv, ring_shift_send_recv)
from genie.collectives.halving_doubling import (halving_doubling_allgather, halving_doubling_allreduce,
                                                halving_doubling_reduce_scatter, recursive_doubling_allreduce)
from genie.collectives.pat import pat_allgather, pat_reduce_scatter
from genie.collectives.ring import pipelined_ring_broadcast, ring_allgather, ring_allreduce, ring_reduce_scatter
from genie.collectives.rooted import direct_gather, direct_scatter, dissemination_barrier, pipelined_ring_reduce
from genie.collectives.tree import double_binary_tree_allreduce
from genie.collectives.tuner import DEFAULT_NET_GBPS, nccl_prefers_pat

Generator = Callable[[CollectiveOp], Schedule]

#: All-reduces of at most this many bytes use recursive doubling under AUTO (log2 n steps of the whole buffer:
#: the fewest steps, which is what a message dominated by per-step latency needs, as MPICH does).
RECURSIVE_DOUBLING_MAX_BYTES = 16 * 1024

#: All-reduces of at most this many bytes use halving-doubling under AUTO (latency-bound: 2 log2 n steps
#: instead of ring's 2(n-1)); larger ones use the bandwidth-optimal ring, as NCCL switches from tree to ring.
HALVING_DOUBLING_MAX_BYTES = 256 * 1024


class UnsupportedAlgorithm(GenieError, ValueError):
    """No generator for this (collective, algorithm) pair."""


_GENERATORS: dict[Collective, dict[Algorithm, Generator]] = {
    Collective.ALL_REDUCE: {Algorithm.RING: ring_allreduce,
                            Algorithm.HALVING_DOUBLING: halving_doubling_allreduce,
                            Algorithm.RECURSIVE_DOUBLING: recursive_doubling_allreduce,
                            Algorithm.DOUBLE_BINARY_TREE: double_binary_tree_allreduce},
    Collective.ALL_GATHER: {Algorithm.RING: ring_allgather,
                            Algorithm.PAT: pat_allgather,
                            Algorithm.HALVING_DOUBLING: halving_doubling_allgather,
                            Algorithm.DIRECT: direct_allgather},
    Collective.REDUCE_SCATTER: {Algorithm.RING: ring_reduce_scatter,
                                Algorithm.PAT: pat_reduce_scatter,
                                Algorithm.HALVING_DOUBLING: halving_doubling_reduce_scatter,
                                Algorithm.DIRECT: direct_reduce_scatter},
    Collective.ALL_TO_ALL: {Algorithm.DIRECT: direct_alltoall},
    Collective.BROADCAST: {Algorithm.PIPELINED_RING: pipelined_ring_broadcast,
                           Algorithm.RING: pipelined_ring_broadcast},
    Collective.SEND_RECV: {Algorithm.P2P: p2p_send_recv, Algorithm.RING: ring_shift_send_recv,
                           Algorithm.PING_PONG: ping_pong_send_recv},
    Collective.REDUCE: {Algorithm.PIPELINED_RING: pipelined_ring_reduce, Algorithm.RING: pipelined_ring_reduce},
    Collective.GATHER: {Algorithm.DIRECT: direct_gather},
    Collective.SCATTER: {Algorithm.DIRECT: direct_scatter},
    Collective.BARRIER: {Algorithm.DISSEMINATION: dissemination_barrier},
}


def supported_algorithms(collective: Collective) -> tuple[Algorithm, ...]:
    """The concrete algorithms `build_schedule` accepts for ``collective`` (AUTO is always accepted too)."""
    return tuple(_GENERATORS[collective])


def choose_algorithm(collective: Collective, size_bytes: int, n: int, *, ranks_per_node: int | None = None,
                     net_GBps: float | None = None) -> Algorithm:
    """NCCL-like choice for ``Algorithm.AUTO``.

    - all_reduce: recursive_doubling up to ``RECURSIVE_DOUBLING_MAX_BYTES`` (16 KiB), halving_doubling up to
      ``HALVING_DOUBLING_MAX_BYTES`` (256 KiB), ring above; for n <= 2 all are the same exchange and ring is
      chosen;
    - all_gather, reduce_scatter: pat where NCCL's tuner picks it (`genie.collectives.tuner`): one rank per
      node (``ranks_per_node == 1``; None, not known, counts as more) and PAT's estimate below ring's for
      ``size_bytes`` on a NIC of ``net_GBps`` per rank (default 10 Gbit/s, NCCL's socket default); ring
      otherwise;
    - all_to_all: direct; broadcast: pipelined_ring; send_recv: p2p;
    - reduce: pipelined_ring (NCCL's ring); gather, scatter: direct (NCCL's grouped sends); barrier:
      dissemination.
    """
    if collective is Collective.ALL_REDUCE:
        if n > 2 and size_bytes <= RECURSIVE_DOUBLING_MAX_BYTES:
            return Algorithm.RECURSIVE_DOUBLING
        if n > 2 and size_bytes <= HALVING_DOUBLING_MAX_BYTES:
            return Algorithm.HALVING_DOUBLING
        return Algorithm.RING
    if collective in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER) and ranks_per_node == 1 and \
            nccl_prefers_pat(size_bytes, n, ranks_per_node, net_GBps or DEFAULT_NET_GBPS):
        return Algorithm.PAT
    return {Collective.ALL_GATHER: Algorithm.RING, Collective.REDUCE_SCATTER: Algorithm.RING,
            Collective.ALL_TO_ALL: Algorithm.DIRECT, Collective.BROADCAST: Algorithm.PIPELINED_RING,
            Collective.SEND_RECV: Algorithm.P2P, Collective.REDUCE: Algorithm.PIPELINED_RING,
            Collective.GATHER: Algorithm.DIRECT, Collective.SCATTER: Algorithm.DIRECT,
            Collective.BARRIER: Algorithm.DISSEMINATION}[collective]


def build_schedule(op: CollectiveOp) -> Schedule:
    """The schedule of ``op`` with ``op.algorithm`` (resolved by `choose_algorithm` when AUTO).

    Raises `UnsupportedAlgorithm` (a ValueError) naming the supported algorithms, and
    `genie.collectives.plan.InvalidCollectiveOp` (a ValueError) for an inconsistent op."""
    algorithm = op.algorithm
    if algorithm is Algorithm.AUTO:
        algorithm = choose_algorithm(op.collective, op.size_bytes, len(op.group))
    generator = _GENERATORS[op.collective].get(algorithm)
    if generator is None:
        names = ", ".join(a.value for a in supported_algorithms(op.collective))
        raise UnsupportedAlgorithm(f"algorithm {algorithm.value!r} is not available for {op.collective.value} "
                                   f"(supported: {names}, or auto)")
    return generator(op)
