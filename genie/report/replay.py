"""Replay reports: ops.csv, ranks.csv, a Chrome/Perfetto timeline, replay.json."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from statistics import median

from genie.core.program import Lane
from genie.core.records import ReplayOutcome
from genie.measure.replay import iteration_time_ns, rank_summaries
from genie.core.files import write_atomic

OPS_COLUMNS = ("iteration", "rank", "node_id", "name", "type", "bytes", "group", "algorithm", "start_ns", "end_ns")
RANKS_COLUMNS = ("iteration", "rank", "iteration_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "overlap_ns")


def _node_index(outcome: ReplayOutcome) -> dict[int, dict[int, object]]:
    return {p.rank: {n.id: n for n in p.nodes} for p in outcome.programs}


def ops_csv(outcome: ReplayOutcome) -> str:
    """One row per node per timed iteration; times in ns from the iteration's start (earliest rank)."""
    nodes = _node_index(outcome)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(OPS_COLUMNS)
    for it in outcome.iterations:
        origin = it.start_ns
        for rr in it.ranks:
            for nid, s, e in rr.records:
                n = nodes[rr.rank][nid]
                kind = n.op.collective.value if n.op else n.lane.value
                w.writerow((it.iteration, rr.rank, nid, n.name, kind, n.size_bytes, n.group,
                            n.op.algorithm.value if n.op else "", s - origin, e - origin))
    return out.getvalue()


def ranks_csv(summaries) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(RANKS_COLUMNS)
    for s in summaries:
        w.writerow((s.iteration, s.rank, s.iteration_ns, s.compute_ns, s.comm_ns, s.exposed_comm_ns, s.overlap_ns))
    return out.getvalue()


def chrome_trace(outcome: ReplayOutcome) -> str:
    """Chrome / Perfetto trace-event JSON: a process per rank, a thread per lane (compute, each channel).
    Thread ids are integers (the trace-event format's), numbered per rank in order of appearance; a
    ``thread_name`` metadata event names each (``compute``, the group, ``send 3``...)."""
    nodes = _node_index(outcome)
    events: list[dict] = []
    tids: dict[tuple[int, str], int] = {}
    for p in outcome.programs:
        events.append({"name": "process_name", "ph": "M", "pid": p.rank, "args": {"name": f"rank {p.rank}"}})

    def tid_of(rank: int, lane: str) -> int:
        if (rank, lane) not in tids:
            tids[(rank, lane)] = sum(1 for r, _ in tids if r == rank)
            events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tids[(rank, lane)],
                           "args": {"name": lane}})
        return tids[(rank, lane)]

    for it in outcome.iterations:
        origin = outcome.iterations[0].start_ns
        for rr in it.ranks:
            for nid, s, e in rr.records:
                n = nodes[rr.rank][nid]
                if n.lane is Lane.NONE:
                    continue
                lane = ("compute" if n.lane is Lane.COMPUTE else
                        f"{n.group or 'world'}" if n.lane is Lane.COLLECTIVE else f"{n.lane.value} {n.peer}")
                events.append({"name": n.name, "cat": n.lane.value, "ph": "X", "pid": rr.rank,
                               "tid": tid_of(rr.rank, lane),
                               "ts": (s - origin) / 1e3, "dur": (e - s) / 1e3,
                               "args": {"iteration": it.iteration, "node": nid, "bytes": n.size_bytes}})
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}) + "\n"


def summarize(outcome: ReplayOutcome) -> tuple[list, list[int]]:
    summaries, times = [], []
    for it in outcome.iterations:
        per_rank = rank_summaries(outcome.programs, it)
        summaries.extend(per_rank)
        times.append(iteration_time_ns(per_rank))
    return summaries, times


def replay_document(outcome: ReplayOutcome, meta: dict, summarized: tuple[list, list[int]] | None = None) -> dict:
    summaries, times = summarized or summarize(outcome)
    return {"meta": meta, "iteration_ns": times, "iteration_median_ns": int(median(times)),
            "ranks": [s.__dict__ for s in summaries if s.iteration == 0]}


def replay_files(outcome: ReplayOutcome, meta: dict) -> tuple[dict, dict[str, str]]:
    """(replay.json's document, {file name: text}) for ops.csv, ranks.csv, timeline.json, replay.json."""
    summarized = summarize(outcome)
    doc = replay_document(outcome, meta, summarized)
    return doc, {"ops.csv": ops_csv(outcome), "ranks.csv": ranks_csv(summarized[0]),
                 "timeline.json": chrome_trace(outcome), "replay.json": json.dumps(doc, indent=2) + "\n"}


def write_replay(run_dir: Path, outcome: ReplayOutcome, meta: dict) -> dict:
    doc, files = replay_files(outcome, meta)
    for name, text in files.items():
        write_atomic(Path(run_dir) / name, text)
    return doc


def end_summary(doc: dict, run_dir: Path, links: dict | None = None) -> str:
    """The closing line of `genie replay`: iteration time, exposed communication, where the files are."""
    ranks = doc.get("ranks") or []
    median_ms = doc["iteration_median_ns"] / 1e6
    line = f"# replay: {len(ranks)} ranks, iteration median {median_ms:.3f} ms"
    if ranks:
        worst = max(ranks, key=lambda r: r["exposed_comm_ns"])
        share = 100.0 * worst["exposed_comm_ns"] / worst["iteration_ns"] if worst["iteration_ns"] else 0.0
        line += (f", exposed communication up to {worst['exposed_comm_ns'] / 1e6:.3f} ms "
                 f"({share:.0f}%, rank {worst['rank']}, iteration 0)")
    if links:
        line += (f"; links moved {links['link_bytes'] / 1e6:.3f} MB, {links['link_drops']} drops, "
                 f"{links['tcp_retrans_segs']} TCP retransmissions")
    return line + f"\n# results in {run_dir}"


def median_iteration(times: list[int]) -> int:
    """The index of the median iteration (the lower one of an even count): the one a table shows."""
    order = sorted(range(len(times)), key=lambda i: (times[i], i))
    return order[(len(order) - 1) // 2]


def _which(count: int) -> str:
    if count == 1:
        return "the only one"
    if count % 2 == 0:
        return f"the faster of the two middle ones of {count}"
    return f"the median one of {count}"


def format_summary(outcome: ReplayOutcome) -> str:
    summaries, times = summarize(outcome)
    shown = outcome.iterations[median_iteration(times)].iteration
    lines = [f"# replay: {len(outcome.programs)} ranks, {len(times)} iteration(s), "
             f"iteration time median {median(times) / 1e6:.3f} ms",
             f"# per rank, iteration {shown} ({_which(len(times))})",
             f"#{'rank':>5} {'iter_ms':>10} {'compute_ms':>11} {'comm_ms':>9} {'exposed_ms':>11} {'overlap_ms':>11}"]
    for s in summaries:
        if s.iteration == shown:
            lines.append(f" {s.rank:>5} {s.iteration_ns / 1e6:>10.3f} {s.compute_ns / 1e6:>11.3f} "
                         f"{s.comm_ns / 1e6:>9.3f} {s.exposed_comm_ns / 1e6:>11.3f} {s.overlap_ns / 1e6:>11.3f}")
    return "\n".join(lines)
