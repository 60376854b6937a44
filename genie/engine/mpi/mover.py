"""`MpiMover`: the replay walker's steps over MPI nonblocking point-to-point (``genie replay --transport mpi``).

A step posts every receive (`Irecv`), then every send (`Isend`), on one communicator (a duplicate of
COMM_WORLD, so data never matches control messages) with **one tag per channel**: a channel is a process
group's communicator in genie's model (and the p2p lanes have one of their own), so concurrent collectives of
different groups never match each other's messages, while MPI's non-overtaking rule keeps the messages of one
channel between two ranks in order — the order both ranks walk their steps in.

Between the walker's wake-ups the mover polls: `Testall` on every step in flight, `sched_yield` between
rounds (MPICH progresses only inside MPI calls; yielding hands the core to the peer being waited for when
ranks outnumber cores), until a step completes, the compute timer is due or the wait ends. With nothing in
flight it sleeps on a timerfd, in slices of at most `IDLE_SLICE_NS` with an `Iprobe` between them, so
MPICH still pushes out what earlier steps left in its queues.

Buffers are allocated once, from the program: a zeroed send buffer as large as the largest message (sends
only read it, so concurrent sends share it) and, per lane (at most one step in flight each), a receive area
as large as that lane's largest step — each concurrent receive of a step in its own region, as MPI requires.
Payloads are irrelevant in a replay.
"""

from __future__ import annotations

import os
import select
import time
from typing import Any

import numpy as np

from genie.core.schedule import Step
from genie.engine.clock import DeadlineTimer
from genie.core.program import Lane, RankProgram
from genie.engine.transport import PeerFailure
from genie.engine.walker import CommRun, lane_key, node_steps

TAG_BASE = 100  # tag of channel c: TAG_BASE + c (clock ping-pongs use 23, bench data 17)
IDLE_SLICE_NS = 1_000_000


def buffer_needs(program: RankProgram) -> tuple[int, dict[tuple, int]]:
    """(largest single send in bytes, per lane the largest sum of receives of one step) over the program."""
    send_bytes = 0
    recv_bytes: dict[tuple, int] = {}
    for node in program.nodes:
        if node.lane not in (Lane.COLLECTIVE, Lane.SEND, Lane.RECV):
            continue
        key = lane_key(node)
        for step in node_steps(node, program.rank):
            send_bytes = max([send_bytes, *(s.size_bytes for s in step.sends)])
            recv_bytes[key] = max(recv_bytes.get(key, 0), sum(r.size_bytes for r in step.recvs))
    return send_bytes, recv_bytes


class MpiExchange:
    """One step's requests; `progress` is one `Testall`."""

    __slots__ = ("rank", "requests", "what", "_testall")

    def __init__(self, rank: int, requests: list[Any], what: list[tuple[str, int, int]], testall) -> None:
        self.rank = rank
        self.requests = requests
        self.what = what  # (verb, peer, size_bytes) per request
        self._testall = testall

    def progress(self) -> bool:
        return not self.requests or self._testall(self.requests)

    def describe_pending(self) -> str:
        return ", ".join(f"{verb} rank {peer} (0/{size} bytes)"
                         for req, (verb, peer, size) in zip(self.requests, self.what) if not req.Test())


class MpiMover:
    """Steps of `program` over `comm` (every rank of the replay; rank numbers are the trace's ranks)."""

    def __init__(self, comm: Any, program: RankProgram) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = comm
        self.rank = program.rank
        self.world = comm.Get_size()
        channels = {c for c, _ in program.links} | {n.channel for n in program.nodes}
        tag_ub = comm.Get_attr(MPI.TAG_UB) or 32767
        if TAG_BASE + max(channels, default=0) > tag_ub:
            raise PeerFailure(f"rank {self.rank}: {len(channels)} channels need MPI tags above this MPI's "
                              f"limit ({tag_ub})")
        send_bytes, recv_bytes = buffer_needs(program)
        self._send_area = np.zeros(max(send_bytes, 1), dtype=np.uint8)
        self._recv_areas = {key: np.empty(max(size, 1), dtype=np.uint8) for key, size in recv_bytes.items()}
        self.running: set[CommRun] = set()
        self.timer = DeadlineTimer()
        self._armed: int | None = None

    def begin(self, run: CommRun, step: Step) -> MpiExchange:
        MPI = self._mpi
        tag = TAG_BASE + run.node.channel
        area = self._recv_areas[lane_key(run.node)] if step.recvs else None
        requests: list[Any] = []
        what: list[tuple[str, int, int]] = []
        offset = 0
        for r in step.recvs:
            self._check_peer(r.peer)
            if r.size_bytes <= 0:
                continue
            buf = area[offset:offset + r.size_bytes]
            offset += r.size_bytes
            requests.append(self.comm.Irecv([buf, MPI.BYTE], source=r.peer, tag=tag))
            what.append(("receiving from", r.peer, r.size_bytes))
        for s in step.sends:
            self._check_peer(s.peer)
            if s.size_bytes <= 0:
                continue
            requests.append(self.comm.Isend([self._send_area[:s.size_bytes], MPI.BYTE], dest=s.peer, tag=tag))
            what.append(("sending to", s.peer, s.size_bytes))
        return MpiExchange(self.rank, requests, what, MPI.Request.Testall)

    def _check_peer(self, peer: int) -> None:
        if not 0 <= peer < self.world or peer == self.rank:
            raise PeerFailure(f"rank {self.rank}: no MPI peer rank {peer} (world of {self.world})")

    def watch(self, run: CommRun) -> None:
        self.running.add(run)

    def unwatch(self, run: CommRun) -> None:
        self.running.discard(run)

    def wait(self, wait_s: float, wake_ns: int | None) -> list[CommRun]:
        now = time.monotonic_ns
        until = now() + int(wait_s * 1e9)
        if wake_ns is not None:
            until = min(until, wake_ns)
        if not self.running:
            self._idle(until)
            return []
        yield_cpu = os.sched_yield
        while True:
            done = [run for run in self.running if run.exchange is not None and run.exchange.progress()]
            if done or now() >= until:
                return done
            yield_cpu()

    def _idle(self, until_ns: int) -> None:
        """Sleep until `until_ns` on the timerfd, poking MPI's progress engine every slice."""
        while True:
            t = time.monotonic_ns()
            if t >= until_ns:
                return
            target = min(until_ns, t + IDLE_SLICE_NS)
            if target != self._armed:
                self.timer.set(target)
                self._armed = target
            select.select([self.timer.fd], [], [], (target - t) / 1e9 + 0.001)
            self.timer.clear()
            self.comm.Iprobe(source=self._mpi.ANY_SOURCE, tag=self._mpi.ANY_TAG)

    def close(self) -> None:
        self.timer.close()
        self._send_area = np.empty(0, dtype=np.uint8)
        self._recv_areas = {}
