"""Byte transport between ranks: persistent stream sockets, a send and a receive connection per peer (`PeerLink`),
driven by a poll loop.

`SocketTransport.exchange` runs one schedule step: every send and receive of the step progresses concurrently
on non-blocking sockets in a single thread (no per-byte Python work: the kernel copies straight from and into
preallocated memoryviews). A transfer without a view moves payload-agnostic bytes through a fixed window, so
a 256 MiB collective needs no 256 MiB buffer unless the data is verified; TCP discards such received bytes
without copying them (`genie.engine.flows.DISCARD`).

The same class runs over TCP between namespaces and over `socket.socketpair()` inside one process, which is how
schedules are executed in tests without root: the connections are made in `genie.engine.links` (`connect_mesh`,
`socketpair_mesh`).
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from typing import Protocol, Sequence

from genie.engine.compiled_exchange import CompiledExchange, ExchangeLoop
from genie.engine.compiled_steps import CompiledPlans, StepPlan, run_steps
from genie.engine.links import PeerFailure, PeerLink, delay_acks
from genie.engine.flows import DISCARD, Flow as _Flow, StepExchange, Transfer
from genie.engine.flows import closed_failure, send_failure, wait_sent
from genie.engine.flows import pump_recv as _pump_recv, pump_send as _pump_send

_DONTWAIT = socket.MSG_DONTWAIT  # sockets stay in blocking mode; every non-blocking attempt says so per call
WATCH_IN = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET
WATCH_IN_OUT = WATCH_IN | select.EPOLLOUT
_RECV_SLICE_S = 0.05  # a blocking recv returns at least this often to check the deadline
_RECV_SLICE = struct.pack("ll", 0, round(_RECV_SLICE_S * 1e6))
HELD_BACK_MIN_BYTES = 64 << 10  # a message up to one GSO packet leaves its socket whole (see `flush`)


class Transport(Protocol):
    rank: int

    def exchange(self, sends: Sequence[Transfer], recvs: Sequence[Transfer], timeout_s: float, *,
                 wait_for_sends: bool = True) -> None:
        """Run all sends and receives concurrently; return when all are complete. With `wait_for_sends=False`
        return once the receives are complete: sends still in progress stay queued (in order, per peer) and
        keep moving during later exchanges, as a GPU's NCCL keeps forwarding slices while it receives the next.
        A transport may always wait (that is only less eager)."""

    def flush(self, timeout_s: float) -> None:
        """Return when every queued send is complete."""

    def close(self) -> None: ...


class SocketTransport:
    """Executes steps one at a time over a `PeerLink` per peer (the bench path). Sends not waited for
    (`wait_for_sends=False`) stay in the outbox and move whenever the transport runs."""

    def __init__(self, rank: int, links: dict[int, PeerLink], window_bytes: int = 1 << 20,
                 spin_s: float = 0.0, compiled: bool = True) -> None:
        self.rank = rank
        self.spin_s = spin_s
        self._links = links
        self._fd_peer: dict[int, int] = {}
        for peer, link in links.items():
            for sock in link.sockets():
                sock.settimeout(None)  # blocking mode: see _recv_blocking; attempts elsewhere use MSG_DONTWAIT
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _RECV_SLICE)
                self._fd_peer[sock.fileno()] = peer
        self._window = memoryview(bytearray(window_bytes))
        self._window_bytes = window_bytes
        self._send = {peer: link.send.send for peer, link in links.items()}  # the fast path's, per peer
        self._recv_into = {peer: link.recv.recv_into for peer, link in links.items()}
        # receive connections in delayed-ACK mode, set again after each small receive (see `delay_acks`)
        self._delay_acks = {peer: delay_acks(link.recv) for peer, link in links.items()}
        self._outbox: dict[int, _Flow] = {}
        self._bulk_peers: set[int] = set()  # peers sent more than HELD_BACK_MIN_BYTES since the last flush
        # the compiled step loop's plans; `compiled=False`: every step on the Python reference (tests compare)
        self._compiled_plans = CompiledPlans(self._window, links, self._delay_acks, HELD_BACK_MIN_BYTES) if compiled else None
        self._epoll = select.epoll()
        for fd in self._fd_peer:
            self._epoll.register(fd, WATCH_IN)
        # multi-peer steps (the all-to-all's) in the compiled exchange loop, the same system calls as below
        self._compiled_exchange = CompiledExchange(rank, self._window, links, self._epoll, HELD_BACK_MIN_BYTES) \
            if compiled and ExchangeLoop is not None else None

    @property
    def peers(self) -> frozenset[int]:
        return frozenset(self._links)

    def exchange(self, sends: Sequence[Transfer], recvs: Sequence[Transfer], timeout_s: float, *,
                 wait_for_sends: bool = True) -> None:
        for t in sends:
            if t.size_bytes > HELD_BACK_MIN_BYTES:
                self._bulk_peers.add(t.peer)
        if not self._outbox and len(sends) <= 1 and len(recvs) == 1:
            # the latency-critical shape (recursive doubling, trees, p2p): at most one send, then one message
            # to wait for — no step object, no failed attempt, no epoll: a send and a recv that sleeps
            if not sends or self._send_now(sends[0]):
                self._recv_now(recvs[0], timeout_s)
                return
            sends = ()  # the rest of that send waits in the outbox
        if self._compiled_exchange is not None and not self.spin_s \
                and self._compiled_exchange.exchange(self._outbox, sends, recvs, timeout_s, wait_for_sends):
            return
        step = StepExchange(self.rank, self._links, sends, recvs, self._window, outbox=self._outbox,
                            wait_for_sends=wait_for_sends)
        if step.progress():  # optimistic pass: small messages usually complete here
            return
        if not step.pending_out and len(step.pending_in) == 1:
            (flow,) = step.pending_in.values()
            self._recv_blocking(flow, timeout_s)
            return
        if self.spin_s > 0 and self._spin(step):
            return
        self._wait_loop(step, timeout_s)

    def flush(self, timeout_s: float) -> None:
        """Return when every send is out of the outbox and, if the sends went to several peers in bulk, TCP
        has sent all of them, so no later op's data can overtake them: TCP small queues holds a message's last
        piece in its socket until its connection's packets before it have left the host's FIFO, while later
        data to another peer enters the FIFO at once (docs/engine.md, "An op's last pieces"). A NIC serves its
        connections' queues in turn: its last piece is never held back behind later data."""
        if self._outbox:
            self.exchange((), (), timeout_s)
        if self._bulk_peers:
            peers, self._bulk_peers = self._bulk_peers, set()
            if len(peers) > 1:
                wait_sent(self.rank, {p: self._links[p].send for p in peers}, timeout_s)

    def run_plan(self, plan: StepPlan, start: int, deadline: float, timeout_s: float,
                 stamps: list[tuple[int, int, int]] | None = None) -> int:
        """Run `plan` (a `transfer_plan` the caller keeps) from step `start` in the compiled step loop (outbox
        empty; `genie.engine.compiled_steps`); returns the first step the caller runs through `exchange`."""
        if self._outbox or self._compiled_plans is None:
            return start
        return self._compiled_plans.run(self, plan, start, deadline, timeout_s, stamps, self._bulk_peers)

    def whole_ops(self, plan: StepPlan):
        """`plan` compiled for whole ops back to back (`CompiledSteps.run_ops`; None: not here — not built, not
        its shape, sends in bulk, or a send still queued)."""
        if self._outbox or self._bulk_peers or self._compiled_plans is None:
            return None
        return self._compiled_plans.whole_ops(plan)

    def exchange_ops(self, plan: StepPlan, ops: int, timeout_s: float) -> list[tuple[int, int]] | None:
        """`ops` whole ops of a one-step multi-peer `plan` (the all-to-all's) back to back in the compiled exchange
        (`CompiledExchange.run_ops`): their (start ns, end ns). None: not here (not built, not its shape, a send
        queued, spinning), the caller runs them one by one."""
        if self._compiled_exchange is None or self.spin_s or self._outbox or self._bulk_peers or len(plan) != 1:
            return None
        sends, recvs = plan[0]
        if len(sends) <= 1 and len(recvs) == 1:  # `exchange`'s lone-receive shape
            return None
        return self._compiled_exchange.run_ops(self._outbox, sends, recvs, ops, timeout_s)

    def resume_plan(self, steps, plan: StepPlan, stopped: tuple[int, int, int, int], deadline: float,
                    timeout_s: float) -> int:
        """An op of `plan` that `steps.run_ops` stopped with `stopped` (outcome, step, done bytes, errno): the
        reference takes that step over, as `run_plan` hands it; returns the first step the caller runs."""
        return run_steps(self, steps, plan, stopped[1], deadline, timeout_s, first=stopped)

    def _link(self, peer: int) -> PeerLink:
        try:
            return self._links[peer]
        except KeyError:
            raise PeerFailure(f"rank {self.rank}: no connection to rank {peer}") from None

    def _send_now(self, transfer: Transfer) -> bool:
        """Send as much of `transfer` as the socket takes now; True when all of it went, else the rest is
        queued in the outbox. A payload-agnostic transfer that fits the window is one system call and no
        flow object (the per-step cost of small collectives, benchmarks/README.md "The step's software")."""
        size = transfer.size_bytes
        sent = 0
        if transfer.view is None and size <= self._window_bytes:
            send = self._send.get(transfer.peer)
            if send is None:
                self._link(transfer.peer)  # raises, naming the peer
            try:
                sent = send(self._window[:size], _DONTWAIT) if size else 0
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise send_failure(self.rank, transfer.peer, exc) from None
            if sent == size:
                return True
        return self.queue_send(transfer, sent)

    def queue_send(self, transfer: Transfer, sent_bytes: int) -> bool:
        """`transfer` of which `sent_bytes` went: push the rest now; True when all of it went, else the rest is
        queued in the outbox."""
        flow = _Flow(transfer.peer, self._link(transfer.peer).send)
        flow.add(transfer)
        flow.pos = flow.done_bytes = sent_bytes
        if _pump_send(flow, self._window, self.rank):
            return True
        self._outbox[transfer.peer] = flow
        return False

    def _recv_now(self, transfer: Transfer, timeout_s: float) -> None:
        """Receive `transfer` blocking (see `_recv_blocking`). A payload-agnostic transfer that fits the window
        is received with bare `recv_into` calls, no flow object, and reads the clock only when a slice of
        the socket's SO_RCVTIMEO ends without data."""
        size = transfer.size_bytes
        if transfer.view is not None or size > self._window_bytes:
            flow = _Flow(transfer.peer, self._link(transfer.peer).recv)
            flow.add(transfer)
            self._recv_blocking(flow, timeout_s)
            return
        self.finish_recv(transfer, 0, timeout_s)

    def finish_recv(self, transfer: Transfer, got: int, timeout_s: float, deadline: float | None = None, *,
                    slice_ended: bool = False) -> None:
        """Receive the rest (`got` bytes are in) of payload-agnostic `transfer` within the window with bare
        `recv_into` calls (`DISCARD`: TCP drops the bytes uncopied), then set delayed-ACK mode again. Whenever a
        slice ends empty (`slice_ended`: one just did) the op's `deadline` is checked (None: `timeout_s` after the
        receive began)."""
        size = transfer.size_bytes
        recv_into = self._recv_into.get(transfer.peer)
        if recv_into is None:
            self._link(transfer.peer)  # raises, naming the peer
        window = self._window
        while got < size:
            if slice_ended:  # is the op's time up?
                slice_ended = False
                now = time.monotonic()
                if deadline is None:  # the first slice ended: the receive began about a slice ago
                    deadline = now - _RECV_SLICE_S + timeout_s
                if now >= deadline:
                    raise PeerFailure(f"rank {self.rank}: op timed out after {timeout_s:g} s receiving from "
                                      f"rank {transfer.peer} ({got}/{size} bytes)")
            try:
                n = recv_into(window[:size - got], 0, DISCARD)
            except (BlockingIOError, InterruptedError):  # a slice ended
                slice_ended = True
                continue
            except ConnectionResetError:
                n = 0
            if n == 0:
                raise closed_failure(self.rank, transfer.peer, got, size)
            got += n
        again = self._delay_acks[transfer.peer]
        if again is not None:
            try:
                again()
            except OSError:  # the connection is gone: the next receive names the peer
                pass

    def _recv_blocking(self, flow: _Flow, timeout_s: float) -> None:
        """Receive `flow` with blocking recv calls, each bounded by the socket's SO_RCVTIMEO slice (set once):
        one system call that sleeps, instead of an attempt that fails, an epoll_wait and a second attempt.
        The op's deadline is checked whenever a slice ends, so a silent peer is named within the slice."""
        deadline = time.monotonic() + timeout_s
        while not _pump_recv(flow, self._window, self.rank, 0):
            if time.monotonic() >= deadline:
                raise PeerFailure(f"rank {self.rank}: op timed out after {timeout_s:g} s receiving from rank "
                                  f"{flow.peer} ({flow.done_bytes}/{flow.total_bytes} bytes)")

    def _spin(self, step: StepExchange) -> bool:
        """Retry for up to `spin_s`, yielding the CPU between tries: with more ranks than cores the peer we
        wait for gets the core at once, instead of this rank paying a sleep/wake-up per step."""
        until = time.perf_counter() + self.spin_s
        yield_cpu = os.sched_yield
        while time.perf_counter() < until:
            yield_cpu()
            if step.progress():
                return True
        return False

    def _wait_loop(self, step: StepExchange, timeout_s: float) -> None:
        """Wait for readiness with the edge-triggered epoll set registered once at start-up. Edge triggering
        is safe because every wait follows an attempt that hit EAGAIN on that socket (the optimistic pass,
        or a pump), so no readiness edge can have been missed. Write readiness is watched only while a send
        is blocked: otherwise every ACK would wake the rank."""
        watching_out = [self._links[peer].send.fileno() for peer in step.pending_out]
        for fd in watching_out:
            self._epoll.modify(fd, WATCH_IN_OUT)
        try:
            deadline = time.monotonic() + timeout_s
            wait = self._epoll.poll
            fd_peer = self._fd_peer
            while True:
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    raise PeerFailure(f"rank {self.rank}: op timed out after {timeout_s:g} s "
                                      + step.describe_pending())
                try:
                    events = wait(remaining_s)
                except InterruptedError:
                    continue
                for fd, ev in events:
                    if step.on_ready(fd_peer[fd], ev):
                        return
        finally:
            for fd in watching_out:
                self._epoll.modify(fd, WATCH_IN)

    def close(self) -> None:
        self._compiled_plans = self._compiled_exchange = None  # their sockets are closed next
        self._epoll.close()
        for link in self._links.values():
            link.close()
        self._links = {}
