"""How much a testbed's TCP connection can hold in flight, and so in a link's queue (pure).

A testbed namespace starts with Linux's per-namespace TCP buffer defaults; the testbed raises the maxima where a
long path needs them (:func:`tcp_buffer_bytes`, applied by ``genie.testbed.userspace.tcp_buffer_steps``). A
connection's window is the smaller of its send buffer and the receive window its peer advertises (about half of
the receive buffer: ``tcp_adv_win_scale = 1``). On a link whose rate is the flow's bottleneck, what it has in
flight beyond the bandwidth-delay product waits in that link's queue: with genie's sub-millisecond delays, nearly
its whole window (measured on the oversubscribed leaf-spine: ~3 MB, ~48 ms at 500 Mbit/s,
``genie.testbed.shaping``). The queue itself is bounded too: a link's ``queue_packets`` x MTU, or, with no limit
set, HTB's leaf FIFO of ``txqueuelen`` (1000) packets of up to one GSO segment (64 KiB) each - deeper than any
window, so there the windows bound it.
"""

from __future__ import annotations

import math

DEFAULT_TCP_RMEM = (4096, 131072, 6291456)  # a new namespace's defaults (min, default, max), bytes
DEFAULT_TCP_WMEM = (4096, 16384, 4194304)
MAX_TCP_BUFFER_BYTES = 256 * 1024**2
TXQUEUELEN_PACKETS = 1000  # a veth's default tx_queue_len: the limit of HTB's default leaf FIFO
GSO_MAX_BYTES = 65536  # the largest segment a veth hands its qdisc at once
# A collective's data to a peer waits for that peer's clear-to-send token only from this many bytes per peer and op
# on (genie.engine.program.clear_to_send); below it a rank writes its sends when it enters the op (eagerly).
RENDEZVOUS_MIN_BYTES = 1 << 20


def tcp_buffer_bytes(rate_bps: int, rtt_us: float) -> int:
    """TCP buffer maximum for one flow to fill ``rate_bps`` over ``rtt_us``: twice the bandwidth-delay
    product (Linux advertises about half of the receive buffer), rounded up to a power of two."""
    need = 2 * rate_bps / 8 * rtt_us / 1e6
    return min(MAX_TCP_BUFFER_BYTES, 1 << max(0, math.ceil(math.log2(max(need, 1)))))


def window_bytes(rmem_max: int = DEFAULT_TCP_RMEM[2], wmem_max: int = DEFAULT_TCP_WMEM[2]) -> int:
    """The most one connection keeps in flight: its send buffer or half its peer's receive buffer."""
    return min(wmem_max, rmem_max // 2)


def testbed_window_bytes(rate_bps: int, rtt_us: float) -> int:
    """A testbed connection's window on a path of ``rtt_us`` from a host of ``rate_bps``: the defaults, or the
    raised maxima :func:`tcp_buffer_bytes` gives the hosts of long paths."""
    raised = tcp_buffer_bytes(rate_bps, rtt_us)
    return window_bytes(max(DEFAULT_TCP_RMEM[2], raised), max(DEFAULT_TCP_WMEM[2], raised))


def send_buffer_bytes(rate_bps: int, rtt_us: float) -> int:
    """The most a testbed connection's socket holds of what its sender wrote and the peer has not yet
    acknowledged: the send buffer's maximum, raised with the receive buffer on long paths (:func:`tcp_buffer_bytes`).
    A sender's last write of a message returns once its bytes are in that buffer: the rank goes on with up to
    this much of the message still on its way."""
    return max(DEFAULT_TCP_WMEM[2], tcp_buffer_bytes(rate_bps, rtt_us))


def queue_limit_bytes(queue_packets: int | None, mtu_bytes: int) -> int:
    """The most a shaped link's queue holds: ``queue_packets`` MTU-sized packets, or HTB's default FIFO."""
    if queue_packets is not None:
        return queue_packets * mtu_bytes
    return TXQUEUELEN_PACKETS * GSO_MAX_BYTES


def sender_queue_bytes(rate_bps: int) -> int:
    """The most one connection keeps in the qdisc of its own host's link: TCP small queues lets it have about
    1 ms of its pacing rate there (at least two GSO packets); the rest of its window waits in the socket, not in
    that queue (docs/testbed.md, measured in benchmarks/README.md "Slow iterations"). A router's queue further
    on gets the whole window."""
    return max(int(rate_bps / 8 / 1000), 2 * GSO_MAX_BYTES)
