"""genie's NCCL model at scale (issue 33, ALCF Polaris): NCCL's LL128 rule for the GPU-NIC PCIe path, the AMD
CPU's network overhead, the depth of the tree NCCL builds, and the tree's pipeline through that depth."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from genie.core.collective import Collective
from genie.core.errors import InputError

from astra_adapter.nccl.calibration_io import calibration_json, parse_calibration
from astra_adapter.nccl.fit import Observation, fit
from astra_adapter.nccl.hardware import Cluster, CpuVendor, Interconnect, NicPath, tuner_system
from astra_adapter.nccl.model import Call, NcclParams, nominal_params, predict
from astra_adapter.nccl.trees import TreePattern
from astra_adapter.nccl.tuning import NcclAlgorithm, NcclProtocol, TreeLevels, enabled, table_entry, tuner_table
from tests.cli_support import run_genie

ROOT = Path(__file__).resolve().parents[1]
POLARIS = ROOT / "benchmarks" / "data" / "real-nccl" / "alcf-polaris-a100-slingshot11-2-8-256-540node"
#: a Polaris node as the topology describes it: 4 x A100 on NVLink3, two 200 Gb/s NICs, NCCL 2.21.5
A100X4 = Cluster("polaris", 2, 4, "A100", 80, Interconnect.NVLINK, 240.0, 0.5, 2, 25.0, 2.0, nccl_version="2.21.5")


def _btree_depth(nodes: int) -> int:
    """The depth of NCCL's binary tree over ``nodes`` ranks, walked from its parent rule (src/graph/trees.cc):
    a rank's lowest set bit ``b``; parent (rank ^ b) | (b << 1), or rank ^ b where that is out of range."""
    def parent(rank: int) -> int:
        bit = rank & -rank
        up = (rank ^ bit) | (bit << 1)
        return up if up < nodes else rank ^ bit

    deepest = 0
    for rank in range(1, nodes):
        depth, r = 0, rank
        while r != 0:
            r, depth = parent(r), depth + 1
        deepest = max(deepest, depth)
    return deepest


@pytest.mark.parametrize("nodes", [2, 3, 5, 8, 100, 256, 257, 540])
def test_the_built_tree_is_as_deep_as_nccls_btree(nodes):
    assert TreeLevels.BUILT.depth(nodes) == _btree_depth(nodes)


def test_the_tuner_counts_the_floor_of_log2_but_540_nodes_build_10_levels():
    assert TreeLevels.TUNER.depth(540) == 9 and TreeLevels.BUILT.depth(540) == 10
    assert TreeLevels.TUNER.depth(256) == TreeLevels.BUILT.depth(256) == 8
    assert TreeLevels.TUNER.depth(1) == TreeLevels.BUILT.depth(1) == 0


def test_a_tree_call_on_540_nodes_takes_a_level_more_than_on_512():
    # NCCL's tuner picks the same Tree/LL on 512 and 540 nodes (log2i: 9 both); the tree it builds on 540 is
    # 10 levels deep, a network hop more each way (NCCL's Tree/LL network latency, 5 us in 2.23's table), and
    # on an A100 node (the balanced pattern) the extra level enters a node's second GPU: an NVLink hop (0.6 us);
    # its two network hops each hold the call's 1 KiB slice for the GPU's write and the wire (the test below)
    from astra_adapter.nccl.model import fitted_system, ll_write_us_per_byte

    params = nominal_params(A100X4)
    small = {n: predict(A100X4, params, Call(Collective.ALL_REDUCE, 4 * n, n, 1024)) for n in (512, 540)}
    assert small[512].choice.algorithm is small[540].choice.algorithm is NcclAlgorithm.TREE
    assert small[540].choice.protocol is NcclProtocol.LL and small[540].choice.channels == 1
    nominal = tuner_system(A100X4, nodes=540, ranks_per_node=4)
    entry = table_entry(fitted_system(nominal, A100X4, params), Collective.ALL_REDUCE, NcclAlgorithm.TREE,
                        NcclProtocol.LL)
    hold_us = 1024 * (ll_write_us_per_byte(nominal, entry, 1.0) + 2 / (1000.0 * 2 * 25.0 / 2))
    assert small[540].time_us - small[512].time_us == pytest.approx(2 * (5.0 + 0.6) + 2 * hold_us, rel=0.02)


def _btree_ways(nodes: int) -> set[tuple[int, int]]:
    """Every node's (levels, child-0 links) to the root, walked from NCCL's parent rule (src/graph/trees.cc): a
    rank below its parent is its child 0."""
    ways = set()
    for rank in range(1, nodes):
        hops = zeros = 0
        r = rank
        while r:
            bit = r & -r
            up = (r ^ bit) | (bit << 1)
            up = up if up < nodes else r ^ bit
            hops, zeros, r = hops + 1, zeros + (r < up), up
        ways.add((hops, zeros))
    return ways


@pytest.mark.parametrize("nodes", [2, 3, 5, 8, 16, 100, 257, 540])
def test_the_slowest_way_up_the_built_tree_is_its_deepest_with_the_most_child_0_links(nodes):
    from astra_adapter.nccl.trees import btree_paths, tree_way_us

    ways = _btree_ways(nodes)
    assert max(h for h, _ in btree_paths(nodes)) == _btree_depth(nodes)
    for intra, inter in ((0.6, 5.0), (4.0, 14.0), (1.0, 0.5)):
        slowest = max(h * inter + z * intra for h, z in ways)
        assert tree_way_us(nodes, intra, inter, TreePattern.BALANCED) == pytest.approx(slowest)
        assert tree_way_us(nodes, intra, inter, TreePattern.TREE) == pytest.approx(_btree_depth(nodes) * inter)
        assert tree_way_us(nodes, intra, inter, TreePattern.SPLIT) == pytest.approx(
            _btree_depth(nodes) * (inter + intra))
    # the root's one child is its child 1: 2 nodes cross no extra NVLink hop; 16 nodes cross 3
    assert btree_paths(2) == ((1, 0),) and btree_paths(16) == ((4, 3),)


def test_nccls_search_builds_the_balanced_tree_but_with_one_gpu_a_node_and_on_volta_in_2_8():
    from astra_adapter.nccl.trees import tree_pattern

    # src/init.cc, src/graph/search.cc per release: the balanced pattern first; 2.8/2.9 the plain one on 2 nodes
    # and the split one before Ampere; one GPU a node the plain one
    assert tree_pattern((2, 21), 80, 4, 540) is TreePattern.BALANCED
    assert tree_pattern((2, 23), 70, 4, 32) is TreePattern.BALANCED
    assert tree_pattern((2, 8), 70, 4, 32) is TreePattern.SPLIT
    assert tree_pattern((2, 8), 70, 4, 2) is TreePattern.TREE
    assert tree_pattern((2, 8), 80, 8, 16) is TreePattern.BALANCED
    assert tree_pattern((2, 23), 90, 8, 16) is TreePattern.BALANCED
    assert tree_pattern((2, 23), 80, 1, 16) is TreePattern.TREE


def test_a_balanced_tree_enters_a_node_on_its_second_gpu_for_a_child_0():
    from astra_adapter.nccl.model import fitted_system

    cluster = replace(A100X4, nodes=16, nccl_version="2.21.5")
    nominal = tuner_system(cluster)
    fitted = fitted_system(nominal, cluster, nominal_params(cluster))
    plain = replace(fitted, tree_pattern=TreePattern.TREE)
    lat = {s.tree_pattern: table_entry(s, Collective.ALL_REDUCE, NcclAlgorithm.TREE, NcclProtocol.LL).latency_us
           for s in (fitted, plain)}
    # 16 nodes: 4 levels, 3 of them into a child 0, up and down: 6 NVLink hops of Tree/LL's 0.6 us
    assert fitted.tree_pattern is TreePattern.BALANCED
    assert lat[TreePattern.BALANCED] - lat[TreePattern.TREE] == pytest.approx(2 * 3 * 0.6)
    # the tuner decides with NCCL's own formula whatever the pattern
    assert nominal.tree_levels is TreeLevels.TUNER
    assert table_entry(replace(nominal, tree_pattern=TreePattern.BALANCED), Collective.ALL_REDUCE,
                       NcclAlgorithm.TREE, NcclProtocol.LL) == table_entry(nominal, Collective.ALL_REDUCE,
                                                                           NcclAlgorithm.TREE, NcclProtocol.LL)


def test_a_tree_holds_a_whole_slice_on_each_network_hop_of_its_levels():
    # a Tree/Simple call between nodes is a chain up the tree and one down: each of the 2 x depth network hops
    # holds a 512 KiB slice a channel, all but the slowest (the transfer's) on top of the transfer; with the
    # latencies and the general fill off, 540 nodes (10 levels) take 4 slices' times more than 256 (8 levels)
    params = replace(nominal_params(A100X4), fill_us=0.0, latency_scale=0.0, launch_us=0.0)
    cluster = replace(A100X4, nic_path=NicPath.PHB)
    calls = {n: predict(cluster, params, Call(Collective.ALL_REDUCE, 4 * n, n, 64 << 20)) for n in (256, 540)}
    assert all(p.choice.algorithm is NcclAlgorithm.TREE and p.choice.protocol is NcclProtocol.SIMPLE
               and p.choice.channels == 4 for p in calls.values())
    # a channel's share of the node's two NICs: 2 x 25 GB/s over 4 channels
    slice_us = (512 << 10) / (1000.0 * 2 * 25.0 / 4)
    assert calls[540].time_us - calls[256].time_us == pytest.approx(4 * slice_us, rel=1e-6)


def test_a_tree_ll128_call_runs_nccls_smaller_chunks():
    from astra_adapter.nccl.model import tree_ll128_chunk_bytes

    # 2.23: 1 + log2i(nodes) + ppn/10 tree steps; halve LL128's 576000-byte step while a channel has fewer than
    # 64 x steps / ppn chunks (down to 128 KiB), then 16 x (down to 32 KiB)
    assert tree_ll128_chunk_bytes(1 << 30, 4, 2, 8) == 576000
    assert tree_ll128_chunk_bytes(4 << 20, 4, 16, 8) == 576000 // 8  # 8 chunks < 16 x 5.8 / 8, stop above 32K
    # the checks come before each halving: 36000 > 32 KiB halves once more
    assert tree_ll128_chunk_bytes(64 << 10, 4, 16, 8) == 576000 // 32


def test_a_gpu_to_nic_path_through_the_host_bridge_turns_ll128_off_between_nodes():
    # Polaris: each Slingshot NIC hangs off one GPU's PCIe host bridge (nvidia-smi topo -m: PHB); NCCL enables
    # LL128 between nodes only up to PXB (src/graph/tuning.cc), so the tuner never offers it there
    for version in ("2.21.5", "2.23.4"):
        pxb = replace(A100X4, nodes=256, nccl_version=version)
        phb = replace(pxb, nic_path=NicPath.PHB)
        for cluster, offered in ((pxb, True), (phb, False)):
            system = tuner_system(cluster)
            assert enabled(system, Collective.ALL_REDUCE, NcclAlgorithm.TREE, NcclProtocol.LL128) is offered
            protocols = {e.protocol for e in tuner_table(system, Collective.ALL_REDUCE)}
            assert (NcclProtocol.LL128 in protocols) is offered
    # inside one node the NIC path does not matter
    one = replace(A100X4, nodes=1, nic_path=NicPath.SYS)
    assert enabled(tuner_system(one), Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.LL128)


def test_the_256_node_all_reduce_of_128_mib_runs_tree_simple_not_ll128_on_polaris():
    cluster = replace(A100X4, nic_path=NicPath.PHB, cpu=CpuVendor.AMD)
    p = predict(cluster, nominal_params(cluster), Call(Collective.ALL_REDUCE, 1024, 256, 128 << 20))
    assert p.choice.protocol is NcclProtocol.SIMPLE
    before = predict(A100X4, nominal_params(A100X4), Call(Collective.ALL_REDUCE, 1024, 256, 128 << 20))
    assert before.choice.protocol is NcclProtocol.LL128


def test_an_amd_cpu_costs_an_inter_node_ring_step_2_us_of_network_overhead():
    # NCCL: an inter-node ring's intra-node steps cost at least the network overhead (1 us, 2 on AMD), three
    # times that for Simple
    intel = tuner_system(replace(A100X4, nodes=4))
    amd = tuner_system(replace(A100X4, nodes=4, cpu=CpuVendor.AMD))
    assert not intel.amd_cpu and amd.amd_cpu
    steps = 2 * (16 - 1) - 2 * 4  # all-reduce ring steps inside nodes (2.21: 2 x nodes between them)
    ring = {s.amd_cpu: table_entry(s, Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.SIMPLE).latency_us
            for s in (intel, amd)}
    # Intel's 3 us is below NVLink's own Ring/Simple step (3.4 us in 2.21), AMD's 6 us above it
    assert ring[True] - ring[False] == pytest.approx(steps * (6.0 - 3.4))


def test_the_path_and_cpu_are_kept_in_the_calibration_and_old_files_read_as_a_dgx():
    cluster = replace(A100X4, nic_path=NicPath.PHB, cpu=CpuVendor.AMD)
    obs = [Observation(Call(Collective.ALL_REDUCE, 8, 2, s), t) for s, t in
           ((1 << 10, 37.0), (1 << 20, 480.0), (1 << 28, 12942.0), (1 << 30, 51310.0))]
    text = calibration_json(fit(cluster, obs), (), ("x.txt",))
    back, _ = parse_calibration(text.encode(), source="cal.json")
    assert back == cluster
    doc = json.loads(text)
    del doc["cluster"]["nic_path"], doc["cluster"]["cpu"]
    old, _ = parse_calibration(json.dumps(doc).encode(), source="cal.json")
    assert old.nic_path is NicPath.PXB and old.cpu is CpuVendor.INTEL
    doc["cluster"]["nic_path"] = "nvlink"
    with pytest.raises(InputError, match="cluster.nic_path"):
        parse_calibration(json.dumps(doc).encode(), source="cal.json")


def test_genie_calibrate_takes_the_nic_path_and_cpu(tmp_path):
    out = tmp_path / "cal"
    r = run_genie("calibrate", str(POLARIS / "all_reduce-8r.txt"), "--topology", str(POLARIS / "topology.yaml"),
                  "--interconnect", "nvlink", "--nic-path", "phb", "--cpu", "amd", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "LL128" not in r.stdout  # NCCL runs no LL128 between nodes through a host bridge
    doc = json.loads((out / "nccl_calibration.json").read_text())
    assert doc["cluster"]["nic_path"] == "phb" and doc["cluster"]["cpu"] == "amd"


@pytest.mark.parametrize("flag, value", [("--nic-path", "bridge"), ("--cpu", "sparc")])
def test_genie_calibrate_refuses_an_unknown_path_or_cpu_in_one_line(tmp_path, flag, value):
    out = tmp_path / "cal"
    r = run_genie("calibrate", str(POLARIS / "all_reduce-8r.txt"), "--topology", str(POLARIS / "topology.yaml"),
                  flag, value, "--out", str(out))
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and flag in r.stderr
    assert not out.exists()


def test_a_tree_ll_slice_waits_on_each_network_hop_for_the_gpus_write_into_host_memory():
    # NCCL keeps a network connection's LL send buffer in host memory (src/transport/net.cc), and its proxy
    # posts a step only once all its lines carry the flag: on the tree's network hops a Tree/LL slice takes the
    # GPU's write at a channel's share of the LL bus bandwidth and then the wire (LL's 16-byte lines, 8 of data).
    # With latencies and the fill off, 540 nodes (10 levels) take 4 such holds more than 256 (8 levels); halving
    # LL's efficiency halves the rate of the write, not of the wire
    from astra_adapter.nccl.model import fitted_system, ll_write_us_per_byte, tree_ll_write_us

    base = replace(nominal_params(A100X4), fill_us=0.0, latency_scale=0.0, launch_us=0.0)
    size = 4096  # one channel, one 4 KiB slice
    for efficiency in (1.0, 0.5):
        params = replace(base, ll_efficiency=efficiency)
        calls = {n: Call(Collective.ALL_REDUCE, 4 * n, n, size) for n in (256, 540)}
        got = {n: predict(A100X4, params, c) for n, c in calls.items()}
        assert all(p.choice.algorithm is NcclAlgorithm.TREE and p.choice.protocol is NcclProtocol.LL
                   and p.choice.channels == 1 for p in got.values())
        nominal = tuner_system(A100X4, nodes=540, ranks_per_node=4)
        entry = table_entry(fitted_system(nominal, A100X4, params), Collective.ALL_REDUCE, NcclAlgorithm.TREE,
                            NcclProtocol.LL)
        # one channel's write: the tree's bus bandwidth (twice its algorithm bandwidth) over the comm's channels
        write_us = size * nominal.comm_channels / (1000.0 * efficiency * 2 * entry.algbw_gb_s)
        assert ll_write_us_per_byte(nominal, entry, efficiency) * size == pytest.approx(write_us)
        # the wire: LL's 2 bytes a data byte at a channel's share of the two NICs (one channel: one NIC)
        wire_us = 2 * size / (1000.0 * 2 * 25.0 / 2)
        assert got[540].time_us - got[256].time_us == pytest.approx(4 * (write_us + wire_us), rel=1e-6)
        assert write_us > wire_us  # the hold is the GPU's write more than the wire
        # on 2 nodes the transfer (LL's bus bandwidth, up and down once) is the one write each way: none added
        two = Call(Collective.ALL_REDUCE, 8, 2, size)
        assert tree_ll_write_us(tuner_system(A100X4, nodes=2, ranks_per_node=4), entry, efficiency, two, 1) == 0.0
        assert tree_ll_write_us(nominal, entry, efficiency, calls[540], 1) == pytest.approx(18 * write_us)
