"""A coflow ring step's next step entered inside the compiled event loop (fairshare_core.FlowEvents._enter, where
the next step is the same step object, pays no latency and is not the op's last: ``flat_slots.repeats_of``) against
the same engine's events through the player's Python loop (``compiled_loop = False``), which enters each step in
Python: the op's step counter, its moving flows and its end time at every return, the entries counted; whole coflow
plays (uneven MoE on a 3-tier fabric with and without ECMP hash draws, flow contention, the estimates' end
precision, message overhead; the slots compacted at every chance) bit for bit with the same events and solves
(pure)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.topology import LinkShape
from genie.topology.builders import star

from astra_adapter.fabric import flat_slots
from astra_adapter.fabric.coflow import RingModel
from astra_adapter.fabric.fairshare import FlowEvents
from astra_adapter.fabric.flat_flows import FlatFlowEngine
from astra_adapter.fabric.flat_slots import repeats_of
from astra_adapter.fabric.flows import END_PRECISION, FabricParams
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from astra_adapter.measurements import CommOp
from fabric_cases import fabric, moe

pytestmark = pytest.mark.skipif(FlowEvents is None, reason="astra_adapter.fabric.fairshare_core is not built "
                                "(pip install -e . builds it): the compiled event loop runs only there")

COFLOW = FabricParams(ring_model=RingModel.COFLOW)
RING = tuple(range(8))


class PythonLoop(FlatFlowEngine):
    compiled_loop = False


@pytest.fixture(params=["grown", "compacted"])
def slots(request, monkeypatch):
    """The slots as they run, or compacted whenever a slot is given up (the arrays bound again each time)."""
    if request.param == "compacted":
        monkeypatch.setattr(flat_slots, "_MIN_COMPACT", -1)
    return request.param


def _star9() -> FabricNetwork:
    return FabricNetwork(star(9, shape=LinkShape(rate_bps=1_000_000_000)))


def _all_reduce(size: int = 8_000_000) -> CommOp:
    return CommOp(Collective.ALL_REDUCE, Algorithm.RING, len(RING), size)


def _message(size: int) -> CommOp:
    return CommOp(Collective.SEND_RECV, Algorithm.AUTO, 2, size)


def _state(op) -> tuple:
    return op.step, op.active_count, op.latency_ns, op.done, op.left.tolist(), op.active.tolist()


def _remove_done(engine) -> None:
    for op in [o for o in engine.ops if o.done]:  # (as run_concurrently and the player remove them)
        engine.remove(op)


def _python_states(engine, ops):
    """Each op's state after every event of the Python loop (``horizon_ns`` / ``advance``), by the clock."""
    started = [engine.start(engine.plan(op, members)) for op, members in ops]
    t, out = 0.0, {}
    while any(not o.done for o in started):
        _remove_done(engine)
        dt = engine.horizon_ns()
        engine.advance(dt)
        t += dt
        out[t] = [_state(o) for o in started]
    return out


def _compiled_states(engine, ops):
    """Each op's state at every return of the compiled loop (``flow_events``; a Python event where it plays none)."""
    started = [engine.start(engine.plan(op, members)) for op, members in ops]
    t, out = 0.0, {}
    while any(not o.done for o in started):
        _remove_done(engine)
        after = engine.flow_events(t, float("inf"))
        if after is None:
            dt = engine.horizon_ns()
            engine.advance(dt)
            after = t + dt
        t = after
        out[t] = [_state(o) for o in started]
    return out


def test_the_repeats_of_a_coflow_ring_all_reduce_are_its_steps_up_to_the_last():
    network = _star9()
    steps = FlatFlowEngine(network, COFLOW).plan(_all_reduce(), RING)
    assert len(steps) == 14 and all(s is steps[0] for s in steps)  # 2 (n - 1) steps, one memoised object
    assert repeats_of(steps) == list(range(12, 0, -1)) + [0, 0]  # step 12 enters 13, the last: Python's
    # a step paying a latency is entered in Python (the latency first); lock step is left to Python
    assert repeats_of(FlatFlowEngine(network, replace(COFLOW, message_overhead_ns=3000.0)).plan(_all_reduce(),
                                                                                                  RING)) == [0] * 14
    assert repeats_of(FlatFlowEngine(network).plan(_all_reduce(), RING)) == [0] * 14
    # the first step with the endpoint delay is its own object: the others still repeat
    delayed = FlatFlowEngine(network, replace(COFLOW, endpoint_delay_ns=20000.0)).plan(_all_reduce(), RING)
    assert delayed[0] is not delayed[1] and repeats_of(delayed) == [0] + list(range(11, 0, -1)) + [0, 0]


def test_a_ring_alone_enters_every_step_but_the_last_in_c_at_the_python_loops_times():
    network = _star9()
    reference = PythonLoop(network, COFLOW)
    python = _python_states(reference, [(_all_reduce(), RING)])
    engine = FlatFlowEngine(network, COFLOW)
    compiled = _compiled_states(engine, [(_all_reduce(), RING)])
    assert engine._events.entered == 12
    # one return after step 12's end (step 13, the last, entered in Python), one at the end
    assert len(compiled) == 2 and len(python) == 14
    (t1, first), (t2, last) = compiled.items()
    assert first == python[t1] and first[0][0] == 13  # the step counter caught up: 12 steps entered in C
    assert last == python[t2] and list(python)[-1] == t2 and last[0][3]
    assert engine.events == reference.events == 14 and engine.solves == reference.solves


def test_a_ring_beside_messages_keeps_its_step_counter_and_end_time_at_every_return():
    """Messages ending in the ring's steps return to Python (a step's end that is no ring's): there the ring op's
    step, moving flows and bytes left are the Python loop's at that instant."""
    network = _star9()
    ops = [(_all_reduce(), RING), (_message(3_000_000), (8, 1)), (_message(7_000_000), (8, 2)),
           (_message(12_000_000), (0, 8))]
    reference = PythonLoop(network, COFLOW)
    python = _python_states(reference, ops)
    engine = FlatFlowEngine(network, COFLOW)
    compiled = _compiled_states(engine, ops)
    assert 0 < engine._events.entered < 12  # some steps entered in C, some in Python (an event with a message's end)
    assert len(compiled) >= 4
    for t, states in compiled.items():
        assert states == python[t], t  # the same instant, the same state of every op
    ring_end = [t for t, states in python.items() if states[0][3]][0]
    assert ring_end in compiled and compiled[ring_end][0][3]  # the ring ends at the Python loop's instant
    assert engine.events == reference.events and engine.solves == reference.solves


def _same_play(trace, network, params):
    engine = FlatFlowEngine(network, params)
    got = play_on_fabric(trace, engine)
    python = PythonLoop(network, params)
    want = play_on_fabric(trace, python)
    assert got.spans == want.spans and got.ranks == want.ranks  # every node's start and end, bit for bit
    assert engine.solves == python.solves and engine.events == python.events
    assert engine._live.refills == python._live.refills and \
        engine._live.routes_refilled == python._live.routes_refilled
    return engine


@pytest.mark.parametrize("params", [COFLOW, replace(COFLOW, flow_contention=0.05),
                                    replace(COFLOW, end_precision=END_PRECISION)])
@pytest.mark.parametrize("seed", [None, 2])
def test_an_uneven_moe_play_entering_ring_steps_in_c_is_the_python_loops(slots, params, seed):
    trace = moe(seed=1 if seed is None else seed)
    engine = _same_play(trace, FabricNetwork(fabric(), hash_seed=seed), params)
    assert engine._events.entered > 100  # the DP rings' steps (the all-to-alls' are not one step repeated)


def test_with_a_step_latency_no_ring_step_is_entered_in_c(slots):
    params = replace(COFLOW, message_overhead_ns=3000.0, endpoint_delay_ns=20000.0)
    engine = _same_play(moe(seed=1), FabricNetwork(fabric(), hash_seed=2), params)
    assert engine._events.entered == 0


def test_under_lock_step_no_ring_step_is_entered_in_c():
    engine = _same_play(moe(seed=1), FabricNetwork(fabric(), hash_seed=2), FabricParams())
    assert engine._events.entered == 0 and engine.events > 0


def test_the_slots_entered_in_c_stay_consistent_after_a_compaction(monkeypatch):
    """The entries left per slot move with it when the arrays are compacted (every slot given up compacts)."""
    monkeypatch.setattr(flat_slots, "_MIN_COMPACT", -1)
    network = _star9()
    ops = [(_message(2_000_000), (8, 3)), (_all_reduce(), RING), (_message(5_000_000), (8, 5))]
    python = _python_states(PythonLoop(network, COFLOW), ops)
    engine = FlatFlowEngine(network, COFLOW)
    compiled = _compiled_states(engine, ops)
    assert engine._events.entered > 0
    for t, states in compiled.items():
        assert states == python[t], t
    slots = engine._slots
    assert np.all(slots._again[:len(slots.ops)] >= 0)
