"""The built-in estimator on small synthetic workloads: closed forms, messages, groups, symmetry, errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from astra_adapter.collective_plan import CommKind, PhaseSpec, chunk_sizes, logical_dims, world_phases
from astra_adapter.config import (CollectiveImpl, CollectiveOptimization, ImplKind, MemoryType, NetworkConfig,
                                  NetworkDim, RemoteMemoryConfig, SystemConfig, TopologyKind)
from astra_adapter.dbt import TreeType, binary_tree
from astra_adapter.estimate import estimate
from astra_adapter.network import AnalyticalNetwork
from astra_adapter.phase_sim import PhaseEnv, PhaseTimer
from genie.core.errors import GenieError, InputError
from genie.core.trace import (CommType, NodeKind, ProcessGroup, TraceNode, collective_node, compute_node,
                              make_trace, recv_node, send_node)


def system(impl: str = "ring", dims: int = 1, **kw) -> SystemConfig:
    impls = (CollectiveImpl(ImplKind(impl)),) * dims
    return SystemConfig(endpoint_delay_ns=kw.pop("endpoint_delay_ns", 10), preferred_dataset_splits=kw.pop("splits", 4),
                        all_reduce_impl=impls, all_gather_impl=impls, reduce_scatter_impl=impls, all_to_all_impl=impls,
                        collective_optimization=CollectiveOptimization.LOCAL_BW_AWARE, local_mem_bw_gb_per_s=1600.0,
                        **kw)


def network(*dims: tuple[TopologyKind, int, float, float]) -> NetworkConfig:
    return NetworkConfig(tuple(NetworkDim(*d) for d in dims))


RING8 = network((TopologyKind.RING, 8, 50.0, 500.0))


def all_reduce_trace(ranks: int, size: int) -> object:
    return make_trace([[collective_node(0, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=size)]] * ranks)


def test_ring_all_reduce_closed_form() -> None:
    """sends * (latency + msg/bw) + (sends + 1) * endpoint delay + reductions * 3 * msg/local-mem-bw, per chunk."""
    chunk, n = (1 << 20) // 4, 8
    msg = chunk // n
    net_ns = int(500 + msg / (50 * 2**30 / 1e9))
    sends = 2 * (n - 1)
    per_chunk = sends * net_ns + (sends + 1) * 10 + (n - 1) * 3 * int(msg / 1600)
    est = estimate(all_reduce_trace(8, 1 << 20), system(), RING8)
    assert {r.finish_cycles for r in est.result.ranks} == {4 * per_chunk} == {64440}


def test_two_active_chunks_run_side_by_side() -> None:
    one = estimate(all_reduce_trace(8, 1 << 20), system(), RING8).result.max_finish_cycles
    two = estimate(all_reduce_trace(8, 1 << 20), system(active_chunks_per_dimension=2), RING8).result
    assert two.max_finish_cycles == one // 2


@pytest.mark.parametrize("impl, comm, topo", [
    ("ring", CommKind.ALL_REDUCE, TopologyKind.SWITCH), ("ring", CommKind.ALL_TO_ALL, TopologyKind.RING),
    ("direct", CommKind.ALL_REDUCE, TopologyKind.RING), ("direct", CommKind.ALL_GATHER, TopologyKind.SWITCH),
    ("halvingDoubling", CommKind.ALL_REDUCE, TopologyKind.RING),
    ("halvingDoubling", CommKind.REDUCE_SCATTER, TopologyKind.FULLY_CONNECTED),
])
def test_mirrored_member_equals_whole_group(impl: str, comm: CommKind, topo: TopologyKind) -> None:
    """A group started together is simulated through one member; it must agree with simulating everyone."""
    net = AnalyticalNetwork(network((topo, 8, 50.0, 500.0)))
    timer = PhaseTimer(PhaseEnv(net, 10, 1600.0))
    spec = PhaseSpec(comm, CollectiveImpl(ImplKind(impl)), 0, 0, 8, 262144)
    members, starts = tuple(range(8)), (0,) * 8
    mirrored, _ = timer._simulate(spec, members, starts, tuple(range(8)), True, TreeType.ROOT_MAX)
    everyone, order = timer._simulate(spec, members, starts, tuple(range(8)), False, TreeType.ROOT_MAX)
    assert mirrored == everyone and sorted(order) == list(range(8))


def test_late_member_delay_travels_along_the_ring() -> None:
    """Each member waits only for its predecessor: a late start moves one hop per send (14 sends for 8 NPUs)."""
    timer = PhaseTimer(PhaseEnv(AnalyticalNetwork(RING8), 10, 1600.0))
    spec = PhaseSpec(CommKind.ALL_REDUCE, CollectiveImpl(ImplKind.RING), 0, 0, 8, 262144)
    ends, _ = timer.end_times(spec, tuple(range(8)), (0,) * 7 + (1000,), tuple(range(8)), 0)
    assert ends == (16110,) * 5 + (17110,) + (16110,) * 2  # rank (7 + 14) % 8 = 5 carries the delay


def test_huge_staggered_phase_becomes_a_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PhaseTimer, "FULL_SIMULATION_MAX_SENDS", 10)
    timer = PhaseTimer(PhaseEnv(AnalyticalNetwork(RING8), 10, 1600.0))
    spec = PhaseSpec(CommKind.ALL_REDUCE, CollectiveImpl(ImplKind.RING), 0, 0, 8, 262144)
    ends, _ = timer.end_times(spec, tuple(range(8)), (0,) * 7 + (1000,), tuple(range(8)), 0)
    assert ends == (17110,) * 8 and timer.barrier_approximations == 1  # an upper bound of the exact ends


def test_double_binary_tree_shapes() -> None:
    high = binary_tree(8, TreeType.ROOT_MAX)
    assert high.parent == (1, 3, 1, 7, 5, 3, 5, -1) and high.left[7] == 3 and high.right[7] == -1
    low = binary_tree(8, TreeType.ROOT_MIN)
    assert low.parent == (-1, 2, 4, 2, 0, 6, 4, 6) and low.right[0] == 4
    with pytest.raises(GenieError, match="power-of-two"):
        binary_tree(6, TreeType.ROOT_MAX)


def test_chunks_and_multi_dimension_phases() -> None:
    assert chunk_sizes(1 << 20, 4) == (262144,) * 4 and chunk_sizes(10, 4) == (2,) * 5 and chunk_sizes(3, 4) == (3,)
    sys2 = system(dims=2)
    dims = logical_dims(sys2, CommKind.ALL_REDUCE, (2, 8))
    phases = world_phases(sys2, CommKind.ALL_REDUCE, 262144, dims, ())
    assert [(p.comm, p.logical_dim, p.data_size_bytes) for p in phases] == [
        (CommKind.REDUCE_SCATTER, 0, 262144), (CommKind.ALL_REDUCE, 1, 131072), (CommKind.ALL_GATHER, 0, 131072)]
    gather = world_phases(sys2, CommKind.ALL_GATHER, 1000, dims, ())
    assert [(p.logical_dim, p.data_size_bytes) for p in gather] == [(1, 1000), (0, 8000)]
    assert world_phases(sys2, CommKind.ALL_REDUCE, 4096, dims, (False, True))[0].comm is CommKind.ALL_REDUCE


def test_send_and_receive() -> None:
    size = 1 << 20
    trace = make_trace([
        [compute_node(0, "c", duration_ns=10_000), send_node(1, "s", rank=0, peer=1, size_bytes=size, data_deps=(0,))],
        [recv_node(0, "r", rank=1, peer=0, size_bytes=size), compute_node(1, "c", duration_ns=5_000, data_deps=(0,))],
    ])
    net = network((TopologyKind.SWITCH, 2, 50.0, 500.0))
    delay = int(2 * 500 + size / (50 * 2**30 / 1e9))
    ranks = estimate(trace, system(), net).result.by_rank()
    assert ranks[0].finish_cycles == 10_000 + delay and ranks[0].exposed_comm_cycles == delay
    assert ranks[1].finish_cycles == 10_000 + delay + 5_000 and ranks[1].gpu_time == 5_000
    assert ranks[1].comm_time == 10_000 + delay


def test_unmatched_receive_is_reported() -> None:
    trace = make_trace([[recv_node(0, "r", rank=0, peer=1, size_bytes=8, tag=3)], []])
    with pytest.raises(GenieError, match="never finishes on ranks 0.*8-byte message from rank 1 \\(tag 3\\)"):
        estimate(trace, system(), network((TopologyKind.SWITCH, 2, 50.0, 500.0)))


def test_process_group_ring_uses_the_local_bus_delay() -> None:
    """A group smaller than the world runs system.json's implementation (ring here) over its ranks; its memory-bus
    hop is 10 ns, not endpoint-delay."""
    size, chunk = 4096, 1024
    node = collective_node(0, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=size, process_group="7")
    trace = make_trace([[node], [], [node], []], groups=(ProcessGroup("7", (0, 2)),))
    net = network((TopologyKind.FULLY_CONNECTED, 4, 50.0, 500.0))
    msg = chunk // 2
    net_ns = int(500 + msg / (50 * 2**30 / 1e9))
    per_chunk = 2 * net_ns + 3 * 10 + 3 * int(msg / 1600)
    est = estimate(trace, system(endpoint_delay_ns=100), net)
    assert [r.finish_cycles for r in est.result.by_rank()] == [4 * per_chunk, 0, 4 * per_chunk, 0]
    assert any("custom ring, id: 2" in line for line in est.stdout().splitlines())


def test_collectives_take_turns_on_the_communication_slot() -> None:
    nodes = [collective_node(0, "a", comm_type=CommType.ALL_REDUCE, size_bytes=1 << 20),
             collective_node(1, "b", comm_type=CommType.ALL_REDUCE, size_bytes=1 << 20)]
    est = estimate(make_trace([nodes] * 8), system(), RING8)
    assert est.result.max_finish_cycles == 2 * 64440


def test_skipped_nodes_do_not_stall() -> None:
    nodes = [TraceNode(0, "meta", NodeKind.METADATA), TraceNode(1, "invalid", NodeKind.INVALID, data_deps=(0,)),
             compute_node(2, "c", duration_ns=3_000, data_deps=(1,))]
    result = estimate(make_trace([nodes] * 8), system(), RING8).result.by_rank()[0]
    assert result.finish_cycles == 3_000 and dict(result.type_times)["Invalid"] == 0


def test_roofline_compute() -> None:
    nodes = [compute_node(0, "gemm", num_ops=2 * 10**12, tensor_size_bytes=10**9),
             compute_node(1, "copy", num_ops=10**6, tensor_size_bytes=10**9, data_deps=(0,))]
    sys_ = system(roofline_enabled=True, peak_perf_tflops=1000.0)
    result = estimate(make_trace([nodes] * 8), sys_, RING8).result.by_rank()[0]
    gemm = int(2e12 / 1e15 * 1e9)  # compute bound: 2 ms at 1000 TFLOP/s
    copy = int(1e6 / (1600e9 * 1e6 / 1e9) * 1e9)  # memory bound: 1 GB at 1600 GB/s
    assert result.finish_cycles == gemm + copy and result.gpu_time == gemm + copy
    assert dict(result.utilisation)["Compute bound percentage"] == f"{gemm / (gemm + copy + 1) * 100:.3f}%"


def test_remote_memory() -> None:
    node = TraceNode(0, "load", NodeKind.MEM_LOAD).with_attr("tensor_size", 10**6)
    trace = make_trace([[node]] * 8)
    with pytest.raises(GenieError, match="NO_MEMORY_EXPANSION"):
        estimate(trace, system(), RING8, RemoteMemoryConfig())
    per_npu = RemoteMemoryConfig(MemoryType.PER_NPU_MEMORY_EXPANSION, latency_ns=100, bw_gb_per_s=100)
    assert estimate(trace, system(), RING8, per_npu).result.max_finish_cycles == 100 + 10_000
    pool = RemoteMemoryConfig(MemoryType.MEMORY_POOL, latency_ns=100, bw_gb_per_s=100)
    assert estimate(trace, system(), RING8, pool).result.max_finish_cycles == 8 * 10_100


def test_unsupported_inputs() -> None:
    with pytest.raises(GenieError, match="model-shared-bus"):
        estimate(all_reduce_trace(8, 1024), system(model_shared_bus=True), RING8)
    with pytest.raises(GenieError, match="4 ranks but the network has 8"):
        estimate(all_reduce_trace(4, 1024), system(), RING8)
    gather = make_trace([[collective_node(0, "g", comm_type=CommType.GATHER, size_bytes=8)]] * 8)
    with pytest.raises(InputError, match="GATHER is not supported"):
        estimate(gather, system(), RING8)
    missing = make_trace([[collective_node(0, "x", comm_type=CommType.ALL_REDUCE, size_bytes=8,
                                           process_group="9")]] * 8)
    with pytest.raises(GenieError, match="process group '9' is not defined"):
        estimate(missing, system(), RING8)
    with pytest.raises(GenieError, match="power-of-two"):
        estimate(all_reduce_trace(6, 4096), system("halvingDoubling"), network((TopologyKind.RING, 6, 50.0, 500.0)))


def three_d_trace(tp: int, dp: int, pp: int, microbatches: int = 2) -> object:
    """Tensor-parallel all-reduces, pipeline sends/receives, a data-parallel all-reduce; rank = t + tp*(d + dp*p)."""
    def rank(t: int, d: int, p: int) -> int:
        return t + tp * (d + dp * p)

    groups = [ProcessGroup(f"tp{p}.{d}", tuple(rank(t, d, p) for t in range(tp)))
              for p in range(pp) for d in range(dp)]
    groups += [ProcessGroup(f"dp{p}.{t}", tuple(rank(t, d, p) for d in range(dp)))
               for p in range(pp) for t in range(tp)]
    # Megatron's tied embedding: first and last stage all-reduce together (a group mixing rank classes)
    groups += [ProcessGroup(f"emb{d}.{t}", (rank(t, d, 0), rank(t, d, pp - 1))) for d in range(dp) for t in range(tp)]
    ranks = {}
    for p in range(pp):
        for d in range(dp):
            for t in range(tp):
                nodes: list[TraceNode] = []

                def add(node: TraceNode) -> None:
                    nodes.append(node)

                for m in range(microbatches):
                    deps = (len(nodes) - 1,) if nodes else ()
                    if p > 0:
                        add(recv_node(len(nodes), "rf", rank=rank(t, d, p), peer=rank(t, d, p - 1), size_bytes=1 << 16,
                                      tag=m, data_deps=deps))
                        deps = (len(nodes) - 1,)
                    add(compute_node(len(nodes), "fwd", duration_ns=20_000 * (p + 1), data_deps=deps))
                    add(collective_node(len(nodes), "tp", comm_type=CommType.ALL_REDUCE, size_bytes=1 << 18,
                                        process_group=f"tp{p}.{d}", data_deps=(len(nodes) - 1,)))
                    if p < pp - 1:
                        add(send_node(len(nodes), "sf", rank=rank(t, d, p), peer=rank(t, d, p + 1), size_bytes=1 << 16,
                                      tag=m, data_deps=(len(nodes) - 1,)))
                add(collective_node(len(nodes), "dp", comm_type=CommType.ALL_REDUCE, size_bytes=1 << 20,
                                    process_group=f"dp{p}.{t}", data_deps=(len(nodes) - 1,)))
                if p in (0, pp - 1):
                    add(collective_node(len(nodes), "emb", comm_type=CommType.ALL_REDUCE, size_bytes=1 << 19,
                                        process_group=f"emb{d}.{t}", data_deps=(len(nodes) - 1,)))
                ranks[rank(t, d, p)] = nodes
    return make_trace([ranks[r] for r in range(tp * dp * pp)], groups=tuple(groups))


def test_symmetric_ranks_are_simulated_once() -> None:
    trace = three_d_trace(tp=2, dp=2, pp=3)
    net = network((TopologyKind.SWITCH, 2, 400.0, 100.0), (TopologyKind.RING, 2, 50.0, 500.0),
                  (TopologyKind.FULLY_CONNECTED, 3, 25.0, 1000.0))
    sys3 = system(dims=3)
    full = estimate(trace, sys3, net, symmetry=False)
    reduced = estimate(trace, sys3, net, symmetry=True)
    assert full.simulated_ranks == 12 and reduced.simulated_ranks == 3  # one per pipeline stage
    assert reduced.result.by_rank() == full.result.by_rank()
    assert len({r.finish_cycles for r in full.result.ranks}) > 1


def test_symmetry_with_position_dependent_algorithms() -> None:
    """Double binary tree on dim 0, ring on dim 1: each tree position is a class, simulated once."""
    trace = all_reduce_trace(16, 1 << 20)
    net = network((TopologyKind.RING, 8, 50.0, 500.0), (TopologyKind.SWITCH, 2, 50.0, 500.0))
    sys2 = replace(system(dims=2), all_reduce_impl=(CollectiveImpl(ImplKind.DOUBLE_BINARY_TREE),
                                                    CollectiveImpl(ImplKind.RING)))
    full = estimate(trace, sys2, net, symmetry=False)
    reduced = estimate(trace, sys2, net, symmetry=True)
    assert reduced.simulated_ranks == 8 and reduced.result.by_rank() == full.result.by_rank()


def test_asymmetric_workload_falls_back_to_every_rank() -> None:
    nodes = [collective_node(0, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=1 << 20)]
    slow = [compute_node(0, "c", duration_ns=1000)] + [collective_node(1, "ar", comm_type=CommType.ALL_REDUCE,
                                                                       size_bytes=1 << 20, data_deps=(0,))]
    trace = make_trace([slow] + [nodes] * 7)
    est = estimate(trace, system(), RING8, symmetry=True)
    assert est.simulated_ranks == 8
    # rank 0's 1 us lag travels 4 chunks * 14 sends = 56 hops round the ring: back to rank 0
    assert [r.finish_cycles for r in est.result.by_rank()] == [65440] + [64440] * 7
