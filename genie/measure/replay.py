"""Replay records → per-rank iteration metrics (pure).

Per iteration, time 0 is the earliest rank's start (all ranks leave one barrier together). For each rank:
`iteration_ns` = its last node's end; `compute_ns` = the trace's compute durations (what a GPU would spend;
the replay charges them on an ideal clock, see the engine's walker); `comm_ns` = time at least one
communication node was in flight; `exposed_comm_ns` = iteration_ns - compute_ns (ASTRA-sim's "exposed
communication": what the iteration takes beyond compute); `overlap_ns` = time compute and communication ran
at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from genie.core.program import Lane, RankProgram
from genie.core.records import IterationRecords
from genie.core.intervals import union_ns


@dataclass(frozen=True)
class RankSummary:
    iteration: int
    rank: int
    iteration_ns: int
    compute_ns: int
    comm_ns: int
    exposed_comm_ns: int
    overlap_ns: int


def rank_summaries(programs: Sequence[RankProgram], it: IterationRecords) -> list[RankSummary]:
    lanes = {p.rank: {n.id: n.lane for n in p.nodes} for p in programs}
    nominal = {p.rank: p.compute_ns for p in programs}
    origin = it.start_ns
    out = []
    for rr in it.ranks:
        lane_of = lanes[rr.rank]
        compute = [(s, e) for nid, s, e in rr.records if lane_of.get(nid) is Lane.COMPUTE]
        comm = [(s, e) for nid, s, e in rr.records if lane_of.get(nid) in (Lane.COLLECTIVE, Lane.SEND, Lane.RECV)]
        end = max((e for _, _, e in rr.records), default=origin)
        compute_ns = nominal[rr.rank]
        comm_ns = union_ns(comm)
        busy = union_ns(compute + comm)
        iteration_ns = end - origin
        out.append(RankSummary(it.iteration, rr.rank, iteration_ns, compute_ns, comm_ns,
                               max(0, iteration_ns - compute_ns),
                               sum(e - s for s, e in compute) + comm_ns - busy))
    return out


def iteration_time_ns(summaries: Sequence[RankSummary]) -> int:
    return max(s.iteration_ns for s in summaries)
