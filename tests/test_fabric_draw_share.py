"""What the fabric estimate's ECMP hash draws share or leave out without changing a result (benchmarks/README.md,
"The 1024-rank CLI on this machine"): the draws' networks one memo of the topology's hop distances, the estimate's
draws sent back from their workers without their nodes' spans."""

from __future__ import annotations

import pytest

from astra_adapter.fabric import estimate
from astra_adapter.fabric.coflow import RING_MODEL
from astra_adapter.fabric.flows import ECMP_SAMPLES, END_PRECISION, FabricParams
from astra_adapter.fabric.network import FabricNetwork, sample_networks
from fabric_cases import fabric, moe


def test_the_draws_share_one_memo_of_hop_distances_and_route_as_fresh_networks():
    network = FabricNetwork(fabric())
    nets = sample_networks(network, ECMP_SAMPLES)
    assert len(nets) > 1 and all(n._distances is network._distances for n in nets)
    ranks = range(network.world_size)
    for seed in (0, 3):
        shared, fresh = network.with_hash_seed(seed), FabricNetwork(fabric(), hash_seed=seed)
        assert shared.hash_seed == fresh.hash_seed == seed
        for a in ranks:
            for b in ranks:
                if a != b:  # (one rank a host: no loopback)
                    assert shared.routes[shared.route(a, b)] == fresh.routes[fresh.route(a, b)]
        assert shared._distances is network._distances and shared._distances == fresh._distances


def test_draws_played_without_spans_have_the_same_ranks_in_process_and_in_workers():
    trace = moe(seed=3, layers=2)
    nets = sample_networks(FabricNetwork(fabric()), ECMP_SAMPLES)[:3]
    params = FabricParams(end_precision=1e-3)
    full = estimate.play_draws(trace, nets, params, workers=1)
    assert all(t.spans for t in full)
    for workers in (1, 2):
        bare = estimate.play_draws(trace, nets, params, workers=workers, spans=False)
        assert [t.spans for t in bare] == [()] * 3
        assert [t.ranks for t in bare] == [t.ranks for t in full]
    assert estimate.play_draws(trace, nets, params, workers=2) == full  # spans kept by default (the mix reads them)


def test_the_estimate_is_the_mean_of_the_draws_ranks():
    trace = moe(seed=3, layers=2)
    topology = fabric()
    params = FabricParams(end_precision=END_PRECISION, ring_model=RING_MODEL)  # (estimate_fabric's defaults)
    played = estimate.play_draws(trace, sample_networks(FabricNetwork(topology), ECMP_SAMPLES), params, workers=1)
    est = estimate.estimate_fabric(trace, topology, draw_precision=0.0)
    assert est.draw_iterations_ns == tuple(t.iteration_ns for t in played)
    assert est.ranks == estimate._mean_ranks(played)


def test_with_workers_the_check_is_joined_once_they_are_forked_and_its_error_ends_the_draws():
    import multiprocessing

    trace = moe(seed=3, layers=2)
    nets = sample_networks(FabricNetwork(fabric()), ECMP_SAMPLES)[:3]
    before = set(multiprocessing.active_children())
    seen = []
    played = estimate.play_draws(trace, nets, FabricParams(), workers=2, spans=False,
                                 before_plays=lambda: seen.append(len(set(multiprocessing.active_children()) - before)))
    assert seen == [2] and len(played) == 3  # called once, both workers forked (and playing) by then
    assert [t.ranks for t in played] == [t.ranks for t in estimate.play_draws(trace, nets, FabricParams(), workers=1)]

    def refuse():
        raise RuntimeError("the trace is bad")

    with pytest.raises(RuntimeError, match="the trace is bad"):
        estimate.play_draws(trace, nets, FabricParams(), workers=2, before_plays=refuse)
    assert not set(multiprocessing.active_children()) - before  # the workers killed, reaped
