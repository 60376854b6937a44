"""The congestion-aware backend's compiled loop (astra_adapter/aware_core.pyx) equals the pure Python reference,
event for event, on asymmetric traces: uneven MoE all-to-alls in expert groups, pipeline stages sending to each
other, stragglers, contention between chunks and between groups, every algorithm and topology it runs."""

from __future__ import annotations

import os

from dataclasses import replace

import pytest

from astra_adapter import engine as engine_module
from astra_adapter.config import CollectiveImpl, ImplKind, NetworkBackend, NetworkConfig, NetworkDim, SystemConfig, \
    TopologyKind
from astra_adapter.engine import Engine
from astra_adapter.estimate import estimate
from astra_adapter.network import AnalyticalNetwork
from astra_adapter.work import trace_work
from genie.core.errors import GenieError
from genie.core.trace import CommType, ProcessGroup, collective_node, compute_node, make_trace, recv_node, \
    send_node

AWARE = NetworkBackend.CONGESTION_AWARE

pytestmark = pytest.mark.skipif(engine_module.AwareCore is None and not os.environ.get("CI"),
                                reason="astra_adapter.aware_core is not built (pip install -e . builds it)")


def test_ci_builds_the_compiled_loop():
    """CI installs a compiler (scripts/setup.sh): there the compiled loop must exist, not be skipped."""
    assert engine_module.AwareCore is not None


def _system(impl: ImplKind, splits: int = 2, active: int = 2) -> SystemConfig:
    chosen = (CollectiveImpl(impl),)
    return SystemConfig(endpoint_delay_ns=10, preferred_dataset_splits=splits, active_chunks_per_dimension=active,
                        all_reduce_impl=chosen, all_gather_impl=chosen, reduce_scatter_impl=chosen,
                        all_to_all_impl=chosen, local_mem_bw_gb_per_s=1600.0)


def _net(kind: TopologyKind, n: int) -> NetworkConfig:
    return NetworkConfig((NetworkDim(kind, n, 25.0, 700.0),))


def _both(trace, system: SystemConfig, network: NetworkConfig):
    """The compiled and the reference engine's runs (no fallback between them)."""
    work = trace_work(trace, system)
    groups = {g.name: tuple(g.ranks) for g in trace.groups}
    net = AnalyticalNetwork(network)
    runs = []
    for compiled in (True, False):
        engine = Engine(work, groups, system, net, backend=AWARE, compiled=compiled)
        assert (engine.core is not None) is compiled
        runs.append(engine.run())
    return runs


def _moe(n: int, experts: int) -> object:
    """Expert groups of ``experts`` ranks, each group's all-to-all its own size (uneven routing), a straggler
    rank per group, then a world all-reduce of the dense gradients and a group all-gather."""
    groups = tuple(ProcessGroup(f"ep{g}", tuple(range(g * experts, (g + 1) * experts))) for g in range(n // experts))
    ranks = []
    for r in range(n):
        g = r // experts
        slow = 3 if r % experts == 1 else 1
        nodes = [compute_node(0, "attn", duration_ns=20_000 * slow),
                 collective_node(1, "dispatch", comm_type=CommType.ALL_TO_ALL, size_bytes=(g + 1) * 96 << 10,
                                 process_group=f"ep{g}", data_deps=(0,)),
                 compute_node(2, "expert", duration_ns=(5 + 7 * g) * 1_000, data_deps=(1,)),
                 collective_node(3, "combine", comm_type=CommType.ALL_TO_ALL, size_bytes=(g + 1) * 96 << 10,
                                 process_group=f"ep{g}", data_deps=(2,)),
                 collective_node(4, "dense", comm_type=CommType.ALL_REDUCE, size_bytes=3 << 20, data_deps=(3,)),
                 collective_node(5, "gather", comm_type=CommType.ALL_GATHER, size_bytes=(g + 2) << 16,
                                 process_group=f"ep{g}", data_deps=(3,))]
        ranks.append(nodes)
    return make_trace(ranks, groups=groups)


def _pipeline(n: int, stages: int) -> object:
    """``stages`` pipeline stages of n/stages ranks: forward activations sent to the next stage, backward
    gradients to the previous one, micro-batches interleaved; each stage's data-parallel all-reduce at the end."""
    per = n // stages
    groups = tuple(ProcessGroup(f"dp{s}", tuple(range(s * per, (s + 1) * per))) for s in range(stages))
    ranks = []
    for r in range(n):
        s = r // per
        nodes, prev = [], None

        def add(node_fn, *args, **kw) -> None:
            nonlocal prev
            node = node_fn(len(nodes), *args, data_deps=() if prev is None else (prev,), **kw)
            nodes.append(node)
            prev = node.id

        for mb in range(3):
            if s > 0:
                add(recv_node, f"fwd.recv{mb}", rank=r, peer=r - per, size_bytes=(1 + mb) << 18, tag=mb)
            add(compute_node, f"fwd{mb}", duration_ns=(10 + 4 * s) * 1_000)
            if s < stages - 1:
                add(send_node, f"fwd.send{mb}", rank=r, peer=r + per, size_bytes=(1 + mb) << 18, tag=mb)
        for mb in range(3):
            if s < stages - 1:
                add(recv_node, f"bwd.recv{mb}", rank=r, peer=r + per, size_bytes=1 << 18, tag=10 + mb)
            add(compute_node, f"bwd{mb}", duration_ns=(20 + 3 * s) * 1_000)
            if s > 0:
                add(send_node, f"bwd.send{mb}", rank=r, peer=r - per, size_bytes=1 << 18, tag=10 + mb)
        add(collective_node, "dp", comm_type=CommType.ALL_REDUCE, size_bytes=(2 + s) << 20, process_group=f"dp{s}")
        ranks.append(nodes)
    return make_trace(ranks, groups=groups)


@pytest.mark.parametrize("kind", list(TopologyKind), ids=lambda k: k.value)
@pytest.mark.parametrize("impl", [ImplKind.RING, ImplKind.DIRECT], ids=lambda i: i.value)
def test_uneven_moe_all_to_all(kind: TopologyKind, impl: ImplKind) -> None:
    fast, reference = _both(_moe(16, 4), _system(impl), _net(kind, 16))
    assert fast == reference
    assert len({r.finish_ns for r in reference.ranks}) > 1  # the ranks really differ


@pytest.mark.parametrize("kind", list(TopologyKind), ids=lambda k: k.value)
def test_pipeline_stages(kind: TopologyKind) -> None:
    fast, reference = _both(_pipeline(16, 4), _system(ImplKind.RING, splits=4, active=2), _net(kind, 16))
    assert fast == reference
    assert len({r.finish_ns for r in reference.ranks}) > 1


@pytest.mark.parametrize("impl", [ImplKind.HALVING_DOUBLING, ImplKind.ONE_RING, ImplKind.ONE_DIRECT],
                         ids=lambda i: i.value)
def test_positional_algorithms_and_chunks_queueing_on_links(impl: ImplKind) -> None:
    ranks = [[compute_node(0, "c", duration_ns=1_000 * (r % 3)),
              collective_node(1, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=5 << 20, data_deps=(0,)),
              collective_node(2, "ag", comm_type=CommType.ALL_GATHER, size_bytes=1 << 20, data_deps=(0,))]
             for r in range(8)]
    for kind in TopologyKind:
        for splits, active in ((1, 1), (8, 4)):
            fast, reference = _both(make_trace(ranks), _system(impl, splits, active), _net(kind, 8))
            assert fast == reference


def test_direct_window_and_a_mirrored_run() -> None:
    system = replace(_system(ImplKind.DIRECT), all_to_all_impl=(CollectiveImpl(ImplKind.DIRECT, window=2),))
    trace = make_trace([[collective_node(0, "a2a", comm_type=CommType.ALL_TO_ALL, size_bytes=1 << 20),
                         collective_node(1, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=1 << 20)]
                        for _ in range(8)])
    for kind in TopologyKind:
        assert _both(trace, system, _net(kind, 8))[0] == _both(trace, system, _net(kind, 8))[1]
        mirrored = [estimate(trace, _system(ImplKind.RING), _net(kind, 8), backend=AWARE, symmetry=True,
                             compiled=compiled) for compiled in (True, False)]
        assert mirrored[0] == mirrored[1]
        assert mirrored[0].simulated_ranks == 1 or kind is not TopologyKind.RING


def test_what_it_does_not_model_runs_on_the_reference() -> None:
    """A double binary tree is left to the reference: estimate() gives the reference's answer."""
    system = _system(ImplKind.DOUBLE_BINARY_TREE)
    trace = make_trace([[collective_node(0, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=1 << 20)]
                        for _ in range(8)])
    net = _net(TopologyKind.SWITCH, 8)
    with pytest.raises(engine_module.Unsupported):
        Engine(trace_work(trace, system), {}, system, AnalyticalNetwork(net), backend=AWARE, compiled=True).run()
    fast, reference = (estimate(trace, system, net, backend=AWARE, symmetry=False, compiled=c) for c in (True, False))
    assert fast == reference


def test_a_hang_is_reported_in_the_reference_words() -> None:
    groups = (ProcessGroup("pair", (0, 1)),)
    ranks = [[collective_node(0, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=1 << 20, process_group="pair")]
             if r < 2 else [compute_node(0, "c", duration_ns=5)] for r in range(4)]
    ranks[1] = [recv_node(0, "r", rank=1, peer=2, size_bytes=64), *[replace(n, id=n.id + 1, data_deps=(0,))
                                                                   for n in ranks[1]]]
    trace, system, net = make_trace(ranks, groups=groups), _system(ImplKind.RING), _net(TopologyKind.RING, 4)
    messages = []
    for compiled in (True, False):
        with pytest.raises(GenieError) as caught:
            estimate(trace, system, net, backend=AWARE, symmetry=False, compiled=compiled)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert "never finishes" in messages[0]


def test_the_speed_benchmarks_workload_on_a_switch() -> None:
    """The DP ring workload of benchmarks/astra_aware_speed.py with 4 chunks per collective on a Switch (every
    chunk stored and forwarded there; aware and unaware differ): identical, rank by rank and line by line."""
    from benchmarks.astra_aware_speed import configs, dp_ring_trace

    system, network = configs(12, 4, TopologyKind.SWITCH)
    fast, reference = (estimate(dp_ring_trace(12), system, network, backend=AWARE, symmetry=False, compiled=c)
                       for c in (True, False))
    assert fast == reference
    assert fast.stdout("t") == reference.stdout("t")
