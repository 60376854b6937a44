"""NCCL's tuner, for the one choice genie follows it in: ring or PAT for all-gather and reduce-scatter.

NCCL (>= 2.23) enables PAT only with one rank per node (nNodes == nRanks) and only with the Simple protocol,
then takes the (algorithm, protocol) of least estimated time ``latency + bytes / bandwidth`` (src/graph/
tuning.cc, v2.24-2.30 constants; ties go to ring, the lower algorithm index). With one rank per node every ring
step crosses the network, and NCCL charges it the tree's network latency:

- ring, LL:     6.6 + (n-1) x 5.0 us;   bandwidth min(llMaxBw, B/2) x n/(n-1)   (LL's flags halve it)
- ring, Simple: 8.4 + (n-1) x 14.0 us;  bandwidth B x n/(n-1)
- PAT, Simple:  8.0 + floor(log2 n) x 14.0/3.5 + n x 2.8 us;  bandwidth 0.75 B

where B is the bus bandwidth NCCL's topology search finds for a rank's network (GB/s: :func:`graph_GBps`, one
NIC of the host's link rate, or 10 Gbit/s where the rate is not known) and llMaxBw NCCL's cap on LL (Intel hosts:
39.0 GB/s for 2 nodes, 20.4 beyond). LL128 is off on a network path (NCCL enables it only over NVLink/PCIe
switches), so it is not a candidate. genie's schedules do not model protocols: ring/LL and ring/Simple are both
genie's ring. The bytes are the op's total (the all-gather's output, the reduce-scatter's input), as genie sizes
ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: a rank's NIC when its rate is not known (GB/s): NCCL's socket transport reads the interface's
#: /sys/class/net/<if>/speed and falls back to 10 Gbit/s (src/transport/net_socket.cc ncclNetSocketGetSpeed); a
#: veth, an unshaped testbed link, reports 10000 Mbit/s; the NIC's bandwidth is speed / 8000 GB/s
#: (src/graph/topo.cc). (topo.h's NET_BW, 12.0 "100Gbit", is defined but read nowhere.)
DEFAULT_NET_GBPS = 10_000 / 8000

#: NCCL's per-channel speed candidates with a network (GB/s; src/graph/search.cc speedArrayInter, 2.19-2.30;
#: the Hopper array differs only above 2.4)
SPEEDS_INTER_GBPS = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
                     0.24, 0.12)
#: the ring search's channel limit (MAXCHANNELS / 2)
RING_MAX_CHANNELS = 16

_RING_LL_BASE_US, _RING_LL_HOP_US = 6.6, 5.0
_RING_SIMPLE_BASE_US, _RING_SIMPLE_HOP_US = 8.4, 14.0
_PAT_BASE_US, _PAT_NET_US, _PAT_PER_RANK_US = 8.0, 14.0, 2.8
_PAT_BW_FACTOR = 0.75
_LL_BW_FACTOR = 0.5
_LL_MAX_GBPS_TWO_NODES, _LL_MAX_GBPS_MORE_NODES = 39.0, 20.4


def search_channels(link_GBps: float, speeds: tuple[float, ...] = SPEEDS_INTER_GBPS,
                    max_channels: int = RING_MAX_CHANNELS) -> tuple[int, float]:
    """The channels and per-channel speed NCCL's graph search settles on for a GPU whose narrowest link holds
    ``link_GBps`` (src/graph/search.cc ncclTopoCompute): the first candidate speed the link holds, then slower
    ones while at least 0.49 of it, keeping the most channels x speed (each channel takes its speed on the link);
    nothing fits: 1 channel at max(0.1, the link)."""
    best = (0, 0.0)
    first = None
    for speed in speeds:
        if speed > link_GBps:
            continue
        if first is not None and speed < 0.49 * first:
            break
        channels = min(max_channels, int(link_GBps // speed))
        if channels < 1:
            continue
        first = first or speed
        if channels * speed > best[0] * best[1] + 1e-9:
            best = (channels, float(speed))
    if best[0] == 0:
        return 1, max(0.1, link_GBps)
    return best


def graph_GBps(nic_GBps: float) -> float:
    """B: the bus bandwidth (channels x speed) NCCL's search finds for one rank per node on a NIC of ``nic_GBps``
    (1 Gbit/s: 0.125 -> 1 x 0.12; 10 Gbit/s: 1.25 -> 1 x 1.2; 100 Gbit/s: 12.5 -> 1 x 12). A fast graph's
    split into twice the channels at half the speed keeps the product."""
    channels, speed = search_channels(nic_GBps)
    return channels * speed


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
    node, each on a NIC of ``net_GBps`` (the bandwidth the tuner uses is the graph's: :func:`graph_GBps`)."""
    if n < 2 or net_GBps <= 0:
        raise ValueError(f"need n >= 2 ranks and a positive bandwidth, got n={n}, net_GBps={net_GBps}")
    bus_GBps = graph_GBps(net_GBps)
    ring_ratio = n / (n - 1)
    ll_max = _LL_MAX_GBPS_TWO_NODES if n <= 2 else _LL_MAX_GBPS_MORE_NODES
    ring_ll_bw = min(ll_max, bus_GBps * _LL_BW_FACTOR) * ring_ratio
    ring_simple_bw = bus_GBps * ring_ratio
    pat_bw = bus_GBps * _PAT_BW_FACTOR
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
