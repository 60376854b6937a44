"""The congestion-aware network (links, queues, routes) and its mirrored run (one rank standing for all)."""

from __future__ import annotations

import heapq
from dataclasses import replace

import pytest

from astra_adapter.config import CollectiveImpl, ImplKind, NetworkBackend, NetworkConfig, NetworkDim, SystemConfig, \
    TopologyKind
from astra_adapter.estimate import estimate
from astra_adapter.links import LinkNetwork
from genie.core.errors import GenieError
from genie.core.trace import CommType, ProcessGroup, collective_node, compute_node, make_trace

AWARE = NetworkBackend.CONGESTION_AWARE
GB_PER_S = 1.0  # 2^30 / 1e9 bytes per ns


def _net(kind: TopologyKind, n: int, latency_ns: float = 100.0) -> NetworkConfig:
    return NetworkConfig((NetworkDim(kind, n, GB_PER_S, latency_ns),))


class _Clock:
    """A minimal event loop for LinkNetwork alone."""

    def __init__(self) -> None:
        self.heap: list = []
        self.seq = 0
        self.arrivals: list[tuple[int, str]] = []

    def schedule(self, t: int, callback, argument) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, callback, argument))

    def arrived(self, t: int, name: str) -> None:
        self.arrivals.append((t, name))

    def run(self) -> list[tuple[int, str]]:
        while self.heap:
            t, _, callback, argument = heapq.heappop(self.heap)
            callback(t, argument)
        return self.arrivals


def test_routes() -> None:
    ring = LinkNetwork(_net(TopologyKind.RING, 8), lambda *_: None)
    assert ring.route(0, 3) == (0, 1, 2, 3)
    assert ring.route(0, 5) == (0, 7, 6, 5)
    assert ring.route(0, 4) == (0, 1, 2, 3, 4)  # a tie goes clockwise
    assert LinkNetwork(_net(TopologyKind.SWITCH, 4), lambda *_: None).route(1, 3) == (1, 4, 3)
    assert LinkNetwork(_net(TopologyKind.FULLY_CONNECTED, 4), lambda *_: None).route(1, 3) == (1, 3)
    with pytest.raises(GenieError, match="only supports 1-dim"):
        LinkNetwork(NetworkConfig((NetworkDim(TopologyKind.RING, 2, 1.0, 1.0),) * 2), lambda *_: None)


def test_a_busy_link_queues_and_a_switch_stores_and_forwards() -> None:
    size = 1 << 20  # 2^20 / (2^30 / 1e9) = 976562.5 ns of serialisation
    ser, arrive = 976_562, int(100.0 + size / (2**30 / 1e9))
    clock = _Clock()
    fc = LinkNetwork(_net(TopologyKind.FULLY_CONNECTED, 3), clock.schedule)
    fc.send(0, 0, 1, size, clock.arrived, "a")
    fc.send(0, 0, 1, size, clock.arrived, "b")  # same link: waits until the first frees it
    fc.send(0, 0, 2, size, clock.arrived, "c")  # another link: in parallel
    assert sorted(clock.run()) == [(arrive, "a"), (arrive, "c"), (ser + arrive, "b")]
    clock = _Clock()
    switch = LinkNetwork(_net(TopologyKind.SWITCH, 4), clock.schedule)
    switch.send(0, 0, 1, size, clock.arrived, "x")
    switch.send(0, 2, 1, size, clock.arrived, "y")  # shares the switch's link down to NPU 1
    assert clock.run() == [(2 * arrive, "x"), (arrive + ser + arrive, "y")]


def _trace(n: int, comm: CommType, groups=()) -> object:
    nodes, prev = [], None
    for i in range(3):
        nodes.append(compute_node(len(nodes), f"c{i}", duration_ns=3_000 * (i + 1),
                                  data_deps=() if prev is None else (prev,)))
        prev = len(nodes) - 1
        nodes.append(collective_node(len(nodes), f"x{i}", comm_type=comm, size_bytes=1 << 20, data_deps=(prev,)))
        if i % 2:
            prev = len(nodes) - 1
    return make_trace([list(nodes) for _ in range(n)], groups=groups)


def _system(impl: ImplKind, splits: int, active: int) -> SystemConfig:
    chosen = (CollectiveImpl(impl),)
    return SystemConfig(endpoint_delay_ns=10, preferred_dataset_splits=splits, active_chunks_per_dimension=active,
                        all_reduce_impl=chosen, all_gather_impl=chosen, reduce_scatter_impl=chosen,
                        all_to_all_impl=chosen, local_mem_bw_gb_per_s=1600.0)


def _per_rank(est) -> list[tuple]:
    return [(r.finish_cycles, r.exposed_comm_cycles, r.type_times, r.overlap) for r in est.result.by_rank()]


@pytest.mark.parametrize("kind", list(TopologyKind), ids=lambda k: k.value)
@pytest.mark.parametrize("comm", [CommType.ALL_REDUCE, CommType.ALL_GATHER, CommType.REDUCE_SCATTER,
                                  CommType.ALL_TO_ALL], ids=lambda c: c.name)
@pytest.mark.parametrize("impl", [ImplKind.RING, ImplKind.DIRECT], ids=lambda i: i.value)
def test_mirrored_run_equals_every_rank_simulated(kind: TopologyKind, comm: CommType, impl: ImplKind) -> None:
    for n, splits, active in ((8, 4, 2), (16, 1, 1)):
        trace, system, net = _trace(n, comm), _system(impl, splits, active), _net(kind, n, 500.0)
        full = estimate(trace, system, net, backend=AWARE, symmetry=False)
        mirrored = estimate(trace, system, net, backend=AWARE, symmetry=True)
        single_source = kind is TopologyKind.FULLY_CONNECTED or impl is ImplKind.RING
        assert mirrored.simulated_ranks == (1 if single_source else n)
        assert _per_rank(mirrored) == _per_rank(full)


def test_no_mirror_with_a_smaller_group_or_a_positional_algorithm() -> None:
    groups = (ProcessGroup("half", (0, 1, 2, 3)), ProcessGroup("other", (4, 5, 6, 7)))
    nodes = [[collective_node(0, "g", comm_type=CommType.ALL_REDUCE, size_bytes=1 << 16,
                              process_group="half" if r < 4 else "other")] for r in range(8)]
    net, system = _net(TopologyKind.SWITCH, 8), _system(ImplKind.RING, 1, 1)
    assert estimate(make_trace(nodes, groups=groups), system, net, backend=AWARE, symmetry=True).simulated_ranks == 8
    hd = replace(system, all_reduce_impl=(CollectiveImpl(ImplKind.HALVING_DOUBLING),))
    est = estimate(_trace(8, CommType.ALL_REDUCE), hd, _net(TopologyKind.FULLY_CONNECTED, 8), backend=AWARE,
                   symmetry=True)
    assert est.simulated_ranks == 8
