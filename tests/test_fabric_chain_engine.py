"""The ring-chain engine (astra_adapter.fabric.chain_flows) gives the reference FlowEngine's results with ring
chains and standing queues on, bit for bit (pure; small cases): random job mixes on random placements of an
oversubscribed leaf-spine, and random sets of concurrent collectives on a 3-tier fabric, each with and without
the compiled solve; each case also checks that the chains changed the play (so the comparison covers them)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from astra_adapter.fabric.chain_flows import ChainFlowEngine, CompiledRingOp
from astra_adapter.fabric.chains import RingOp
from astra_adapter.fabric.flat_flows import engine_for
from astra_adapter.fabric.flows import FabricParams, FlowEngine, run_concurrently
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from fabric_mix_support import MIX_TOPOLOGY, random_mixes

CHAINS = FabricParams(standing_queues=True, ring_chains=True)


class _Numpy(ChainFlowEngine):
    compiled_solve = False  # the numpy solve and RingOp's numpy methods: the skipped work alone
    ring_op = RingOp
    compiled_queues = False


def test_plays_with_ring_chains_run_on_the_chain_engine() -> None:
    network = FabricNetwork(MIX_TOPOLOGY)
    assert type(engine_for(network, CHAINS)) is ChainFlowEngine
    assert type(engine_for(network, replace(CHAINS, standing_queues=False))) is ChainFlowEngine
    assert not isinstance(engine_for(network, FabricParams(standing_queues=True)), ChainFlowEngine)
    try:
        import astra_adapter.fabric.chains_core  # noqa: F401  (built by the install step where it can be)
    except ImportError:
        pytest.skip("astra_adapter.fabric.chains_core is not built")
    assert ChainFlowEngine.ring_op is CompiledRingOp  # built: a ring's per-event work runs compiled


@pytest.mark.parametrize("engine", [ChainFlowEngine, _Numpy])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_job_mixes_with_chains_and_queues_play_as_the_reference(engine, seed):
    # 2-4 jobs at random host slots and start offsets, each repeated twice: rings whose connections run at
    # unequal rates beside other jobs' elephants, chunks starting mid-advance in every order of the engine's ops
    rng = np.random.default_rng(seed)
    chained = skipped = paired = 0
    for merged, contention, overhead_ns, network in random_mixes(rng):
        params = replace(CHAINS, flow_contention=contention, message_overhead_ns=overhead_ns)
        want = play_on_fabric(merged, FlowEngine(network, params))
        fast = engine(network, params)
        got = play_on_fabric(merged, fast)
        assert got.ranks == want.ranks
        assert got.spans == want.spans  # every node's start and end, bit for bit
        chained += want.spans != play_on_fabric(merged, FlowEngine(network, replace(params,
                                                                                   ring_chains=False))).spans
        skipped += fast.queue_reads < fast.queue_asks
        paired += fast.releases
    assert chained  # the chains changed the play: they were exercised
    assert skipped  # some reads were known to be 0.0 and skipped: the short cut was exercised
    assert paired  # some big rings started pair by pair (chains.PairStarts): their releases were exercised


@pytest.mark.parametrize("engine", [ChainFlowEngine, _Numpy])
@pytest.mark.parametrize("params", [CHAINS, replace(CHAINS, flow_contention=0.05),
                                    replace(CHAINS, message_overhead_ns=3000.0, endpoint_delay_ns=20000.0),
                                    replace(CHAINS, standing_queues=False)])
def test_random_concurrent_collectives_with_chains_end_when_the_reference_says(engine, params):
    from tests.test_fabric_flat_engine import _random_ops, small_fabric

    rng = np.random.default_rng(17)
    network = FabricNetwork(small_fabric(), hash_seed=3)
    chained = 0
    for _ in range(8):
        ops = _random_ops(rng, network.world_size)
        want = run_concurrently(FlowEngine(network, params), ops)
        assert run_concurrently(engine(network, params), ops) == want  # bit for bit
        chained += want != run_concurrently(FlowEngine(network, replace(params, ring_chains=False)), ops)
    assert chained
