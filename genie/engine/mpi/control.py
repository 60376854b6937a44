"""The control plane of an MPI-launched run, over MPI instead of the orchestrator's unix socket.

* `Outbox` — rank 0's line channel to the orchestrator: ``@genie-mpi {json}`` lines on the stdout hydra
  forwards to mpiexec (rank 0's other output goes to stderr, so nothing interleaves with them);
* `receive_job` — rank 0 reads the job from its stdin (which hydra forwards from mpiexec's) in base64 chunks,
  one per request line, so hydra never holds more than one chunk (it fails when a rank reads too slowly);
* `measure_clock_offsets` — ping-pongs with rank 0 (`clocksync`);
* `MpiControl` — what the job runners of `genie.engine.rank` need: `barrier()` (every rank, then a common
  start time on rank 0's timeline, converted to this rank's clock) and `send(message)` (a gather of the
  `genie.core.protocol` messages to rank 0, which writes one line per gathered case).
"""

from __future__ import annotations

import base64
import json
import os
import time
import zlib
from enum import Enum
from typing import Any, BinaryIO, Callable

import numpy as np

from genie.core.errors import RunFailure
from genie.core.protocol import Barrier, Message, encode_message
from genie.engine.clock import sleep_until
from genie.engine.mpi.clocksync import ClockOffset, Sample, estimate_offset, reference_offset, to_reference
from genie.engine.mpi.plan import MARKER

CLOCK_TAG = 23
JOB_CHUNK_CHARS = 32 * 1024  # below hydra's pipe to the rank (64 KiB)


class OutboxKind(Enum):
    """What a marker line of rank 0 tells the orchestrator (its JSON ``type``)."""

    NEED = "need"  # send job chunk ``chunk``
    CLOCK = "clock"  # every rank's clock ``offsets``
    STARTED = "started"  # every rank's place (``ranks``): host, pid, address, port, interface
    GATHERED = "gathered"  # every rank's control message of one gather (``messages``, encoded)
    DONE = "done"  # the job is complete on every rank


class Outbox:
    """Writes marker lines to a file descriptor (rank 0's saved stdout), each with one write loop."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def emit(self, kind: OutboxKind, **fields: Any) -> None:
        data = (MARKER + json.dumps({"type": kind.value, **fields}, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]


def encode_job(envelope: dict[str, Any]) -> list[str]:
    """The job as base64 lines of zlib-compressed JSON (what the orchestrator writes, one per request)."""
    packed = base64.b64encode(zlib.compress(json.dumps(envelope, separators=(",", ":")).encode(), 6)).decode()
    return [packed[i:i + JOB_CHUNK_CHARS] for i in range(0, len(packed), JOB_CHUNK_CHARS)] or [""]


def decode_job(chunks: list[str]) -> dict[str, Any]:
    return json.loads(zlib.decompress(base64.b64decode("".join(chunks))))


def receive_job(outbox: Outbox, stdin: BinaryIO) -> dict[str, Any]:
    """Rank 0: ask for the job chunk by chunk (``need``), until the orchestrator answers with an empty line."""
    chunks: list[str] = []
    while True:
        outbox.emit(OutboxKind.NEED, chunk=len(chunks))
        line = stdin.readline()
        if not line:
            raise RunFailure("rank 0: the launcher closed stdin before sending the job")
        text = line.decode().strip()
        if not text:
            return decode_job(chunks)
        chunks.append(text)


def measure_clock_offsets(comm: Any, rounds: int, same_clock: list[bool]) -> list[ClockOffset] | None:
    """Ping-pong rank 0 <-> every rank, `rounds` times each, one rank after the other. Rank 0 returns every
    rank's offset (rank 0's own first); other ranks return None. `same_clock[r]`: rank r shares rank 0's
    kernel, so its offset is reported but not applied."""
    from mpi4py import MPI

    rank, world = comm.Get_rank(), comm.Get_size()
    clock = time.monotonic_ns
    ping = np.zeros(1, dtype=np.int64)
    pong = np.zeros(2, dtype=np.int64)
    if rank == 0:
        offsets = [reference_offset(0)]
        for peer in range(1, world):
            samples: list[Sample] = []
            for _ in range(rounds):
                t0 = clock()
                ping[0] = t0
                comm.Send([ping, MPI.INT64_T], dest=peer, tag=CLOCK_TAG)
                comm.Recv([pong, MPI.INT64_T], source=peer, tag=CLOCK_TAG)
                t3 = clock()
                samples.append((t0, int(pong[0]), int(pong[1]), t3))
            offsets.append(estimate_offset(peer, samples, same_clock=same_clock[peer]))
        return offsets
    for _ in range(rounds):
        comm.Recv([ping, MPI.INT64_T], source=0, tag=CLOCK_TAG)
        pong[0] = clock()
        pong[1] = clock()
        comm.Send([pong, MPI.INT64_T], dest=0, tag=CLOCK_TAG)
    return None


class MpiControl:
    """`send`/`barrier` for `run_bench_job` / `run_replay_job`, on `comm` (every rank calls both the same
    number of times in the same order, as those runners do)."""

    def __init__(self, comm: Any, rank: int, *, offset_ns: int, lead_ns: int,
                 emit: Callable[..., None] | None) -> None:
        self.comm = comm
        self.rank = rank
        self.offset_ns = offset_ns
        self.lead_ns = lead_ns
        self.emit = emit
        self._start = np.zeros(1, dtype=np.int64)

    def barrier(self, barrier: Barrier | None = None) -> int:
        """Wait for every rank, then for the common start time rank 0 sets; returns it on this rank's clock.
        What `barrier` says is for an orchestrator's fault hooks, which MPI runs do not have."""
        from mpi4py import MPI

        self.comm.Barrier()
        if self.rank == 0:
            self._start[0] = time.monotonic_ns() + self.lead_ns
        self.comm.Bcast([self._start, MPI.INT64_T], root=0)
        start_ns = int(self._start[0]) + self.offset_ns
        sleep_until(start_ns)
        return start_ns

    def send(self, message: Message) -> None:
        """Gather the message (timestamps moved onto rank 0's timeline) to rank 0, which writes them out."""
        gathered = self.comm.gather(encode_message(to_reference(message, self.offset_ns)), root=0)
        if self.rank == 0 and self.emit is not None:
            self.emit(OutboxKind.GATHERED, messages=gathered)
