"""The fabric model's standing queues (astra_adapter.fabric.queues): a step that starts while another op's
flow keeps a link it crosses saturated waits for that flow's queued window - derived from the testbed's TCP
buffers and the link's queue limit, nothing fitted."""

from __future__ import annotations

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
