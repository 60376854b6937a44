"""How NCCL runs send/receive operations between nodes (pure): the channels a network peer gets, how many peers
are in flight at once, and what one channel drives - the rules of the release the outputs name, read from NCCL's
tagged sources (``src/graph/paths.cc`` ``ncclTopoGetNchannels`` / ``ncclTopoComputeP2pChannels``,
``src/enqueue.cc`` ``addP2pToPlan`` / ``scheduleP2pTasksToPlan``); the code is genie's.

- ``p2pnChannels``: the communicator's channels, rounded up to a power of two.
- Channels per network peer (``p2pnChannelsPerPeer``; ``NCCL_NCHANNELS_PER_NET_PEER`` unset):
  2.8 - 2.11: 1. 2.12 - 2.19: 2 (the variable's default). 2.20 - 2.28: 2, halved while 2 x ranks exceeds
  4 x p2pnChannels ("avoid overloading channels with 8+ operations"), but at least the GPU's NICs; then rounded
  up to a power of two and at most p2pnChannels. 2.29: enough channels to drive the GPU's NICs at
  ``NCCL_P2P_PER_CHANNEL_NET_BW`` (14 GB/s) each, at least one per NIC, a power of two; then, across nodes,
  halved while it times the rounds of 8 peers (``NCCL_MAX_DEV_WORK_P2P_PER_BATCH``) the ranks make exceeds
  p2pnChannels ("fit all the peers within a single round").
- A large send runs on all of its peer's channels (addP2pToPlan doubles a peer's parts up to the maximum while
  a part exceeds the 128 KiB network chunk), so a lone peer - a sendrecv's one neighbour across a node
  boundary - moves at its channels' share of its NICs: NCCL sizes a network peer's channels at 14 GB/s each of
  the NICs' nominal rate (2.29, the only release that states a per-channel rate; genie applies it to every
  release, as what one channel drives), so a peer on ``c`` channels of a GPU whose NICs are nominally ``B`` GB/s
  gets ``min(1, 14 c / B)`` of what the NICs turn out to deliver (the calibration's NIC rate scales the channel
  with it: a calibration fitted on a sendrecv alone still fits it).
- ``NCCL_NCHANNELS_PER_NET_PEER`` set to a positive count replaces the default's reckoning (2.12 on; a value of
  0 or less is ignored, as 2.29 does): 2.12 - 2.28 take the fewest of it and the p2p channels, a power of two;
  2.29 takes it as a power of two, at most p2pnChannels, and does not halve it with the ranks.
- Peers in flight: each channel runs up to 8 peers' operations at once (a batch), its batches one after
  another; a call whose peers each take ``channels per peer`` of the ``p2pnChannels`` has
  ``p2pnChannels / channels per peer x 8`` peers in flight (2.29's ``maxConcurrent``), and the rest wait for
  the next batch.
- The channels an alltoall's network peers run on (:func:`network_batches`): from 2.12 NCCL gives a peer's
  operations a base channel by its round, and the rounds to one node's peers share one base per schedule group
  of 8 (2.12 - 2.21 ``src/include/channel.h`` ``ncclChannelComputeBase``: the node delta plus the local step
  over 8; 2.22 - 2.28 ``ncclP2pChannelBaseForRound``: the node delta times ceil(local ranks / 8) plus the local
  delta over 8; 2.29 on: the round's group of ``NCCL_P2P_SCHEDULE_GROUP_SIZE`` = 8 ranks, or the greatest common
  divisor of 8 and a node's ranks where those are not a multiple of 8, ``src/init.cc`` ``ncclP2pSchedule``), the
  peer's parts on the ``channels per peer`` channels from it (``ncclP2pChannelForPart``). So a GPU's peers on
  another node run together on one base's channels - a batch on the same channels, as the device work's comment
  says - and the GPU drives at most ``remote batches x channels per peer`` channels (never more than
  ``p2pnChannels``) to its NICs, each at 14 GB/s as above: 8 GPUs a node on 2 nodes with 2 channels a peer
  drive 28 of a 400G NIC's 50 GB/s, however many peers the batch holds. 2.8 - 2.11 give each peer its own channel
  (the peer's delta plus the part, ``src/group.cc``).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from genie.core.errors import InputError

from astra_adapter.nccl.versions import NcclVersion

CHANNELS_PER_NET_PEER_VARIABLE = "NCCL_NCHANNELS_PER_NET_PEER"

#: NCCL_P2P_PER_CHANNEL_NET_BW's default (NCCL 2.29, src/graph/paths.cc): GB/s one p2p channel drives on the network
PER_CHANNEL_NET_GB_S = 14.0
#: NCCL_MAX_DEV_WORK_P2P_PER_BATCH (src/include/device.h): peers' operations one channel runs at once
P2P_PER_BATCH = 8


def _pow2_up(value: int) -> int:
    power = 1
    while power < value:
        power <<= 1
    return power


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class NetPeerPlan:
    """A communicator's send/receive layout across nodes: ``p2p_channels`` (p2pnChannels), the channels each
    network peer runs on (``channels_per_peer``) and the nominal GB/s of one GPU's NICs (``gpu_net_gb_s``)."""

    p2p_channels: int
    channels_per_peer: int
    gpu_net_gb_s: float

    @property
    def peers_in_flight(self) -> int:
        """Peers whose operations run at once: each takes channels_per_peer channels, a channel runs a batch of 8."""
        return max(1, self.p2p_channels // self.channels_per_peer) * P2P_PER_BATCH

    def batches(self, peers: int) -> int:
        """The batches one after another that ``peers`` peers take (1 when all are in flight at once)."""
        return max(1, _div_up(peers, self.peers_in_flight))

    def channels_nic_share(self, channels: int) -> float:
        """The share of a GPU's NICs that ``channels`` p2p channels drive at once: 14 GB/s each of the NICs'
        nominal rate, at most all of it; never more channels than ``p2pnChannels``."""
        if self.gpu_net_gb_s <= 0:
            return 1.0
        return min(1.0, min(channels, self.p2p_channels) * PER_CHANNEL_NET_GB_S / self.gpu_net_gb_s)

    def peers_nic_share(self, peers: int) -> float:
        """The share of a GPU's NICs that ``peers`` network peers in flight drive: 14 GB/s a channel of the
        NICs' nominal rate, at most all of it."""
        if self.gpu_net_gb_s <= 0:
            return 1.0
        return min(1.0, peers * self.channels_per_peer * PER_CHANNEL_NET_GB_S / self.gpu_net_gb_s)


def channels_per_net_peer_setting(settings: tuple[tuple[str, str], ...], *, source: str) -> int | None:
    """``NCCL_NCHANNELS_PER_NET_PEER`` from NCCL settings (the later wins): a positive count, or None when unset or
    not positive (NCCL then keeps its own); a value that is not an integer is an input error."""
    value = dict(settings).get(CHANNELS_PER_NET_PEER_VARIABLE)
    if value is None:
        return None
    try:
        count = int(value.strip())
    except ValueError:
        raise InputError(f"{CHANNELS_PER_NET_PEER_VARIABLE}={value!r}: expected an integer", source=source,
                         path=CHANNELS_PER_NET_PEER_VARIABLE) from None
    return count if count > 0 else None


def net_peer_plan(version: NcclVersion, *, ranks: int, comm_channels: int, gpu_nics: int,
                  nic_gb_s: float, setting: int | None = None) -> NetPeerPlan:
    """NCCL's channels per network peer for a communicator of ``ranks`` over several nodes whose GPUs each have
    ``gpu_nics`` NICs of ``nic_gb_s`` nominal GB/s (NCCL's rule of that release, see the module doc);
    ``setting``: NCCL_NCHANNELS_PER_NET_PEER when set."""
    raw = max(1, comm_channels)
    p2p = _pow2_up(raw)
    if version < (2, 12):
        per_peer = 1
    elif setting is not None and version < (2, 29):
        per_peer = _pow2_up(min(raw, setting))
    elif setting is not None:
        per_peer = min(_pow2_up(setting), p2p)
    elif version < (2, 20):
        per_peer = min(_pow2_up(min(raw, 2)), p2p)
    elif version < (2, 29):
        most = 2
        while most * ranks > raw * 4 and most > 1:
            most //= 2
        per_peer = min(_pow2_up(max(gpu_nics, most)), p2p)
    else:
        per_peer = _pow2_up(max(gpu_nics, _div_up(int(gpu_nics * nic_gb_s), int(PER_CHANNEL_NET_GB_S))))
        while per_peer * _div_up(ranks, P2P_PER_BATCH) > p2p and per_peer > 1:
            per_peer //= 2
    return NetPeerPlan(p2p, per_peer, gpu_nics * nic_gb_s)


def network_batches(version: NcclVersion, *, nodes: int, ranks_per_node: int, remote_peers: int) -> int:
    """The base channels a GPU's peers on other nodes run on (see the module doc): per other node, its ranks in
    schedule groups of 8 (2.12 on; 2.29 on: 8, or gcd(8, ranks a node) where a node's ranks are not a multiple of
    8); 2.8 - 2.11: one per peer."""
    if version < (2, 12):
        return max(1, remote_peers)
    if version < (2, 29):
        per_node = _div_up(ranks_per_node, P2P_PER_BATCH)
    else:
        group = P2P_PER_BATCH if ranks_per_node % P2P_PER_BATCH == 0 else gcd(P2P_PER_BATCH, ranks_per_node)
        per_node = max(1, ranks_per_node // group)
    return max(1, (nodes - 1) * per_node)
