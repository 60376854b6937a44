"""`MpiTransport`: a schedule step over MPI point-to-point (``--transport mpi``) instead of genie's sockets.

Every receive of a step is posted (`Irecv`), then every send (`Isend`), and the requests are completed
together: first `Testall` in a short spin (small messages finish there), then `Testall` with `sched_yield`
between tries until the op deadline. MPICH makes progress only inside MPI calls, so the loop keeps calling
it; yielding lets the peer we wait for have the core when ranks outnumber cores. A timeout names the
transfers still pending, as `SocketTransport` does.

Without verify the payload is irrelevant: sends come from one preallocated buffer, receives land in another
(each concurrent receive of a step in its own region, as MPI requires), both grown to the largest need and
then reused. With verify, transfers carry their views into the real arrays.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

import numpy as np

from genie.engine.transport import PeerFailure, Transfer

DATA_TAG = 17
_SPIN_TRIES = 64


class MpiTransport:
    """Steps over `comm` (a communicator of the job's ranks; rank numbers are the schedule's ranks)."""

    def __init__(self, comm: Any, rank: int) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = comm
        self.rank = rank
        self.world = comm.Get_size()
        self._send_area = np.zeros(1 << 20, dtype=np.uint8)
        self._recv_area = np.empty(1 << 20, dtype=np.uint8)

    @staticmethod
    def _grown(area: np.ndarray, size: int, zero: bool) -> np.ndarray:
        if area.size >= size:
            return area
        return (np.zeros if zero else np.empty)(max(size, 2 * area.size), dtype=np.uint8)

    def exchange(self, sends: Sequence[Transfer], recvs: Sequence[Transfer], timeout_s: float, *,
                 wait_for_sends: bool = True) -> None:
        """Always waits for the sends too (MPI requests complete together)."""
        MPI = self._mpi
        for t in (*sends, *recvs):
            if not 0 <= t.peer < self.world or t.peer == self.rank:
                raise PeerFailure(f"rank {self.rank}: no connection to rank {t.peer}")
        plain_recv = sum(t.size_bytes for t in recvs if t.view is None)
        plain_send = max((t.size_bytes for t in sends if t.view is None), default=0)
        self._recv_area = self._grown(self._recv_area, plain_recv, zero=False)
        self._send_area = self._grown(self._send_area, plain_send, zero=True)
        requests: list[Any] = []
        what: list[tuple[str, Transfer]] = []
        offset = 0
        for t in recvs:
            if t.size_bytes <= 0:
                continue
            if t.view is not None:
                buf = t.view[:t.size_bytes]
            else:
                buf = self._recv_area[offset:offset + t.size_bytes]
                offset += t.size_bytes
            requests.append(self.comm.Irecv([buf, MPI.BYTE], source=t.peer, tag=DATA_TAG))
            what.append(("receiving from", t))
        for t in sends:
            if t.size_bytes <= 0:
                continue
            buf = t.view[:t.size_bytes] if t.view is not None else self._send_area[:t.size_bytes]
            requests.append(self.comm.Isend([buf, MPI.BYTE], dest=t.peer, tag=DATA_TAG))
            what.append(("sending to", t))
        if requests:
            self._complete(requests, what, timeout_s)

    def _complete(self, requests: list[Any], what: list[tuple[str, Transfer]], timeout_s: float) -> None:
        testall = self._mpi.Request.Testall
        for _ in range(_SPIN_TRIES):
            if testall(requests):
                return
        deadline = time.monotonic() + timeout_s
        yield_cpu = os.sched_yield
        while not testall(requests):
            if time.monotonic() > deadline:
                pending = [f"{verb} rank {t.peer} ({t.size_bytes} bytes)"
                           for req, (verb, t) in zip(requests, what) if not req.Test()]
                for req, (verb, _) in zip(requests, what):
                    if verb == "receiving from" and not req.Test():
                        try:
                            req.Cancel()
                        except self._mpi.Exception:
                            pass
                raise PeerFailure(f"rank {self.rank}: op timed out after {timeout_s:g} s "
                                  + ", ".join(pending))
            yield_cpu()

    def flush(self, timeout_s: float) -> None:
        """Nothing is ever left queued (see `exchange`)."""

    def close(self) -> None:
        self._send_area = self._recv_area = np.empty(0, dtype=np.uint8)
