"""Collective algorithms as pure schedules: generators, the algorithm registry, busbw factors and checks.

`build_schedule(op)` is the entry point; `genie.collectives.check` verifies schedules (deadlock, data).
"""

from genie.collectives.busbw import algbw_GBps, busbw_factor, busbw_GBps
from genie.collectives.direct import (direct_allgather, direct_alltoall, direct_reduce_scatter, p2p_send_recv,
                                      ring_shift_send_recv)
from genie.collectives.halving_doubling import (halving_doubling_allgather, halving_doubling_allreduce,
                                                halving_doubling_reduce_scatter, recursive_doubling_allreduce)
from genie.collectives.plan import InvalidCollectiveOp, block_bounds
from genie.collectives.registry import (HALVING_DOUBLING_MAX_BYTES, RECURSIVE_DOUBLING_MAX_BYTES,
                                        UnsupportedAlgorithm, build_schedule,
                                        choose_algorithm, supported_algorithms)
from genie.collectives.ring import pipelined_ring_broadcast, ring_allgather, ring_allreduce, ring_reduce_scatter
from genie.collectives.rooted import direct_gather, direct_scatter, dissemination_barrier, pipelined_ring_reduce
from genie.collectives.tree import double_binary_tree_allreduce

__all__ = [
    "HALVING_DOUBLING_MAX_BYTES", "RECURSIVE_DOUBLING_MAX_BYTES", "InvalidCollectiveOp", "UnsupportedAlgorithm", "algbw_GBps", "block_bounds",
    "build_schedule", "busbw_GBps", "busbw_factor", "choose_algorithm", "direct_allgather", "direct_alltoall",
    "direct_gather", "direct_reduce_scatter", "direct_scatter", "dissemination_barrier", "pipelined_ring_reduce", "double_binary_tree_allreduce", "halving_doubling_allgather",
    "halving_doubling_allreduce", "halving_doubling_reduce_scatter", "p2p_send_recv", "ring_shift_send_recv",
    "pipelined_ring_broadcast", "recursive_doubling_allreduce", "ring_allgather", "ring_allreduce", "ring_reduce_scatter",
    "supported_algorithms",
]
