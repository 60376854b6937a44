"""NCCL's tuner per release (astra_adapter.nccl.versions): each rule that changed between releases, read from
the tagged src/graph/tuning.cc, and how a calibration picks the release its outputs name."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from genie.core.collective import Collective
from genie.measure.nccl_output import parse_nccl_tests

from astra_adapter.nccl.calibration_io import calibration_json, parse_calibration
from astra_adapter.nccl.fit import Observation, fit
from astra_adapter.nccl.hardware import Cluster, Interconnect, tuner_system
from astra_adapter.nccl.model import Call, nominal_params, predict
from astra_adapter.nccl.observations import tables_nccl_version
from astra_adapter.nccl.tuning import HwKind, NcclAlgorithm, NcclProtocol, TunerSystem, call_latency_us, choose, \
    enabled, inter_steps, table_entry
from astra_adapter.nccl.versions import DEFAULT_VERSION, constants, describe_release, parse_version

A100 = Cluster("dgxa100", 1, 8, "A100-SXM4-40GB", 80, Interconnect.NVSWITCH, 240.0, 0.5, 8, 25.0, 1.0)
H100 = Cluster("hgx", 1, 8, "H100", 90, Interconnect.NVSWITCH, 370.8, 0.5, 8, 50.0, 1.0)
V100_PCIE = Cluster("v100", 1, 4, "V100-PCIE", 70, Interconnect.PCIE, 12.0, 0.5, 4, 12.5, 1.0)


def _at(cluster: Cluster, version: str, **kw) -> TunerSystem:
    return tuner_system(replace(cluster, nccl_version=version), **kw)


def _busbw(system: TunerSystem, collective: Collective, algorithm: NcclAlgorithm, protocol: NcclProtocol) -> float:
    """The table's bus bandwidth: its algorithm bandwidth back through the ring's n/steps."""
    n = system.ranks
    steps = 2 * (n - 1) if collective is Collective.ALL_REDUCE else n - 1
    return table_entry(system, collective, algorithm, protocol).algbw_gb_s * steps / n


def test_release_strings():
    assert parse_version("2.26.2") == (2, 26) and parse_version("NCCL version 2.8.3+cuda11.0") == (2, 8)
    assert parse_version("") is None and parse_version("unknown") is None
    assert constants(None).version == DEFAULT_VERSION
    assert constants((2, 4)).version == (2, 8)  # no tuner of this shape before 2.8: its earliest rules
    assert describe_release("2.26.2", 90) == "NCCL 2.26.2's rules, the release the outputs print"
    assert "2.8's rules, the earliest" in describe_release("2.4.2", 70)
    assert describe_release("", 90) == "NCCL 2.23's rules (the outputs print no NCCL version)"
    assert describe_release("", 100).startswith("NCCL 2.25's rules")


def test_ring_ll_share_of_the_link_before_and_from_2_21():
    # A100, one node: graph 12 x 20 GB/s = 240 GB/s, capped at 235 before 2.15; LL capped by llMaxBw 87.7
    old, new = _at(A100, "2.11.4"), _at(A100, "2.23.4")
    ring, ll = NcclAlgorithm.RING, NcclProtocol.LL
    assert _busbw(old, Collective.ALL_REDUCE, ring, ll) == pytest.approx(235 / 4)  # all-reduce: 1/4
    assert _busbw(old, Collective.ALL_GATHER, ring, ll) == pytest.approx(235 / 3)  # all-gather: 1/3
    assert _busbw(new, Collective.ALL_REDUCE, ring, ll) == pytest.approx(87.7)  # min(87.7, 240 / 2)
    assert _busbw(new, Collective.ALL_GATHER, ring, ll) == pytest.approx(87.7)
    # multi-node: 1/4 for every collective before 2.21
    two = _at(replace(A100, nodes=2), "2.19.3")
    assert _busbw(two, Collective.ALL_GATHER, ring, ll) == pytest.approx(
        min(constants((2, 19)).ll_max_bws[0][1], two.channels * two.bw_intra_gb_s / 4))


def test_a100_bus_bandwidth_cap_until_2_14():
    simple = (Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.SIMPLE)
    assert _busbw(_at(A100, "2.14.3"), *simple) == pytest.approx(235.0)
    assert _busbw(_at(A100, "2.15.1"), *simple) == pytest.approx(240.0)


def test_ll128_enabled_per_architecture_and_release():
    ar, ring, ll128 = Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.LL128
    assert not enabled(_at(H100, "2.15.5"), ar, ring, ll128)  # Volta and Ampere only
    assert enabled(_at(H100, "2.16.2"), ar, ring, ll128)
    b200 = replace(H100, gpu="B200", compute_capability=100)
    assert not enabled(_at(b200, "2.24.3"), ar, ring, ll128)
    assert enabled(_at(b200, "2.25.1"), ar, ring, ll128)
    assert enabled(_at(b200, ""), ar, ring, ll128)  # no release named: Blackwell's first, 2.25
    sm86_nvlink = replace(H100, gpu="A40", compute_capability=86, interconnect=Interconnect.NVLINK)
    assert not enabled(_at(sm86_nvlink, "2.26.2"), ar, ring, ll128)
    assert not enabled(_at(sm86_nvlink, ""), ar, ring, ll128)
    assert enabled(_at(sm86_nvlink, "2.27.3"), ar, ring, ll128)  # any sm70+ from 2.27
    assert not enabled(_at(V100_PCIE, "2.27.3"), ar, ring, ll128)  # never without NVLink


def test_algorithms_appear_with_their_release():
    s = _at(H100, "2.16.5")
    assert not enabled(s, Collective.ALL_REDUCE, NcclAlgorithm.NVLS, NcclProtocol.SIMPLE)
    assert enabled(_at(H100, "2.17.1"), Collective.ALL_REDUCE, NcclAlgorithm.NVLS, NcclProtocol.SIMPLE)
    one_gpu_nodes = dict(nodes=4, ranks_per_node=1)
    assert not enabled(_at(replace(H100, nodes=4), "2.22.3", **one_gpu_nodes), Collective.ALL_GATHER,
                       NcclAlgorithm.PAT, NcclProtocol.SIMPLE)
    assert enabled(_at(replace(H100, nodes=4), "2.23.4", **one_gpu_nodes), Collective.ALL_GATHER,
                   NcclAlgorithm.PAT, NcclProtocol.SIMPLE)


def test_all_reduce_inter_node_steps_per_release():
    assert inter_steps(Collective.ALL_REDUCE, 4, (2, 11)) == 6
    assert inter_steps(Collective.ALL_REDUCE, 4, (2, 12)) == 8  # 2 x nodes in 2.12 .. 2.22
    assert inter_steps(Collective.ALL_REDUCE, 4, (2, 22)) == 8
    assert inter_steps(Collective.ALL_REDUCE, 4, (2, 23)) == 6
    assert inter_steps(Collective.ALL_GATHER, 4, (2, 19)) == 3


def test_latency_and_cap_tables_per_release():
    ar = Collective.ALL_REDUCE
    # ring LL on 8 GPUs over NVLink: 2.8 .. 2.17 base 3.6 + 14 x 0.47; 2.18+ 6.6 + 14 x 0.6
    assert table_entry(_at(A100, "2.10.3"), ar, NcclAlgorithm.RING, NcclProtocol.LL).latency_us == \
        pytest.approx(3.6 + 14 * 0.47)
    assert table_entry(_at(A100, "2.23.4"), ar, NcclAlgorithm.RING, NcclProtocol.LL).latency_us == \
        pytest.approx(6.6 + 14 * 0.6)
    # tree Simple: 28 us a step in 2.19 .. 2.22, 4 us on NVLink from 2.23
    tree = (ar, NcclAlgorithm.TREE, NcclProtocol.SIMPLE)
    assert table_entry(_at(A100, "2.21.5"), *tree).latency_us == pytest.approx(0 + 2 * 7 * 28)
    assert table_entry(_at(A100, "2.23.4"), *tree).latency_us == pytest.approx(8.4 + 2 * 7 * 4.0)
    # LL's cap on Hopper: Volta's row before 2.16 (only sm80 read Ampere's), Ampere's values until 2.20, then own
    assert constants((2, 15)).ll_max_bws[constants((2, 15)).generation(90)][0] == 39.0
    assert constants((2, 20)).ll_max_bws[constants((2, 20)).generation(90)][0] == 87.7
    assert constants((2, 21)).ll_max_bws[constants((2, 21)).generation(90)][0] == 141.0
    # LL's intra-node step x1.8 across nodes before 2.18
    two = _at(replace(A100, nodes=2), "2.11.4")
    assert constants(two.version).hw_lat_us[HwKind.NVLINK.value][0][0] == 0.52
    assert constants((2, 17)).multinode_ll_intra_factor == 1.8 and constants((2, 18)).multinode_ll_intra_factor == 1


def test_one_gpu_a_node_network_latency_and_pat_share_per_release():
    one = dict(nodes=2, ranks_per_node=1)
    a100 = replace(A100, nodes=2)
    ring_ll = (Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.LL)
    # 2 ranks, 2 nodes: ring steps 2, inter-node steps 2 x nodes = 4 in 2.22 (at the ring's 2.7 us), 2 in 2.23
    # (at the tree's 5.0 us); the intra-node steps count negative in 2.22, at the 1 us network overhead
    assert table_entry(_at(a100, "2.22.3", **one), *ring_ll).latency_us == pytest.approx(6.6 - 2 * 1.0 + 4 * 2.7)
    assert table_entry(_at(a100, "2.23.4", **one), *ring_ll).latency_us == pytest.approx(6.6 + 2 * 5.0)
    four = dict(nodes=4, ranks_per_node=1)
    pat = (Collective.ALL_GATHER, NcclAlgorithm.PAT, NcclProtocol.SIMPLE)
    s23, s24 = _at(replace(A100, nodes=4), "2.23.4", **four), _at(replace(A100, nodes=4), "2.24.3", **four)
    assert table_entry(s24, *pat).algbw_gb_s == pytest.approx(table_entry(s23, *pat).algbw_gb_s * 0.75 / 0.85)


def test_an_old_release_chooses_but_the_current_cost_model_times():
    # V100 PCIe, 4 GPUs: NCCL 2.8's ring LL at 1/4 of the link leaves LL for Simple at 128 KiB, 2.23's at 1/2 not
    call = Call(Collective.ALL_REDUCE, 4, 1, 128 << 10)
    old, new = _at(V100_PCIE, "2.8.3"), _at(V100_PCIE, "")
    assert choose(old, call.collective, call.size_bytes)[0].protocol is NcclProtocol.SIMPLE
    assert choose(new, call.collective, call.size_bytes)[0].protocol is NcclProtocol.LL
    params = nominal_params(V100_PCIE)
    old_cluster = replace(V100_PCIE, nccl_version="2.8.3")
    assert predict(old_cluster, params, call).choice.protocol is NcclProtocol.SIMPLE
    # where both releases choose the same, the time is the same (2.23's constants time both)
    big = replace(call, size_bytes=64 << 20)
    assert predict(old_cluster, params, big).time_us == pytest.approx(predict(V100_PCIE, params, big).time_us)


def test_the_release_an_output_prints_is_the_calibrations():
    text = ("# Collective test starting: all_reduce_perf\n"
            "# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n"
            "#  Rank  0 Group  0 Pid   1 on      node1 device  0 [0x07] NVIDIA A100-SXM4-80GB\n"
            "#  Rank  1 Group  0 Pid   2 on      node1 device  1 [0x0f] NVIDIA A100-SXM4-80GB\n"
            "NCCL version 2.18.3+cuda12.2\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
            "   busbw #wrong\n"
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
            "  (GB/s)       \n"
            "           8             2     float     sum      -1    10.00    0.00    0.00      0    10.00    0.00"
            "    0.00      0\n"
            "          16             4     float     sum      -1    10.00    0.00    0.00      0    10.00    0.00"
            "    0.00      0\n")
    tables = parse_nccl_tests(text.encode(), source="ar.txt").tables
    assert tables_nccl_version(tables) == "2.18.3"
    assert tables_nccl_version(()) == ""


def test_a_calibration_keeps_its_release_and_old_files_still_read():
    cluster = replace(A100, nccl_version="2.11.4")
    obs = tuple(Observation(Call(Collective.ALL_REDUCE, 8, 1, s), t) for s, t in
                ((8, 20.0), (1 << 20, 60.0), (1 << 30, 8000.0)))
    text = calibration_json(fit(cluster, obs), (), ("x.txt",))
    back, _ = parse_calibration(text.encode(), source="cal.json")
    assert back == cluster and tuner_system(back).version == (2, 11)
    doc = json.loads(text)
    del doc["cluster"]["nccl_version"]  # a calibration written before releases were modelled
    back, _ = parse_calibration(json.dumps(doc).encode(), source="cal.json")
    assert back.nccl_version == "" and tuner_system(back).version == DEFAULT_VERSION


def test_ll128_and_tree_caps_of_2_8_and_2_9():
    # NCCL 2.8/2.9 (src/graph/tuning.cc ll128MaxBwPerCh[function]): LL128's cap a channel is per collective
    # (all-reduce 16.9, reduce 12.0 GB/s), not 20 GB/s; one node of 8 A100: graph 12 channels, 235 GB/s cap first
    old, new = _at(A100, "2.8.4"), _at(A100, "2.10.3")
    ring, ll128 = NcclAlgorithm.RING, NcclProtocol.LL128
    assert old.channels == new.channels == 12
    assert _busbw(old, Collective.ALL_REDUCE, ring, ll128) == pytest.approx(12 * 16.9)
    assert _busbw(new, Collective.ALL_REDUCE, ring, ll128) == pytest.approx(235 * 0.92)
    reduce_busbw = table_entry(old, Collective.REDUCE, ring, ll128).algbw_gb_s  # ring ratio n / n steps = 1
    assert reduce_busbw == pytest.approx(12 * 12.0)
    # two nodes: Ampere's tree cap 22.5 GB/s a channel (23.6 from 2.10); tree LL128 across nodes x0.915
    two_old, two_new = _at(replace(A100, nodes=2), "2.9.9"), _at(replace(A100, nodes=2), "2.10.3")
    tree = NcclAlgorithm.TREE
    for system, cap in ((two_old, 22.5), (two_new, 23.6)):
        simple = table_entry(system, Collective.ALL_REDUCE, tree, NcclProtocol.SIMPLE).algbw_gb_s / 0.5
        # on 2 nodes the tree's intra-node speed is its search's raised one (astra_adapter.nccl.hardware)
        assert simple == pytest.approx(min(system.channels * system.tree_bw_intra_gb_s * 0.92,
                                           system.channels * cap))
    tree_simple = min(two_old.channels * two_old.tree_bw_intra_gb_s * 0.92, two_old.channels * 22.5)
    assert table_entry(two_old, Collective.ALL_REDUCE, tree, ll128).algbw_gb_s / 0.5 == pytest.approx(
        min(tree_simple * 0.915, two_old.channels * 16.9))


def test_ring_plateau_threshold_and_factor_per_release():
    # ncclTopoGetAlgoTime: a multi-node all-reduce's Ring/Simple latency x1.9 from nRanks/16 x 64 KiB bytes in
    # 2.8 .. 2.17 (any GPU); from 2.18 from 64 bytes a channel and rank, x1.4 on Ampere and later
    a100 = replace(A100, nodes=2)
    ar = Collective.ALL_REDUCE
    for version, small, large in (("2.8.4", 1.0, 1.9), ("2.16.5", 1.0, 1.9), ("2.23.4", 1.4, 1.4)):
        system = _at(a100, version)
        entry = table_entry(system, ar, NcclAlgorithm.RING, NcclProtocol.SIMPLE)
        # 32 KiB: below 16 ranks / 16 x 64 KiB, above 24 channels x 16 ranks x 64 B
        assert call_latency_us(system, ar, entry, 32 << 10) == pytest.approx(entry.latency_us * small)
        assert call_latency_us(system, ar, entry, 1 << 20) == pytest.approx(entry.latency_us * large)
    assert constants((2, 17)).plateau_factor(90) == 1.5 and constants((2, 17)).plateau_factor(80) == 1.9


def test_ll128_cap_of_2_17_is_per_generation_for_rings_and_trees():
    # v2.17.1-1: ll128MaxBwPerCh[compCapIndex] = {20.0, 20.0, 36.7}, before 2.18's separate ring and tree tables
    h = constants((2, 17)).generation(90)
    assert constants((2, 17)).per_ch_max_ring_ll128_bws[h] == (36.7, 36.7, 36.7)
    assert constants((2, 17)).per_ch_max_tree_ll128_bws[h] == (36.7, 36.7, 36.7)
    assert constants((2, 16)).per_ch_max_ring_ll128_bws[h] == (20.0, 20.0, 20.0)
    assert constants((2, 18)).per_ch_max_tree_ll128_bws[h] == (36.7, 36.7, 29.0)


def test_2_8_all_reduce_leaves_ll128_for_simple_where_its_per_collective_cap_binds():
    # 4 x V100 SXM2 with NVLink between every pair (6 links x 20 GB/s): ring graph 6 channels x 20 GB/s.
    # NCCL 2.8.4's LL128 all-reduce cap 6 x 16.9 GB/s makes Simple faster from 4 MiB (LL128 at 2 MiB); with 20
    # GB/s a channel LL128 would run to 4 MiB (ABCI's V node, NCCL 2.8.4: 2 MiB 103 us, 4 MiB 101 us)
    v100 = Cluster("v100-nvlink", 1, 4, "Tesla V100-SXM2-16GB", 70, Interconnect.NVLINK, 120.0, 0.5, 2, 12.5, 1.0)
    system = _at(v100, "2.8.4")
    assert (system.channels, system.bw_intra_gb_s) == (6, 20.0)
    ar = Collective.ALL_REDUCE
    assert choose(system, ar, 2 << 20)[0].protocol is NcclProtocol.LL128
    assert choose(system, ar, 4 << 20)[0].protocol is NcclProtocol.SIMPLE
