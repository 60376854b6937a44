"""HTB's after-idle credit in the fabric model (astra_adapter.fabric.credit): one bucket rule for the testbed and
the model, the times a bucket link gives a message after idle time (worked out by hand, phase by phase), and
every flow engine's results bit for bit with the reference's with the credit on - the flat engine's default
per-component solve within the relative 1e-9 it keeps without the credit (pure)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.htb import htb_buckets
from genie.core.topology import LinkShape
from genie.testbed.shaping import htb_class
from genie.topology.builders import leaf_spine, star

from astra_adapter.fabric.chain_flows import ChainFlowEngine
from astra_adapter.fabric.chains import RingOp
from astra_adapter.fabric.credit import BURST, CEIL, RATE, DEVICE_RATE_BPS
from astra_adapter.fabric.flat_flows import FlatFlowEngine, engine_for
from astra_adapter.fabric.flows import WIRE_BYTES_PER_PAYLOAD_BYTE, FabricParams, FlowEngine, run_concurrently
from astra_adapter.fabric.network import FabricNetwork, LinkClass
from astra_adapter.fabric.player import play_on_fabric
from astra_adapter.measurements import CommOp
from fabric_mix_support import MIX_TOPOLOGY, random_mixes
from test_fabric_rates_compiled import REL, _same_play

GBIT = 1_000_000_000
CREDIT = FabricParams(htb_credit=True)
CHAINS = FabricParams(standing_queues=True, ring_chains=True, htb_credit=True)


def _pair(rate_bps: int = GBIT) -> FabricNetwork:
    return FabricNetwork(star(2, shape=LinkShape(rate_bps=rate_bps)))


def _message(size_bytes: int) -> list[tuple[CommOp, tuple[int, ...]]]:
    return [(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, size_bytes), (0, 1))]


def _modes(engine) -> dict[str, int]:
    """Each credit link's mode, by its ``a>b`` name."""
    res = engine.network.resources
    return {f"{res[i].a}>{res[i].b}": m for i, m in zip(engine.credit.index.tolist(), engine.credit.mode.tolist())}


def _by_hand_ns(wire: float, c: float, b: float, rate_bps: int) -> float:
    """One flow alone on links with these buckets (tokens ``c``, ``b``): at the device's speed while both hold
    tokens, at the ceil while the rate bucket does, then at the rate (bytes per ns)."""
    r, ceil, d = rate_bps / 8e9, htb_buckets(rate_bps).ceil_bps / 8e9, DEVICE_RATE_BPS / 8e9
    t = 0.0
    if c > 0 and b > 0:
        t1 = min(c / (d - ceil), b / (d - r), wire / d)
        t, wire, b = t + t1, wire - d * t1, b - (d - r) * t1
    if wire > 0 and b > 1e-6:
        t2 = min(b / (ceil - r), wire / ceil)
        t, wire = t + t2, wire - ceil * t2
    return t + max(wire, 0.0) / r


def test_the_testbed_and_the_model_share_one_bucket_rule() -> None:
    for rate in (10 * 10**6, 500 * 10**6, GBIT, 3 * GBIT, 10 * GBIT, 100 * GBIT):
        step, buckets = htb_class("ns", "eth0", rate, 1500), htb_buckets(rate)
        assert (step.rate_bps, step.ceil_bps, step.burst_bytes, step.cburst_bytes) == \
            (buckets.rate_bps, buckets.ceil_bps, buckets.burst_bytes, buckets.cburst_bytes)
    assert htb_buckets(GBIT) == type(htb_buckets(GBIT))(GBIT, 1_020_000_000, 1_000_000, 131072)


@pytest.mark.parametrize("engine", [FlowEngine, FlatFlowEngine])
def test_a_message_after_idle_time_ends_in_its_size_less_cburst_over_the_ceil(engine) -> None:
    size = 4 * 2**20
    wire = size * WIRE_BYTES_PER_PAYLOAD_BYTE  # within the 1 MB rate bucket's reach at 2 % above the rate
    played = engine(_pair(), CREDIT)
    (got,) = run_concurrently(played, _message(size))
    assert got == pytest.approx((wire - 131072) / (1.02 * GBIT / 8e9), rel=1e-9)
    # its path ends with the ceil bucket spent and the rate bucket not: at the ceil; the other way untouched
    assert _modes(played) == {"h0>s0": CEIL, "s0>h1": CEIL, "h1>s0": BURST, "s0>h0": BURST}
    assert 0 < played.credit.b.min() < 1_000_000 == played.credit.b.max() and played.credit.c.min() == 0
    (off,) = run_concurrently(engine(_pair(), FabricParams()), _message(size))
    assert off == pytest.approx(wire / (GBIT / 8e9), rel=1e-12)
    assert got < off * (1 - 0.02 + 0.001)  # 2 % faster and the burst's time on top


def test_a_message_longer_than_the_rate_bucket_runs_at_the_ceil_then_at_the_rate() -> None:
    size = 100 * 10**6
    wire = size * WIRE_BYTES_PER_PAYLOAD_BYTE
    (got,) = run_concurrently(FlowEngine(_pair(), CREDIT), _message(size))
    assert got == pytest.approx(_by_hand_ns(wire, 131072, 1_000_000, GBIT), rel=1e-9)
    # every byte sent above the rate is a token of the rate bucket: the message gains its 1 MB's time, 8 ms
    assert wire / (GBIT / 8e9) - got == pytest.approx(8e6, rel=1e-6)


def test_back_to_back_messages_run_at_the_rate_and_idle_time_refills_the_buckets() -> None:
    big, small = 100 * 10**6, 4 * 2**20
    engine = FlowEngine(_pair(), CREDIT)
    run_concurrently(engine, _message(big))  # the rate bucket is spent
    assert _modes(engine) == {"h0>s0": RATE, "s0>h1": RATE, "h1>s0": BURST, "s0>h0": BURST}
    (next_one,) = run_concurrently(engine, _message(small))
    wire = small * WIRE_BYTES_PER_PAYLOAD_BYTE
    assert next_one == pytest.approx(wire / (GBIT / 8e9), rel=1e-9)  # no idle time: the rate
    idle_ns = 2e6  # 2 ms: 250 kB into the rate bucket; the ceil bucket full again
    assert engine.horizon_ns() == float("inf")  # nothing moves, no bucket runs dry
    engine.advance(idle_ns)
    assert sorted(engine.credit.b.tolist()) == pytest.approx([GBIT / 8e9 * idle_ns] * 2 + [1e6] * 2, rel=1e-9)
    assert set(engine.credit.mode.tolist()) == {BURST}
    (after_idle,) = run_concurrently(engine, _message(small))
    assert after_idle == pytest.approx(_by_hand_ns(wire, 131072, GBIT / 8e9 * idle_ns, GBIT), rel=1e-9)
    assert after_idle < next_one


def test_a_link_loaded_below_its_rate_keeps_its_buckets_and_links_at_the_devices_speed_have_none() -> None:
    network = FabricNetwork(leaf_spine(2, 2, 1, shape=LinkShape(rate_bps=GBIT),
                                       fabric_shape=LinkShape(rate_bps=10 * GBIT)))
    engine = FlowEngine(network, CREDIT)
    shaped = [network.resources[i] for i in engine.credit.index.tolist()]
    assert shaped and all(r.link_class is LinkClass.HOST for r in shaped)  # the 10 Gbit/s fabric links: none
    assert FlowEngine(FabricNetwork(star(2, shape=LinkShape(rate_bps=10 * GBIT))), CREDIT).credit is None
    assert FlowEngine(_pair(), FabricParams()).credit is None
    # two hosts' messages meet on a 1 Gbit/s downlink: their uplinks run at half its speed, keeping their buckets
    engine = FlowEngine(FabricNetwork(star(3, shape=LinkShape(rate_bps=GBIT))), CREDIT)
    ops = [(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, 50 * 10**6), (0, 2)),
           (CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, 50 * 10**6), (1, 2))]
    run_concurrently(engine, ops)
    modes = _modes(engine)
    assert modes["h0>s0"] == modes["h1>s0"] == BURST and modes["s0>h2"] == RATE


@pytest.mark.parametrize("engine", [FlowEngine, FlatFlowEngine])
def test_with_flow_contention_a_link_the_solve_fills_reads_as_full_to_its_buckets(engine) -> None:
    """Two flows meet on a 1 Gbit/s downlink with flow contention c: the solve fills it to its speed / (1 + c) in
    every mode, which is full to its buckets (the wire's scale, as the standing queues read it). So the buckets
    drain in the phases one flow alone would see, the bytes move 1 + c slower, the link ends at its rate - and an
    empty bucket stays empty: a handful of events, not a refill and a burst after every one."""
    c, size = 0.05, 50 * 10**6
    params = replace(CREDIT, flow_contention=c)
    eng = engine(FabricNetwork(star(3, shape=LinkShape(rate_bps=GBIT))), params)
    horizons = []
    real = eng.horizon_ns

    def counted() -> float:
        horizons.append(1)
        return real()

    eng.horizon_ns = counted
    ops = [(CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, size), (0, 2)),
           (CommOp(Collective.SEND_RECV, Algorithm.P2P, 2, size), (1, 2))]
    got = run_concurrently(eng, ops)
    wire = 2 * size * WIRE_BYTES_PER_PAYLOAD_BYTE
    assert max(got) == pytest.approx(_by_hand_ns(wire * (1 + c), 131072, 1_000_000, GBIT), rel=1e-9)
    modes = _modes(eng)
    assert modes["s0>h2"] == RATE and modes["h0>s0"] == modes["h1>s0"] == BURST
    assert len(horizons) <= 12


class _NumpyChains(ChainFlowEngine):
    compiled_solve = False
    ring_op = RingOp
    compiled_queues = False


class _NumpyFlat(FlatFlowEngine):
    compiled_solve = False


class _OneSolveFlat(FlatFlowEngine):
    by_component = False  # one compiled solve of every moving flow: the reference's floats


@pytest.mark.parametrize("seed", [0, 1])
def test_random_job_mixes_with_the_credit_play_as_the_reference_on_every_engine(seed) -> None:
    """Bit for bit on the chain engines and the flat engine's one solve (compiled or numpy); the flat engine's
    default solve (per component: incremental without standing queues) within the relative 1e-9 it keeps
    without the credit (tests/test_fabric_rates_compiled.py)."""
    rng = np.random.default_rng(seed)
    credited = 0
    for merged, contention, overhead_ns, network in random_mixes(rng):
        for base, engines in ((CHAINS, (ChainFlowEngine, _NumpyChains)),
                              (replace(CHAINS, ring_chains=False), (FlatFlowEngine, _OneSolveFlat, _NumpyFlat)),
                              (replace(CHAINS, ring_chains=False, standing_queues=False),
                               (FlatFlowEngine, _OneSolveFlat, _NumpyFlat))):
            params = replace(base, flow_contention=contention, message_overhead_ns=overhead_ns)
            want = play_on_fabric(merged, FlowEngine(network, params))
            assert type(engine_for(network, params)) is engines[0]
            for engine in engines:
                played = engine(network, params)
                got = play_on_fabric(merged, played)
                if engine is FlatFlowEngine:  # incremental (LiveRates told the capacities) without the queues
                    assert (played._live is not None) is (not params.standing_queues)
                    _same_play(got, want)
                    continue
                assert got.ranks == want.ranks
                assert got.spans == want.spans  # every node's start and end, bit for bit
            credited += want.spans != play_on_fabric(merged, FlowEngine(network, replace(params,
                                                                                        htb_credit=False))).spans
    assert credited  # the credit changed the plays: it was exercised


@pytest.mark.parametrize("params", [CREDIT, replace(CREDIT, flow_contention=0.05),
                                    replace(CREDIT, standing_queues=True),
                                    replace(CHAINS, message_overhead_ns=3000.0, endpoint_delay_ns=20000.0)])
def test_random_concurrent_collectives_with_the_credit_end_when_the_reference_says(params) -> None:
    from tests.test_fabric_flat_engine import _random_ops

    rng = np.random.default_rng(23)
    network = FabricNetwork(MIX_TOPOLOGY, hash_seed=3)
    credited = 0
    for _ in range(6):
        ops = _random_ops(rng, network.world_size)
        want = run_concurrently(FlowEngine(network, params), ops)
        got = run_concurrently(engine_for(network, params), ops)
        if params.ring_chains:
            assert got == want  # bit for bit
        else:  # the flat engine's per-component solve
            assert all(math.isclose(g, w, rel_tol=REL, abs_tol=1e-6) for g, w in zip(got, want))
            assert run_concurrently(_OneSolveFlat(network, params), ops) == want  # bit for bit
        credited += want != run_concurrently(FlowEngine(network, replace(params, htb_credit=False)), ops)
    assert credited


def test_a_mix_estimate_plays_the_credit_where_the_topologys_testbed_has_bucket_links() -> None:
    from genie.services.mix import _bucket_links

    assert _bucket_links(MIX_TOPOLOGY)  # rate-only links: HTB buckets alone (--links bucket)
    delayed = leaf_spine(2, 2, 1, shape=LinkShape(rate_bps=GBIT, delay_us=50.0))
    assert not _bucket_links(delayed)  # a delay: netem on the path, the wire model (no burst at once)
