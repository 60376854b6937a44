"""Wake a rank once per bulk message, not once per packet: the receive low-water mark (`SO_RCVLOWAT`).

A rank that waits for several peers' messages at once (the all-to-all: seven connections) sleeps in
`epoll_wait`; without a mark every data packet on any connection wakes it, and it reads that packet and tries
once more (EAGAIN) before it sleeps again: ~3.5 reads, one `epoll_wait` and about one wake-up per 128 KiB
message on the 1 Gbit/s star, most of the ranks' CPU an iteration that is not the network's own (benchmarks/
README.md, "Slow iterations"). With the mark at the bytes the message still needs, TCP wakes the rank when all
of them are in (`tcp_data_ready`), and one read takes them.

TCP's side stays that of a prompt reader: while fewer bytes than the mark are unread, Linux ACKs every arrival
of more than one segment at once (`__tcp_ack_snd_check`: "If application uses SO_RCVLOWAT, we want send ack
now"), as it does when the reader keeps the window's right edge moving; a reader that simply did not read
would have its ACKs delayed (measured: 2.6-4x the tail-loss probes). The kernel still wakes the reader early
when the window has shrunk to one segment or memory runs short, so a mark cannot stall a connection.

Setting a mark also grows a receive buffer smaller than the mark needs and then clamps the connection's
window to the mark (`tcp_set_rcvlowat`): that would change the TCP the testbed measures, so a mark is set only
on a connection whose buffer already holds `BUFFER_FACTOR` times the bytes (a cold connection's 128 KiB buffer
does not; autotuning grows it within the warm-up iterations), and only for messages over `MIN_MARK_BYTES`
(smaller ones arrive in one or two packets anyway).

Every readiness wait of `SocketTransport` arms the connections it waits on first, so a mark left from an
earlier message never delays a later, smaller one; blocking receives are unaffected (a blocking `recv` waits
for the smaller of the mark and the bytes asked for).
"""

from __future__ import annotations

import socket
from typing import Iterable

MIN_MARK_BYTES = 64 << 10  # one GSO packet: a message up to this size wakes its reader once without a mark
BUFFER_FACTOR = 4  # the receive buffer must hold this many times the mark for the kernel to leave it alone


def mark_bytes(left_bytes: int, buffer_bytes: int) -> int:
    """The low-water mark for a receive that still needs `left_bytes` on a connection whose receive buffer is
    `buffer_bytes` (SO_RCVBUF): `left_bytes` when the mark is worth setting and the kernel would not grow the
    buffer or clamp the window for it, else 1 (Linux's default: wake on any byte)."""
    if left_bytes <= MIN_MARK_BYTES or buffer_bytes < BUFFER_FACTOR * left_bytes:
        return 1
    return left_bytes


class LowWaterMarks:
    """The mark each receive connection has (so unchanged marks cost no system call), and each one's receive
    buffer as last read (autotuning only grows it while the connection is busy; read again when too small)."""

    __slots__ = ("_mark", "_buffer")

    def __init__(self) -> None:
        self._mark: dict[int, int] = {}  # fd -> the mark set (absent: Linux's default 1)
        self._buffer: dict[int, int] = {}  # fd -> SO_RCVBUF as last read

    def arm(self, waits: Iterable[tuple[socket.socket, int]]) -> None:
        """Before a readiness wait: each (receive socket, bytes it still needs) gets its mark (`mark_bytes`).
        A socket that refuses (not TCP, gone) keeps wake-on-any-byte."""
        for sock, left in waits:
            fd = sock.fileno()
            want = 1
            if left > MIN_MARK_BYTES and sock.type == socket.SOCK_STREAM and sock.family != socket.AF_UNIX:
                buffer_bytes = self._buffer.get(fd, 0)
                if buffer_bytes < BUFFER_FACTOR * left:
                    try:
                        buffer_bytes = self._buffer[fd] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
                    except OSError:
                        buffer_bytes = 0
                want = mark_bytes(left, buffer_bytes)
            if self._mark.get(fd, 1) != want:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, want)
                except OSError:
                    continue
                self._mark[fd] = want
