"""Ring broadcast and reduce as NCCL runs them (pure): a pipelined chain through the ring, not a ring.

Facts carried over from NCCL 2.8.4 and 2.23 (the same in both; the code is genie's):
- ``src/collectives/device/broadcast.h`` / ``reduce.h``: the root sends, every other rank receives a slice, copies
  it and forwards it to the next rank (``recvCopySend``); the last rank only receives. A slice is one FIFO step
  (``BROADCAST_SLICESTEPS`` = ``BROADCAST_CHUNKSTEPS`` = 1, ``REDUCE_*`` likewise), at most
  ``min(chunk, ceil(bytes / channels))`` per channel and loop;
- ``src/init.cc``: a step is the protocol's buffer over ``NCCL_STEPS`` = 8: Simple 4 MiB (``NCCL_BUFFSIZE``) / 8 =
  512 KiB; LL 8 lines x 512 threads x 8 steps x 16 B / 8 = 64 KiB of lines, half of it data; LL128 120 x 640 x 8 x
  8 B / 8 = 614400 B, 120 of each 128 bytes data;
- ``src/graph/tuning.cc`` (``ncclTopoTuneModel``): a broadcast or reduce ring has ``nsteps = nRanks``; when the
  ring graph's channels are all the same GPU order (``sameChannels``) its latency is one step
  (``baseLat + hwLat``), otherwise ``nsteps`` steps, Simple's at the tree's ``hwLat`` ("add some chunk latency,
  waiting for proper chunk modeling"). The tuner decides with that; genie times the chunks instead
  (:func:`chain_fill_us`).
- ``src/graph/search.cc`` (``ncclTopoCompute``): the search tries ``sameChannels = 1`` first, replaying the first
  channel's GPU order; a ring through nodes that reach several NICs enters each node at the GPU next to its NIC,
  so its channels differ and the search keeps ``sameChannels = 0`` (:func:`same_channels`, an outline).

Between nodes a slice moves whole, whatever the protocol: the network proxy (``src/transport/net.cc``, the send
proxy) sends a step only once the GPU has advanced the connection's tail past it (every protocol but LL, whose
lines' flags it checks instead), and the GPU advances the tail after it has written the whole slice (Simple: after
the data; LL128: ``postSend`` after the closing barrier of ``GenericOp`` in ``prims_ll128.h``; the same in 2.8.4 and
2.23.4). So a chain through ``nodes`` nodes holds each slice once per network hop: the fill is a slice's time on
each of the ``nodes - 1`` network hops but the slowest (the transfer at the chain's bandwidth counts that one).
Inside a node the hops write into the next GPU's buffer over NVLink or PCIe; their fill is the model's general
pipeline fill (:func:`astra_adapter.nccl.model._with_fill`), as for the other collectives: a whole 512 KiB step
held on each of 7 hops would take 8 x A100's 32 MiB broadcast beyond its measured 217 us.

Back to back (nccl-tests times a stream of calls), a chain's calls overlap: the root is done once it has posted
its slices, and each rank starts the next call while the ranks after it still forward the last one. A call then
costs what one rank spends on it, NCCL's base latency for the protocol (:func:`chain_latency_us`), not the hop
latency on the way to the last rank: ABCI's broadcast of 4 B takes 7.5 us on 2 and on 16 nodes alike
(benchmarks/data/real-nccl/abci-anode-a100sxm4-hdr-2-4-8-16node), its all-reduce 32 to 62 us. Nor does it pay the
model's fitted ``launch_us``: NCCL's tuner has no launch term (``baseLat`` is a call's fixed cost), and the ~10 us
an all-reduce fit puts there is its tree's beyond NCCL's table (on one node of the same machine the 4 B all-reduce
takes 17.2 us, NCCL's Ring/LL latency for 8 GPUs ~15, the broadcast 7.3; on 2-16 nodes the all-reduce is ~10 us
above NCCL's tree latency at every node count, the broadcast stays at ``baseLat`` + ~1).
"""

from __future__ import annotations

from genie.core.collective import Collective

from astra_adapter.nccl.tuning import ALGORITHMS, PROTOCOLS, NcclAlgorithm, NcclProtocol, TunerSystem

CHAINS = (Collective.BROADCAST, Collective.REDUCE)
NCCL_STEPS = 8
#: one FIFO step's data bytes per protocol with NCCL's default buffers (src/init.cc, 2.8 .. 2.23)
STEP_DATA_BYTES = {
    NcclProtocol.SIMPLE: (1 << 22) // NCCL_STEPS,
    NcclProtocol.LL: 8 * 512 * 16 // 2,
    NcclProtocol.LL128: 120 * 640 * 8 * 120 // 128,
}

#: bytes on the wire per data byte (LL: 8 of each 16-byte line are flags; LL128: 8 of each 128-byte line)
WIRE_BYTES_PER_DATA_BYTE = {NcclProtocol.SIMPLE: 1.0, NcclProtocol.LL: 2.0, NcclProtocol.LL128: 128 / 120}


def is_chain(collective: Collective, algorithm: NcclAlgorithm) -> bool:
    """NCCL runs this call as a pipelined chain through its ring."""
    return collective in CHAINS and algorithm is NcclAlgorithm.RING


def same_channels(nodes: int, nics_reached: int) -> bool:
    """Whether the ring graph's channels keep one GPU order (NCCL's ``sameChannels``): on one node, or when a
    node's ranks reach one NIC; a ring entering nodes through several NICs starts each channel at another GPU."""
    return nodes == 1 or nics_reached <= 1


def slice_bytes(protocol: NcclProtocol, size_bytes: int, channels: int) -> float:
    """The bytes a rank forwards at once on one channel: a FIFO step, or the call's share if smaller."""
    per_channel = -(-size_bytes // max(1, channels))
    return float(min(STEP_DATA_BYTES[protocol], per_channel))


def chain_latency_us(system: TunerSystem, protocol: NcclProtocol) -> float:
    """A chain's latency per call back to back: NCCL's ring base latency for ``protocol`` in the system's timing
    release (``baseLat``; its per-hop ``hwLat`` overlaps the next call, see the module doc)."""
    return system.constants.base_lat_us[ALGORITHMS.index(NcclAlgorithm.RING)][PROTOCOLS.index(protocol)]


def chain_fill_us(protocol: NcclProtocol, size_bytes: int, channels: int, nodes: int,
                  intra_us_per_byte: float, inter_us_per_byte: float) -> float:
    """The chain's fill between nodes: a whole slice's time on every network hop of the chain (``nodes - 1``)
    but the slowest hop, which the transfer at the chain's bandwidth already counts. ``intra_us_per_byte`` /
    ``inter_us_per_byte``: one channel's time per data byte on a hop inside a node and between nodes."""
    if nodes <= 1 or size_bytes <= 0:
        return 0.0
    s = slice_bytes(protocol, size_bytes, channels)
    hops = nodes - 1 - (1 if inter_us_per_byte >= intra_us_per_byte else 0)
    return max(0, hops) * s * inter_us_per_byte


def network_hop_us_per_byte(protocol: NcclProtocol, node_nic_gb_s: float, nics: int, channels: int) -> float:
    """One channel's time per data byte on a network hop: the protocol's wire bytes at the channel's share of
    the node's NICs (a channel's ring crosses one NIC; channels share a NIC only when there are more of them)."""
    per_channel_gb_s = node_nic_gb_s / max(channels, nics, 1)
    return WIRE_BYTES_PER_DATA_BYTE[protocol] / (1000.0 * per_channel_gb_s)
