"""A one-step op (an all-to-all, a send/recv) per connection in a mix's fabric model (FabricParams.one_step_chains,
astra_adapter.fabric.chains): each flow waits behind the queues on its own path, and each rank leaves the op when
its own receives are in and its sends are written into its sockets (all but the send buffer sent) - the replay's
rank returns then, as NCCL's kernel on that rank does - not when the op's slowest flow is through. Expected times
worked out from the link rates (max-min shares, a window queued ahead), not read off the model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.tcp_window import send_buffer_bytes, window_bytes
from genie.core.trace import CommType, ProcessGroup, collective_node, compute_node, make_trace
from genie.topology.reader import load_topology

from astra_adapter.fabric.chain_flows import ChainFlowEngine
from astra_adapter.fabric.chains import RingOp, one_step
from astra_adapter.fabric.flat_flows import FlatFlowEngine, engine_for
from astra_adapter.fabric.flows import WIRE_BYTES_PER_PAYLOAD_BYTE as WIRE, FabricParams, FlowEngine
from astra_adapter.fabric.mix import mix_play_params
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from astra_adapter.measurements import CommOp

MS = 1e6
TRUNK_BYTES_PER_NS = 500e6 / 8 / 1e9
BIG, SMALL = 2_000_000, 500_000  # leaf0's ranks send BIG to each leaf1 rank, leaf1's send SMALL back
SPLITS = [(0, 0, BIG, BIG), (0, 0, BIG, BIG), (SMALL, SMALL, 0, 0), (SMALL, SMALL, 0, 0)]
PRE_NS, POST_NS = 1_000_000, 10_000_000


def _dumbbell() -> FabricNetwork:
    """h0, h1, h4, h5 on sw0 and h2, h3, h6, h7 on sw1 (1 Gbit/s host links), sw0 - sw1 at 500 Mbit/s; no delays."""
    hosts = ", ".join(f"{{name: h{i}}}" for i in range(8))
    links = "".join(f"  - {{endpoints: [h{i}, sw{0 if i in (0, 1, 4, 5) else 1}]}}\n" for i in range(8))
    return FabricNetwork(load_topology(f"name: d\ndefaults: {{bandwidth: 1gbit}}\nhosts: [{hosts}]\n"
                                       "switches: [{name: sw0}, {name: sw1}]\nlinks:\n" + links
                                       + "  - {endpoints: [sw0, sw1], bandwidth: 500mbit}\n"))


def _trace(beside_ring: bool):
    """Ranks 0-3 (h0-h3): 1 ms of compute, the uneven all-to-all, 10 ms of compute. Beside a ring: ranks 4 and 6
    (h4, h6) run a 40 MB ring all-reduce from 0, its connections crossing sw0 - sw1 both ways."""
    nodes = [[compute_node(0, "pre", duration_ns=PRE_NS),
              collective_node(1, "a2a", comm_type=CommType.ALL_TO_ALL, size_bytes=sum(SPLITS[r]), process_group="ep",
                              send_split_bytes=SPLITS[r], data_deps=(0,)),
              compute_node(2, "post", duration_ns=POST_NS, data_deps=(1,))] for r in range(4)]
    groups = [ProcessGroup("ep", (0, 1, 2, 3))]
    if beside_ring:
        groups.append(ProcessGroup("dp", (4, 6)))
        ring = [collective_node(0, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=40_000_000, process_group="dp",
                                algorithm=Algorithm.RING)]
        nodes += [ring, [compute_node(0, "idle", duration_ns=1)], ring, [compute_node(0, "idle", duration_ns=1)]]
    return make_trace(nodes, groups=tuple(groups))


def _a2a_ends_ms(beside_ring: bool, engine) -> tuple[list[float], list[float]]:
    timeline = play_on_fabric(_trace(beside_ring), engine)
    return ([timeline.spans[r][1][2] / MS for r in range(4)], [timeline.spans[r][2][2] / MS for r in range(4)])


@pytest.mark.parametrize("reference", [False, True])
def test_an_uneven_all_to_all_s_ranks_leave_at_their_own_receives(reference) -> None:
    # the trunk carries 4 flows each way, 125 Mbit/s each (the host links have room): leaf1's SMALL blocks into
    # ranks 0, 1 are in after SMALL / 125 Mbit/s; ranks 0, 1 wrote their BIG blocks into their sockets at once
    # (less than the send buffer) and go on then; ranks 2, 3 wait for the BIG blocks, BIG / 125 Mbit/s
    params = mix_play_params(FabricParams())
    engine = FlowEngine(_dumbbell(), params) if reference else engine_for(_dumbbell(), params)
    share = TRUNK_BYTES_PER_NS / 4
    assert BIG * WIRE < send_buffer_bytes(1_000_000_000, 0) * WIRE
    leave = [PRE_NS + SMALL * WIRE / share] * 2 + [PRE_NS + BIG * WIRE / share] * 2
    ends, post = _a2a_ends_ms(False, engine)
    assert ends == pytest.approx([t / MS for t in leave], rel=1e-9)
    assert post == pytest.approx([(t + POST_NS) / MS for t in leave], rel=1e-9)  # the next node starts then


@pytest.mark.parametrize("reference", [False, True])
def test_beside_a_ring_each_flow_waits_its_own_path_s_queue(reference) -> None:
    # at 1 ms the ring's connections keep a window (3 MiB) each in the trunk's queue each way (the trunk is their
    # bottleneck, 500 Mbit/s each); every all-to-all flow crosses the trunk and waits that window out, then 5
    # flows share each direction (100 Mbit/s each): ranks 0, 1 leave when the SMALL blocks are in, 2 and 3 when
    # the BIG ones are (lock step: every rank at the BIG blocks' end)
    params = mix_play_params(FabricParams())
    engine = FlowEngine(_dumbbell(), params) if reference else engine_for(_dumbbell(), params)
    wait = window_bytes() / TRUNK_BYTES_PER_NS
    share = TRUNK_BYTES_PER_NS / 5
    leave = [PRE_NS + wait + SMALL * WIRE / share] * 2 + [PRE_NS + wait + BIG * WIRE / share] * 2
    ends, _ = _a2a_ends_ms(True, engine)
    assert ends == pytest.approx([t / MS for t in leave], rel=1e-9)
    locked, _ = _a2a_ends_ms(True, engine_for(_dumbbell(), replace(params, one_step_chains=False)))
    assert locked == pytest.approx([leave[-1] / MS] * 4, rel=1e-9)


def test_a_sender_with_more_than_its_socket_holds_leaves_once_only_that_is_left() -> None:
    # a 10 MB send/recv h0 -> h2 across the trunk (500 Mbit/s): the receiver leaves at its last byte, the sender
    # once all but its socket's send buffer is sent
    engine = FlowEngine(_dumbbell(), FabricParams(one_step_chains=True))
    op = engine.start(engine.plan(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, 10_000_000), (0, 2)))
    assert isinstance(op, RingOp) and op.count == 1
    left, t = {}, 0.0
    while len(left) < 2:
        for rank in {0, 2} - engine.busy_ranks(op) - left.keys():
            left[rank] = t
        if len(left) < 2:
            dt = engine.horizon_ns()
            engine.advance(dt)
            t += dt
    socket = send_buffer_bytes(1_000_000_000, 0) * WIRE
    assert left[0] == pytest.approx((10_000_000 * WIRE - socket) / TRUNK_BYTES_PER_NS, rel=1e-9)
    assert left[2] == pytest.approx(10_000_000 * WIRE / TRUNK_BYTES_PER_NS, rel=1e-9)


def test_one_step_chains_are_the_mix_s_and_run_on_the_chain_engine() -> None:
    params = mix_play_params(FabricParams())
    assert params.one_step_chains and params.ring_chains
    assert not mix_play_params(FabricParams(), standing_queues=False).one_step_chains  # the flat engine's lock step
    assert type(engine_for(_dumbbell(), FabricParams(one_step_chains=True))) is ChainFlowEngine
    with pytest.raises(ValueError):  # the flat engine has no per-connection state
        FlatFlowEngine(_dumbbell(), FabricParams(one_step_chains=True))
    engine = FlowEngine(_dumbbell(), FabricParams(one_step_chains=True))
    a2a = engine.plan(CommOp(Collective.ALL_TO_ALL, Algorithm.DIRECT, 4, 4_000_000), (0, 1, 2, 3))
    ring = engine.plan(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 4, 4_000_000), (0, 1, 2, 3))
    assert one_step(a2a) and not one_step(ring)
    assert isinstance(engine.start(a2a), RingOp) and not isinstance(engine.start(ring), RingOp)  # no ring chains


def test_outside_a_mix_an_all_to_all_stays_in_lock_step() -> None:
    # a single job's estimate (FabricParams without one_step_chains, the flat engine): every rank at the BIG end
    ends, _ = _a2a_ends_ms(False, engine_for(_dumbbell(), FabricParams()))
    assert ends == pytest.approx([(PRE_NS + BIG * WIRE / (TRUNK_BYTES_PER_NS / 4)) / MS] * 4, rel=1e-9)
