"""Every generator over many group sizes: matched messages, no deadlock, correct data; and the checkers
themselves on hand-made broken schedules (pure, no root)."""

from __future__ import annotations

import numpy as np
import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.schedule import Buffer, CollectiveOp, RankSchedule, Recv, Schedule, Send, Step
from genie.collectives import build_schedule, supported_algorithms
from genie.collectives.check import (element_dtype, expected_regions, find_deadlock, initial_buffers,
                                     initial_values, schedule_problems, simulate_data, verify_buffers)

A, C = Algorithm, Collective
PIPELINED = {(C.ALL_REDUCE, A.RING), (C.ALL_REDUCE, A.DOUBLE_BINARY_TREE), (C.ALL_GATHER, A.RING),
             (C.REDUCE_SCATTER, A.RING), (C.BROADCAST, A.PIPELINED_RING), (C.REDUCE, A.PIPELINED_RING)}
SYNONYMS = {(C.BROADCAST, A.RING), (C.REDUCE, A.RING)}  # the same generator as pipelined_ring
COMBOS = [(c, a) for c in C for a in supported_algorithms(c) if (c, a) not in SYNONYMS]


def op_for(collective: Collective, algorithm: Algorithm, n: int, count: int, chunks: int = 1,
           dtype_bytes: int = 4) -> CollectiveOp:
    group = tuple((7 * i + 3) % 50 for i in range(n))
    root = group[n // 2]
    peer = group[(n // 2 + 1) % n] if collective is C.SEND_RECV else None
    return CollectiveOp(collective, count * dtype_bytes, group, algorithm, root=root, peer=peer, chunks=chunks,
                        dtype_bytes=dtype_bytes)


def assert_messages_match(schedule: Schedule) -> None:
    """The k-th send on every channel has a k-th receive of the same size (and vice versa)."""
    sends: dict[tuple[int, int], list[int]] = {}
    recvs: dict[tuple[int, int], list[int]] = {}
    for rs in schedule.ranks:
        for step in rs.steps:
            for s in step.sends:
                sends.setdefault((rs.rank, s.peer), []).append(s.size_bytes)
            for r in step.recvs:
                recvs.setdefault((r.peer, rs.rank), []).append(r.size_bytes)
    assert sends == recvs
    assert all(size > 0 for sizes in sends.values() for size in sizes)


def assert_correct(op: CollectiveOp) -> None:
    schedule = build_schedule(op)
    assert schedule_problems(schedule) == []
    assert_messages_match(schedule)
    assert find_deadlock(schedule) is None
    assert len({len(rs.steps) for rs in schedule.ranks}) == 1
    buffers = simulate_data(schedule)
    for rank in op.group:
        assert verify_buffers(op, rank, buffers[rank]) is None


@pytest.mark.parametrize("collective,algorithm", COMBOS, ids=lambda x: x.value)
def test_every_generator_is_correct_for_1_to_17_ranks(collective, algorithm):
    for n in range(1, 18):
        if collective is C.SEND_RECV and n == 1:
            continue
        counts = sorted({0, 1, max(1, n - 1), n, 7, 3 * n + 2, 101})  # incl. fewer elements than ranks
        for count in counts:
            assert_correct(op_for(collective, algorithm, n, count))
        if (collective, algorithm) in PIPELINED:
            for chunks in (2, 5):
                for count in (3, 4 * n * chunks + 3):
                    assert_correct(op_for(collective, algorithm, n, count, chunks))


@pytest.mark.parametrize("dtype_bytes", [1, 2, 8])
@pytest.mark.parametrize("collective,algorithm", COMBOS, ids=lambda x: x.value)
def test_other_element_sizes(collective, algorithm, dtype_bytes):
    for n in (2, 5, 8):
        assert_correct(op_for(collective, algorithm, n, 4 * n + 1, dtype_bytes=dtype_bytes))


# ------------------------------------------------------------------------------------------- deadlocks

def hand_made(op: CollectiveOp, steps: dict[int, list[Step]]) -> Schedule:
    return Schedule(op, A.RING, tuple(RankSchedule(rank, tuple(steps[rank])) for rank in op.group))


def test_find_deadlock_catches_receive_before_send():
    op = CollectiveOp(C.ALL_REDUCE, 16, (0, 1), A.RING)
    schedule = hand_made(op, {
        0: [Step(recvs=(Recv(1, 0, 8),)), Step(sends=(Send(1, 8, 8),))],
        1: [Step(recvs=(Recv(0, 8, 8),)), Step(sends=(Send(0, 0, 8),))],
    })
    problem = find_deadlock(schedule)
    assert problem is not None and "deadlock" in problem
    assert "rank 0 stuck at step 0" in problem and "rank 1 stuck at step 0" in problem
    with pytest.raises(ValueError, match="deadlock"):
        simulate_data(schedule)


def test_find_deadlock_catches_a_cycle_over_steps():
    op = CollectiveOp(C.ALL_REDUCE, 12, (0, 1, 2), A.RING)
    # each rank sends first to its successor, who only receives from it one step later
    steps = {r: [Step(sends=(Send((r + 1) % 3, 0, 4),)), Step(recvs=(Recv((r - 1) % 3, 4, 4),))]
             for r in range(3)}
    steps[1] = [steps[1][1], steps[1][0]]
    steps[2] = [steps[2][1], steps[2][0]]
    assert find_deadlock(hand_made(op, steps)) is None  # 0 -> 1 -> 2 -> 0 unrolls
    steps[0] = [steps[0][1], steps[0][0]]  # now everyone receives first
    assert "stuck" in find_deadlock(hand_made(op, steps))


def test_find_deadlock_reports_size_mismatch_and_unmatched_messages():
    op = CollectiveOp(C.ALL_REDUCE, 16, (0, 1), A.RING)
    mismatch = hand_made(op, {0: [Step(sends=(Send(1, 0, 8),))], 1: [Step(recvs=(Recv(0, 0, 4),))]})
    assert "sizes differ" in find_deadlock(mismatch)
    unmatched = hand_made(op, {0: [Step(sends=(Send(1, 0, 8), Send(1, 8, 8)))],
                               1: [Step(recvs=(Recv(0, 0, 8),))]})
    assert "sends 2 messages to rank 1, which receives 1" in find_deadlock(unmatched)


def test_schedule_problems_enforces_the_model_rules():
    op = CollectiveOp(C.ALL_REDUCE, 16, (0, 1), A.RING)
    bad = hand_made(op, {
        0: [Step(sends=(Send(1, 0, 8),), recvs=(Recv(1, 4, 8),))],          # reads what it writes
        1: [Step(sends=(Send(0, 4, 8), Send(7, 0, 4)), recvs=(Recv(0, 12, 8),))],  # unknown peer, out of range
    })
    text = "\n".join(schedule_problems(bad))
    assert "overlaps" in text and "invalid peer 7" in text and "outside data" in text
    two_reduces = hand_made(op, {0: [Step(recvs=(Recv(1, 0, 8, reduce=True), Recv(1, 0, 8, reduce=True)))],
                                 1: [Step(sends=(Send(0, 0, 8), Send(0, 8, 8)))]})
    assert schedule_problems(two_reduces) == []  # concurrent reductions into one region are fine
    misaligned = hand_made(op, {0: [Step(sends=(Send(1, 2, 4),))], 1: [Step(recvs=(Recv(0, 0, 4),))]})
    assert any("multiples" in p for p in schedule_problems(misaligned))
    output_in_allreduce = hand_made(op, {0: [Step(sends=(Send(1, 0, 4, Buffer.OUTPUT),))],
                                         1: [Step(recvs=(Recv(0, 0, 4),))]})
    assert any("does not exist" in p for p in schedule_problems(output_in_allreduce))


# ------------------------------------------------------------------------------------------- test data

def test_initial_buffers_are_deterministic_small_distinct_integers():
    op = op_for(C.ALL_REDUCE, A.RING, 8, 1000)
    a, b = initial_buffers(op, 3), initial_buffers(op, 3)
    assert set(a) == {Buffer.DATA} and a[Buffer.DATA].dtype == np.float32
    np.testing.assert_array_equal(a[Buffer.DATA], b[Buffer.DATA])
    data = {r: initial_buffers(op, r)[Buffer.DATA] for r in op.group}
    assert all(np.array_equal(v, np.round(v)) and v.min() >= 0 and v.max() * 8 < 2**24 for v in data.values())
    assert len({v.tobytes() for v in data.values()}) == 8
    assert len(np.unique(data[op.group[0]])) > 500  # elements differ within a rank
    np.testing.assert_array_equal(initial_values(op, 3, 100, 200), a[Buffer.DATA][100:200])
    a2a = op_for(C.ALL_TO_ALL, A.DIRECT, 4, 64)
    bufs = initial_buffers(a2a, 3)
    assert set(bufs) == {Buffer.DATA, Buffer.OUTPUT}
    assert not np.array_equal(bufs[Buffer.DATA], bufs[Buffer.OUTPUT])
    assert element_dtype(op_for(C.ALL_REDUCE, A.RING, 2, 4, dtype_bytes=2)) == np.float16


def test_expected_regions_cover_only_the_defined_part():
    rs = op_for(C.REDUCE_SCATTER, A.RING, 4, 10)  # blocks of 3, 3, 2, 2 elements
    [region] = expected_regions(rs, rs.group[2])
    assert region.buffer is Buffer.DATA and region.offset_bytes == 6 * 4 and region.values.size == 2
    total = sum(initial_values(rs, r, 6, 8) for r in rs.group)
    np.testing.assert_array_equal(region.values, total)
    a2a = op_for(C.ALL_TO_ALL, A.DIRECT, 4, 10)  # nccl-tests rounding: 2 elements per peer, 2 left over
    [region] = expected_regions(a2a, a2a.group[1])
    assert region.buffer is Buffer.OUTPUT and region.values.size == 8
    np.testing.assert_array_equal(region.values[4:6], initial_values(a2a, a2a.group[2], 2, 4))
    assert expected_regions(op_for(C.ALL_REDUCE, A.RING, 3, 0), 3) == []


def test_verify_buffers_finds_a_wrong_element_and_accepts_raw_bytes():
    op = op_for(C.ALL_REDUCE, A.RING, 4, 50)
    buffers = simulate_data(build_schedule(op))
    rank = op.group[1]
    raw = {Buffer.DATA: buffers[rank][Buffer.DATA].view(np.uint8)}
    assert verify_buffers(op, rank, raw) is None
    buffers[rank][Buffer.DATA][17] += 1
    problem = verify_buffers(op, rank, buffers[rank])
    assert problem is not None and "byte 68" in problem and "1 wrong" in problem


def test_simulate_data_detects_a_wrong_schedule():
    op = op_for(C.ALL_GATHER, A.RING, 2, 4)
    g = op.group
    # well-formed and deadlock-free, but rank g[1] sums block 0 into its stale copy instead of storing it
    wrong = hand_made(op, {g[0]: [Step(sends=(Send(g[1], 0, 8),), recvs=(Recv(g[1], 8, 8),))],
                           g[1]: [Step(sends=(Send(g[0], 8, 8),), recvs=(Recv(g[0], 0, 8, reduce=True),))]})
    assert schedule_problems(wrong) == [] and find_deadlock(wrong) is None
    buffers = simulate_data(wrong)
    assert verify_buffers(op, g[0], buffers[g[0]]) is None
    assert "byte 0" in verify_buffers(op, g[1], buffers[g[1]])
