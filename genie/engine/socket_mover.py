"""`SocketMover`: the replay walker's steps over genie's TCP connections (a `PeerLink` per (channel, peer)).

One epoll set holds every socket (edge-triggered, as in `SocketTransport`: every wait follows an attempt that
hit EAGAIN, so no edge is missed) and a timerfd for the walker's compute wake-up. A run in flight is a user
of its channel's sockets; write readiness is watched only where one of its sends is blocked. A collective that
sent in bulk to several peers completes once TCP has sent all of it, as the bench's op ends
(`SocketTransport.flush`); while only that is left the mover looks again every `SENT_POLL_S`. Receive
connections are kept in delayed-ACK mode as the bench's are (`genie.engine.links.delay_acks`): set at
start-up and again as each step begins to receive on them.
"""

from __future__ import annotations

import select
from typing import Callable

from genie.core.schedule import Step
from genie.engine.clock import DeadlineTimer
from genie.engine.flows import SENT_POLL_S
from genie.engine.transport import HELD_BACK_MIN_BYTES, WATCH_IN, WATCH_IN_OUT, PeerLink, StepExchange, Transfer, \
    delay_acks
from genie.engine.walker import CommRun



class SocketMover:
    """`links`: {(channel, peer): PeerLink}; they stay the caller's to close."""

    def __init__(self, rank: int, links: dict[tuple[int, int], PeerLink], *,
                 window_bytes: int = 1 << 20) -> None:
        self.rank = rank
        self.window = memoryview(bytearray(window_bytes))
        self.channels: dict[int, dict[int, PeerLink]] = {}
        self.epoll = select.epoll()
        self.fd_users: dict[int, set[CommRun]] = {}
        self.fd_peer: dict[int, int] = {}
        self.channel_fds: dict[int, list[int]] = {}  # every socket of a channel, both directions
        self.fds_out: dict[CommRun, list[int]] = {}
        self.outboxes: dict[CommRun, dict] = {}  # sends of a run's earlier steps still queued
        self.watched: set[CommRun] = set()
        self.delay_acks: dict[tuple[int, int], Callable[[], None]] = {}  # (channel, peer): set the mode again
        for (channel, peer), link in links.items():
            self.channels.setdefault(channel, {})[peer] = link
            again = delay_acks(link.recv) if link.recv is not link.send else None  # one way: see PeerLink
            if again is not None:
                self.delay_acks[(channel, peer)] = again
            for sock in link.sockets():
                sock.settimeout(None)  # attempts use MSG_DONTWAIT (see genie.engine.transport)
                fd = sock.fileno()
                self.epoll.register(fd, WATCH_IN)
                self.fd_users[fd] = set()
                self.fd_peer[fd] = peer
                self.channel_fds.setdefault(channel, []).append(fd)
        self.timer = DeadlineTimer()
        self.epoll.register(self.timer.fd, select.EPOLLIN)
        self._armed: int | None = None

    def begin(self, run: CommRun, step: Step) -> StepExchange:
        """The bench's step semantics (`genie.engine.executor.run_schedule`): a step completes once its
        receives are done, its sends staying queued in the run's outbox while later steps go on; the run's
        last step completes only when the outbox is empty too."""
        last = run.index >= len(run.steps) - 1
        outbox = self.outboxes.pop(run, {}) if last else self.outboxes.setdefault(run, {})
        for peer in {r.peer for r in step.recvs}:  # Linux leaves the mode whenever a delayed ACK's timer fires
            again = self.delay_acks.get((run.node.channel, peer))
            if again is not None:
                try:
                    again()
                except OSError:  # the connection is gone: the receive names the peer
                    pass
        links = self.channels.get(run.node.channel, {})
        drain = None
        if last:
            bulk = {s.peer for st in run.steps for s in st.sends if s.size_bytes > HELD_BACK_MIN_BYTES}
            if len(bulk) > 1:
                drain = {peer: links[peer].send for peer in bulk if peer in links}
        return StepExchange(self.rank, links, [Transfer(s.peer, s.size_bytes) for s in step.sends],
                            [Transfer(r.peer, r.size_bytes) for r in step.recvs], self.window,
                            outbox=outbox, wait_for_sends=last, drain=drain)

    def watch(self, run: CommRun) -> None:
        """Register `run` as a user of its sockets; watch write readiness where its sends are blocked."""
        for fd in self.channel_fds.get(run.node.channel, ()):
            self.fd_users[fd].add(run)
        self.watched.add(run)
        if run.exchange is not None:
            links = self.channels.get(run.node.channel, {})
            fds = self.fds_out[run] = [links[p].send.fileno() for p in run.exchange.pending_out]
            for fd in fds:
                self.epoll.modify(fd, WATCH_IN_OUT)

    def unwatch(self, run: CommRun) -> None:
        for fd in self.channel_fds.get(run.node.channel, ()):
            self.fd_users[fd].discard(run)
        self.watched.discard(run)
        for fd in self.fds_out.pop(run, ()):
            self.epoll.modify(fd, WATCH_IN)

    def wait(self, wait_s: float, wake_ns: int | None) -> list[CommRun]:
        if wake_ns != self._armed:
            self.timer.set(wake_ns)
            self._armed = wake_ns
        done: list[CommRun] = []
        draining = [run for run in self.watched if run.exchange is not None and run.exchange.draining]
        if draining:
            wait_s = min(wait_s, SENT_POLL_S)
        for fd, ev in self.epoll.poll(wait_s):
            if fd == self.timer.fd:
                self.timer.clear()
                continue
            peer = self.fd_peer[fd]
            for run in self.fd_users.get(fd, ()):
                ex = run.exchange
                if ex is not None and run not in done and ex.on_ready(peer, ev):
                    done.append(run)
        done += [run for run in draining if run not in done and run.exchange.done]
        return done

    def close(self) -> None:
        self.epoll.close()
        self.timer.close()
