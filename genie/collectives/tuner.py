"""NCCL's tuner, for the one choice genie follows it in: ring or PAT for all-gather and reduce-scatter.

NCCL (>= 2.23) enables PAT only with one rank per node (nNodes == nRanks) and only with the Simple protocol,
then takes the (algorithm, protocol) of least estimated time ``latency + bytes / bandwidth`` (src/graph/
tuning.cc, v2.24-2.30 constants; ties go to ring, the lower algorithm index). With one rank per node every ring
step crosses the network, and NCCL charges it the tree's network latency:

- ring, LL:     6.6 + (n-1) x 5.0 us;   bandwidth min(llMaxBw, B/2) x n/(n-1)   (LL's flags halve it)
- ring, Simple: 8.4 + (n-1) x 14.0 us;  bandwidth B x n/(n-1)
- PAT, Simple:  8.0 + floor(log2 n) x 14.0/3.5 + n x 2.8 us;  bandwidth 0.75 B

where B is the per-rank network bus bandwidth (GB/s) and llMaxBw NCCL's cap on LL (Intel hosts: 39.0 GB/s for
2 nodes, 20.4 beyond). LL128 is off on a network path (NCCL enables it only over NVLink/PCIe switches), so it
is not a candidate. genie's schedules do not model protocols: ring/LL and ring/Simple are both genie's ring.
The bytes are the op's total (the all-gather's output, the reduce-scatter's input), as genie sizes ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: NCCL's NET_BW (src/graph/topo.h, "100Gbit"): B when the network's rate is not known
DEFAULT_NET_GBPS = 12.0

_RING_LL_BASE_US, _RING_LL_HOP_US = 6.6, 5.0
_RING_SIMPLE_BASE_US, _RING_SIMPLE_HOP_US = 8.4, 14.0
_PAT_BASE_US, _PAT_NET_US, _PAT_PER_RANK_US = 8.0, 14.0, 2.8
_PAT_BW_FACTOR = 0.75
_LL_BW_FACTOR = 0.5
_LL_MAX_GBPS_TWO_NODES, _LL_MAX_GBPS_MORE_NODES = 39.0, 20.4


@dataclass(frozen=True)
class AlgorithmTimes:
    """NCCL's estimates (us) for one all-gather or reduce-scatter with one rank per node."""

    ring_ll_us: float
    ring_simple_us: float
    pat_us: float

    @property
    def pat_wins(self) -> bool:
        return self.pat_us < min(self.ring_ll_us, self.ring_simple_us)


def estimated_times(size_bytes: int, n: int, net_GBps: float = DEFAULT_NET_GBPS) -> AlgorithmTimes:
    """NCCL's time estimates of ring (LL, Simple) and PAT for ``size_bytes`` total over ``n`` ranks, one per
    node, on a network of ``net_GBps`` per rank."""
    if n < 2 or net_GBps <= 0:
        raise ValueError(f"need n >= 2 ranks and a positive bandwidth, got n={n}, net_GBps={net_GBps}")
    ring_ratio = n / (n - 1)
    ll_max = _LL_MAX_GBPS_TWO_NODES if n <= 2 else _LL_MAX_GBPS_MORE_NODES
    ring_ll_bw = min(ll_max, net_GBps * _LL_BW_FACTOR) * ring_ratio
    ring_simple_bw = net_GBps * ring_ratio
    pat_bw = net_GBps * _PAT_BW_FACTOR
    log_nodes = int(math.floor(math.log2(n)))

    def time_us(latency_us: float, bandwidth_GBps: float) -> float:
        return latency_us + size_bytes / (1000.0 * bandwidth_GBps)

    return AlgorithmTimes(
        ring_ll_us=time_us(_RING_LL_BASE_US + (n - 1) * _RING_LL_HOP_US, ring_ll_bw),
        ring_simple_us=time_us(_RING_SIMPLE_BASE_US + (n - 1) * _RING_SIMPLE_HOP_US, ring_simple_bw),
        pat_us=time_us(_PAT_BASE_US + log_nodes * _PAT_NET_US / 3.5 + n * _PAT_PER_RANK_US, pat_bw))


def nccl_prefers_pat(size_bytes: int, n: int, ranks_per_node: int, net_GBps: float = DEFAULT_NET_GBPS) -> bool:
    """Whether NCCL runs an all-gather / reduce-scatter of ``size_bytes`` (total) with PAT: one rank per node,
    at least 2 ranks, and PAT's estimate below both ring protocols'."""
    return ranks_per_node == 1 and n >= 2 and estimated_times(size_bytes, n, net_GBps).pat_wins
