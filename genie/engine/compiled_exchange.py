"""A multi-peer step run by the compiled exchange loop (`genie/engine/exchange_loop.pyx`, built by the install step;
issue #36 item 3, benchmarks/README.md "The all-to-all's exchange, compiled").

`SocketTransport.exchange` hands a step here when the pure Python reference would move it with `StepExchange` and
its epoll wait (`SocketTransport._wait_loop`): every transfer payload-agnostic, at most one new send and one receive
per peer, every send already queued in the outbox a single payload-agnostic transfer, no spinning. The loop makes
the reference's system calls in its order; this module turns its outcome into what the reference leaves and raises:
the sends not yet taken stay queued in the outbox (as `Flow`s, in the reference's order), a failure or a timeout is
raised worded as the reference words it. Where the module is not built the reference runs every step
(`ExchangeLoop` is None).
"""

from __future__ import annotations

import os
import select
import socket
from typing import Sequence

from genie.core.errors import RunFailure
from genie.engine.flows import Flow, Transfer, closed_failure, send_error, unsent_bytes
from genie.engine.links import PeerFailure, PeerLink

try:
    from genie.engine.exchange_loop import (DONE, FILE_SEND_MIN_BYTES, LATE, LATE_ONE, OP_BEGIN, OP_LATE, OP_STEP,
                                            RECV_CLOSED, SEND_FAILED, SENT_LATE, ExchangeLoop, ExchangeOps)
except ImportError:  # not built (no compiler at install): the pure Python reference runs every step
    ExchangeLoop = ExchangeOps = FILE_SEND_MIN_BYTES = None


def _own_tcp_send(link: PeerLink) -> bool:
    """A TCP connection that only sends: its bulk sends may come from the window's file (`ExchangeLoop`). The file
    is the window as it was at the first bulk send; the window may take bytes later (the compiled step loop's
    receives copy into it), but every payload-agnostic byte of a job is a zero (every window starts zeroed and
    sends only its own or its file's bytes), so the file still holds what the window does."""
    sock = link.send
    return sock is not link.recv and sock.family in (socket.AF_INET, socket.AF_INET6) \
        and sock.type == socket.SOCK_STREAM


class CompiledExchange:
    """One transport's multi-peer steps in the compiled loop: `window`, `links` and `epoll` are the transport's
    (`SocketTransport`; every socket of `links` registered in `epoll`)."""

    def __init__(self, rank: int, window: memoryview, links: dict[int, PeerLink], epoll: select.epoll,
                 bulk_bytes: int) -> None:
        self.rank = rank
        self._links = links
        self._bulk_bytes = bulk_bytes  # a send over this waits at the op's flush (`SocketTransport.flush`)
        self._peers = list(links)  # slot -> peer
        self._slot = {peer: slot for slot, peer in enumerate(self._peers)}
        self._loop = ExchangeOps(window, epoll.fileno(), [(link.send.fileno(), link.recv.fileno())
                                                           for link in links.values()],
                                 [slot for slot, link in enumerate(links.values()) if _own_tcp_send(link)])

    def exchange(self, outbox: dict[int, Flow], sends: Sequence[Transfer], recvs: Sequence[Transfer],
                 timeout_s: float, wait_for_sends: bool) -> bool:
        """Run the step as `SocketTransport.exchange` would past its lone-receive shortcut; False (nothing done)
        where it is not the loop's shape, and the reference runs it."""
        shape = self._shape(outbox, sends, recvs)
        if shape is None:
            return False
        out, send_peers, new, into, recv_slots = shape
        loop = self._loop
        loop.load(out, recv_slots)  # (a ValueError here: nothing began, the outbox stays as it is)
        try:
            outcome, index, error = loop.run(wait_for_sends, timeout_s)
        finally:
            self._requeue(loop, outbox, new)
        if outcome != DONE:
            self._raise(outcome, index, error, send_peers, outbox, into, timeout_s)
        return True

    def run_ops(self, outbox: dict[int, Flow], sends: Sequence[Transfer], recvs: Sequence[Transfer], ops: int,
                timeout_s: float) -> list[tuple[int, int]] | None:
        """`ops` ops of the one-step plan (`sends`, `recvs`) back to back, each as `run_schedule` runs it (its
        deadline, the step through `exchange`, the flush: the sends left, then TCP's sending of the bulk ones
        when there are several), with no Python between them: [(start ns, end ns)] per op on
        time.monotonic_ns()'s clock. None (nothing done) where the step is not the loop's shape. An op that fails
        raises what the reference raises; the sends not yet taken are left in the outbox as it leaves them.
        Unlike the reference's `exchange`, it adds nothing to `SocketTransport._bulk_peers` (its flush is in the
        loop): after an op that fails in its step or its flush's sends the reference still lists that op's bulk
        peers there and this does not - which matters only to a caller that goes on with the transport after the
        RunFailure (its next `flush` would then wait for TCP to send to those peers)."""
        shape = self._shape(outbox, sends, recvs)
        if shape is None or outbox:
            return None
        out, send_peers, new, into, recv_slots = shape
        bulk = sorted(t.peer for t in new if t.size_bytes > self._bulk_bytes)  # `flush`: a set of small ints
        loop = self._loop
        loop.load(out, recv_slots)  # (a ValueError here: nothing began, the outbox stays empty)
        try:
            spans, outcome, stage, index, error, stage_s = loop.run_ops(
                [self._slot[p] for p in bulk] if len(bulk) > 1 else [], ops, timeout_s)
        except BaseException:
            self._requeue(loop, outbox, new)
            raise
        if outcome == DONE:
            return spans
        self._requeue(loop, outbox, new)
        rank = self.rank
        if outcome == OP_LATE:  # `_run_plan` / `_flush` found the op's time up
            raise RunFailure(f"rank {rank}: op timed out after {timeout_s:g} s"
                             + (" at step 0" if stage == OP_BEGIN else ""))
        if outcome == SENT_LATE:  # `wait_sent`
            peer = min(bulk[b] for b in loop.bulk_left())
            raise PeerFailure(f"rank {rank}: op timed out after {stage_s:g} s: "
                              f"{unsent_bytes(self._links[peer].send)} bytes to rank {peer} not yet sent")
        self._raise(outcome, index, error, send_peers, outbox, into if stage == OP_STEP else [], stage_s)
        return None

    def _shape(self, outbox: dict[int, Flow], sends: Sequence[Transfer], recvs: Sequence[Transfer]):
        """The step as the loop takes it — (sends as (slot, bytes left) in the reference's order, their peers, the
        step's new sends, its receives, those as (slot, bytes)) — or None where it is not the loop's shape."""
        slot = self._slot
        out: list[tuple[int, int]] = []  # (slot, bytes left) per send, in the reference's order
        send_peers: list[int] = []
        for peer, flow in outbox.items():
            queue = flow.queue
            if len(queue) != 1 or queue[0].view is not None:
                return None
            out.append((slot[peer], queue[0].size_bytes - flow.pos))
            send_peers.append(peer)
        new: list[Transfer] = []
        for t in sends:
            peer = t.peer
            if t.view is not None or peer not in slot:
                return None
            if t.size_bytes > 0:
                if peer in send_peers:
                    return None  # several transfers to one peer: one flow of several (the reference's)
                new.append(t)
                send_peers.append(peer)
                out.append((slot[peer], t.size_bytes))
        into: list[Transfer] = []
        recv_slots: list[tuple[int, int]] = []
        for t in recvs:
            peer = t.peer
            if t.view is not None or peer not in slot:
                return None
            if t.size_bytes > 0:
                pair = (slot[peer], t.size_bytes)
                for s, _ in recv_slots:
                    if s == pair[0]:
                        return None
                into.append(t)
                recv_slots.append(pair)
        return out, send_peers, new, into, recv_slots

    def _requeue(self, loop, outbox: dict[int, Flow], new: list[Transfer]) -> None:
        """The sends not yet taken stay queued, in the reference's order (its outbox is the step's pending sends:
        the queued flows first, then the step's new ones), the ones done leave the outbox."""
        if not loop.sends_left():
            outbox.clear()
            return
        flows = list(outbox.values())
        outbox.clear()
        for i, flow in enumerate(flows):
            left = loop.sent_left(i)
            if left:
                moved = flow.queue[0].size_bytes - flow.pos - left
                flow.pos += moved
                flow.done_bytes += moved
                outbox[flow.peer] = flow
        for i, t in enumerate(new, len(flows)):
            left = loop.sent_left(i)
            if left:
                flow = Flow(t.peer, self._links[t.peer].send)
                flow.add(t)
                flow.pos = flow.done_bytes = t.size_bytes - left
                outbox[t.peer] = flow

    def _raise(self, outcome: int, index: int, error: int, send_peers: list[int], outbox: dict[int, Flow],
               into: list[Transfer], timeout_s: float) -> None:
        """What the reference raises where the loop stopped (`index`: the send's or the receive's)."""
        loop, rank = self._loop, self.rank
        if outcome == SEND_FAILED:
            raise send_error(rank, send_peers[index], error) from None
        if outcome in (RECV_CLOSED, LATE_ONE):
            t = into[index]
            got = t.size_bytes - loop.recv_left_of(index)
            if outcome == RECV_CLOSED:
                raise closed_failure(rank, t.peer, got, t.size_bytes)
            raise PeerFailure(f"rank {rank}: op timed out after {timeout_s:g} s receiving from rank {t.peer} "
                              f"({got}/{t.size_bytes} bytes)")
        if outcome == LATE:
            parts = [f"sending to rank {p} ({f.done_bytes}/{f.total_bytes} bytes)" for p, f in sorted(outbox.items())]
            parts += [f"receiving from rank {t.peer} ({t.size_bytes - left}/{t.size_bytes} bytes)"
                      for t, left in sorted(((t, loop.recv_left_of(i)) for i, t in enumerate(into)),
                                            key=lambda x: x[0].peer) if left]
            raise PeerFailure(f"rank {rank}: op timed out after {timeout_s:g} s " + ", ".join(parts))
        raise OSError(error, os.strerror(error))  # RECV_FAILED, WAIT_FAILED: as the socket call / epoll raises
