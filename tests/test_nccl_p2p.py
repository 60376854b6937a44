"""NCCL's send/receive operations across nodes (astra_adapter.nccl.p2p): channels per network peer by release,
peers in flight, and what they do to a sendrecv's and an alltoall's time in the model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from genie.core.collective import Collective

from astra_adapter.nccl.hardware import Cluster, Interconnect, tuner_system
from astra_adapter.nccl.model import Call, NcclParams, predict
from astra_adapter.nccl.p2p import PER_CHANNEL_NET_GB_S, NetPeerPlan, net_peer_plan

# 8 x H100 on NVSwitch, one 400G NIC per GPU (50 GB/s), NCCL 2.29
HGX = Cluster("hgx", 10, 8, "H100", 90, Interconnect.NVSWITCH, 370.8, 0.5, 8, 50.0, 2.0, nccl_version="2.29.2")
# 4 x A100 on NVLink, two 200G NICs per node, NCCL 2.21
A100X4 = Cluster("a100x4", 2, 4, "A100", 80, Interconnect.NVLINK, 300.0, 0.5, 2, 25.0, 2.0, nccl_version="2.21.5")


@pytest.mark.parametrize("version, ranks, comm_channels, expected", [
    # 2.29: ceil(50 / 14) = 4 channels drive the NIC; halved until 4 x ceil(ranks / 8) fits p2pnChannels
    ((2, 29), 2, 4, 4),
    ((2, 29), 10, 4, 2),
    ((2, 29), 16, 14, 4),   # p2pnChannels 16: 4 x 2 rounds fit
    ((2, 29), 20, 8, 2),
    ((2, 29), 40, 16, 2),
    ((2, 29), 80, 14, 1),   # 10 rounds of 8 peers: 2 x 10 > 16
    # 2.20 - 2.28: 2, halved while 2 x ranks > 4 x the communicator's channels; at least the GPU's NIC
    ((2, 21), 8, 4, 2),
    ((2, 21), 1024, 4, 1),
    # 2.12 - 2.19: NCCL_NCHANNELS_PER_NET_PEER's default 2; before: 1
    ((2, 18), 1024, 4, 2),
    ((2, 8), 16, 16, 1),
])
def test_channels_per_network_peer_follow_the_release(version, ranks, comm_channels, expected):
    plan = net_peer_plan(version, ranks=ranks, comm_channels=comm_channels, gpu_nics=1, nic_gb_s=50.0)
    assert plan.channels_per_peer == expected


def test_peers_in_flight_and_batches():
    plan = NetPeerPlan(p2p_channels=4, channels_per_peer=1, gpu_net_gb_s=25.0)
    assert plan.peers_in_flight == 32  # 4 channels x a batch of 8
    assert (plan.batches(31), plan.batches(32), plan.batches(1023)) == (1, 1, 32)
    # 14 GB/s a channel of a nominal 50 GB/s NIC: 2 channels drive 28/50 of it, 4 all of it
    assert NetPeerPlan(16, 2, 50.0).peers_nic_share(1) == pytest.approx(2 * PER_CHANNEL_NET_GB_S / 50.0)
    assert NetPeerPlan(16, 2, 50.0).peers_nic_share(2) == 1.0


PARAMS = NcclParams(intra_busbw_gb_s=360.0, nvls_busbw_gb_s=320.0, nic_gb_s=48.0, launch_us=5.0)


@pytest.mark.parametrize("ranks_per_node, channels", [(1, 2), (2, 2), (8, 1)])
def test_a_sendrecv_across_many_nodes_runs_at_its_peers_channels(ranks_per_node, channels):
    # NCCL 2.29 on 10 nodes gives the one neighbour across a node boundary 2 channels (1 with 8 GPUs a node):
    # 14 GB/s each of the nominal 50 GB/s NIC, of the 48 it delivers (xxrjun cluster01 measures 25, 26, 15 GB/s)
    nodes = 10
    big = Call(Collective.SEND_RECV, nodes * ranks_per_node, nodes, 1 << 34)
    small = replace(big, size_bytes=1 << 30)
    rate_gb_s = (big.size_bytes - small.size_bytes) / (
        predict(HGX, PARAMS, big).time_us - predict(HGX, PARAMS, small).time_us) / 1000.0
    assert rate_gb_s == pytest.approx(PARAMS.nic_gb_s * channels * PER_CHANNEL_NET_GB_S / 50.0, rel=0.02)


def test_a_sendrecv_between_two_nodes_still_reaches_the_nic():
    # 2 ranks: one round, 4 channels x 14 GB/s > the NIC: the NIC's fitted rate
    big = Call(Collective.SEND_RECV, 2, 2, 1 << 34)
    small = replace(big, size_bytes=1 << 30)
    rate = (big.size_bytes - small.size_bytes) / (predict(HGX, PARAMS, big).time_us -
                                                  predict(HGX, PARAMS, small).time_us) / 1000.0
    assert rate == pytest.approx(PARAMS.nic_gb_s, rel=0.02)


def test_an_alltoall_over_many_ranks_waits_a_step_per_batch_of_peers():
    # 2.21 on 4-GPU nodes: 4 communicator channels, 1 channel a peer at 1024 ranks -> 32 peers in flight,
    # 1023 peers take 32 batches one after another, each a network step's latency
    params = replace(PARAMS, nic_gb_s=20.0, intra_busbw_gb_s=240.0)
    assert tuner_system(A100X4, nodes=256, ranks_per_node=4).comm_channels == 4
    tiny = lambda ranks, nodes: predict(A100X4, params, Call(Collective.ALL_TO_ALL, ranks, nodes, ranks)).time_us
    one_batch = tiny(32, 8) - params.launch_us  # 31 peers: one batch
    many = tiny(1024, 256) - params.launch_us
    assert many == pytest.approx(32 * one_batch, rel=0.02)
