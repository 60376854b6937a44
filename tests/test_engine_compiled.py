"""The bench's compiled step loop (genie/engine/step_loop.pyx) against the pure Python reference it stands in for:
the same bytes on the same connections, the same hand-over where a step needs more than one send and one blocking
receive, the same failures worded the same way. Schedules run over socket pairs in threads (no root)."""

from __future__ import annotations

import os
import time

import pytest

from engine_support import run_ranks
from genie.collectives import check
from genie.collectives.registry import build_schedule
from genie.core.collective import Algorithm, Collective
from genie.core.errors import RunFailure
from genie.core.schedule import CollectiveOp
from genie.engine import compiled_steps
from genie.engine.executor import DataBuffers, run_schedule, run_timed_ops, transfer_plan
from genie.engine.links import socketpair_mesh
from genie.engine.transport import PeerFailure, SocketTransport

pytestmark = pytest.mark.skipif(compiled_steps.CompiledSteps is None and not os.environ.get("CI"),
                                reason="genie.engine.step_loop is not built (pip install -e . builds it)")


def test_ci_builds_the_compiled_loop():
    """CI installs a compiler (scripts/setup.sh): there the compiled loop must exist, not be skipped."""
    assert compiled_steps.CompiledSteps is not None


class _CountingTransport(SocketTransport):
    """A `SocketTransport` that counts the steps the reference (`exchange`) ran (not its flushes)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reference_steps = 0

    def exchange(self, sends, recvs, timeout_s, *, wait_for_sends=True):
        self.reference_steps += bool(recvs)
        super().exchange(sends, recvs, timeout_s, wait_for_sends=wait_for_sends)


def _run(op: CollectiveOp, *, compiled: bool, ops: int = 4, buffer_bytes: int | None = None,
         records: dict | None = None, spans: dict | None = None, late_s: float = 0.0):
    """`ops` payload-agnostic ops of `op` (each rank's plan kept, as the bench keeps it), then one verified op on
    the same connections, every rank on a thread. Each rank's window starts as a pattern of its own. Returns
    {rank: (window bytes after the payload-agnostic ops, steps the reference ran, verification problem)};
    `records` (when given) gets each rank's step records of its payload-agnostic ops; with `spans` the ops run
    back to back (`run_timed_ops`, as the bench's timed loop) and `spans` gets each rank's (start, end) per op.
    The last rank starts `late_s` after the others."""
    schedule = build_schedule(op)
    mesh = socketpair_mesh(len(op.group), buffer_bytes)
    out, errors = {}, []

    def rank_main(rank: int) -> None:
        transport = _CountingTransport(rank, mesh[rank], window_bytes=1 << 20, compiled=compiled)
        transport._window[:] = bytes((rank * 31 + i) % 251 for i in range(1 << 20))
        mine = schedule.for_rank(rank)
        plan = transfer_plan(mine)
        if rank == len(op.group) - 1:
            time.sleep(late_s)
        try:
            if spans is not None:
                spans[rank] = run_timed_ops(mine, transport, plan, ops, timeout_s=20)
            for _ in range(ops if spans is None else 0):
                done = run_schedule(mine, transport, timeout_s=20, plan=plan, record_steps=records is not None)
                if records is not None:
                    records.setdefault(rank, []).append(done)
            window = bytes(transport._window[:4096])
            steps = transport.reference_steps
            data = DataBuffers(check.initial_buffers(op, rank))
            run_schedule(mine, transport, timeout_s=20, data=data)
            out[rank] = (window, steps, check.verify_buffers(op, rank, data.arrays))
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    run_ranks(rank_main, len(op.group), mesh)
    assert not errors, errors
    return out


@pytest.mark.parametrize("collective, algorithm, ranks, size_bytes", [
    (Collective.ALL_REDUCE, Algorithm.RECURSIVE_DOUBLING, 8, 1024),
    (Collective.ALL_REDUCE, Algorithm.RECURSIVE_DOUBLING, 4, 8),
    (Collective.ALL_REDUCE, Algorithm.RING, 8, 1024),
    (Collective.ALL_GATHER, Algorithm.RING, 4, 4096),
])
def test_compiled_loop_moves_the_bytes_the_reference_moves(collective, algorithm, ranks, size_bytes):
    """Every step of these plans is the loop's shape: the compiled run leaves the reference no step, leaves
    every window as the reference leaves it (each receive lands at the window's start, as the reference's),
    and leaves the streams where a verified op expects them (an op that moved a byte too many or too few
    would misalign the verified one)."""
    op = CollectiveOp(collective, size_bytes, tuple(range(ranks)), algorithm, dtype_bytes=4)
    compiled = _run(op, compiled=True)
    reference = _run(op, compiled=False)
    for rank in range(ranks):
        window, steps, problem = compiled[rank]
        assert not problem, problem
        assert steps == 0
        assert window == reference[rank][0]
        assert reference[rank][1] == 4 * len(build_schedule(op).for_rank(rank).steps)


@pytest.mark.parametrize("buffer_bytes", [None, 1 << 14])
def test_the_compiled_loop_records_its_steps_as_the_reference_does(buffer_bytes):
    """With step records (`--steps`) the loop stamps each step on the executor's clock: one record per step
    and op, its bytes and peers the step's, ending after it starts and no earlier than the step before it
    (small socket buffers: steps handed to the reference midway are recorded too)."""
    op = CollectiveOp(Collective.ALL_REDUCE, 1 << 17, tuple(range(4)), Algorithm.RECURSIVE_DOUBLING, dtype_bytes=4)
    schedule = build_schedule(op)
    compiled, reference = {}, {}
    _run(op, compiled=True, ops=3, buffer_bytes=buffer_bytes, records=compiled)
    _run(op, compiled=False, ops=3, buffer_bytes=buffer_bytes, records=reference)
    for rank in range(4):
        steps = schedule.for_rank(rank).steps
        for ours, theirs in zip(compiled[rank], reference[rank], strict=True):
            assert [(r.step_index, r.sent_bytes, r.received_bytes, r.peers) for r in ours] \
                == [(r.step_index, r.sent_bytes, r.received_bytes, r.peers) for r in theirs]
            assert len(ours) == len(steps)
            assert all(r.start_ns <= r.end_ns for r in ours)
            assert all(a.end_ns <= b.start_ns for a, b in zip(ours, ours[1:]))


@pytest.mark.parametrize("collective", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER])
def test_pat_chunks_to_one_peer_are_one_message(collective):
    """PAT's steps send several chunks to one peer and receive several from one: the loop moves each step's
    chunks as one message of their total, and the streams stay where a verified op expects them."""
    op = CollectiveOp(collective, 8 * 1024, tuple(range(8)), Algorithm.PAT, dtype_bytes=4)
    assert any(len(step.sends) > 1 for step in build_schedule(op).for_rank(0).steps)
    for rank, (_, steps, problem) in _run(op, compiled=True).items():
        assert not problem, problem
        assert steps == 0


def test_steps_not_of_its_shape_run_on_the_reference():
    """Direct all-to-all has steps with several sends and receives: the whole plan stays on the reference."""
    op = CollectiveOp(Collective.ALL_TO_ALL, 4 * 256, tuple(range(4)), Algorithm.DIRECT, dtype_bytes=4)
    plan_steps = len(build_schedule(op).for_rank(0).steps)
    for rank, (_, steps, problem) in _run(op, compiled=True).items():
        assert not problem, problem
        assert steps == 4 * plan_steps


def test_a_send_the_socket_does_not_take_whole_is_queued_as_the_reference_queues_it():
    """512 KiB messages through 16 KiB socket buffers: the loop stops at every send, the reference queues the
    rest in the outbox and receives while it keeps that send moving; the bytes stay where they belong."""
    op = CollectiveOp(Collective.ALL_REDUCE, 1 << 19, tuple(range(2)), Algorithm.RECURSIVE_DOUBLING, dtype_bytes=4)
    for rank, (_, steps, problem) in _run(op, compiled=True, ops=3, buffer_bytes=1 << 14).items():
        assert not problem, problem
        # at most each op's one step, handed over when the rest of its send did not go at once
        assert steps <= 3


def _lone_rank(**kwargs) -> tuple[SocketTransport, object, list]:
    mesh = socketpair_mesh(2)
    op = CollectiveOp(Collective.ALL_REDUCE, 1024, (0, 1), Algorithm.RECURSIVE_DOUBLING)
    mine = build_schedule(op).for_rank(0)
    return SocketTransport(0, mesh[0], **kwargs), mine, mesh


@pytest.mark.parametrize("compiled", [True, False])
def test_a_silent_peer_times_out_naming_rank_peer_and_bytes(compiled):
    transport, mine, mesh = _lone_rank(compiled=compiled)
    with pytest.raises(PeerFailure, match=r"^rank 0: op timed out after 0\.\d+ s receiving from rank 1 "
                                          r"\(0/1024 bytes\)$"):
        run_schedule(mine, transport, timeout_s=0.3, plan=transfer_plan(mine))
    transport.close()


@pytest.mark.parametrize("compiled", [True, False])
def test_a_peer_that_closed_is_named_with_the_bytes_received(compiled):
    transport, mine, mesh = _lone_rank(compiled=compiled)
    mesh[1][0].send.sendall(b"x" * 100)
    mesh[1][0].close()
    with pytest.raises(PeerFailure, match=r"^rank 0: (rank 1 closed the connection \(100 of 1024 bytes received\)"
                                          r"|connection to rank 1 lost while sending)"):
        run_schedule(mine, transport, timeout_s=5, plan=transfer_plan(mine))
    transport.close()


@pytest.mark.parametrize("compiled", [True, False])
def test_a_send_to_a_peer_gone_is_named(compiled):
    transport, mine, mesh = _lone_rank(compiled=compiled)
    mesh[1][0].recv.close()  # nobody reads what rank 0 sends
    with pytest.raises(PeerFailure, match=r"^rank 0: connection to rank 1 lost while sending"):
        run_schedule(mine, transport, timeout_s=5, plan=transfer_plan(mine))
    transport.close()


@pytest.mark.parametrize("compiled", [True, False])
def test_an_op_whose_time_is_up_before_a_step_names_the_step(compiled):
    transport, mine, mesh = _lone_rank(compiled=compiled)
    with pytest.raises(RunFailure, match=r"^rank 0: op timed out after 0 s at step 0$"):
        run_schedule(mine, transport, timeout_s=0.0, plan=transfer_plan(mine))
    transport.close()



def test_an_op_that_sent_in_bulk_to_several_peers_waits_for_tcp_as_the_reference_does(monkeypatch):
    """Recursive doubling with 128 KiB messages sends in bulk (over HELD_BACK_MIN_BYTES) to a peer per step: the
    compiled loop's ops wait at their flush until TCP has sent to all of them (`SocketTransport.flush`), as
    the reference's ops do: the same waits, for the same peers."""
    from genie.engine import transport as transport_module

    waited: list[tuple[int, frozenset[int]]] = []
    real_wait_sent = transport_module.wait_sent

    def wait_sent(rank, socks, timeout_s):
        waited.append((rank, frozenset(socks)))
        real_wait_sent(rank, socks, timeout_s)

    monkeypatch.setattr(transport_module, "wait_sent", wait_sent)
    op = CollectiveOp(Collective.ALL_REDUCE, 1 << 17, tuple(range(4)), Algorithm.RECURSIVE_DOUBLING, dtype_bytes=4)
    runs = []
    for compiled in (True, False):
        waited.clear()
        for rank, (_, steps, problem) in _run(op, compiled=compiled, ops=3).items():
            assert not problem, problem
            if not compiled:
                assert steps == 3 * 2
        runs.append(sorted(waited))
    peers = {rank: frozenset(s.peer for step in build_schedule(op).for_rank(rank).steps for s in step.sends)
             for rank in range(4)}
    assert runs[0] == runs[1]
    assert {rank: sum(1 for r, _ in runs[0] if r == rank) for rank in range(4)} == {r: 3 for r in range(4)}
    assert all(socks == peers[rank] for rank, socks in runs[0])


@pytest.mark.parametrize("collective, algorithm, ranks, size_bytes", [
    (Collective.ALL_REDUCE, Algorithm.RECURSIVE_DOUBLING, 8, 1024),
    (Collective.ALL_REDUCE, Algorithm.RING, 8, 1024),
    (Collective.ALL_GATHER, Algorithm.RING, 4, 4096),
    (Collective.ALL_GATHER, Algorithm.PAT, 8, 8 * 1024),
])
def test_whole_ops_back_to_back_move_the_bytes_the_reference_moves(collective, algorithm, ranks, size_bytes):
    """The bench's timed ops back to back in the loop (`run_timed_ops`): one span per op on the monotonic
    clock, in order; every window as op by op (which is the reference's, above: PAT's chunks aside); the
    streams where a verified op expects them."""
    op = CollectiveOp(collective, size_bytes, tuple(range(ranks)), algorithm, dtype_bytes=4)
    spans: dict = {}
    whole = _run(op, compiled=True, ops=5, spans=spans)
    reference = _run(op, compiled=True, ops=5)
    for rank in range(ranks):
        window, steps, problem = whole[rank]
        assert not problem, problem
        assert steps == 0
        assert window == reference[rank][0]
        assert len(spans[rank]) == 5
        assert all(start <= end for start, end in spans[rank])
        assert all(a[1] <= b[0] for a, b in zip(spans[rank], spans[rank][1:]))


def test_an_op_the_loop_stops_in_is_finished_by_the_reference_and_timed_whole():
    """64 KiB messages through 4 KiB socket buffers, rank 1 late: the loop stops at a send the socket does not
    take whole, the reference finishes that op from there (queueing the rest, as it does without the op loop),
    and the op loop goes on with the next op; every op still has its span and the streams stay where the
    verified op after them expects them (where a handed-over receive lands in the window depends on the timing:
    not compared)."""
    op = CollectiveOp(Collective.ALL_REDUCE, 1 << 16, tuple(range(2)), Algorithm.RECURSIVE_DOUBLING, dtype_bytes=4)
    spans: dict = {}
    whole = _run(op, compiled=True, ops=4, buffer_bytes=1 << 12, spans=spans, late_s=0.2)
    for rank in range(2):
        _, steps, problem = whole[rank]
        assert not problem, problem
        assert steps <= 4  # handed over: at most each op's one step
        assert len(spans[rank]) == 4 and all(a[1] <= b[0] for a, b in zip(spans[rank], spans[rank][1:]))
    assert whole[0][1] >= 1  # rank 0's first send met a peer not yet reading


@pytest.mark.parametrize("collective, algorithm, size_bytes", [
    # (several sends and receives per step: the compiled exchange's op loop, tests/test_engine_exchange_compiled.py)
    (Collective.ALL_REDUCE, Algorithm.RECURSIVE_DOUBLING, 1 << 17),  # in bulk: the flush may wait for TCP
])
def test_ops_the_loop_cannot_run_whole_are_left_to_the_caller(collective, algorithm, size_bytes):
    op = CollectiveOp(collective, size_bytes, tuple(range(4)), algorithm, dtype_bytes=4)
    mesh = socketpair_mesh(4)
    mine = build_schedule(op).for_rank(0)
    transport = SocketTransport(0, mesh[0])
    assert run_timed_ops(mine, transport, transfer_plan(mine), 3, timeout_s=1) is None
    transport.close()
    without_loop = SocketTransport(0, socketpair_mesh(4)[0], compiled=False)
    assert run_timed_ops(mine, without_loop, transfer_plan(mine), 3, timeout_s=1) is None
    without_loop.close()


def test_whole_ops_fail_as_the_reference_fails():
    """A silent peer and an op whose time is up: `run_timed_ops` raises what `run_schedule` raises."""
    transport, mine, mesh = _lone_rank()
    with pytest.raises(PeerFailure, match=r"^rank 0: op timed out after 0\.\d+ s receiving from rank 1 "
                                          r"\(0/1024 bytes\)$"):
        run_timed_ops(mine, transport, transfer_plan(mine), 3, timeout_s=0.3)
    transport.close()
    transport, mine, mesh = _lone_rank()
    with pytest.raises(RunFailure, match=r"^rank 0: op timed out after 0 s at step 0$"):
        run_timed_ops(mine, transport, transfer_plan(mine), 3, timeout_s=0.0)
    transport.close()


def test_an_extension_built_before_the_op_loop_runs_op_by_op(monkeypatch):
    """A checkout updated without rebuilding keeps a step loop without `run_ops`: the bench runs op by op."""

    class _StaleBuild:  # what an extension built from the step loop before `run_ops` offers
        def __init__(self, steps) -> None:
            self.run = steps.run

    real_compile = compiled_steps.CompiledPlans.compile
    monkeypatch.setattr(compiled_steps.CompiledPlans, "compile",
                        lambda self, plan: _StaleBuild(real_compile(self, plan)))
    op = CollectiveOp(Collective.ALL_REDUCE, 1024, tuple(range(4)), Algorithm.RECURSIVE_DOUBLING, dtype_bytes=4)
    mine = build_schedule(op).for_rank(0)
    transport = SocketTransport(0, socketpair_mesh(4)[0])
    assert run_timed_ops(mine, transport, transfer_plan(mine), 3, timeout_s=1) is None
    transport.close()
