"""Reduce, gather, scatter and barrier schedules (genie.collectives.rooted): the shapes NCCL/gloo use, the bytes
each rank moves, and that a barrier synchronises. Data correctness and deadlock freedom for 1..17 ranks are in
test_collectives_check (every generator of the registry)."""

from __future__ import annotations

import math

import pytest

from genie.collectives.busbw import busbw_factor
from genie.collectives.check import expected_regions, simulate_data, verify_buffers
from genie.collectives.plan import InvalidCollectiveOp
from genie.collectives.registry import build_schedule, choose_algorithm
from genie.core.collective import Algorithm, Collective
from genie.core.schedule import Buffer, CollectiveOp
from genie.core.sizes import trace_op_size

C, A = Collective, Algorithm


def _sent(schedule, rank: int) -> int:
    return schedule.for_rank(rank).sent_bytes


def test_auto_picks_what_nccl_and_gloo_do():
    assert choose_algorithm(C.REDUCE, 1 << 20, 8) is A.PIPELINED_RING
    assert choose_algorithm(C.GATHER, 1 << 20, 8) is A.DIRECT
    assert choose_algorithm(C.SCATTER, 1 << 20, 8) is A.DIRECT
    assert choose_algorithm(C.BARRIER, 0, 8) is A.DISSEMINATION


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_reduce_is_a_chain_along_the_ring_ending_at_the_root(n):
    group = tuple(10 + i for i in range(n))
    root = group[n // 2]
    op = CollectiveOp(C.REDUCE, 4 * 1000, group, A.PIPELINED_RING, root=root, chunks=4)
    schedule = build_schedule(op)
    start = group.index(root)
    chain = [group[(start + 1 + h) % n] for h in range(n)]
    assert chain[-1] == root
    for h, rank in enumerate(chain):
        peers = schedule.peers_of(rank)
        assert peers == frozenset(p for p in (chain[h - 1] if h else None, chain[h + 1] if h < n - 1 else None)
                                  if p is not None)
        assert _sent(schedule, rank) == (0 if rank == root else 4000)
        assert all(r.reduce for step in schedule.for_rank(rank).steps for r in step.recvs)
    assert len(schedule.for_rank(root).steps) == n - 1 + 4 - 1  # pipelined: hops + chunks - 1
    buffers = simulate_data(schedule)
    assert verify_buffers(op, root, buffers[root]) is None
    assert [r.buffer for r in expected_regions(op, root)] == [Buffer.DATA]
    assert expected_regions(op, chain[0]) == []  # the others' buffers are not defined (as in NCCL)


@pytest.mark.parametrize("collective", [C.GATHER, C.SCATTER])
@pytest.mark.parametrize("n", [2, 4, 7])
def test_gather_and_scatter_are_one_step_of_direct_transfers_with_the_root(collective, n):
    group = tuple(range(n))
    root = n - 1
    size = 4 * n * 5  # 5 elements per rank
    op = CollectiveOp(collective, size, group, A.DIRECT, root=root)
    schedule = build_schedule(op)
    assert {len(rs.steps) for rs in schedule.ranks} == {1}
    for rank in group:
        if rank == root:
            assert schedule.peers_of(rank) == frozenset(group) - {root}
            assert _sent(schedule, rank) == (size - size // n if collective is C.SCATTER else 0)
        else:
            assert schedule.peers_of(rank) == {root}
            assert _sent(schedule, rank) == (size // n if collective is C.GATHER else 0)
    buffers = simulate_data(schedule)
    for rank in group:
        assert verify_buffers(op, rank, buffers[rank]) is None


def test_a_wrong_root_is_refused():
    with pytest.raises(InvalidCollectiveOp, match="root 9 is not in group"):
        build_schedule(CollectiveOp(C.GATHER, 64, (0, 1, 2, 3), A.DIRECT, root=9))


@pytest.mark.parametrize("n", range(1, 18))
def test_barrier_rounds_and_every_rank_hears_from_every_rank(n):
    group = tuple(range(0, 3 * n, 3))
    schedule = build_schedule(CollectiveOp(C.BARRIER, 0, group, A.DISSEMINATION, dtype_bytes=1))
    rounds = math.ceil(math.log2(n)) if n > 1 else 0
    assert {len(rs.steps) for rs in schedule.ranks} == {rounds}
    # what each rank has heard of, transitively, when it leaves: a message carries what its sender knew when
    # the round began (rendezvous per round); a barrier must let no rank leave before all have arrived
    heard = {rank: {rank} for rank in group}
    for index in range(rounds):
        before = {rank: set(known) for rank, known in heard.items()}
        for rs in schedule.ranks:
            step = rs.steps[index]
            assert len(step.sends) == len(step.recvs) == 1
            assert step.sends[0].size_bytes == step.recvs[0].size_bytes == 1
            assert (step.sends[0].buffer, step.recvs[0].buffer) == (Buffer.DATA, Buffer.OUTPUT)
            for r in step.recvs:
                heard[rs.rank] |= before[r.peer]
    assert all(known == set(group) for known in heard.values())
    assert all(expected_regions(schedule.op, rank) == [] for rank in group)


def test_a_barrier_without_its_last_round_does_not_synchronise():
    """The check above can fail: dissemination with one round fewer leaves ranks that heard from only half."""
    schedule = build_schedule(CollectiveOp(C.BARRIER, 0, tuple(range(8)), A.DISSEMINATION, dtype_bytes=1))
    heard = {rank: {rank} for rank in range(8)}
    for index in range(2):
        before = {rank: set(known) for rank, known in heard.items()}
        for rs in schedule.ranks:
            for r in rs.steps[index].recvs:
                heard[rs.rank] |= before[r.peer]
    assert all(len(known) == 4 for known in heard.values())


def test_sizes_follow_nccl_tests_and_the_trace_convention():
    # a trace's comm_size of gather/scatter is one rank's piece (as all_gather's): the op moves n x it
    assert trace_op_size(C.GATHER, 40, 4) == (160, 4)
    assert trace_op_size(C.SCATTER, 24, 3) == (72, 4)
    assert trace_op_size(C.REDUCE, 96, 4) == (96, 4)
    assert trace_op_size(C.BARRIER, 0, 4) == (0, 1)
    assert busbw_factor(C.GATHER, 4) == busbw_factor(C.SCATTER, 4) == 0.75
    assert busbw_factor(C.REDUCE, 4) == 1.0
    assert CollectiveOp(C.BARRIER, 0, (0, 1)).sends_messages and not CollectiveOp(C.REDUCE, 0, (0, 1)).sends_messages
