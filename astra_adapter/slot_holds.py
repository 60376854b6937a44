"""Where ASTRA-sim's one communication slot per NPU held communication back (pure).

ASTRA-sim's workload layer lets one communication node be in flight per NPU: a collective or a send holds the
``GPU_COMM`` slot until it finishes, and a second one that is ready waits for it (receives take no slot; see
docs/astra.md). The replay - and the measured and fabric modes, which follow it - runs a rank's sends and its
collectives of different process groups at once. So a workload that overlaps them (a pipeline's last
gradient send beside its data-parallel all-reduce, a TP all-reduce beside a DP bucket) gets a later answer
from ASTRA-sim than from the testbed, and this module says where and by how much.

A node's hold is the time from when it became ready (its last dependency finished) to when it was issued;
"behind" is the communication node that held the slot when it became ready.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from astra_adapter.engine import RankRun
from astra_adapter.work import OpKind, RankWork, Slot

_HELD_OPS = (OpKind.SEND, OpKind.COLLECTIVE)


@dataclass(frozen=True)
class SlotHold:
    """One communication node that waited for the communication slot."""

    rank: int
    node_index: int  # into the rank's nodes (the trace's order)
    held_ns: int  # ready -> issued
    behind_index: int  # the communication node in the slot when it became ready (-1: none found)


def longest_slot_hold(work: RankWork, run: RankRun) -> SlotHold | None:
    """The rank's longest wait of a send or collective for the communication slot (None: none waited)."""
    nodes, starts, ends = work.nodes, run.starts, run.ends
    occupants = sorted((starts[i], ends[i], i) for i, n in enumerate(nodes)
                       if n.slot is Slot.GPU_COMM and starts[i] >= 0 and ends[i] > starts[i])
    occupant_starts = [s for s, _, _ in occupants]
    best: SlotHold | None = None
    for i, node in enumerate(nodes):
        if node.op not in _HELD_OPS or starts[i] < 0:
            continue
        ready = max((ends[d] for d in node.deps), default=0)
        held = starts[i] - ready
        if held <= 0 or (best is not None and held <= best.held_ns):
            continue
        k = bisect_right(occupant_starts, ready) - 1
        behind = occupants[k][2] if k >= 0 and occupants[k][1] > ready and occupants[k][2] != i else -1
        best = SlotHold(run.rank, i, held, behind)
    return best


def longest_hold(works: tuple[RankWork, ...], runs) -> SlotHold | None:
    """The longest hold over the simulated ranks (``runs``: their :class:`RankRun`)."""
    holds = [h for r in runs if (h := longest_slot_hold(works[r.rank], r)) is not None]
    return max(holds, key=lambda h: (h.held_ns, -h.rank), default=None)
