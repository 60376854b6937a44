"""Which TCP congestion control the ranks' connections use, and why it follows the time dilation (the rule is
pure; :func:`pin_congestion` sets it on a socket).

Undilated, cubic (Linux's default), pinned per socket so results do not depend on the machine's default (this
CI machine defaults to bbr, whose bandwidth probing and 200 ms PROBE_RTT window cuts cost 1-3 % of a 1 Gbit/s
ring and stretch single steps: 0.1154-0.1176 GB/s with bbr against 0.1179-0.1188 with cubic, 64 MiB ring
all-reduce, 8 hosts).

Under time dilation N > 1 the links' delays and queues are N times longer in real time, and so is every RTT, but
cubic runs two rules on real time: HyStart leaves slow start when the RTT grows by a threshold of real
milliseconds (4-16 ms), which a dilated queue passes early, and after slow start the window follows a curve of
real seconds since its last reduction (W(t) = C (t - K)^3 + W_max), bounded below only by reno's per-RTT growth.
Neither is dilated, so in the fabric's time a cubic connection leaves slow start early and grows too slowly. Reno
has no HyStart (slow start ends at a loss or ssthresh) and grows per ACK, clocked by the dilated RTT: its window
follows the fabric's time at any factor. Measured on star-8 `--links wire`, the 1 MiB all-to-all of issue #36
item 3 on fresh connections (benchmarks/README.md "Reno under time dilation"): with cubic one connection in seven
left slow start at 28 segments and took ~4 s real to pass a 128 KiB message's 91 segments, and the first dozen
iterations ran up to 1.11x the median (every iteration within 5 % in 1 of 3 runs at 30x, 0 of 3 at 10x); with
reno in 3 of 3 at both.
"""

from __future__ import annotations

import socket
from enum import Enum


class CongestionControl(Enum):
    """A Linux TCP congestion control module, by the name `TCP_CONGESTION` takes."""

    CUBIC = "cubic"
    RENO = "reno"


def congestion_control_for(dilation_factor: float) -> CongestionControl:
    """The ranks' congestion control at time dilation `dilation_factor` (1: none): cubic undilated, reno above."""
    return CongestionControl.RENO if dilation_factor > 1 else CongestionControl.CUBIC


def pin_congestion(sock: socket.socket, congestion: CongestionControl) -> None:
    """Set `congestion` on TCP socket `sock` (before it connects, so its first segments use it too). Where the
    kernel refuses - the module missing, or not in `tcp_allowed_congestion_control` for a non-root process - the
    socket keeps its namespace's default."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.value.encode())
    except OSError:
        pass
