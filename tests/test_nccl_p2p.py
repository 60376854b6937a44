"""NCCL's send/receive operations across nodes (astra_adapter.nccl.p2p): channels per network peer by release,
peers in flight, and what they do to a sendrecv's and an alltoall's time in the model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from genie.core.collective import Collective

from astra_adapter.nccl.hardware import Cluster, Interconnect, tuner_system
from astra_adapter.nccl.model import Call, NcclParams, predict
from astra_adapter.nccl.p2p import PER_CHANNEL_NET_GB_S, NetPeerPlan, net_peer_plan, network_batches

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


@pytest.mark.parametrize("version, nodes, ranks_per_node, expected", [
    ((2, 21), 2, 8, 1),      # 2.12 - 2.21: the node delta plus the local step over 8
    ((2, 21), 2, 4, 1),
    ((2, 21), 256, 4, 255),  # one base per other node
    ((2, 23), 2, 16, 2),     # 2.22 - 2.28: ceil(16 / 8) bases a node
    ((2, 23), 2, 6, 1),
    ((2, 29), 2, 6, 3),      # 2.29: schedule groups of gcd(8, 6) = 2 ranks
    ((2, 29), 10, 8, 9),
    ((2, 29), 10, 1, 9),
    ((2, 8), 2, 8, 8),       # 2.8 - 2.11: each peer its own channel
])
def test_an_alltoalls_peers_on_one_node_share_a_base_channel(version, nodes, ranks_per_node, expected):
    assert network_batches(version, nodes=nodes, ranks_per_node=ranks_per_node,
                           remote_peers=(nodes - 1) * ranks_per_node) == expected


def test_an_alltoall_between_two_nodes_drives_only_its_batchs_channels():
    # NCCL 2.29 with NCCL_NCHANNELS_PER_NET_PEER=1 on 2 x 8 H100: the 8 peers on the other node are one batch on
    # one channel, 14 of the NIC's nominal 50 GB/s whatever the peers; on 10 nodes 9 batches drive the whole NIC
    one = replace(HGX, nccl_env=(("NCCL_NCHANNELS_PER_NET_PEER", "1"),))

    def remote_rate_gb_s(nodes: int) -> float:
        ranks = 8 * nodes
        big = Call(Collective.ALL_TO_ALL, ranks, nodes, 1 << 36)
        small = replace(big, size_bytes=1 << 32)
        remote_bytes = (big.size_bytes - small.size_bytes) * (ranks - 8) / ranks
        return remote_bytes / (predict(one, PARAMS, big).time_us - predict(one, PARAMS, small).time_us) / 1000.0

    assert remote_rate_gb_s(2) == pytest.approx(PARAMS.nic_gb_s * PER_CHANNEL_NET_GB_S / 50.0, rel=0.02)
    assert remote_rate_gb_s(10) == pytest.approx(PARAMS.nic_gb_s, rel=0.02)
    assert NetPeerPlan(4, 2, 50.0).channels_nic_share(1 * 2) == pytest.approx(28 / 50)
    assert NetPeerPlan(4, 2, 50.0).channels_nic_share(9 * 2) == 1.0  # at most p2pnChannels: 4 x 14 > 50


def test_the_fabric_runs_a_sendrecv_at_its_peers_channels_as_the_nccl_model_does(tmp_path):
    # the xxrjun cluster's node (8 x H100, a 400G NIC per GPU on its rail) on 10 nodes, NCCL 2.29: 2 channels
    # for the neighbour across each node boundary, 28 / 50 of the NIC, in the flows as in the NCCL model
    from genie.topology import load_topology_file
    from astra_adapter.fabric.flows import run_concurrently
    from astra_adapter.fabric.nccl_flows import NcclFlowEngine
    from astra_adapter.fabric.network import FabricNetwork
    from astra_adapter.measurements import CommOp
    from astra_adapter.nccl.hardware import cluster_from_topology, node_of_hosts
    from genie.core.collective import Algorithm
    from tests.test_nccl_model import DATA

    text = (DATA / "xxrjun-cluster01-h100-10node-5collectives" / "topology.yaml").read_text()
    path = tmp_path / "ten.yaml"
    path.write_text(text.replace("count: 2, gpus: 8", "count: 10, gpus: 8"))
    topology = load_topology_file(path)
    cluster = replace(cluster_from_topology(topology, gpu="H100 80GB HBM3", interconnect=Interconnect.NVSWITCH,
                                            source=str(path)), nccl_version="2.29.2")
    network = FabricNetwork(topology)
    node_of = node_of_hosts(topology)
    engine = NcclFlowEngine(network, cluster, PARAMS, [node_of.get(h, h) for h in network.rank_hosts])
    times = {}
    for size in (1 << 30, 1 << 32):
        call = Call(Collective.SEND_RECV, 20, 10, size)
        members = tuple(n * 8 + g for n in range(10) for g in range(2))
        fabric_us = run_concurrently(engine, [(CommOp(call.collective, Algorithm.AUTO, 20, size), members)])[0] / 1e3
        assert fabric_us == pytest.approx(predict(cluster, PARAMS, call).time_us, rel=0.02)
        times[size] = fabric_us
    rate_gb_s = ((1 << 32) - (1 << 30)) / (times[1 << 32] - times[1 << 30]) / 1000.0
    assert rate_gb_s == pytest.approx(PARAMS.nic_gb_s * 2 * PER_CHANNEL_NET_GB_S / 50.0, rel=0.03)


@pytest.mark.parametrize("version, value, ranks, expected", [
    ((2, 29), "8", 80, 8),    # set by the user: not halved with the ranks (p2pnChannels 16)
    ((2, 29), "3", 80, 4),    # a power of two
    ((2, 29), "0", 80, 1),    # not positive: NCCL keeps its own
    ((2, 21), "4", 1024, 4),  # 2.12 - 2.28: the fewest of it and the communicator's channels (14)
    ((2, 8), "4", 16, 1),     # no such variable before 2.12
])
def test_nccl_nchannels_per_net_peer_sets_a_network_peers_channels(version, value, ranks, expected):
    from astra_adapter.nccl.p2p import channels_per_net_peer_setting
    setting = channels_per_net_peer_setting((("NCCL_NCHANNELS_PER_NET_PEER", value),), source="x")
    plan = net_peer_plan(version, ranks=ranks, comm_channels=14, gpu_nics=1, nic_gb_s=50.0, setting=setting)
    assert plan.channels_per_peer == expected


def test_a_sendrecv_runs_on_the_channels_the_environment_sets_and_bad_values_are_refused():
    from genie.core.errors import InputError
    from astra_adapter.nccl.env import env_from_output, parse_env
    big, small = Call(Collective.SEND_RECV, 80, 10, 1 << 34), Call(Collective.SEND_RECV, 80, 10, 1 << 30)
    four = replace(HGX, nccl_env=(("NCCL_NCHANNELS_PER_NET_PEER", "4"),))
    rate = (big.size_bytes - small.size_bytes) / (predict(four, PARAMS, big).time_us -
                                                  predict(four, PARAMS, small).time_us) / 1000.0
    assert rate == pytest.approx(PARAMS.nic_gb_s, rel=0.02)  # 4 x 14 GB/s drive the whole NIC
    line = b"host:1:1 [0] NCCL INFO NCCL_NCHANNELS_PER_NET_PEER set by environment to 4.\n"
    assert env_from_output(line) == (("NCCL_NCHANNELS_PER_NET_PEER", "4"),)
    with pytest.raises(InputError, match="NCCL_NCHANNELS_PER_NET_PEER"):
        parse_env([("NCCL_NCHANNELS_PER_NET_PEER", "many")], source="nccl-env")
