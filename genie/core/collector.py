"""The cyclic garbage collector paused around a model's play or a big trace's read (pure, no side effects at
import).

A play builds millions of small acyclic records (events, spans, flows); the cyclic collector would only rescan
them - and the trace they point to - again and again (a 1024-rank fabric play ran ~2,700 collections that freed
311 objects: benchmarks/README.md "The play's Python side"). A Chakra ET set's read builds the trace's records
(a 1024-rank MoE set: ~1.2 M nodes and attributes; 5,700 collections, half the read's CPU) and the fabric
model's compile its lanes and queues. Reference counting still frees them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Inside the block the cyclic collector does not run; afterwards it is as it was (left off if it was off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
