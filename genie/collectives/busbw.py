"""Algorithm and bus bandwidth as nccl-tests defines them (doc/PERFORMANCE.md of nccl-tests).

``size_bytes`` is nccl-tests' size of the operation, which is also `CollectiveOp.size_bytes`:

- all_reduce:     the buffer (every rank's input = output), S
- all_gather:     the total OUTPUT buffer = n x the per-rank input
- reduce_scatter: the total INPUT buffer = n x the per-rank output
- all_to_all:     the per-rank total send buffer (S/n to every rank, itself included)
- broadcast:      the buffer
- send_recv:      the message
- reduce:         the buffer
- gather:         the root's OUTPUT = n x the per-rank input (nccl-tests' gather_perf)
- scatter:        the root's INPUT = n x the per-rank output (nccl-tests' scatter_perf)
- barrier:        0 (no payload)

The element count is ``size_bytes / dtype_bytes``.

``algbw = size_bytes / time`` and ``busbw = algbw x factor``, the factor turning algbw into the bandwidth each
rank's link must carry with an optimal algorithm, so that busbw is comparable across collectives and rank
counts: all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all, gather, scatter (n-1)/n; broadcast,
reduce and send_recv 1.
Bandwidths are in GB/s with GB = 1e9 bytes.
"""

from __future__ import annotations

from genie.core.collective import Collective


def busbw_factor(collective: Collective, n: int) -> float:
    if n < 1:
        raise ValueError(f"rank count must be >= 1, got {n}")
    if collective is Collective.ALL_REDUCE:
        return 2 * (n - 1) / n
    if collective in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL, Collective.GATHER,
                      Collective.SCATTER):
        return (n - 1) / n
    return 1.0


def algbw_GBps(size_bytes: int, time_us: float) -> float:
    """``size_bytes / time`` in GB/s (1e9 bytes per second)."""
    if time_us <= 0:
        raise ValueError(f"time must be positive, got {time_us} us")
    return size_bytes / (time_us * 1e3)


def busbw_GBps(collective: Collective, n: int, size_bytes: int, time_us: float) -> float:
    return algbw_GBps(size_bytes, time_us) * busbw_factor(collective, n)
