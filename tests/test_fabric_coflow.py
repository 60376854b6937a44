"""The coflow ring model (astra_adapter.fabric.coflow, ``FabricParams.ring_model``): a ring step's connections as one
flow on their summed route - its rate the max-min share of that route (hand-computed on a star and on two switches),
its members ending together at one event, its ranks busy until then; the steps it does not apply to unchanged; whole
MoE and pipeline plays on every engine that takes it (the reference, the flat one with one solve, with and without
slots, the compiled loop and the Python loop) agreeing as they do under lock step; not with ring chains or standing
queues; `genie estimate --ring-model` recorded in the manifest (pure)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.topology import LinkShape
from genie.topology import load_topology
from genie.topology.builders import star
from genie.workloads.generators import TrainingConfig, pipeline_parallel
from genie.workloads.presets import device_preset, model_preset

from astra_adapter.fabric.coflow import RING_MODEL, RingModel
from astra_adapter.fabric.fairshare import FlowEvents, max_min_levels, max_min_rates
from astra_adapter.fabric.flat_flows import FlatFlowEngine
from astra_adapter.fabric.flows import FabricParams, FlowEngine, run_concurrently
from astra_adapter.fabric.mix import mix_play_params
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from astra_adapter.measurements import CommOp
from fabric_cases import fabric, moe

COFLOW = FabricParams(ring_model=RingModel.COFLOW)
C = 1e9 / 8e9  # bytes per ns of a 1 Gbit/s link
RING = (0, 1, 2, 3)


def _ring(size: int = 4_000_000, collective: Collective = Collective.ALL_GATHER) -> CommOp:
    return CommOp(collective, Algorithm.RING, len(RING), size)


def _message(size: int) -> CommOp:
    return CommOp(Collective.SEND_RECV, Algorithm.AUTO, 2, size)


def _star7() -> FabricNetwork:
    return FabricNetwork(star(7, shape=LinkShape(rate_bps=1_000_000_000)))


# a ring of 4 (0 -> 1 -> 2 -> 3 -> 0) on a 1 Gbit/s star beside three long messages: 4 -> 1 and 5 -> 1 share the
# switch's link into h1 with the ring's 0 -> 1, 6 -> 2 the link into h2 with the ring's 1 -> 2
CROSS = [((4, 1), 10**9), ((5, 1), 10**9), ((6, 2), 10**9)]


def _started(engine: FlowEngine):
    ring = engine.start(engine.plan(_ring(), RING))
    others = [engine.start(engine.plan(_message(size), pair)) for pair, size in CROSS]
    engine.horizon_ns()
    rates = dict(zip(map(id, engine.ops), engine._current))
    return ring, [rates[id(ring)][ring.active]] + [rates[id(o)] for o in others]


def test_a_coflow_step_moves_at_its_rings_bottleneck_and_the_others_get_the_leftover():
    ring, (ring_rates, a, b, c) = _started(FlowEngine(_star7(), COFLOW))
    # one flow for the step: the link into h1 has it and two messages (C/3 each); the link into h2 then has C/3 of
    # the ring's and 6 -> 2 takes the leftover 2C/3
    assert len(ring.steps[0].routes) == 1
    assert ring_rates.tolist() == pytest.approx([C / 3], rel=1e-12)
    assert (a[0], b[0], c[0]) == pytest.approx((C / 3, C / 3, 2 * C / 3), rel=1e-12)
    # lock step: each connection its own share - 0 -> 1 at C/3, 1 -> 2 at C/2 beside 6 -> 2, the others at C
    ring, (ring_rates, a, b, c) = _started(FlowEngine(_star7()))
    step = ring.steps[0]
    by_pair = dict(zip(zip(step.src.tolist(), step.dst.tolist()), ring_rates.tolist()))
    assert by_pair == pytest.approx({(0, 1): C / 3, (1, 2): C / 2, (2, 3): C, (3, 0): C}, rel=1e-12)
    assert c[0] == pytest.approx(C / 2, rel=1e-12)


@pytest.mark.parametrize("engine", [FlowEngine, FlatFlowEngine])
def test_a_coflow_ring_ends_its_steps_at_the_bottleneck_rate_and_the_others_after(engine):
    times = run_concurrently(engine(_star7(), COFLOW), [(_ring(), RING)] + [(_message(s), p) for p, s in CROSS])
    chunk = FlowEngine(_star7(), COFLOW).plan(_ring(), RING)[0].wire_bytes[0]
    ring_ns = 3 * chunk / (C / 3)  # 3 steps, each at the bottleneck C/3 (no delay, no overhead: no latency)
    assert times[0] == pytest.approx(ring_ns, rel=1e-12)
    wire = FlowEngine(_star7()).plan(_message(10**9), (6, 2))[0].wire_bytes[0]
    assert times[3] == pytest.approx(ring_ns + (wire - 2 * C / 3 * ring_ns) / C, rel=1e-12)
    lockstep = run_concurrently(engine(_star7()), [(_ring(), RING)] + [(_message(s), p) for p, s in CROSS])
    assert lockstep[0] == pytest.approx(ring_ns, rel=1e-12)  # the same slowest connection
    # 6 -> 2 moves 2C/3 through each coflow step; in lock step C/2 until the ring's 1 -> 2 is done, then C: the link
    # into h2 is full either way, so it ends at the same time
    assert lockstep[3] == pytest.approx(times[3], rel=1e-12)


TWO_SWITCHES = """name: two
defaults: {bandwidth: 1gbit}
hosts: [{name: h0}, {name: h1}, {name: h2}, {name: h3}]
switches: [{name: sw0}, {name: sw1}]
links:
  - {endpoints: [h0, sw0]}
  - {endpoints: [h1, sw0]}
  - {endpoints: [h2, sw1]}
  - {endpoints: [h3, sw1]}
  - {endpoints: [sw0, sw1], delay: 20us}
"""


@pytest.mark.parametrize("engine", [FlowEngine, FlatFlowEngine])
def test_a_coflow_loads_a_link_by_its_members_on_it(engine):
    """Ring 0 -> 2 -> 1 -> 3 -> 0 on two switches: two connections cross each direction of sw0 - sw1, so the step's
    one flow loads it twice (a route weight of 2) and moves at C/2; its delay is its slowest member's."""
    network = FabricNetwork(load_topology(TWO_SWITCHES))
    order = (0, 2, 1, 3)
    steps = FlowEngine(network, COFLOW).plan(_ring(), order)
    route = network.routes[int(steps[0].routes[0])]
    across = {network.index[("sw0", "sw1")], network.index[("sw1", "sw0")]}
    assert {r: w for r, w in route.loads if r in across} == {r: 2.0 for r in across}
    assert all(w == 1.0 for r, w in route.loads if r not in across) and len(route.loads) == 10
    assert route.delay_ns == 20_000.0 and steps[0].latency_ns == 20_000.0
    (t,) = run_concurrently(engine(network, COFLOW), [(_ring(), order)])
    assert t == pytest.approx(3 * (20_000.0 + steps[0].wire_bytes[0] / (C / 2)), rel=1e-12)
    # with flow contention the weight counts as that many flows: sw0 - sw1 delivers C / (1 + 0.5), half each
    (t,) = run_concurrently(engine(network, replace(COFLOW, flow_contention=0.5)), [(_ring(), order)])
    assert t == pytest.approx(3 * (20_000.0 + steps[0].wire_bytes[0] / (C / 1.5 / 2)), rel=1e-12)
    assert network.coflow_route(steps[0].routes) is not None and \
        FlowEngine(network, COFLOW).plan(_ring(), order)[0].routes[0] == steps[0].routes[0]  # memoised


def test_the_solves_take_route_weights_above_one():
    # route 0 loads resource 0 twice (a coflow of two connections), route 1 once: 1 = 2 x + x, so x = 1/3; then
    # route 1 alone on resource 1 is not the bottleneck
    flow_of, res, w = np.array([0, 1, 1]), np.array([0, 0, 1]), np.array([2.0, 1.0, 1.0])
    assert max_min_rates(flow_of, res, w, np.array([1.0, 5.0]), 2) == pytest.approx([1 / 3, 1 / 3])
    levels = max_min_levels(np.array([0, 1]), np.array([1, 1]), np.array([0, 1, 3]), res, w, np.array([1.0, 5.0]))
    assert levels == pytest.approx([1 / 3, 1 / 3], rel=1e-14)


def test_steps_that_are_not_a_rings_of_equal_bytes_stay_as_they_are():
    engine, lock = FlowEngine(_star7(), COFLOW), FlowEngine(_star7())
    uneven = engine.plan(_ring(1001, Collective.ALL_REDUCE), RING)  # 250 / 251-byte blocks: every step uneven
    assert all(len(s.routes) == 4 and s.ranks is None for s in uneven)
    even = engine.plan(_ring(4096, Collective.ALL_REDUCE), RING)
    assert all(len(s.routes) == 1 and s.ranks.tolist() == list(RING) for s in even)
    for op, members in [(CommOp(Collective.ALL_TO_ALL, Algorithm.AUTO, 4, 4096), RING),
                        (CommOp(Collective.ALL_REDUCE, Algorithm.DOUBLE_BINARY_TREE, 4, 4096), RING),
                        (CommOp(Collective.ALL_REDUCE, Algorithm.HALVING_DOUBLING, 4, 4096), RING),
                        (_message(4096), (0, 1))]:
        got, want = engine.plan(op, members), lock.plan(op, members)
        assert [[engine.network.routes[r] for r in s.routes.tolist()] for s in got] == \
            [[lock.network.routes[r] for r in s.routes.tolist()] for s in want]
        assert [(s.src.tolist(), s.dst.tolist(), s.bytes.tolist(), s.latency_ns) for s in got] == \
            [(s.src.tolist(), s.dst.tolist(), s.bytes.tolist(), s.latency_ns) for s in want]
        assert all(s.ranks is None for s in got)


def test_a_coflow_rings_ranks_leave_its_last_step_together():
    """Beside the messages the lock-step ring's connections end its last step at three instants (its ranks leave
    one after another); the coflow ring's at one, every member busy until then."""
    for params, instants in ((FabricParams(), 3), (COFLOW, 1)):
        engine = FlatFlowEngine(_star7(), params)
        ring = engine.start(engine.plan(_ring(), RING))
        for pair, size in CROSS:
            engine.start(engine.plan(_message(size), pair))
        left_at: dict[int, float] = {}
        t = 0.0
        while ring in engine.ops and not ring.done:
            busy = engine.busy_ranks(ring)
            if busy is not None:
                assert busy <= set(RING)
                for rank in set(RING) - busy:
                    left_at.setdefault(rank, t)
                if params is COFLOW and not ring.done:
                    assert busy in (set(RING), set())
            dt = engine.horizon_ns()
            engine.advance(dt)
            t += dt
        left_at.update({r: t for r in RING if r not in left_at})
        assert len(set(left_at.values())) == instants


def _same(a, b) -> None:
    assert a.spans == b.spans and a.ranks == b.ranks  # every node's start and end, bit for bit


def _close(a, b) -> None:
    """Every node's start and end within a relative 1e-9 (of the iteration)."""
    scale = 1e-9 * b.iteration_ns
    assert len(a.spans) == len(b.spans)
    for x, y in zip(a.spans, b.spans):
        assert [n for n, _, _ in x] == [n for n, _, _ in y]
        assert all(abs(s1 - s2) <= scale and abs(e1 - e2) <= scale for (_, s1, e1), (_, s2, e2) in zip(x, y))


class OneSolve(FlatFlowEngine):
    by_component = False


class PythonLoop(FlatFlowEngine):
    compiled_loop = False


class Rebuilt(FlatFlowEngine):
    slots = False


@pytest.mark.parametrize("params", [COFLOW, replace(COFLOW, flow_contention=0.05),
                                    replace(COFLOW, message_overhead_ns=3000.0, endpoint_delay_ns=20000.0)])
@pytest.mark.parametrize("seed", [None, 2])
def test_an_uneven_moe_play_under_the_coflow_ring_on_every_engine(params, seed):
    trace, network = moe(seed=1 if seed is None else seed), FabricNetwork(fabric(), hash_seed=seed)
    reference = play_on_fabric(trace, FlowEngine(network, params))
    _same(play_on_fabric(trace, OneSolve(network, params)), reference)  # the reference's arithmetic: bit for bit
    flat = FlatFlowEngine(network, params)
    got = play_on_fabric(trace, flat)
    if FlowEvents is not None:
        _same(got, play_on_fabric(trace, PythonLoop(network, params)))
        assert flat.plays_events
    _same(got, play_on_fabric(trace, Rebuilt(network, params)))
    _close(got, reference)  # per component: the same rates summed in another order
    lockstep = FlatFlowEngine(network, replace(params, ring_model=RingModel.LOCKSTEP))
    assert play_on_fabric(trace, lockstep).spans != got.spans and flat.events < lockstep.events


def test_a_pipeline_with_data_parallelism_under_the_coflow_ring():
    model = model_preset("gpt3-1.3b").with_overrides(num_layers=4)
    trace = pipeline_parallel(model, device_preset("a100"), pp=4, dp=4, config=TrainingConfig(micro_batches=4))
    network, params = FabricNetwork(fabric(), hash_seed=1), replace(COFLOW, message_overhead_ns=3000.0)
    reference = play_on_fabric(trace, FlowEngine(network, params))
    _same(play_on_fabric(trace, OneSolve(network, params)), reference)
    got = play_on_fabric(trace, FlatFlowEngine(network, params))
    if FlowEvents is not None:
        _same(got, play_on_fabric(trace, PythonLoop(network, params)))
    _close(got, reference)


def test_not_with_ring_chains_or_standing_queues():
    for other in ({"ring_chains": True}, {"standing_queues": True}):
        with pytest.raises(ValueError, match="coflow"):
            FabricParams(ring_model=RingModel.COFLOW, **other)
    # a job mix's estimate with standing queues plays lock step (the chains model the pipelining themselves); without
    # them the ring model given stays
    assert mix_play_params(COFLOW).ring_model is RingModel.LOCKSTEP
    assert mix_play_params(COFLOW, standing_queues=False).ring_model is RingModel.COFLOW


def test_the_ring_model_parses_and_refuses_unknown_names():
    assert RingModel.parse(" Coflow ") is RingModel.COFLOW and RING_MODEL is RingModel.COFLOW
    from genie.core.errors import InputError
    with pytest.raises(InputError, match="ring model"):
        RingModel.parse("pipelined")


def test_genie_estimate_takes_the_ring_model_and_records_it(tmp_path):
    from pathlib import Path

    from tests.cli_support import run_genie

    root = Path(__file__).resolve().parent.parent
    trace, topology = root / "traces" / "gen_moe_ep8_gpt3", root / "topologies" / "leaf-spine-2x4-oversub.yaml"
    for model in ("lockstep", "coflow"):
        done = run_genie("estimate", trace, "--topology", topology, "--mode", "fabric", "--ring-model", model,
                         "--out", tmp_path / model, cwd=root)
        assert done.returncode == 0, done.stderr
        assert json.loads((tmp_path / model / "manifest.json").read_text())["params"]["ring_model"] == model
        assert ("coflow ring model" in done.stdout) == (model == "coflow")
    default = run_genie("estimate", trace, "--topology", topology, "--mode", "fabric", "--out", tmp_path / "d",
                        cwd=root)
    assert json.loads((tmp_path / "d" / "manifest.json").read_text())["params"]["ring_model"] == RING_MODEL.value
    bad = run_genie("estimate", trace, "--topology", topology, "--ring-model", "pipelined", "--out", tmp_path / "b",
                    cwd=root)
    assert bad.returncode == 2 and "--ring-model" in bad.stderr and bad.stderr.count("\n") == 1
    assert not (tmp_path / "b").exists() and default.returncode == 0
