"""Replaying traces with reduce, gather, scatter and barrier (issue #15): a real PyTorch capture that has them
(tests/data/pytorch_rooted), imported, written as Chakra ET and read back, replays through the real rank code
in threads (genie.engine.inprocess, no root); a barrier holds every rank until the last one arrives."""

from __future__ import annotations

from pathlib import Path

from genie.core.trace import NodeKind
from genie.engine.inprocess import thread_sessions
from genie.services.replay import ReplayRequest, run_replay
from genie.services.target import loopback_placements
from genie.workloads.analysis import validate
from genie.workloads.loader import OutputFormat, load_trace, save_trace
from genie.workloads.native import read_native
from genie.workloads.pytorch_files import read_pytorch_set

ROOT = Path(__file__).resolve().parents[1]


def test_an_imported_trace_with_rooted_collectives_and_barriers_replays(tmp_path: Path) -> None:
    save_trace(read_pytorch_set([ROOT / "tests" / "data" / "pytorch_rooted"]).trace, tmp_path / "rooted",
               to=OutputFormat.ET)
    trace = load_trace(tmp_path / "rooted")
    assert validate(trace) == ()
    kinds = {n.comm_type.name for r in trace.ranks for n in r.nodes if n.kind is NodeKind.COLLECTIVE}
    assert kinds == {"BROADCAST", "REDUCE", "GATHER", "SCATTER", "BARRIER"}
    outcome = run_replay(trace, loopback_placements(4), ReplayRequest(iterations=2, warmup=1, timeout_s=30),
                         sessions=thread_sessions())
    assert len(outcome.iterations) == 2
    for it in outcome.iterations:
        for rr in it.ranks:
            assert sorted(nid for nid, _, _ in rr.records) == sorted(n.id for n in trace.ranks[rr.rank].nodes)
    roots = {(p.rank, n.op.collective.value, n.op.root) for p in outcome.programs for n in p.nodes
             if n.op is not None and n.group == ""}
    assert {(c, root) for _, c, root in roots} == {("broadcast", 2), ("reduce", 1), ("gather", 3), ("scatter", 0),
                                                    ("barrier", 0)}


BARRIER_AFTER_A_LATE_RANK = """
format: genie-trace
version: 1
ranks:
  - {rank: 0, nodes: [{id: 1, type: compute, duration: 80ms}, {id: 2, type: barrier, deps: [1]},
                      {id: 3, type: compute, duration: 0us, deps: [2]}]}
  - {rank: 1, nodes: [{id: 2, type: barrier}, {id: 3, type: compute, duration: 0us, deps: [2]}]}
  - {rank: 2, nodes: [{id: 2, type: barrier}, {id: 3, type: compute, duration: 0us, deps: [2]}]}
"""


def test_a_barrier_holds_every_rank_until_the_last_arrives() -> None:
    trace = read_native(BARRIER_AFTER_A_LATE_RANK)
    outcome = run_replay(trace, loopback_placements(3), ReplayRequest(iterations=1, timeout_s=30),
                         sessions=thread_sessions())
    (it,) = outcome.iterations
    barrier = {rr.rank: next((start, end) for nid, start, end in rr.records if nid == 2) for rr in it.ranks}
    late_arrival = barrier[0][0]  # threads share one monotonic clock
    assert late_arrival - it.start_ns >= 79_000_000
    assert all(end >= late_arrival for _, end in barrier.values())
