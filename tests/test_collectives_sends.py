"""`genie.collectives.sends.step_sends`: the sends of each step without the Schedule, equal to what
`build_schedule` sends (the vectorised ring path against the schedule, step for step, in order)."""

from __future__ import annotations

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.schedule import CollectiveOp
from genie.collectives import InvalidCollectiveOp, build_schedule
from genie.collectives.sends import _ring_sends, schedule_sends, step_sends

A, C = Algorithm, Collective


def group_of(n: int) -> tuple[int, ...]:
    return tuple((7 * i + 3) % 50 for i in range(n))


def as_lists(steps):
    return [(s.as_tuples(), s.messages) for s in steps]


@pytest.mark.parametrize("collective", [C.ALL_REDUCE, C.REDUCE_SCATTER, C.ALL_GATHER])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("elements", [1, 3, 7, 8, 40, 1001])  # fewer elements than ranks: empty blocks, steps
@pytest.mark.parametrize("chunks", [1, 2, 3])
@pytest.mark.parametrize("dtype_bytes", [1, 4])
def test_the_vectorised_ring_equals_the_schedule(collective, n, elements, chunks, dtype_bytes):
    op = CollectiveOp(collective, elements * dtype_bytes, group_of(n), A.RING, chunks=chunks,
                      dtype_bytes=dtype_bytes)
    slow = schedule_sends(build_schedule(op))
    fast = _ring_sends(op)
    assert as_lists(fast) == as_lists(slow)
    assert as_lists(step_sends(op)) == as_lists(slow)


def test_small_sizes_drop_empty_steps_as_the_schedule_does():
    # 1 element on 3 ranks in 3 chunks: parts 1 and 2 are empty, so the pipeline's last 2 steps move nothing
    op = CollectiveOp(C.ALL_REDUCE, 4, group_of(3), A.RING, chunks=3)
    fast = step_sends(op)
    assert len(fast) == len(build_schedule(op).ranks[0].steps) == 2 * 2
    assert all(len(s.src) and s.size_bytes.min() > 0 for s in fast)


@pytest.mark.parametrize("collective,algorithm,n", [(C.ALL_TO_ALL, A.DIRECT, 5), (C.ALL_REDUCE, A.HALVING_DOUBLING, 4),
                                                    (C.ALL_REDUCE, A.DOUBLE_BINARY_TREE, 6),
                                                    (C.BROADCAST, A.PIPELINED_RING, 4), (C.ALL_GATHER, A.DIRECT, 3)])
def test_other_algorithms_are_read_off_their_schedule(collective, algorithm, n):
    op = CollectiveOp(collective, 4 * 1000, group_of(n), algorithm, root=group_of(n)[1], chunks=2)
    steps = step_sends(op)
    schedule = build_schedule(op)
    assert len(steps) == len(schedule.ranks[0].steps)
    assert sum(int(s.size_bytes.sum()) for s in steps) == sum(rs.sent_bytes for rs in schedule.ranks)


def test_auto_resolves_as_build_schedule_does():
    op = CollectiveOp(C.ALL_REDUCE, 1 << 20, group_of(6), A.AUTO)
    assert as_lists(step_sends(op)) == as_lists(schedule_sends(build_schedule(op)))


def test_a_bad_op_is_refused_as_build_schedule_refuses_it():
    with pytest.raises(InvalidCollectiveOp):
        step_sends(CollectiveOp(C.ALL_REDUCE, 6, group_of(4), A.RING))  # not a multiple of dtype_bytes


def _splits(n: int, seed: int, zeros: float, e: int) -> tuple[tuple[int, ...], ...]:
    import random
    rng = random.Random(seed)
    return tuple(tuple(0 if rng.random() < zeros else e * rng.randint(1, 50) for _ in range(n)) for _ in range(n))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("zeros", [0.0, 0.3, 0.8, 1.0])  # some or all pairs send nothing (1.0: the step dropped)
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("dtype_bytes", [1, 4])
def test_the_vectorised_alltoallv_equals_the_schedule(n, zeros, seed, dtype_bytes):
    from genie.collectives.sends import _direct_alltoallv_sends
    from genie.core.alltoallv import matrix_op_size
    splits = _splits(n, seed, zeros, dtype_bytes)
    size, _ = matrix_op_size(splits)
    op = CollectiveOp(C.ALL_TO_ALL, max(size, dtype_bytes), group_of(n), A.DIRECT, dtype_bytes=dtype_bytes,
                      split_bytes=splits)
    slow = schedule_sends(build_schedule(op))
    assert as_lists(_direct_alltoallv_sends(op)) == as_lists(slow)
    assert as_lists(step_sends(op)) == as_lists(slow)
    assert [s.src.dtype for s in step_sends(op)] == [s.src.dtype for s in slow]


def test_only_the_own_block_moving_keeps_the_step_with_no_send():
    op = CollectiveOp(C.ALL_TO_ALL, 8, group_of(3), A.DIRECT, dtype_bytes=4,
                      split_bytes=((8, 0, 0), (0, 0, 0), (0, 0, 4)))
    fast, slow = step_sends(op), schedule_sends(build_schedule(op))
    assert len(fast) == len(slow) == 1 and as_lists(fast) == as_lists(slow)


def test_a_bad_alltoallv_is_refused_as_build_schedule_refuses_it():
    op = CollectiveOp(C.ALL_TO_ALL, 8, group_of(2), A.DIRECT, dtype_bytes=4, split_bytes=((4, 4), (4,)))
    with pytest.raises(InvalidCollectiveOp):
        build_schedule(op)
    with pytest.raises(InvalidCollectiveOp):
        step_sends(op)
