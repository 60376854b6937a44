"""Ring broadcast and reduce as the pipelined chain NCCL runs (astra_adapter.nccl.chain): NCCL's sameChannels
latency rule in the tuner, the FIFO step a rank forwards at once, and the chain's fill across nodes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from genie.core.collective import Collective

from astra_adapter.nccl.chain import STEP_DATA_BYTES, chain_fill_us, chain_latency_us, is_chain, \
    network_hop_us_per_byte, same_channels, slice_bytes
from astra_adapter.nccl.hardware import Cluster, Interconnect, tuner_system
from astra_adapter.nccl.model import Call, NcclParams, predict
from astra_adapter.nccl.tuning import NcclAlgorithm, NcclProtocol, choose, tuner_table

# 8 x A100 on NVSwitch + 4 x HDR 200G per node (ABCI's compute node (A))
A_NODE = Cluster("a", 16, 8, "A100-SXM4-40GB", 80, Interconnect.NVSWITCH, 240.0, 0.5, 4, 25.0, 2.0)


def _entry(table, protocol):
    return next(e for e in table if e.algorithm is NcclAlgorithm.RING and e.protocol is protocol)


def test_steps_are_ncclS_default_buffers_over_eight():
    # Simple 4 MiB / 8; LL 8 lines x 512 threads x 16 B per step, half data; LL128 120 x 640 x 8 B, 120/128 data
    assert STEP_DATA_BYTES[NcclProtocol.SIMPLE] == 512 * 1024
    assert STEP_DATA_BYTES[NcclProtocol.LL] == 32 * 1024
    assert STEP_DATA_BYTES[NcclProtocol.LL128] == 576000
    assert slice_bytes(NcclProtocol.SIMPLE, 1 << 20, 8) == 128 * 1024  # the call's share per channel
    assert slice_bytes(NcclProtocol.SIMPLE, 64 << 20, 8) == 512 * 1024  # capped at a step


def test_same_channels_on_one_node_or_one_nic():
    assert same_channels(1, 4) and same_channels(4, 1)
    assert not same_channels(2, 4)
    assert tuner_system(A_NODE, nodes=1).same_channels
    assert not tuner_system(A_NODE, nodes=2).same_channels


def test_broadcast_latency_is_one_step_with_same_channels_and_nranks_steps_otherwise():
    one = tuner_system(A_NODE, nodes=1)
    t = tuner_table(one, Collective.BROADCAST)
    c = one.constants
    # NVLink: base + one hardware step (ring LL: 6.6 + 0.6 in 2.23)
    assert _entry(t, NcclProtocol.LL).latency_us == pytest.approx(c.base_lat_us[1][0] + c.hw_lat_us["nvlink"][1][0])
    multi = tuner_system(A_NODE, nodes=2)
    t = tuner_table(multi, Collective.BROADCAST)
    n = multi.ranks
    assert _entry(t, NcclProtocol.LL).latency_us == pytest.approx(c.base_lat_us[1][0] + n * c.hw_lat_us["net"][1][0])
    # Simple's steps at the tree's network latency (NCCL's stand-in for its chunks)
    assert _entry(t, NcclProtocol.SIMPLE).latency_us == pytest.approx(c.base_lat_us[1][2]
                                                                      + n * c.hw_lat_us["net"][0][2])
    # all-reduce is not touched by the rule
    assert replace(multi, same_channels=True) != multi
    assert tuner_table(multi, Collective.ALL_REDUCE) == tuner_table(replace(multi, same_channels=True),
                                                                    Collective.ALL_REDUCE)


def test_the_protocol_hand_over_moves_with_the_rank_count_across_nodes():
    def first_non_ll(nodes):
        s = tuner_system(A_NODE, nodes=nodes)
        return next(1 << k for k in range(2, 31) if choose(s, Collective.BROADCAST, 1 << k)[0].protocol
                    is not NcclProtocol.LL)
    assert first_non_ll(16) > first_non_ll(2)


def test_chain_fill_counts_network_hops_but_the_slowest():
    # 4 nodes, Simple, 1 us per byte on a network hop: 3 network hops; the network the narrow class: 2 of fill
    s = 512 * 1024
    assert chain_fill_us(NcclProtocol.SIMPLE, 8 * s, 8, 4, 0.5, 1.0) == pytest.approx(2 * s)
    # NVLink the narrow class: every network hop is fill
    assert chain_fill_us(NcclProtocol.SIMPLE, 8 * s, 8, 4, 2.0, 1.0) == pytest.approx(3 * s)
    assert chain_fill_us(NcclProtocol.LL, 8 * s, 8, 4, 0.5, 1.0) == pytest.approx(2 * 32 * 1024)
    # LL128, too: the GPU posts a step to the network proxy after writing all of it (prims_ll128.h, net.cc)
    assert chain_fill_us(NcclProtocol.LL128, 8 * s, 8, 4, 0.5, 1.0) == pytest.approx(2 * s)
    assert chain_fill_us(NcclProtocol.SIMPLE, 8 * s, 8, 1, 0.5, 1.0) == 0.0  # one node: the general fill


def test_a_broadcast_across_more_nodes_takes_longer_only_for_the_chain():
    params = NcclParams(intra_busbw_gb_s=240.0, nvls_busbw_gb_s=0.0, nic_gb_s=20.0)
    size = 4 << 20
    times = [predict(A_NODE, params, Call(Collective.BROADCAST, 8 * n, n, size)).time_us for n in (2, 4, 8, 16)]
    # on 16 nodes NCCL's tuner (which knows no chain fill) hands over to LL, timed as it runs: not monotonic there
    assert times[:3] == sorted(times[:3]) and min(times[1:]) > 2 * times[0]
    assert is_chain(Collective.REDUCE, NcclAlgorithm.RING) and not is_chain(Collective.ALL_REDUCE,
                                                                             NcclAlgorithm.RING)


def test_an_ll128_broadcast_across_nodes_holds_a_step_on_each_network_hop():
    # 16 nodes, 8 MiB: LL128 on 8 channels, a whole 576000 B step (capped by the 1 MiB share) held on 14 of the
    # 15 network hops, its 128/120 wire bytes at a channel's share of the node's NICs (4 x 20 GB/s over 8
    # channels: 10 GB/s)
    params = NcclParams(intra_busbw_gb_s=240.0, nvls_busbw_gb_s=0.0, nic_gb_s=20.0)
    p = predict(A_NODE, params, Call(Collective.BROADCAST, 128, 16, 8 << 20))
    assert p.choice.protocol is NcclProtocol.LL128
    two = predict(A_NODE, params, Call(Collective.BROADCAST, 16, 2, 8 << 20))
    assert p.time_us - two.time_us == pytest.approx(14 * 576000 * 128 / 120 / 10e3, rel=1e-6)


def test_a_small_broadcast_back_to_back_costs_one_rank_not_the_hops():
    # nccl-tests' calls overlap along the chain: a 4-byte broadcast costs NCCL's ring LL base latency on 2 nodes
    # and on 16 alike (ABCI: 7.5 us on both), not a network hop more, and not the fitted launch_us, which the
    # all-reduce's tree and ring carry beyond NCCL's table (ABCI fits ~10 us on 2-16 nodes): the one-node
    # all-reduce of 4 B takes 17.2 us there, the broadcast 7.3
    base = chain_latency_us(tuner_system(A_NODE, nodes=2), NcclProtocol.LL)
    assert base > 0
    for launch_us in (0.5, 3.0, 12.0):
        params = NcclParams(intra_busbw_gb_s=240.0, nvls_busbw_gb_s=0.0, nic_gb_s=20.0, launch_us=launch_us)
        for nodes in (2, 16):
            p = predict(A_NODE, params, Call(Collective.BROADCAST, 8 * nodes, nodes, 4))
            assert p.choice.protocol is NcclProtocol.LL
            assert p.time_us == pytest.approx(base, rel=1e-3)
        # an all-reduce pays it
        ar = predict(A_NODE, params, Call(Collective.ALL_REDUCE, 16, 2, 4))
        ar0 = predict(A_NODE, replace(params, launch_us=0.0), Call(Collective.ALL_REDUCE, 16, 2, 4))
        assert ar.time_us - ar0.time_us == pytest.approx(launch_us, rel=1e-3)


def test_a_network_hop_moves_the_protocols_wire_bytes_on_one_nic_per_channel():
    # LL carries 8 data bytes in each 16-byte line; a channel alone on a NIC has all of it (1 channel, 4 NICs of
    # 20 GB/s: 20 GB/s), 8 channels share 4 NICs (10 GB/s each)
    assert network_hop_us_per_byte(NcclProtocol.LL, 80.0, 4, 1) == pytest.approx(2 / 20e3)
    assert network_hop_us_per_byte(NcclProtocol.SIMPLE, 80.0, 4, 8) == pytest.approx(1 / 10e3)
    assert network_hop_us_per_byte(NcclProtocol.LL128, 80.0, 4, 8) == pytest.approx(128 / 120 / 10e3)
