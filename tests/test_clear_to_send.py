"""Clear to send: a collective's data goes to a peer only once that peer has entered the op (as NCCL's
receiver-posted buffers), for pairs that exchange at least RENDEZVOUS_MIN_BYTES in the op."""

from __future__ import annotations

import threading

import pytest

from genie.collectives.registry import build_schedule, supported_algorithms
from genie.core.collective import Algorithm, Collective
from genie.core.program import Lane, ProgramNode, RankProgram
from genie.core.schedule import CollectiveOp
from genie.engine.program import CLEAR_TO_SEND_BYTES, RENDEZVOUS_MIN_BYTES, clear_to_send
from genie.engine.socket_mover import SocketMover
from genie.engine.links import PeerFailure, socketpair_mesh
from genie.engine.walker import ProgramWalker, node_steps

MiB = 1 << 20


def _op(collective: Collective, algorithm: Algorithm, n: int, size_bytes: int) -> CollectiveOp:
    return CollectiveOp(collective=collective, size_bytes=size_bytes, group=tuple(range(n)), algorithm=algorithm,
                        root=0)


def _pair_bytes(op: CollectiveOp) -> dict[tuple[int, int], int]:
    out: dict[tuple[int, int], int] = {}
    for rs in build_schedule(op).ranks:
        for step in rs.steps:
            for s in step.sends:
                out[(rs.rank, s.peer)] = out.get((rs.rank, s.peer), 0) + s.size_bytes
    return out


CASES = [(c, a) for c in Collective if c is not Collective.SEND_RECV for a in supported_algorithms(c)]


@pytest.mark.parametrize("collective,algorithm", CASES, ids=[f"{c.value}-{a.value}" for c, a in CASES])
def test_both_ends_of_every_pair_agree_on_its_token(collective: Collective, algorithm: Algorithm) -> None:
    for n in (2, 3, 4, 8):
        for size in (64 << 10, MiB, 8 * MiB):
            op = _op(collective, algorithm, n, size)
            if not op.sends_messages:
                continue
            pairs = _pair_bytes(op)
            tokens = {rank: clear_to_send(op, rank) for rank in op.group}
            # (data sender, data receiver): tokens the receivers send, and tokens the senders wait for
            cleared = {(s.peer, rank) for rank, step in tokens.items() if step for s in step.sends}
            awaited = {(rank, r.peer) for rank, step in tokens.items() if step for r in step.recvs}
            assert cleared == awaited
            assert awaited == {pair for pair, size_bytes in pairs.items() if size_bytes >= RENDEZVOUS_MIN_BYTES}
            for step in tokens.values():
                assert step is None or all(t.size_bytes == CLEAR_TO_SEND_BYTES for t in (*step.sends, *step.recvs))


def test_a_ring_waits_for_its_successor_and_clears_its_predecessor() -> None:
    op = _op(Collective.ALL_REDUCE, Algorithm.RING, 4, 8 * MiB)
    step = clear_to_send(op, 0)
    assert [s.peer for s in step.sends] == [3] and [r.peer for r in step.recvs] == [1]
    assert clear_to_send(_op(Collective.ALL_REDUCE, Algorithm.RING, 4, 64 << 10), 0) is None  # eager


def test_the_walker_runs_the_token_step_first() -> None:
    op = _op(Collective.ALL_REDUCE, Algorithm.RING, 2, 8 * MiB)
    node = ProgramNode(0, "ar", Lane.COLLECTIVE, (), op=op, channel=0, size_bytes=op.size_bytes)
    steps = node_steps(node, 0)
    assert steps[0] == clear_to_send(op, 0) and steps[1:] == build_schedule(op).for_rank(0).steps
    small = _op(Collective.ALL_REDUCE, Algorithm.RING, 2, 4096)
    assert node_steps(ProgramNode(0, "ar", Lane.COLLECTIVE, (), op=small, channel=0), 0) == \
        build_schedule(small).for_rank(0).steps


def test_no_data_reaches_a_peer_that_has_not_entered_the_op() -> None:
    """Rank 0 walks an 8 MiB all-reduce with rank 1, which never enters it: all rank 1's socket ever holds is
    rank 0's token (without the rendezvous it would be as much as the socket buffers take)."""
    op = _op(Collective.ALL_REDUCE, Algorithm.RING, 2, 8 * MiB)
    mesh = socketpair_mesh(2)
    theirs = mesh[1][0].recv
    node = ProgramNode(0, "ar", Lane.COLLECTIVE, (), op=op, channel=0, size_bytes=op.size_bytes)
    walker = ProgramWalker(RankProgram(0, (node,), frozenset({(0, 1)})), SocketMover(0, {(0, 1): mesh[0][1]}),
                           timeout_s=0.5)
    failures: list[Exception] = []

    def walk() -> None:
        try:
            walker.run()
        except PeerFailure as exc:
            failures.append(exc)

    thread = threading.Thread(target=walk)
    thread.start()
    thread.join(10)
    try:
        assert failures and "timed out" in str(failures[0])
        theirs.setblocking(False)
        assert len(theirs.recv(1 << 20)) == CLEAR_TO_SEND_BYTES
        with pytest.raises(BlockingIOError):
            theirs.recv(1 << 20)
    finally:
        walker.close()
        for links in mesh:
            for link in links.values():
                link.close()
