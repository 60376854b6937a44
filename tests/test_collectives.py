"""Schedule generators: closed forms, structure, registry and busbw (pure, no root)."""

from __future__ import annotations

import math

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.errors import GenieError
from genie.core.schedule import Buffer, Copy, CollectiveOp, Schedule, Step
from genie.collectives import (HALVING_DOUBLING_MAX_BYTES, RECURSIVE_DOUBLING_MAX_BYTES, InvalidCollectiveOp, UnsupportedAlgorithm, algbw_GBps,
                               block_bounds, build_schedule, busbw_factor, busbw_GBps, choose_algorithm,
                               supported_algorithms)
from genie.collectives.check import find_deadlock
from genie.collectives.halving_doubling import fold
from genie.collectives.tree import double_binary_tree

A, C = Algorithm, Collective


def group_of(n: int) -> tuple[int, ...]:
    """Global rank ids that are neither 0..n-1 nor sorted, to catch position/rank mix-ups."""
    return tuple((7 * i + 3) % 50 for i in range(n))


def make(collective: Collective, algorithm: Algorithm, n: int, size_bytes: int, chunks: int = 1,
         dtype_bytes: int = 4) -> Schedule:
    group = group_of(n)
    root = group[n // 2]
    peer = group[-1] if collective is not C.SEND_RECV else group[(n // 2 + 1) % n]
    return build_schedule(CollectiveOp(collective, size_bytes, group, algorithm, root=root, peer=peer,
                                       chunks=chunks, dtype_bytes=dtype_bytes))


def step_count(schedule: Schedule) -> int:
    counts = {len(rs.steps) for rs in schedule.ranks}
    assert len(counts) == 1, "all ranks share the global step index"
    return counts.pop()


# ------------------------------------------------------------------------------------------- closed forms

@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 16])
@pytest.mark.parametrize("blocks_per_rank", [1, 3, 64])
def test_ring_allreduce_closed_form(n, blocks_per_rank):
    size = n * 4 * blocks_per_rank
    s = make(C.ALL_REDUCE, A.RING, n, size)
    assert s.algorithm is A.RING
    assert step_count(s) == 2 * (n - 1)
    for rs in s.ranks:
        assert rs.sent_bytes == rs.received_bytes == 2 * (n - 1) * size // n
        assert all(len(step.sends) == 1 and len(step.recvs) == 1 for step in rs.steps)


@pytest.mark.parametrize("n,chunks", [(2, 2), (4, 4), (5, 3), (8, 2)])
def test_ring_allreduce_pipelined_adds_chunks_minus_one_steps(n, chunks):
    size = n * chunks * 4 * 5
    s = make(C.ALL_REDUCE, A.RING, n, size, chunks=chunks)
    assert step_count(s) == 2 * (n - 1) + chunks - 1
    assert all(rs.sent_bytes == 2 * (n - 1) * size // n for rs in s.ranks)


@pytest.mark.parametrize("collective", [C.ALL_GATHER, C.REDUCE_SCATTER])
@pytest.mark.parametrize("algorithm", [A.RING, A.DIRECT])
@pytest.mark.parametrize("n", [2, 3, 6, 8, 13])
def test_allgather_reduce_scatter_closed_form(collective, algorithm, n):
    size = n * 4 * 10
    s = make(collective, algorithm, n, size)
    assert step_count(s) == n - 1
    assert all(rs.sent_bytes == rs.received_bytes == (n - 1) * size // n for rs in s.ranks)
    reduces = {r.reduce for rs in s.ranks for step in rs.steps for r in step.recvs}
    assert reduces == {collective is C.REDUCE_SCATTER}


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12])
def test_direct_alltoall_closed_form(n):
    size = n * 4 * 6
    s = make(C.ALL_TO_ALL, A.DIRECT, n, size)
    assert step_count(s) == 1  # every transfer at once, as NCCL posts them
    block = size // n
    for pos, rs in enumerate(s.ranks):
        assert rs.sent_bytes == (n - 1) * block
        assert rs.steps[0].copies == (Copy(Buffer.DATA, pos * block, Buffer.OUTPUT, pos * block, block),)
        assert all(x.buffer is Buffer.DATA for step in rs.steps for x in step.sends)
        assert all(x.buffer is Buffer.OUTPUT for step in rs.steps for x in step.recvs)
        (step,) = rs.steps
        assert [x.peer for x in step.sends] == [s.op.group[(pos + k) % n] for k in range(1, n)]
        assert sorted(x.peer for x in step.recvs) == sorted(p for p in s.op.group if p != s.op.group[pos])
        assert [x.offset_bytes for x in step.recvs] == [((pos - k) % n) * block for k in range(1, n)]


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_halving_doubling_power_of_two(n):
    size = n * 4 * 8
    log = int(math.log2(n))
    ar = make(C.ALL_REDUCE, A.HALVING_DOUBLING, n, size)
    assert step_count(ar) == 2 * log
    assert all(rs.sent_bytes == 2 * (n - 1) * size // n for rs in ar.ranks)
    for collective in (C.ALL_GATHER, C.REDUCE_SCATTER):
        s = make(collective, A.HALVING_DOUBLING, n, size)
        assert step_count(s) == log
        assert all(rs.sent_bytes == (n - 1) * size // n for rs in s.ranks)
    # every step is a pairwise exchange: a rank sends to exactly the peer it receives from
    for rs in ar.ranks:
        for step in rs.steps:
            assert [x.peer for x in step.sends] == [x.peer for x in step.recvs]


@pytest.mark.parametrize("n", [2, 3, 4, 6, 8, 13, 16])
def test_recursive_doubling_closed_form(n):
    p, r = fold(n)
    log = int(math.log2(p))
    size = n * 4 * 8
    s = make(C.ALL_REDUCE, A.RECURSIVE_DOUBLING, n, size)
    assert step_count(s) == log + (2 if r else 0)
    group = group_of(n)
    active = [group[2 * j + 1] if j < r else group[j + r] for j in range(p)]
    for rank in active:  # every active rank exchanges the whole buffer once per doubling step
        extra = size if r and rank in group[:2 * r] else 0  # receives its folded partner's buffer, returns it
        assert s.for_rank(rank).sent_bytes == log * size + extra
    assert find_deadlock(s) is None


@pytest.mark.parametrize("n", [3, 5, 6, 7, 12, 17])
def test_halving_doubling_folds_non_powers_of_two(n):
    p, r = fold(n)
    assert p & (p - 1) == 0 and p + r == n and r < p
    size = n * 4 * 8
    assert step_count(make(C.ALL_REDUCE, A.HALVING_DOUBLING, n, size)) == 2 * int(math.log2(p)) + 2
    assert step_count(make(C.ALL_GATHER, A.HALVING_DOUBLING, n, size)) == int(math.log2(p)) + 2
    assert step_count(make(C.REDUCE_SCATTER, A.HALVING_DOUBLING, n, size)) == int(math.log2(p)) + 2
    s = make(C.ALL_REDUCE, A.HALVING_DOUBLING, n, size)
    group = group_of(n)
    first = s.for_rank(group[0]).steps[0]
    assert first.sends[0].peer == group[1] and first.sends[0].size_bytes == size  # MPICH fold: whole buffer


def test_double_binary_tree_matches_nccl_shapes():
    first, second = double_binary_tree(14)
    # ncclGetBtree illustration for 14 ranks: 0 -> 8 -> (4, 12), 12 -> (10, 13), 2 -> (1, 3)
    assert first.root == 0 and first.children[0] == (8,)
    assert first.children[8] == (4, 12) and first.children[12] == (10, 13) and first.children[2] == (1, 3)
    mirror = double_binary_tree(12)[1]  # ncclGetDtree mirror illustration: 11 -> 3 -> (1, 7)
    assert mirror.root == 11 and mirror.children[11] == (3,) and set(mirror.children[3]) == {1, 7}
    shifted = double_binary_tree(13)[1]
    assert shifted.root == 1


@pytest.mark.parametrize("n", list(range(2, 18)))
def test_double_binary_tree_complementary(n):
    trees = double_binary_tree(n)
    for tree in trees:
        assert sum(1 for p in tree.parent if p < 0) == 1
        assert max(len(k) for k in tree.children) <= 2
        assert max(tree.depths()) == tree.heights()[tree.root] == math.ceil(math.log2(n))
    leaves = [{i for i, kids in enumerate(t.children) if not kids} for t in trees]
    assert not leaves[0] & leaves[1], "a leaf of one tree is interior in the other"


@pytest.mark.parametrize("n,chunks", [(2, 1), (4, 1), (8, 1), (8, 4), (13, 2)])
def test_double_binary_tree_steps(n, chunks):
    size = 2 * chunks * 4 * 9
    height = max(t.heights()[t.root] for t in double_binary_tree(n))
    s = make(C.ALL_REDUCE, A.DOUBLE_BINARY_TREE, n, size, chunks=chunks)
    assert step_count(s) == 2 * height + chunks - 1
    # each tree moves half the buffer: every non-root sends S/2 up its tree, so every rank sends >= S/2
    assert all(rs.sent_bytes >= size // 2 for rs in s.ranks)


@pytest.mark.parametrize("n,chunks", [(2, 1), (4, 1), (5, 4), (9, 3)])
def test_pipelined_ring_broadcast(n, chunks):
    size = chunks * 4 * 3
    s = make(C.BROADCAST, A.PIPELINED_RING, n, size, chunks=chunks)
    assert s.algorithm is A.PIPELINED_RING
    assert step_count(s) == n - 1 + chunks - 1
    group = group_of(n)
    root = n // 2
    assert s.for_rank(group[root]).sent_bytes == size and s.for_rank(group[root]).received_bytes == 0
    last = group[(root - 1) % n]
    assert s.for_rank(last).sent_bytes == 0 and s.for_rank(last).received_bytes == size
    assert make(C.BROADCAST, A.RING, n, size, chunks=chunks).ranks == s.ranks  # ring is a synonym


def test_send_recv():
    group = group_of(4)
    op = CollectiveOp(C.SEND_RECV, 1024, group, A.P2P, root=group[1], peer=group[3])
    s = build_schedule(op)
    assert step_count(s) == 1
    assert s.for_rank(group[1]).steps[0].sends[0].peer == group[3]
    assert s.for_rank(group[3]).received_bytes == 1024 and s.for_rank(group[3]).sent_bytes == 0
    assert s.for_rank(group[0]).steps == (Step(),)


def test_odd_sizes_split_evenly_and_skip_empty_chunks():
    assert block_bounds(10, 4) == (0, 3, 6, 8, 10)
    assert block_bounds(2, 4) == (0, 1, 2, 2, 2)
    s = make(C.ALL_REDUCE, A.RING, 4, 2 * 4)  # two elements over four ranks
    sizes = {x.size_bytes for rs in s.ranks for step in rs.steps for x in (*step.sends, *step.recvs)}
    assert sizes == {4}
    assert make(C.ALL_REDUCE, A.RING, 4, 0).ranks[0].steps == ()


# ------------------------------------------------------------------------------------------- registry

def test_registry_rejects_unsupported_pairs_listing_the_supported_ones():
    op = CollectiveOp(C.ALL_TO_ALL, 64, (0, 1), A.RING)
    with pytest.raises(UnsupportedAlgorithm, match="supported: direct") as info:
        build_schedule(op)
    assert isinstance(info.value, ValueError) and isinstance(info.value, GenieError)
    with pytest.raises(ValueError, match="ring, halving_doubling, recursive_doubling, double_binary_tree"):
        build_schedule(CollectiveOp(C.ALL_REDUCE, 64, (0, 1), A.P2P))


def test_supported_algorithms():
    assert supported_algorithms(C.ALL_REDUCE) == (A.RING, A.HALVING_DOUBLING, A.RECURSIVE_DOUBLING,
                                                  A.DOUBLE_BINARY_TREE)
    # ring: nccl-tests' sendrecv ring shift; ping_pong: OSU's latency test
    assert supported_algorithms(C.SEND_RECV) == (A.P2P, A.RING, A.PING_PONG)
    for collective in C:
        assert A.AUTO not in supported_algorithms(collective)
        assert choose_algorithm(collective, 1 << 30, 8) in supported_algorithms(collective)
        assert choose_algorithm(collective, 1, 8) in supported_algorithms(collective)


def test_choose_algorithm_thresholds():
    assert HALVING_DOUBLING_MAX_BYTES == 256 * 1024 and RECURSIVE_DOUBLING_MAX_BYTES == 16 * 1024
    assert choose_algorithm(C.ALL_REDUCE, RECURSIVE_DOUBLING_MAX_BYTES, 8) is A.RECURSIVE_DOUBLING
    assert choose_algorithm(C.ALL_REDUCE, RECURSIVE_DOUBLING_MAX_BYTES + 4, 8) is A.HALVING_DOUBLING
    assert choose_algorithm(C.ALL_REDUCE, HALVING_DOUBLING_MAX_BYTES, 8) is A.HALVING_DOUBLING
    assert choose_algorithm(C.ALL_REDUCE, HALVING_DOUBLING_MAX_BYTES + 1, 8) is A.RING
    assert choose_algorithm(C.ALL_REDUCE, 1024, 2) is A.RING
    assert choose_algorithm(C.ALL_GATHER, 1024, 8) is A.RING
    assert choose_algorithm(C.REDUCE_SCATTER, 1024, 8) is A.RING
    assert choose_algorithm(C.ALL_TO_ALL, 1024, 8) is A.DIRECT
    assert choose_algorithm(C.BROADCAST, 1024, 8) is A.PIPELINED_RING
    assert choose_algorithm(C.SEND_RECV, 1024, 2) is A.P2P
    auto = build_schedule(CollectiveOp(C.ALL_REDUCE, 65536, tuple(range(8))))
    assert auto.algorithm is A.HALVING_DOUBLING and len(auto.ranks[0].steps) == 6


@pytest.mark.parametrize("op,field", [
    (CollectiveOp(C.ALL_REDUCE, 10, (0, 1), A.RING), "size_bytes"),
    (CollectiveOp(C.ALL_REDUCE, -4, (0, 1), A.RING), "size_bytes"),
    (CollectiveOp(C.ALL_REDUCE, 8, (0, 0), A.RING), "group"),
    (CollectiveOp(C.ALL_REDUCE, 8, (), A.RING), "group"),
    (CollectiveOp(C.ALL_REDUCE, 8, (0, 1), A.RING, chunks=0), "chunks"),
    (CollectiveOp(C.BROADCAST, 8, (0, 1), A.PIPELINED_RING, root=5), "root"),
    (CollectiveOp(C.SEND_RECV, 8, (0, 1), A.P2P, root=0, peer=None), "peer"),
    (CollectiveOp(C.SEND_RECV, 8, (0, 1), A.P2P, root=1, peer=1), "peer"),
])
def test_invalid_ops_name_the_field(op, field):
    with pytest.raises(InvalidCollectiveOp, match=field) as info:
        build_schedule(op)
    assert isinstance(info.value, ValueError) and isinstance(info.value, GenieError)


# ------------------------------------------------------------------------------------------- busbw

def test_busbw_factors_follow_nccl_tests():
    assert busbw_factor(C.ALL_REDUCE, 8) == pytest.approx(2 * 7 / 8)
    for collective in (C.ALL_GATHER, C.REDUCE_SCATTER, C.ALL_TO_ALL):
        assert busbw_factor(collective, 4) == pytest.approx(3 / 4)
    assert busbw_factor(C.BROADCAST, 16) == 1.0 and busbw_factor(C.SEND_RECV, 2) == 1.0
    assert busbw_factor(C.ALL_REDUCE, 1) == 0.0
    with pytest.raises(ValueError):
        busbw_factor(C.ALL_REDUCE, 0)


def test_algbw_and_busbw():
    assert algbw_GBps(10**9, 10**6) == pytest.approx(1.0)   # 1 GB in 1 s
    assert algbw_GBps(1 << 20, 100.0) == pytest.approx((1 << 20) / 100e-6 / 1e9)
    assert busbw_GBps(C.ALL_REDUCE, 4, 10**9, 10**6) == pytest.approx(1.5)
    with pytest.raises(ValueError):
        algbw_GBps(1, 0)


@pytest.mark.parametrize("collective,algorithm", [(C.ALL_REDUCE, A.RING), (C.ALL_GATHER, A.RING),
                                                  (C.REDUCE_SCATTER, A.RING), (C.ALL_TO_ALL, A.DIRECT)])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_busbw_factor_is_what_a_ring_rank_sends(collective, algorithm, n):
    size = n * 4 * 16
    s = make(collective, algorithm, n, size)
    assert max(rs.sent_bytes for rs in s.ranks) == pytest.approx(busbw_factor(collective, n) * size)


def test_send_recv_ring_is_nccl_tests_ring_shift():
    """nccl-tests' sendrecv: every rank sends to rank+1 and receives from rank-1, in one step (issue #17)."""
    schedule = build_schedule(CollectiveOp(C.SEND_RECV, 64, (0, 1, 2, 3), A.RING, root=0, peer=3))
    for rank in range(4):
        steps = schedule.for_rank(rank).steps
        assert len(steps) == 1
        assert [(s.peer, s.size_bytes) for s in steps[0].sends] == [((rank + 1) % 4, 64)]
        assert [(r.peer, r.size_bytes) for r in steps[0].recvs] == [((rank - 1) % 4, 64)]


def test_bench_send_recv_defaults_to_the_ring_shift():
    from genie.services.bench import BenchRequest, sweep_cases

    cases = sweep_cases(BenchRequest(collectives=(C.SEND_RECV,), min_bytes=1024, max_bytes=1024), 4)
    assert [c.op.algorithm for c in cases] == [A.RING]
    cases = sweep_cases(BenchRequest(collectives=(C.SEND_RECV,), algorithm=A.P2P, min_bytes=1024, max_bytes=1024), 4)
    assert [c.op.algorithm for c in cases] == [A.P2P]
