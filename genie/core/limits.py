"""The bounds genie puts on every count and rate it reads (docs/inputs.md): a value past them is a typo or a
hostile file, refused when the file is read — never after a testbed is up or a million processes are asked for.
"""

from __future__ import annotations

MAX_RANKS = 4096  # ranks of one run (a topology's or inventory's world size): each is a process and sockets
MAX_TRACE_RANKS = 65536  # ranks of a trace (estimates simulate more ranks than a run can start)
MAX_TRACE_NODES = 8_000_000  # nodes of a genie trace's `program` times its ranks
MAX_RATE_BPS = 10 * 10**12  # 10 Tbit/s per link: tc's rate is 64-bit, but no emulated link is faster
MAX_TIME_NS = 30 * 86400 * 10**9  # 30 days: the longest time any field (delay, fault `at`, duration) may say
MAX_SIZE_BYTES = 1 << 40  # 1 TiB: the largest message or buffer size any field may say
MAX_ITERATIONS = 1_000_000  # timed or warmup iterations of one run
MAX_TIMEOUT_S = 7 * 86400.0  # one week per op
