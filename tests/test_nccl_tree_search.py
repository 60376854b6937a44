"""The tree graph's raised intra-node bandwidth on 2 nodes (NCCL's search, second pass; astra_adapter.nccl.hardware).
"""

from __future__ import annotations

from dataclasses import replace

from genie.core.collective import Collective

from astra_adapter.nccl.hardware import Cluster, Interconnect, tuner_system
from astra_adapter.nccl.model import Call, nominal_params, predict
from astra_adapter.nccl.tuning import NcclAlgorithm, NcclProtocol, table_entry

#: a Snellius node as its topology describes it: 4 x H100 on point-to-point NVLink, one NDR200 NIC per GPU,
#: NCCL 2.22.3 (printed in the case's logs)
H100X4 = Cluster("snellius", 2, 4, "NVIDIA H100", 90, Interconnect.NVLINK, 370.8, 0.5, 4, 25.0, 2.0,
                 nccl_version="2.22.3")
#: an ABCI A-node: 8 x A100 on NVSwitch, four HDR NICs
A100X8 = Cluster("abci-a", 2, 8, "A100-SXM4-40GB", 80, Interconnect.NVSWITCH, 240.0, 0.5, 4, 25.0, 2.0,
                 nccl_version="2.23.4")


def test_the_tree_runs_twice_the_network_speed_inside_a_node_on_2_nodes():
    system = tuner_system(H100X4, nodes=2, ranks_per_node=4)
    # the ring: 4 channels of 24 GB/s, one per NDR200 NIC (NCCL logs 8 coll channels: twice the graph's)
    assert (system.channels, system.bw_inter_gb_s, system.comm_channels) == (4, 24.0, 8)
    # the tree's second pass raises its bwIntra 24 -> 30 -> 40 -> 42 -> 45 -> 48, twice bwInter, and stops
    assert system.tree_bw_intra_gb_s == 48.0
    tree = table_entry(system, Collective.ALL_REDUCE, NcclAlgorithm.TREE, NcclProtocol.SIMPLE)
    ring = table_entry(system, Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.SIMPLE)
    assert tree.algbw_gb_s > ring.algbw_gb_s


def test_the_raise_stops_where_the_gpus_links_cannot_hold_the_channels():
    # 8 channels of 24 GB/s on 240 GB/s of NVLink: 28 x 8 = 224 and 30 x 8 = 240 fit, 48 x 8 does not
    oci = replace(A100X8, nics=8)
    assert tuner_system(oci, nodes=2).tree_bw_intra_gb_s == 30.0
    # and a ring as fast as the links leaves nothing to raise
    assert tuner_system(replace(A100X8, intra_gb_s=96.0), nodes=2).tree_bw_intra_gb_s == 24.0


def test_before_2_19_the_split_after_the_raise_stays_within_the_rings_channels():
    # 2.8 .. 2.18 split a graph of 25 GB/s or more after the raise, but never past the ring's channels
    # (treeGraph.maxChannels = ringGraph.nChannels): 4 channels raised to 48 stay 4 x 48, as from 2.19
    assert tuner_system(replace(A100X8, nccl_version="2.8.4"), nodes=2).tree_bw_intra_gb_s == 48.0
    assert tuner_system(replace(A100X8, nccl_version="2.19.3"), nodes=2).tree_bw_intra_gb_s == 48.0


def test_snellius_2_node_all_reduce_runs_the_tree_at_large_sizes_and_its_time_follows_the_nics():
    # the case's log: busbw 156 GB/s at 8 GiB, above the four NICs' 100 GB/s that a ring could reach
    params = nominal_params(H100X4)
    p = predict(H100X4, params, Call(Collective.ALL_REDUCE, 8, 2, 8 << 30))
    assert (p.choice.algorithm, p.choice.protocol) == (NcclAlgorithm.TREE, NcclProtocol.SIMPLE)
    busbw = (8 << 30) / (p.time_us * 1e3) * 2 * 7 / 8
    assert 140 < busbw < 175
    # the ring collectives of the same communicator stay at the NICs' 100 GB/s
    g = predict(H100X4, params, Call(Collective.ALL_GATHER, 8, 2, 8 << 30))
    assert g.choice.algorithm is NcclAlgorithm.RING
    assert (8 << 30) / (g.time_us * 1e3) * 7 / 8 <= 100.0


def test_more_than_2_nodes_keep_the_network_speed():
    system = tuner_system(H100X4, nodes=4, ranks_per_node=4)
    tree = table_entry(system, Collective.ALL_REDUCE, NcclAlgorithm.TREE, NcclProtocol.SIMPLE)
    assert tree.algbw_gb_s <= 0.5 * system.channels * system.bw_inter_gb_s
