"""The replay's mover (`SocketMover`) and delayed ACKs on its receive connections (issue #36 item 2: a
connection per direction makes each ACK a packet of its own unless the receiver delays them)."""

from __future__ import annotations

import socket

from genie.collectives.registry import build_schedule
from genie.core.collective import Algorithm, Collective
from genie.core.schedule import CollectiveOp


def test_replay_receive_connections_delay_their_acks_and_keep_doing_so():
    """The replay's mover keeps its receive connections in delayed-ACK mode as the bench's transport does: at
    start-up, and again when a step begins to receive on one (Linux leaves the mode when a delayed ACK's
    timer fires). Its send connections keep the kernel's default."""
    from genie.core.program import Lane, ProgramNode
    from genie.engine.socket_mover import SocketMover
    from genie.engine.transport import PeerLink
    from genie.engine.walker import CommRun

    listener = socket.create_server(("127.0.0.1", 0))
    out = socket.create_connection(listener.getsockname())
    into, _ = listener.accept()
    back = socket.create_connection(listener.getsockname())
    back_in, _ = listener.accept()
    mover = SocketMover(0, {(0, 1): PeerLink(back, into)})

    def quickack(sock):
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)

    op = CollectiveOp(Collective.ALL_REDUCE, 64, (0, 1), Algorithm.RECURSIVE_DOUBLING)
    node = ProgramNode(0, "ar", Lane.COLLECTIVE, (), op=op, channel=0, size_bytes=64)
    steps = build_schedule(op).for_rank(0).steps
    try:
        assert quickack(into) == 0 and quickack(back) == 1
        into.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)  # as when the delayed-ACK timer fires
        out.sendall(b"x" * 64)
        exchange = mover.begin(CommRun(node, steps, 0, 5.0), steps[0])
        assert quickack(into) == 0
        assert exchange.progress()
    finally:
        mover.close()
        for s in (out, back, into, back_in, listener):
            s.close()
