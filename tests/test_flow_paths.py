"""The paths a run's connections took (genie.core.flowpath, genie.testbed.flow_paths) and the fabric model on
them: ranks report their 5-tuples, the walk asks each routing node (here a fake kernel over the plan's own
routes), the fabric model routes each traced pair exactly so."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.flowpath import FlowPath, FlowTuple, SessionPaths
from genie.core.protocol import Done, decode_message, encode_message
from genie.engine.links import PeerLink, flow_tuples
from genie.testbed.flow_paths import session_paths
from genie.testbed.plan import build_plan
from genie.testbed.steps import AddAddress, AddRoute
from genie.topology import load_topology_file

from astra_adapter.fabric.calibrate import calibrate_fabric
from astra_adapter.fabric.flows import FlowEngine, run_concurrently
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.measurements import CommOp, Measurement

ROOT = Path(__file__).resolve().parent.parent
OVERSUB = ROOT / "topologies" / "leaf-spine-2x4-oversub.yaml"


class PlanKernel:
    """A fake of the kernels' route lookup over a plan's own routes: the longest matching route of the namespace,
    an ECMP next hop chosen by the flow's source port (the real hash is the kernel's), else the connected
    subnet. Counts its lookups."""

    def __init__(self, steps) -> None:
        self.routes = [s for s in steps if isinstance(s, AddRoute)]
        self.addresses = [s for s in steps if isinstance(s, AddAddress)]
        self.asked: list[tuple[str, str | None]] = []

    def output_interface(self, netns_name: str, flow: FlowTuple, iif: str | None = None) -> str | None:
        self.asked.append((netns_name, iif))
        dst = ipaddress.ip_address(flow.dst_ip)
        for r in self.routes:
            if r.netns == netns_name and dst in ipaddress.ip_network(r.destination):
                return r.nexthops[flow.src_port % len(r.nexthops)].ifname
        for a in self.addresses:
            if a.netns == netns_name and dst in ipaddress.ip_network(a.cidr, strict=False):
                return a.ifname
        return None


def _plan():
    return build_plan(load_topology_file(OVERSUB), "fp", netem_available=False)


def _flow(info, src: int, dst: int, sport: int) -> FlowTuple:
    return FlowTuple(src, dst, info.endpoint(f"h{src}").address, sport, info.endpoint(f"h{dst}").address, 5000)


def test_done_carries_the_flows_through_json() -> None:
    done = Done(rank=3, peak_rss_kb=100, flows=(FlowTuple(3, 5, "198.18.0.1", 40001, "198.18.0.17", 5000, 2),))
    assert decode_message(encode_message(done)) == done


def test_a_rank_reports_its_sending_tcp_connections_in_their_direction() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    a, b = socket.socketpair()  # in-process ranks: no 5-tuple, no path
    try:
        # only each link's send connection: its receive connection is the peer's sending one
        flows = flow_tuples(1, {(0, 2): PeerLink(send=client, recv=accepted),
                                (1, 2): PeerLink(send=accepted, recv=client), (0, 3): PeerLink.duplex(a)})
        assert flows == (FlowTuple(1, 2, "127.0.0.1", client.getsockname()[1], "127.0.0.1", server.getsockname()[1]),
                         FlowTuple(1, 2, "127.0.0.1", server.getsockname()[1], "127.0.0.1", client.getsockname()[1],
                                   channel=1))
    finally:
        for s in (server, client, accepted, a, b):
            s.close()


def test_each_connection_is_walked_hop_by_hop_asking_only_routing_nodes() -> None:
    plan = _plan()
    kernel = PlanKernel(plan.steps)
    flows = [_flow(plan.info, 0, 4, 40000), _flow(plan.info, 0, 4, 40001), _flow(plan.info, 1, 2, 40000)]
    paths = session_paths(plan.info, flows, "round 1 sweep", kernel)
    assert paths.unresolved == 0
    assert [p.nodes for p in paths.paths] == [("h0", "leaf0", "spine0", "leaf1", "h4"),
                                              ("h0", "leaf0", "spine1", "leaf1", "h4"),
                                              ("h1", "leaf0", "h2")]
    # the sender asks without an input interface; every router with the interface the flow came in on
    assert kernel.asked[:4] == [("genie-fp-h0", None), ("genie-fp-leaf0", "eth0"), ("genie-fp-spine0", "eth0"),
                                ("genie-fp-leaf1", "eth4")]
    assert SessionPaths.from_json(paths.to_json()) == paths


def test_a_path_the_kernel_cannot_give_is_counted_unresolved_and_loopback_left_out() -> None:
    plan = _plan()

    class NoRoute(PlanKernel):
        def output_interface(self, netns_name, flow, iif=None):
            return None if "spine" in netns_name else super().output_interface(netns_name, flow, iif)

    same_host = FlowTuple(0, 1, plan.info.endpoint("h0").address, 1, plan.info.endpoint("h0").address, 2)
    paths = session_paths(plan.info, [_flow(plan.info, 0, 4, 1), same_host], "r", NoRoute(plan.steps))
    assert paths.paths == () and paths.unresolved == 1


def test_the_fabric_model_routes_a_traced_pair_on_its_paths_and_the_rest_by_expectation() -> None:
    net = FabricNetwork(load_topology_file(OVERSUB))
    traced = net.with_paths(SessionPaths("r", (FlowPath(0, 4, ("h0", "leaf0", "spine1", "leaf1", "h4")),
                                               FlowPath(1, 5, ("h1", "leaf0", "spine0", "leaf1", "h5")),
                                               FlowPath(1, 5, ("h1", "leaf0", "spine1", "leaf1", "h5")))))

    def loads(network: FabricNetwork, a: int, b: int) -> dict[tuple[str, str], float]:
        return {(network.resources[r].a, network.resources[r].b): w for r, w in network.routes[network.route(a, b)].loads}

    assert loads(traced, 0, 4) == {("h0", "leaf0"): 1.0, ("leaf0", "spine1"): 1.0, ("spine1", "leaf1"): 1.0,
                                   ("leaf1", "h4"): 1.0}
    # two connections (channels) of one pair: an op of unknown channel half on each of the spines they took
    assert loads(traced, 1, 5)[("leaf0", "spine0")] == 0.5 and loads(traced, 1, 5)[("leaf0", "spine1")] == 0.5
    assert loads(traced, 2, 6) == loads(net, 2, 6)  # not traced: the expected share


def test_an_op_takes_the_path_of_its_own_channels_connection() -> None:
    net = FabricNetwork(load_topology_file(OVERSUB)).with_paths(SessionPaths("r", (
        FlowPath(1, 5, ("h1", "leaf0", "spine0", "leaf1", "h5"), channel=0),
        FlowPath(1, 5, ("h1", "leaf0", "spine1", "leaf1", "h5"), channel=2))))

    def spines(channel: int | None) -> dict[str, float]:
        return {net.resources[r].b: w for r, w in net.routes[net.route(1, 5, channel)].loads
                if net.resources[r].b.startswith("spine")}

    assert spines(0) == {"spine0": 1.0} and spines(2) == {"spine1": 1.0}
    assert spines(None) == spines(7) == {"spine0": 0.5, "spine1": 0.5}  # unknown channel: spread over both
    engine = FlowEngine(net)
    op = CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, 1 << 20)
    (step,) = engine.plan(op, (1, 5), channel=2)
    assert net.routes[int(step.routes[0])] == net.routes[net.route(1, 5, 2)]


def test_calibration_on_the_paths_taken_explains_a_collision_the_expectation_cannot() -> None:
    """Two cross-leaf flows that collided on spine0 measured at twice the uncollided time: fitted on the paths
    they took, the fabric efficiency stays at the link rate; on the expected share it would have to halve."""
    net = FabricNetwork(load_topology_file(OVERSUB))
    collided = SessionPaths("round 1 sweep", (FlowPath(0, 4, ("h0", "leaf0", "spine0", "leaf1", "h4")),
                                              FlowPath(1, 5, ("h1", "leaf0", "spine0", "leaf1", "h5"))))
    size = 4 << 20
    op = CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, size)
    measured_us = max(run_concurrently(FlowEngine(net.with_paths(collided)), [(op, (0, 4)), (op, (1, 5))])) / 1e3
    ms = [Measurement(Collective.SEND_RECV, Algorithm.P2P, 2, size, measured_us, "test", ((0, 4), (1, 5)))]
    traced = calibrate_fabric(ms, net, paths=(collided,))
    assert traced.points[0].residual_pct == pytest.approx(0.0, abs=0.5)
    assert {c.link_class.value: c.efficiency for c in traced.classes}["fabric"] > 0.95
    assert any("ECMP as the sweep's connections took it" in n for n in traced.notes)
    expected = calibrate_fabric(ms, net, ecmp_samples=0)
    fabric = {c.link_class.value: c.efficiency for c in expected.classes}["fabric"]
    assert fabric < 0.8  # the expectation blames the links for the collision


MINI_LEAF_SPINE = """name: mini-leaf-spine
defaults: {bandwidth: 1gbit}
hosts: [{prefix: h, count: 4}]
switches: [{name: leaf0, kind: router}, {name: leaf1, kind: router}, {name: spine0, kind: router},
           {name: spine1, kind: router}]
links:
  - {endpoints: [h0, leaf0]}
  - {endpoints: [h1, leaf0]}
  - {endpoints: [h2, leaf1]}
  - {endpoints: [h3, leaf1]}
  - {endpoints: [leaf0, spine0], bandwidth: 500mbit}
  - {endpoints: [leaf0, spine1], bandwidth: 500mbit}
  - {endpoints: [leaf1, spine0], bandwidth: 500mbit}
  - {endpoints: [leaf1, spine1], bandwidth: 500mbit}
"""
CROSSING_PAIRS = """format: genie-trace
version: 1
ranks: 4
groups: {pair0: [0, 2], pair1: [1, 3]}
program:
  - {id: 0, type: compute, duration: 2ms}
  - {id: 1, type: all_reduce, size: 8MiB, group: "pair{rank % 2}", deps: [0]}
"""


def _session(label: str, spines: dict[tuple[int, int], str]) -> SessionPaths:
    leaf = {0: "leaf0", 1: "leaf0", 2: "leaf1", 3: "leaf1"}
    return SessionPaths(label, tuple(
        FlowPath(a, b, (f"h{a}", leaf[a], spine, leaf[b], f"h{b}"), channel)
        for (a, b), spine in spines.items() for channel in range(4)))


def test_the_experiments_fabric_row_pairs_each_replay_iteration_with_its_sessions_paths(tmp_path: Path) -> None:
    """Two pairs' all-reduces cross the spines at once: in one replay session both took spine0 (collided), in
    the other one spine each. The row estimates each iteration on its own session's paths and takes the median
    of those as of the replay; the note keeps the mean over hash draws."""
    from statistics import median

    from astra_adapter.experiment import Statistic, prepare
    from astra_adapter.experiment_spec import load_experiment
    from astra_adapter.fabric.estimate import estimate_fabric
    from astra_adapter.fabric.experiment import evaluate_fabric, session_of_each_iteration

    assert session_of_each_iteration(2, 4) == (0, 0, 1, 1) and session_of_each_iteration(2, 3) is None
    (tmp_path / "topo.yaml").write_text(MINI_LEAF_SPINE)
    (tmp_path / "trace.yaml").write_text(CROSSING_PAIRS)
    (tmp_path / "exp.yaml").write_text("name: pairs\nworkload: {trace: trace.yaml}\ntopology: topo.yaml\nrounds: 2\n"
                                       "sweep: {iterations: 3, warmup: 1, grid: [1MiB]}\n"
                                       "replay: {iterations: 2, warmup: 1}\n")
    prepared = prepare(load_experiment(tmp_path / "exp.yaml"))
    assert prepared.fabric
    measurements = tuple(Measurement(op.collective, op.algorithm, op.ranks, size, 8.0 * size / 500e6 * 1e6,
                                     groups=case.groups)
                         for case in prepared.sweep for size in case.sizes for op in [case.op(size)])
    collided = _session("round 1 replay", {(0, 2): "spine0", (2, 0): "spine0", (1, 3): "spine0", (3, 1): "spine0"})
    apart = _session("round 2 replay", {(0, 2): "spine0", (2, 0): "spine0", (1, 3): "spine1", (3, 1): "spine1"})
    replay = (40_000_000, 41_000_000, 20_000_000, 21_000_000)
    cal, est, row = evaluate_fabric(prepared, measurements, replay, replay_paths=(collided, apart))
    sessions = [estimate_fabric(prepared.trace, prepared.topology, cal.params, paths=(s,)).iteration_ns
                for s in (collided, apart)]
    assert sessions[0] > 1.5 * sessions[1]  # the collision halves the spine share of both all-reduces
    assert row.estimated_s * 1e9 == pytest.approx(median([sessions[0]] * 2 + [sessions[1]] * 2), rel=1e-9)
    assert row.measured_s * 1e9 == median(replay)
    over_draws = estimate_fabric(prepared.trace, prepared.topology, cal.params).iteration_ns
    assert est.iteration_ns == over_draws  # estimate-fabric.csv: the mean over draws, for an unknown run
    (note,) = [n for n in est.notes if n.startswith("on each replay session's own paths")]
    assert f"{sessions[0] / 1e6:.1f}, {sessions[1] / 1e6:.1f} ms" in note
    assert "those sessions measured 40.5, 20.5 ms" in note and f"{over_draws / 1e6:.1f} ms" in note
    _, _, best = evaluate_fabric(prepared, measurements, replay, Statistic.BEST, replay_paths=(collided, apart))
    assert best.estimated_s * 1e9 == pytest.approx(min(sessions)) and best.measured_s * 1e9 == min(replay)
