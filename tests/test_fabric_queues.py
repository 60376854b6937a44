"""The fabric model's standing queues (astra_adapter.fabric.queues): a step that starts while another op's
flow keeps a link it crosses saturated waits for that flow's queued window - derived from the testbed's TCP
buffers and the link's queue limit, nothing fitted."""

from __future__ import annotations

import numpy as np
import pytest

from astra_adapter.fabric.flows import WIRE_BYTES_PER_PAYLOAD_BYTE, FabricParams, FlowEngine
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.measurements import CommOp
from genie.core.collective import Algorithm, Collective
from genie.core.tcp_window import DEFAULT_TCP_RMEM, DEFAULT_TCP_WMEM, queue_limit_bytes, window_bytes
from genie.topology.reader import load_topology

FABRIC_BYTES_PER_NS = 500e6 / 8 / 1e9


def _dumbbell(fabric: str = "") -> FabricNetwork:
    return FabricNetwork(load_topology(
        "name: d\ndefaults: {bandwidth: 1gbit}\nhosts: [{name: h0}, {name: h1}, {name: h2}, {name: h3}]\n"
        "switches: [{name: sw0}, {name: sw1}]\nlinks:\n  - {endpoints: [h0, sw0]}\n  - {endpoints: [h1, sw0]}\n"
        "  - {endpoints: [h2, sw1]}\n  - {endpoints: [h3, sw1]}\n"
        f"  - {{endpoints: [sw0, sw1], bandwidth: 500mbit{fabric}}}\n"))


def _message(size_bytes: int) -> CommOp:
    return CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, size_bytes)


def _small_after_long(network: FabricNetwork, long_pair: tuple[int, int], small_pair: tuple[int, int],
                      long_bytes: int = 100_000_000, *, queues: bool = True) -> float:
    """The latency a 10 kB message starts with, 1 ms after a long message began."""
    engine = FlowEngine(network, FabricParams(standing_queues=queues))
    engine.start(engine.plan(_message(long_bytes), long_pair))
    engine.horizon_ns()
    engine.advance(1e6)
    return engine.start(engine.plan(_message(10_000), small_pair)).latency_ns


def test_the_testbed_window_is_the_send_buffer_or_half_the_receive_buffer() -> None:
    assert window_bytes() == min(DEFAULT_TCP_WMEM[2], DEFAULT_TCP_RMEM[2] // 2) == 3 * 2**20
    assert queue_limit_bytes(100, 1500) == 150_000 and queue_limit_bytes(None, 1500) > window_bytes()


def test_a_message_behind_a_saturated_link_waits_for_the_standing_window() -> None:
    wait = _small_after_long(_dumbbell(), (0, 2), (1, 3))
    assert wait == pytest.approx(window_bytes() / FABRIC_BYTES_PER_NS)  # 3 MiB at 500 Mbit/s: 50.3 ms


def test_the_queue_holds_no_more_than_the_flow_has_left() -> None:
    left = 1_500_000 - 1e6 * FABRIC_BYTES_PER_NS / WIRE_BYTES_PER_PAYLOAD_BYTE  # payload left after 1 ms
    wait = _small_after_long(_dumbbell(), (0, 2), (1, 3), long_bytes=1_500_000)
    assert wait == pytest.approx(left * WIRE_BYTES_PER_PAYLOAD_BYTE / FABRIC_BYTES_PER_NS, rel=1e-6)


def test_the_link_s_queue_limit_bounds_the_wait() -> None:
    wait = _small_after_long(_dumbbell(", queue: 100"), (0, 2), (1, 3))
    assert wait == pytest.approx(100 * 1500 / FABRIC_BYTES_PER_NS)


def test_no_wait_on_links_that_are_not_saturated_or_without_queues() -> None:
    network = _dumbbell()
    assert _small_after_long(network, (0, 2), (0, 1)) == 0  # h0 -> sw0 carries the long flow at half its rate
    assert _small_after_long(network, (0, 2), (3, 1)) == 0  # the other direction of the full link
    assert _small_after_long(network, (0, 2), (1, 3), queues=False) == 0  # the single-job model: off


def test_queue_packets_parse_in_the_topology() -> None:
    network = _dumbbell(", queue: 100")
    fabric = [r for r in network.resources if {r.a, r.b} == {"sw0", "sw1"}]
    assert {r.queue_limit_bytes for r in fabric} == {150_000}


# ---- measured 2026-12-04 on the oversubscribed leaf-spine (benchmarks/README.md "Job mixes": the spread TP job) --

def _engine(network: FabricNetwork, **params) -> FlowEngine:
    return FlowEngine(network, FabricParams(standing_queues=True, **params))


def _after_longs(engine: FlowEngine, pairs: list[tuple[int, int]], op: CommOp, members: tuple[int, ...],
                 long_bytes: int = 100_000_000, after_ns: float = 200e6) -> float:
    """The latency ``op`` on ``members`` starts with, ``after_ns`` after long messages on ``pairs`` were started
    (one after the other: each but the first first waits behind the others' queues)."""
    for pair in pairs:
        engine.start(engine.plan(_message(long_bytes), pair))
    t = 0.0
    while t < after_ns:
        dt = min(engine.horizon_ns(), after_ns - t)
        engine.advance(dt)
        t += dt
    assert all(not o.done and o.latency_ns == 0 for o in engine.ops)  # every long flow is moving
    return engine.start(engine.plan(op, members)).latency_ns


def test_contended_load_reads_a_link_the_solve_filled_as_full() -> None:
    from astra_adapter.fabric.queues import contended_load

    moved = np.array([0.5 / 1.01, 0.5, 0.2])  # two flows at the contended rate; one flow; two flows, not full
    flows_on = np.array([2.0, 1.0, 2.0])
    assert contended_load(moved, flows_on, 0.01) == pytest.approx([0.5, 0.5, 0.202])
    assert contended_load(moved, flows_on, 0.0) == pytest.approx(moved)


def test_two_flows_sharing_a_link_keep_both_windows_queued_with_flow_contention() -> None:
    # h0->h2 and h1->h3 share sw0->sw1; with flow contention the max-min solve fills it only to rate / 1.01: the
    # link is saturated all the same, and a message across it waits for both windows (it waited for none)
    for contention in (0.0, 0.01):
        wait = _after_longs(_engine(_dumbbell(), flow_contention=contention), [(0, 2), (1, 3)], _message(10_000),
                            (1, 2))
        assert wait == pytest.approx(2 * window_bytes() / FABRIC_BYTES_PER_NS), contention


def test_a_step_pays_the_mean_wait_of_flows_with_one_receiver_each_else_the_longest() -> None:
    from astra_adapter.fabric.queues import step_wait_ns

    assert step_wait_ns(np.array([100.0, 0.0]), np.array([0, 1])) == 50.0  # a pair exchanging: chained receives
    assert step_wait_ns(np.array([100.0, 0.0, 20.0]), np.array([2, 2, 1])) == 100.0  # rank 2 waits for both
    assert step_wait_ns(np.zeros(0), np.zeros(0, dtype=np.int64)) == 0.0


def test_a_pair_s_all_reduce_behind_a_queue_one_way_waits_it_once_per_two_steps() -> None:
    # measured: a TP pair's 512 B all-reduce took ~100 ms with one direction behind a 6 MiB queue (100 ms) and
    # ~205 ms with both; the longest wait per step gave 200 ms for the first
    engine = _engine(_dumbbell())
    allreduce = CommOp(Collective.ALL_REDUCE, Algorithm.RING, 2, 512)
    wait = _after_longs(engine, [(0, 2)], allreduce, (1, 3))
    assert wait == pytest.approx(window_bytes() / FABRIC_BYTES_PER_NS / 2)  # (50.3 ms + 0) / 2 on each step
    both = _after_longs(_engine(_dumbbell()), [(0, 2), (2, 0)], allreduce, (1, 3))
    assert both == pytest.approx(window_bytes() / FABRIC_BYTES_PER_NS)


def test_a_ring_connection_s_later_steps_keep_its_queue_between_steps() -> None:
    from astra_adapter.fabric.queues import later_step_bytes

    engine = _engine(_dumbbell())
    steps = engine.plan(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 4, 4_000_000), (0, 1, 2, 3))
    later = later_step_bytes(steps)
    chunk = 1_000_000 * WIRE_BYTES_PER_PAYLOAD_BYTE
    assert len(steps) == 6
    for k, step in enumerate(steps):  # every rank sends to the same peer in each of the ring's 2(n-1) steps
        assert later[k] == pytest.approx(np.full(len(step.routes), (len(steps) - 1 - k) * chunk))


def test_a_queue_on_the_sender_s_own_link_is_what_tcp_small_queues_lets_in() -> None:
    from genie.core.tcp_window import GSO_MAX_BYTES, sender_queue_bytes

    assert sender_queue_bytes(1_000_000_000) == 2 * GSO_MAX_BYTES  # 1 ms at 1 Gbit/s is less than two GSO packets
    assert sender_queue_bytes(100_000_000_000) == 12_500_000
    star = FabricNetwork(load_topology(
        "name: s\ndefaults: {bandwidth: 1gbit}\nhosts: [{name: h0}, {name: h1}, {name: h2}]\n"
        "switches: [{name: sw}]\nlinks:\n  - {endpoints: [h0, sw]}\n  - {endpoints: [h1, sw]}\n"
        "  - {endpoints: [h2, sw]}\n"))
    host_bytes_per_ns = 1e9 / 8 / 1e9
    # h0 -> h1 fills h0's own link (and sw -> h1): its queue is in h0's qdisc, bounded by TCP small queues
    assert _after_longs(_engine(star), [(0, 1)], _message(10_000), (0, 2)) == \
        pytest.approx(2 * GSO_MAX_BYTES / host_bytes_per_ns)
    # h1 -> h0 the other way round: the first bottleneck along its path is h1's link, not sw -> h0 (a lower
    # resource index), so nothing waits on the way into h0
    assert _after_longs(_engine(star), [(1, 0)], _message(10_000), (2, 0)) == 0
