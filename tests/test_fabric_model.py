"""The genie-native fabric model (astra_adapter.fabric): max-min shares, ECMP routes, schedules as flows, the
trace played on it, and its errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.topology import Host, Link, Topology
from genie.core.trace import CommType, ProcessGroup, collective_node, compute_node, make_trace
from genie.topology import load_topology, load_topology_file

from astra_adapter.fabric.estimate import estimate_fabric, fabric_by_default, needs_fabric
from astra_adapter.fabric.fairshare import max_min_rates
from astra_adapter.fabric.flows import WIRE_BYTES_PER_PAYLOAD_BYTE, FabricParams, FlowEngine, run_concurrently
from astra_adapter.fabric.network import FabricNetwork, LinkClass
from astra_adapter.measurements import CommOp

ROOT = Path(__file__).resolve().parent.parent
OVERSUB = ROOT / "topologies" / "leaf-spine-2x4-oversub.yaml"
GBIT_BYTES_PER_NS = 1e9 / 8e9


def star(n: int, rate: str = "1gbit", ranks: int = 1) -> str:
    hosts = "\n".join(f"  - {{name: h{i}, ranks: {ranks}}}" for i in range(n))
    links = "\n".join(f"  - {{endpoints: [h{i}, sw]}}" for i in range(n))
    return f"name: s\ndefaults: {{bandwidth: {rate}}}\nhosts:\n{hosts}\nswitches:\n  - {{name: sw}}\nlinks:\n{links}\n"


def test_two_flows_sharing_a_link_get_half_each():
    # resource 0: 1 Gbit/s shared by both; resources 1, 2: private and faster
    rates = max_min_rates(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 2]), np.ones(4),
                          np.array([1.0, 5.0, 5.0]), 2)
    assert rates == pytest.approx([0.5, 0.5])


def test_max_min_gives_the_unbottlenecked_flow_the_rest():
    # flow 0 crosses a 0.2 link and the shared 1.0 link; flow 1 only the shared one: 0.2 and 0.8
    rates = max_min_rates(np.array([0, 0, 1]), np.array([0, 1, 1]), np.ones(3), np.array([0.2, 1.0]), 2)
    assert rates == pytest.approx([0.2, 0.8])


def test_ecmp_splits_a_flow_evenly_over_the_spines():
    net = FabricNetwork(load_topology_file(OVERSUB))
    route = net.routes[net.route(0, 4)]  # h0 (leaf0) -> h4 (leaf1)
    loads = {(net.resources[r].a, net.resources[r].b): w for r, w in route.loads}
    assert loads == {("h0", "leaf0"): 1.0, ("leaf0", "spine0"): 0.5, ("leaf0", "spine1"): 0.5,
                     ("spine0", "leaf1"): 0.5, ("spine1", "leaf1"): 0.5, ("leaf1", "h4"): 1.0}
    same_leaf = net.routes[net.route(0, 1)]
    assert {net.resources[r].link_class for r, _ in same_leaf.loads} == {LinkClass.HOST}


def test_oversubscribed_spine_sets_the_all_reduce_time():
    # two 4-rank DP rings (0,2,4,6) and (1,3,5,7): every step two flows leave each leaf over 2 x 500 Mbit/s,
    # so each gets 500 Mbit/s; 6 steps of S/4 each
    engine = FlowEngine(FabricNetwork(load_topology_file(OVERSUB)))
    size = 8 << 20
    op = CommOp(Collective.ALL_REDUCE, Algorithm.RING, 4, size)
    times = run_concurrently(engine, [(op, (0, 2, 4, 6)), (op, (1, 3, 5, 7))])
    expected = 6 * (size / 4) * WIRE_BYTES_PER_PAYLOAD_BYTE / (0.5 * GBIT_BYTES_PER_NS)
    assert times == pytest.approx([expected, expected], rel=1e-6)
    alone = run_concurrently(FlowEngine(FabricNetwork(load_topology_file(OVERSUB))), [(op, (0, 2, 4, 6))])
    # one ring alone: its one cross-leaf flow per direction spreads over both spines and reaches the host's 1 Gbit/s
    assert alone[0] == pytest.approx(expected / 2, rel=1e-6)


def test_a_hash_draw_puts_each_connection_on_one_spine():
    # one draw: the two rings' cross-leaf flows either take different spines (500 Mbit/s each, as the expected
    # share) or collide on one (250 Mbit/s each): each draw's all-reduce takes T or 2T, and both happen
    network = FabricNetwork(load_topology_file(OVERSUB))
    size = 1 << 20
    op = CommOp(Collective.ALL_REDUCE, Algorithm.RING, 4, size)
    fluid = run_concurrently(FlowEngine(network), [(op, (0, 2, 4, 6)), (op, (1, 3, 5, 7))])[0]
    draws = []
    for seed in range(16):
        net = network.with_hash_seed(seed)
        route = net.routes[net.route(2, 4)]
        assert len(route.loads) == 4 and all(w == 1.0 for _, w in route.loads)  # host, leaf-spine, spine-leaf, host
        draws.append(max(run_concurrently(FlowEngine(net), [(op, (0, 2, 4, 6)), (op, (1, 3, 5, 7))])) / fluid)
    assert all(d == pytest.approx(1.0) or d <= 2.0 + 1e-9 for d in draws)
    assert min(draws) == pytest.approx(1.0) and max(draws) > 1.5


def test_ranks_sharing_a_host_share_its_nic():
    topo = load_topology(star(2, ranks=2))
    engine = FlowEngine(FabricNetwork(topo))
    size = 1 << 20
    msg = CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, size)
    # ranks 0, 1 on h0; 2, 3 on h1: two messages h0 -> h1 at once share h0's uplink
    t = run_concurrently(engine, [(msg, (0, 2)), (msg, (1, 3))])
    one = size * WIRE_BYTES_PER_PAYLOAD_BYTE / GBIT_BYTES_PER_NS
    assert t == pytest.approx([2 * one, 2 * one], rel=1e-6)


def test_efficiency_overhead_and_endpoint_delay_add_up():
    topo = load_topology(star(2))
    size = 1 << 20
    params = FabricParams(((LinkClass.HOST, 0.5),), message_overhead_ns=1000.0, endpoint_delay_ns=5000.0)
    t = run_concurrently(FlowEngine(FabricNetwork(topo), params),
                         [(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, size), (0, 1))])
    assert t[0] == pytest.approx(5000 + 1000 + size * WIRE_BYTES_PER_PAYLOAD_BYTE / (0.5 * GBIT_BYTES_PER_NS))


def _dp_trace(groups: list[tuple[int, ...]], size: int, compute_ns: int):
    n = sum(len(g) for g in groups)
    names = {r: f"g{i}" for i, g in enumerate(groups) for r in g}
    nodes = [[compute_node(0, "fwd", duration_ns=compute_ns),
              collective_node(1, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=size, data_deps=(0,),
                              process_group=names[r], algorithm=Algorithm.RING)] for r in range(n)]
    return make_trace(nodes, groups=tuple(ProcessGroup(f"g{i}", g) for i, g in enumerate(groups)))


def test_a_trace_on_the_fabric_plays_compute_then_the_concurrent_groups():
    topo = load_topology_file(OVERSUB)
    size = 4 << 20
    est = estimate_fabric(_dp_trace([(0, 2, 4, 6), (1, 3, 5, 7)], size, 1_000_000), topo, ecmp_samples=0)
    ar = 6 * (size / 4) * WIRE_BYTES_PER_PAYLOAD_BYTE / (0.5 * GBIT_BYTES_PER_NS)
    assert est.iteration_ns == pytest.approx(1_000_000 + ar, abs=2)
    assert est.ranks[0].exposed_comm_ns == pytest.approx(ar, abs=2)


def test_which_topologies_need_the_fabric_model():
    assert needs_fabric(load_topology_file(OVERSUB))
    assert not needs_fabric(load_topology_file(ROOT / "topologies" / "star-8.yaml"))
    assert not needs_fabric(load_topology_file(ROOT / "topologies" / "ring-8.yaml"))


def test_the_fabric_model_is_the_default_where_the_workload_shares_links_the_unaware_model_cannot():
    ring, star = (load_topology_file(ROOT / "topologies" / f"{n}.yaml") for n in ("ring-8", "star-8"))
    two_rings = _dp_trace([(0, 2, 4, 6), (1, 3, 5, 7)], 1 << 20, 1000)  # both cross every other ring link
    world = _dp_trace([tuple(range(8))], 1 << 20, 1000)
    assert fabric_by_default(two_rings, ring)
    assert not fabric_by_default(two_rings, star)  # each group on its own host links
    assert not fabric_by_default(world, ring) and not fabric_by_default(world, star)
    assert fabric_by_default(world, load_topology_file(OVERSUB))


def test_a_disconnected_topology_is_refused_naming_the_hosts():
    # the topology reader refuses it too; the model checks on its own (a Topology built in code)
    topo = Topology("split", tuple(Host(n) for n in "abcd"), (), (Link("a", "b"), Link("c", "d")))
    with pytest.raises(InputError, match="no path from host a to host c") as info:
        FabricNetwork(topo, source="split.yaml").check_connected()
    assert info.value.path == "links" and info.value.source == "split.yaml"


def test_flow_contention_slows_a_link_per_extra_flow():
    topo = load_topology(star(3))
    size = 1 << 20
    msg = CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, size)
    one = size * WIRE_BYTES_PER_PAYLOAD_BYTE / GBIT_BYTES_PER_NS
    # two messages into h2 share its downlink: 1/2 each, and with contention 0.5 the link delivers 1 / 1.5
    plain = run_concurrently(FlowEngine(FabricNetwork(topo)), [(msg, (0, 2)), (msg, (1, 2))])
    contended = run_concurrently(FlowEngine(FabricNetwork(topo), FabricParams(flow_contention=0.5)),
                                 [(msg, (0, 2)), (msg, (1, 2))])
    assert plain == pytest.approx([2 * one, 2 * one], rel=1e-6)
    assert contended == pytest.approx([3 * one, 3 * one], rel=1e-6)
    alone = run_concurrently(FlowEngine(FabricNetwork(topo), FabricParams(flow_contention=0.5)), [(msg, (0, 2))])
    assert alone == pytest.approx([one], rel=1e-6)  # one flow: no contention


def test_each_ecmp_draw_is_kept_and_its_spread_reported():
    # the two 4-rank rings' cross-leaf flows either share a spine (1/4 Gbit/s each) or not (1/2): a draw's
    # all-reduce takes T or 2T, so the draws' iterations are those two values and their spread is reported
    topo = load_topology_file(OVERSUB)
    size = 4 << 20
    est = estimate_fabric(_dp_trace([(0, 2, 4, 6), (1, 3, 5, 7)], size, 1_000_000), topo, ecmp_samples=8)
    ar = 6 * (size / 4) * WIRE_BYTES_PER_PAYLOAD_BYTE / (0.5 * GBIT_BYTES_PER_NS)
    assert len(est.draw_iterations_ns) == 8
    distinct = sorted({round(t / 1000) for t in est.draw_iterations_ns})
    assert distinct == [round((1_000_000 + ar) / 1000), round((1_000_000 + 2 * ar) / 1000)]
    draws = np.array(est.draw_iterations_ns)
    assert est.draw_spread_pct == pytest.approx(draws.std() / draws.mean() * 100) and est.draw_spread_pct > 10
    assert any("one ECMP hash draw (what one testbed session gets)" in n for n in est.notes)
    alone = estimate_fabric(_dp_trace([(0, 2, 4, 6), (1, 3, 5, 7)], size, 1_000_000), topo, ecmp_samples=0)
    assert alone.draw_iterations_ns == () and alone.draw_spread_pct == 0.0


def test_a_multi_gpu_topology_gives_nvlink_its_own_link_class() -> None:
    """topologies/dgx-2node.yaml: the estimator reads the same file as the testbed; NVLink links are their own
    class (calibrated apart from NICs), and an all-reduce inside one node runs at NVLink speed."""
    from pathlib import Path

    from astra_adapter.fabric.estimate import estimate_fabric
    from astra_adapter.fabric.network import FabricNetwork, LinkClass
    from genie.topology import load_topology_file
    from genie.workloads.native import read_native

    topology = load_topology_file(Path(__file__).resolve().parent.parent / "topologies" / "dgx-2node.yaml")
    network = FabricNetwork(topology)
    assert set(network.classes()) == {LinkClass.HOST, LinkClass.FABRIC, LinkClass.INTRA_NODE}
    nvlinks = [r for r in network.resources if r.link_class is LinkClass.INTRA_NODE]
    assert len(nvlinks) == 32 and all(r.rate_bps == 7200 * 10**9 for r in nvlinks)

    def ring_us(groups: str, group: str) -> float:
        text = (f"format: genie-trace\nversion: 1\nname: o\nranks: 16\ngroups: {groups}\nprogram:\n"
                f"  - {{id: 0, name: op, type: all_reduce, size: 64MiB, group: '{group}', algorithm: ring}}\n")
        return estimate_fabric(read_native(text, source="o"), topology).iteration_ns / 1e3

    # each node's 8 GPUs at once: NVLink, 7200 Gbit/s; then GPU i of both nodes (8 pairs, one per rail): 400
    inside = ring_us("{n0: [0, 1, 2, 3, 4, 5, 6, 7], n1: [8, 9, 10, 11, 12, 13, 14, 15]}", "n{rank//8}")
    across = ring_us("{" + ", ".join(f"r{i}: [{i}, {i + 8}]" for i in range(8)) + "}", "r{rank%8}")
    def wire_us(n: int, rate_gbit: float, hop_delay_us: float) -> float:  # a ring's bytes at the rate, each step
        payload = 2 * (n - 1) / n * (64 << 20) * 1514 / 1448  # over two hops (GPU - switch - GPU)
        return payload * 8 / (rate_gbit * 1e3) + 2 * (n - 1) * 2 * hop_delay_us

    assert inside == pytest.approx(wire_us(8, 7200, 0.5), rel=0.02)
    assert across == pytest.approx(wire_us(2, 400, 1.0), rel=0.02)


def test_draws_played_in_forked_workers_equal_the_serial_plays():
    """Big traces play their ECMP draws in parallel processes: the same timelines, in draw order."""
    from astra_adapter.fabric.estimate import play_draws

    trace = _dp_trace([(0, 2, 4, 6), (1, 3, 5, 7)], 4 << 20, 1_000_000)
    nets = [FabricNetwork(load_topology_file(OVERSUB)).with_hash_seed(k) for k in range(5)]
    serial = play_draws(trace, nets, FabricParams(), workers=1)
    forked = play_draws(trace, nets, FabricParams(), workers=2)
    assert forked == serial
    assert len({t.iteration_ns for t in serial}) == 2  # the draws differ (collided or not), so order matters


def test_disjoint_groups_sharing_a_link_bring_the_fabric_model_in():
    """TP2 x DP4 on an 8-host ring: both DP rings cross every other link, so their all-reduces compete, which
    ASTRA-sim's congestion-unaware model cannot express; on a star each group's flows have their own links."""
    from astra_adapter.fabric.estimate import groups_share_links

    tp_dp = [(0, 2, 4, 6), (1, 3, 5, 7), (0, 1), (2, 3), (4, 5), (6, 7)]

    def trace(groups):
        nodes = [[collective_node(0, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=1 << 20,
                                  process_group=None, algorithm=Algorithm.RING)] for _ in range(8)]
        return make_trace(nodes, groups=tuple(ProcessGroup(f"g{i}", g) for i, g in enumerate(groups)))

    ring8 = load_topology_file(ROOT / "topologies" / "ring-8.yaml")
    star8 = load_topology_file(ROOT / "topologies" / "star-8.yaml")
    assert groups_share_links(trace(tp_dp), ring8)
    assert not groups_share_links(trace(tp_dp), star8)
    assert not groups_share_links(trace(tp_dp[2:]), ring8)  # TP pairs alone: each its own link
    assert not groups_share_links(trace([tuple(range(8))]), ring8)  # one group: nothing to compete with


def test_a_rank_leaves_a_collective_when_its_part_of_the_last_step_is_done():
    """A ring broadcast from rank 0 on 4 ranks: 0->1, 1->2, 2->3, one step each. Ranks 0 and 1 have nothing in the
    last step and go on to their next compute when it begins; 2 and 3 one step later."""
    size = 1 << 20
    nodes = [[collective_node(0, "bc", comm_type=CommType.BROADCAST, size_bytes=size),
              compute_node(1, "fwd", duration_ns=10_000_000, data_deps=(0,))] for _ in range(4)]
    est = estimate_fabric(make_trace(nodes), load_topology(star(4)), ecmp_samples=0)
    step = size * WIRE_BYTES_PER_PAYLOAD_BYTE / GBIT_BYTES_PER_NS
    assert [r.iteration_ns for r in est.ranks] == pytest.approx([2 * step + 10_000_000] * 2 +
                                                                [3 * step + 10_000_000] * 2, abs=2)
