"""The token buckets of a rate-shaped link's HTB class, as genie sets them (pure): the one rule that
`genie.testbed.shaping` writes into the testbed's qdiscs and the fabric model plays as a fluid
(`astra_adapter.fabric.credit`).

HTB sends while both of the class's buckets allow it:
* the *ceil* bucket: ``ceil = rate * 1.02``, depth ``cburst = max(128 KiB, rate * 1 ms)`` - what may leave at
  once (at the device's speed) after an idle spell;
* the *rate* bucket: exactly ``rate``, depth ``burst = max(cburst, rate * 8 ms)`` - link time lost to late
  timers, paid back at up to the ceil.
So after an idle spell a link first lets ``cburst`` through at once, then runs at the ceil until the rate bucket
is spent (at 1 Gbit/s ~0.35 s and ~44 MB of traffic), then at the rate. Why these values:
`genie.testbed.shaping`'s module doc.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MIN_BURST_BYTES = 128 * 1024
BURST_TIME_S = 0.001  # the ceil bucket: what may leave at once
CATCH_UP_TIME_S = 0.008  # the rate bucket: link time lost to late timers that can be paid back
CATCH_UP_FRACTION = 0.02  # how much faster than the rate it is paid back


@dataclass(frozen=True)
class HtbBuckets:
    """One HTB class's rates (bits per second) and bucket depths (bytes)."""

    rate_bps: int
    ceil_bps: int
    burst_bytes: int  # the rate bucket's depth
    cburst_bytes: int  # the ceil bucket's depth


def htb_buckets(rate_bps: int) -> HtbBuckets:
    """The buckets genie gives a link shaped to ``rate_bps``."""
    cburst_bytes = max(MIN_BURST_BYTES, math.ceil(rate_bps / 8 * BURST_TIME_S))
    return HtbBuckets(rate_bps, math.ceil(rate_bps * (1 + CATCH_UP_FRACTION)),
                      max(cburst_bytes, math.ceil(rate_bps / 8 * CATCH_UP_TIME_S)), cburst_bytes)
