"""The size rule, once: how a message size becomes whole elements of a dtype, and how a trace's ``comm_size``
becomes the bytes a collective moves in nccl-tests' convention (pure)."""

from __future__ import annotations

from genie.core.collective import Collective

#: float32, nccl-tests' default element
DEFAULT_DTYPE_BYTES = 4

#: the collectives whose buffer is split per rank (their size is a multiple of ranks x element size)
PER_RANK_SPLIT = frozenset({Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL,
                            Collective.GATHER, Collective.SCATTER})
#: the collectives whose trace ``comm_size`` is one rank's piece (the op moves comm_size x group size)
PER_RANK_COMM_SIZE = frozenset({Collective.ALL_GATHER, Collective.GATHER, Collective.SCATTER})


def dtype_bytes_for(size_bytes: int) -> int:
    """The element a trace's message is made of when the trace does not say: float32 where the size allows it,
    else bytes."""
    return DEFAULT_DTYPE_BYTES if size_bytes % DEFAULT_DTYPE_BYTES == 0 else 1


def aligned_size(collective: Collective, size_bytes: int, ranks: int,
                 dtype_bytes: int = DEFAULT_DTYPE_BYTES) -> int:
    """Round down as nccl-tests does: to whole elements, and for the collectives whose buffer is split per rank
    to a multiple of ranks x element size (never below one such unit)."""
    unit = dtype_bytes * (ranks if collective in PER_RANK_SPLIT else 1)
    return max(unit, size_bytes // unit * unit)


def trace_op_size(collective: Collective, comm_size_bytes: int, group_size: int) -> tuple[int, int]:
    """(bytes the op moves in nccl-tests' convention, element size) for a trace node of ``comm_size_bytes``
    (ASTRA-sim's meaning: all-gather's comm_size is the per-rank input, so the op moves comm_size x group
    size, and so do gather's and scatter's, one rank's piece; the others keep it) on a group of ``group_size``
    ranks. A zero size stays zero; a barrier is 0 bytes of one-byte elements."""
    if collective is Collective.BARRIER:
        return 0, 1
    size = int(comm_size_bytes or 0)
    if collective in PER_RANK_COMM_SIZE:
        size *= group_size
    dtype = dtype_bytes_for(size)
    if collective in PER_RANK_SPLIT and size:
        size = aligned_size(collective, size, group_size, dtype)
    return size, dtype
