"""PAT all-gather / reduce-scatter (NCCL's log-step algorithm) and AUTO's NCCL-like choice of it (pure, no root;
the last test replays PAT in-process over loopback)."""

from __future__ import annotations

import math

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.placement import RankPlacement
from genie.core.schedule import CollectiveOp
from genie.collectives import build_schedule, choose_algorithm, supported_algorithms
from genie.collectives.check import find_deadlock, schedule_problems, simulate_data, verify_buffers
from genie.collectives.pat import aggregation, allgather_offset_steps
from genie.collectives.tuner import DEFAULT_NET_GBPS, estimated_times, graph_GBps, nccl_prefers_pat, search_channels

A, C = Algorithm, Collective


def _op(collective: Collective, n: int, count: int, algorithm: Algorithm = A.PAT) -> CollectiveOp:
    group = tuple((7 * i + 3) % 50 for i in range(n))  # neither 0..n-1 nor sorted
    return CollectiveOp(collective, count * 4, group, algorithm, dtype_bytes=4)


@pytest.mark.parametrize("collective", [C.ALL_GATHER, C.REDUCE_SCATTER])
@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 16])
@pytest.mark.parametrize("per_rank", [1, 7, 256])
def test_pat_passes_the_schedule_checks(collective, n, per_rank):
    for count in (n * per_rank, n * per_rank + n // 2 + 1):  # even and uneven blocks
        op = _op(collective, n, count)
        schedule = build_schedule(op)
        assert schedule.algorithm is A.PAT
        assert schedule_problems(schedule) == []
        assert find_deadlock(schedule) is None
        buffers = simulate_data(schedule)
        for rank in op.group:
            assert verify_buffers(op, rank, buffers[rank]) is None


@pytest.mark.parametrize("collective", [C.ALL_GATHER, C.REDUCE_SCATTER])
@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 16])
def test_pat_shape_bytes_peers_and_steps(collective, n):
    size = n * 4 * 10
    schedule = build_schedule(_op(collective, n, n * 10))
    group = schedule.op.group
    # every rank sends and receives (n-1) blocks in all, like the ring; each pair's bytes match
    sent: dict[tuple[int, int], int] = {}
    received: dict[tuple[int, int], int] = {}
    for rs in schedule.ranks:
        assert rs.sent_bytes == rs.received_bytes == (n - 1) * size // n
        x = group.index(rs.rank)
        for step in rs.steps:
            # one dimension per step: every send goes to x - 2^d, every receive comes from x + 2^d
            assert len({s.peer for s in step.sends}) <= 1 and len({r.peer for r in step.recvs}) <= 1
            for s in step.sends:
                sent[(rs.rank, s.peer)] = sent.get((rs.rank, s.peer), 0) + s.size_bytes
                distance = (x - group.index(s.peer)) % n
                assert distance & (distance - 1) == 0
            for r in step.recvs:
                received[(r.peer, rs.rank)] = received.get((r.peer, rs.rank), 0) + r.size_bytes
                assert r.reduce is (collective is C.REDUCE_SCATTER)
    assert sent == received
    steps = len(schedule.ranks[0].steps)
    expected = {2: 1, 3: 2, 4: 2, 5: 4, 8: 3, 16: 4}[n]  # n = 5: offsets 4 | 2 | 1 | 3 (NCCL's aggregation)
    assert steps == expected
    if n & (n - 1) == 0:
        assert steps == math.log2(n)


def test_pat_aggregation_follows_nccl():
    assert [aggregation(n, 1024) for n in (2, 3, 4, 5, 8, 16, 17, 64)] == [1, 1, 2, 2, 4, 8, 8, 32]
    # big blocks: nothing fits a buffer step twice, then NCCL_STEPS = 8 deep: A = 8 at most
    assert aggregation(64, 1 << 20) == 8
    assert allgather_offset_steps(8, 4) == ((4,), (2, 6), (1, 3, 5, 7))
    assert allgather_offset_steps(5, 2) == ((4,), (2,), (1,), (3,))
    # less aggregation: a low dimension's messages go one residue (mod D) per step
    assert allgather_offset_steps(8, 1) == ((4,), (2,), (6,), (1,), (3,), (5,), (7,))
    for n in range(2, 40):
        for factor in (1, 2, 4, 8, 16):
            offsets = [s for step in allgather_offset_steps(n, factor) for s in step]
            assert sorted(offsets) == list(range(1, n))


def test_pat_is_registered_for_all_gather_and_reduce_scatter_only():
    assert A.PAT in supported_algorithms(C.ALL_GATHER) and A.PAT in supported_algorithms(C.REDUCE_SCATTER)
    assert A.PAT not in supported_algorithms(C.ALL_REDUCE)
    assert Algorithm.parse("pat") is A.PAT


def test_tuner_estimates_are_nccls():
    t = estimated_times(0, 8)
    assert t.ring_ll_us == pytest.approx(6.6 + 7 * 5.0)
    assert t.ring_simple_us == pytest.approx(8.4 + 7 * 14.0)
    assert t.pat_us == pytest.approx(8.0 + 3 * 4.0 + 8 * 2.8)
    # bandwidths: PAT 0.75 B; ring LL min(20.4, B/2) x n/(n-1); ring Simple B x n/(n-1); B = 12 on a 100G NIC
    big = estimated_times(10**9, 8, net_GBps=12.5)
    assert big.pat_us - t.pat_us == pytest.approx(10**9 / (1000 * 9.0))
    assert big.ring_simple_us - t.ring_simple_us == pytest.approx(10**9 / (1000 * 12.0 * 8 / 7))
    assert big.ring_ll_us - t.ring_ll_us == pytest.approx(10**9 / (1000 * 6.0 * 8 / 7))
    with pytest.raises(ValueError):
        estimated_times(1024, 1)


@pytest.mark.parametrize("collective", [C.ALL_GATHER, C.REDUCE_SCATTER])
def test_auto_picks_pat_where_nccl_does(collective):
    one_gbit = 1e9 / 8e9
    # only with one rank per node: several per node, or not known, is NCCL's ring
    assert choose_algorithm(collective, 4096, 8, ranks_per_node=2, net_GBps=one_gbit) is A.RING
    assert choose_algorithm(collective, 4096, 8, net_GBps=one_gbit) is A.RING
    # 8 nodes at 1 Gbit/s: ring/LL for the tiniest, PAT from 256 B to 16 KiB, ring/Simple beyond
    picks = {size: choose_algorithm(collective, size, 8, ranks_per_node=1, net_GBps=one_gbit)
             for size in (64, 1024, 4096, 16384, 65536, 1 << 20)}
    assert picks == {64: A.RING, 1024: A.PAT, 4096: A.PAT, 16384: A.PAT, 65536: A.RING, 1 << 20: A.RING}
    # 8 nodes, rate not known (an unshaped veth: NCCL's socket transport reads 10 Gbit/s, graph 1.2 GB/s):
    # ring/LL up to 2 KiB, PAT from 4 KiB to 128 KiB, ring/Simple beyond
    picks = {size: choose_algorithm(collective, size, 8, ranks_per_node=1)
             for size in (1024, 2048, 4096, 16384, 65536, 131072, 262144)}
    assert picks == {1024: A.RING, 2048: A.RING, 4096: A.PAT, 16384: A.PAT, 65536: A.PAT, 131072: A.PAT,
                     262144: A.RING}
    # a 100 Gbit/s NIC (graph 12 GB/s): ring/LL's latency is lower up to ~23 KB, PAT then up to ~1.7 MB
    assert choose_algorithm(collective, 16384, 8, ranks_per_node=1, net_GBps=12.5) is A.RING
    assert choose_algorithm(collective, 65536, 8, ranks_per_node=1, net_GBps=12.5) is A.PAT
    assert choose_algorithm(collective, 1 << 21, 8, ranks_per_node=1, net_GBps=12.5) is A.RING
    # 16 nodes: PAT's log latency wins even for the smallest
    assert choose_algorithm(collective, 64, 16, ranks_per_node=1) is A.PAT
    assert not nccl_prefers_pat(65536, 8, 2)


def test_tuner_bandwidth_is_the_graph_searchs():
    """NCCL's tuner reads the graph's channels x speed, a speed of search.cc's array the NIC holds, not the NIC's
    own rate; a NIC of unknown rate is the socket transport's 10 Gbit/s (topo.h's NET_BW is read nowhere)."""
    assert search_channels(0.125) == (1, 0.12)  # 1 Gbit/s: the array's last entry
    assert search_channels(1.25) == (1, 1.2)  # 10 Gbit/s (a veth's reported speed)
    assert search_channels(12.5) == (1, 12.0)  # 100 Gbit/s: 12 beats 2 x 6 (a tie is not better)
    assert search_channels(0.05) == (1, 0.1)  # below every speed: NCCL's fallback channel
    assert graph_GBps(0.125) == pytest.approx(0.12)
    assert DEFAULT_NET_GBPS == pytest.approx(1.25)
    assert estimated_times(10**6, 8) == estimated_times(10**6, 8, net_GBps=1.25)
    # 1 Gbit/s: PAT's bandwidth is 0.75 x 0.12 (not x 0.125)
    t0, t1 = estimated_times(0, 8, net_GBps=0.125), estimated_times(90_000, 8, net_GBps=0.125)
    assert t1.pat_us - t0.pat_us == pytest.approx(90_000 / (1000 * 0.75 * 0.12))


def test_bench_sweep_uses_ranks_per_host_and_link_rate():
    from genie.services.bench import BenchRequest, ranks_per_node, sweep_cases

    request = BenchRequest(collectives=(C.ALL_GATHER,), min_bytes=1024, max_bytes=65536, factor=4)
    shaped = sweep_cases(request, 8, per_node=1, link_rate_bps=10**9)
    assert [c.op.algorithm for c in shaped] == [A.PAT, A.PAT, A.PAT, A.RING]
    # unshaped (no link rate): the veth's 10 Gbit/s, as NCCL reads it: ring/LL at 1 KiB, PAT at 4-64 KiB
    unshaped = sweep_cases(request, 8, per_node=1)
    assert [c.op.algorithm for c in unshaped] == [A.RING, A.PAT, A.PAT, A.PAT]
    assert [c.op.algorithm for c in sweep_cases(request, 8)] == [A.RING] * 4
    hosts = [RankPlacement(r, f"h{r // 2}", None, "127.0.0.1") for r in range(8)]
    assert ranks_per_node(hosts) == 2
    assert ranks_per_node([RankPlacement(r, f"h{r}", None, "127.0.0.1") for r in range(8)]) == 1


@pytest.mark.parametrize("collective", [C.ALL_GATHER, C.REDUCE_SCATTER])
@pytest.mark.parametrize("n,max_bytes", [(5, 65536), (8, 8 << 20)])
def test_pat_replays_in_process_with_correct_data(collective, n, max_bytes):
    """n = 8 sends up to 4 regions to one peer per step (gathered sends, scattered receives), 8 MiB in pieces
    larger than a socket takes at once."""
    from genie.engine.inprocess import thread_sessions
    from genie.services.bench import BenchRequest, run_bench
    from genie.services.target import loopback_placements

    request = BenchRequest(collectives=(collective,), algorithm=A.PAT, min_bytes=1024, max_bytes=max_bytes,
                           factor=64 if max_bytes > 65536 else 8, iterations=2, warmup=1, verify=True)
    outcome = run_bench(request, loopback_placements(n), sessions=thread_sessions())
    assert [s.algorithm for s in outcome.stats] == [A.PAT] * 3
    assert all(s.ranks == n for s in outcome.stats)


TRACE = """format: genie-trace
version: 1
name: pat-step
ranks: 5
groups:
  all: [0, 1, 2, 3, 4]
program:
  - {id: 0, name: ag, type: all_gather, size: 512B, group: all}
  - {id: 1, name: rs, type: reduce_scatter, size: 4KiB, group: all, deps: [0]}
"""


def _collective_algorithms(programs) -> set:
    return {node.op.algorithm for program in programs for node in program.nodes if node.op is not None}


def test_replay_auto_picks_pat_with_one_rank_per_host():
    from genie.engine.inprocess import thread_sessions
    from genie.engine.program import build_programs
    from genie.services.replay import ReplayRequest, run_replay
    from genie.workloads.native import read_native

    trace = read_native(TRACE)
    one_per_host = {r: f"h{r}" for r in range(5)}
    assert _collective_algorithms(build_programs(trace, hosts=one_per_host, link_rate_bps=10**9)) == {A.PAT}
    assert _collective_algorithms(build_programs(trace, hosts={r: f"h{r // 2}" for r in range(5)},
                                                 link_rate_bps=10**9)) == {A.RING}
    assert _collective_algorithms(build_programs(trace)) == {A.RING}  # hosts not known
    placements = [RankPlacement(r, f"h{r}", None, "127.0.0.1") for r in range(5)]
    outcome = run_replay(trace, placements, ReplayRequest(iterations=2, warmup=1), sessions=thread_sessions(),
                         auto_by_placement=True, link_rate_bps=10**9)
    assert _collective_algorithms(outcome.programs) == {A.PAT}
    assert len(outcome.iterations) == 2
    assert all(len(rr.records) == 2 for it in outcome.iterations for rr in it.ranks)
