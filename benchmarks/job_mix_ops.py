"""Per op, the fabric model's spans of one job of a saved mix replay against the replay's own (no testbed; for
`job_mix.py ops`): where an estimate of a job's iteration alone or in the mix goes wrong - which ops, on which
ranks, by how much.

The model plays the job as `job_mix.py evaluate` estimates it: alone on the paths its alone session took, and
in the mix on the mix session's paths with the replay's repetitions, on the run's own calibration. Its span of
an op is per rank (the rank's own start to its own end, as the replay records it), the median over the
repetitions that saw the whole mix (alone: the one repetition); the replay's is the median over its timed
iterations (`jobs/<job>/{alone,together}/ops.csv`). Both include what a rank waits inside an op for its peers.
The iteration both ways is as the mix's table times it (docs/jobs.md "A job's iteration in the mix").
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median


@dataclass(frozen=True)
class OpSpan:
    """One op of one rank: its median span in the model and in the replay (ms)."""

    rank: int
    node_id: int
    name: str
    model_ms: float
    replay_ms: float

    @property
    def difference_ms(self) -> float:
        return self.model_ms - self.replay_ms


@dataclass(frozen=True)
class JobOps:
    """A job's ops alone or in the mix, and its iteration time both ways (ms)."""

    job: str
    together: bool
    model_iteration_ms: float
    replay_iteration_ms: float
    spans: tuple[OpSpan, ...]


def rank_windows(rows) -> dict[int, dict[int, list[float]]]:
    """Per iteration, each rank's [first start, last end] (ns) over an ops.csv's rows."""
    ranks: dict[int, dict[int, list[float]]] = {}
    for row in rows:
        start, end = float(row["start_ns"]), float(row["end_ns"])
        w = ranks.setdefault(int(row["iteration"]), {}).setdefault(int(row["rank"]), [start, end])
        w[0], w[1] = min(w[0], start), max(w[1], end)
    return ranks


def _replay_spans(path: Path, together: bool) -> tuple[dict[tuple[int, int], float], dict[int, str], float]:
    """Per (rank, node id) the median span of an ops.csv, the nodes' names, and the median iteration as the
    replay times it: in the mix the longest rank's own span (genie.core.jobmix.longest_rank_span_ns), alone the
    window (first start to last end over the ranks)."""
    from genie.core.jobmix import longest_rank_span_ns

    spans: dict[tuple[int, int], list[float]] = {}
    names: dict[int, str] = {}
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        start, end = float(row["start_ns"]), float(row["end_ns"])
        spans.setdefault((int(row["rank"]), int(row["node_id"])), []).append(end - start)
        names[int(row["node_id"])] = row["name"]
    ranks = rank_windows(rows)
    iterations = [longest_rank_span_ns(r.values()) if together else
                  max(e for _, e in r.values()) - min(s for s, _ in r.values()) for r in ranks.values()]
    return {k: median(v) for k, v in spans.items()}, names, median(iterations) if iterations else 0.0


def job_ops(run_dir: Path, scenario: str, placement: str, job: str,
            flow_contention: float | None = None, htb_credit: bool = True) -> tuple[JobOps, JobOps]:
    """The job's ops alone and in the mix of one saved accuracy run (``run_dir`` as `job_mix.py accuracy`
    writes it, with its calibration; with ``flow_contention``, played with that flow contention instead of none,
    :func:`astra_adapter.fabric.mix.mix_play_params`)."""
    from astra_adapter.fabric.calibration_io import load_fabric_params
    from astra_adapter.fabric.estimate import play_draws
    from astra_adapter.fabric.mix import mix_play_params
    from astra_adapter.fabric.network import FabricNetwork
    from genie.core.jobmix import mixed_repetitions, repetition_times
    from genie.services.mix import place_mix, read_mix, replay_paths
    from genie.topology import load_topology_file
    from genie.workloads.mix import merge_jobs

    from benchmarks.job_mix import OVERSUB, _with_placement

    replay_dir = run_dir / f"replay-{scenario}-{placement}"
    topology = load_topology_file(OVERSUB)
    mix, traces = read_mix(_with_placement(run_dir / "inputs" / f"{scenario}.yaml", placement))
    placed = place_mix(mix, traces, topology)
    traced = replay_paths(replay_dir, placed)
    params, _, _ = load_fabric_params(run_dir / "calibration")
    # as estimate_mix plays it (the credit: on, the oversubscribed leaf-spine's testbed has bucket links)
    params = replace(mix_play_params(params), htb_credit=htb_credit)
    if flow_contention is not None:
        params = replace(params, flow_contention=flow_contention)
    network = FabricNetwork(topology, source=str(OVERSUB))
    j = placed.names.index(job)
    out = []
    for together in (False, True):
        if together:
            merged, mix_map = merge_jobs(list(placed.traces), list(placed.names), list(placed.slots),
                                         list(traced["repetitions"]), list(placed.offsets_ns),
                                         world=network.world_size)
            paths, mine, jobs = traced["mixed_paths"], j, len(placed.names)
        else:
            merged, mix_map = merge_jobs([placed.traces[j]], [job], [placed.slots[j]], [1], [0],
                                         world=network.world_size)
            paths, mine, jobs = traced["alone_paths"][j], 0, 1
        timeline = play_draws(merged, [network.with_paths(paths) if paths is not None else network], params)[0]
        chosen = mixed_repetitions(repetition_times(mix_map, timeline.spans), jobs, mix_map.offsets_ns)[mine]
        reps = {t.repetition for t in chosen}
        model: dict[tuple[int, int], list[float]] = {}
        for rank, rows in enumerate(timeline.spans):
            for node_id, start, end in rows:
                where = mix_map.origin(rank, node_id)
                if where is not None and where[0] == mine and where[2] in reps:
                    model.setdefault((where[1], where[3]), []).append(end - start)
        measured, names, replay_iteration = _replay_spans(
            replay_dir / "jobs" / job / ("together" if together else "alone") / "ops.csv", together)
        spans = tuple(OpSpan(rank, node, names.get(node, "?"), median(v) / 1e6, measured.get((rank, node), 0.0) / 1e6)
                      for (rank, node), v in sorted(model.items()))
        model_iteration = median(t.iteration_ns if together else t.duration_ns for t in chosen)
        out.append(JobOps(job, together, model_iteration / 1e6, replay_iteration / 1e6, spans))
    return out[0], out[1]


def format_job_ops(ops: JobOps, min_ms: float = 0.5) -> str:
    """Per op (the mean over the job's ranks) and per rank where the two differ by ``min_ms`` or more."""
    lines = [f"# {ops.job} {'in the mix' if ops.together else 'alone'}: iteration model "
             f"{ops.model_iteration_ms:.1f} ms, replay {ops.replay_iteration_ms:.1f} ms "
             f"({100 * (ops.model_iteration_ms / ops.replay_iteration_ms - 1):+.2f}%)",
             f"#{'node':>4} {'op':<36} {'model_ms':>9} {'replay_ms':>9} {'diff_ms':>8}   per rank model-replay (ms)"]
    for node in sorted({s.node_id for s in ops.spans}):
        mine = [s for s in ops.spans if s.node_id == node]
        model = sum(s.model_ms for s in mine) / len(mine)
        replay = sum(s.replay_ms for s in mine) / len(mine)
        if max(model, replay) < min_ms and abs(model - replay) < min_ms:
            continue
        lines.append(f" {node:>4} {mine[0].name[:36]:<36} {model:>9.2f} {replay:>9.2f} {model - replay:>+8.2f}   "
                     + " ".join(f"r{s.rank} {s.difference_ms:+.1f}" for s in mine))
    return "\n".join(lines)


def recounted_together(replay_dir: Path, mix_file: Path, *, first_fired: bool = False
                       ) -> dict[str, tuple[float, int]] | None:
    """Per job of a saved mix replay, its iteration in the mix (the median of its counted repetitions, each its
    longest rank's own span) and how many were counted, recounted from the replay's ``mix_ops.csv`` (every
    repetition of the merged replay; runs before session 25 have none: None) by today's rule
    (:func:`genie.core.jobmix.mixed_repetitions`, the mix's offsets) - or, with ``first_fired``, by the rule before
    session 25 (counting from the moment the last job's first op fired)."""
    import json

    from genie.core.jobmix import RepetitionTime, mixed_repetitions, repetition_times
    from genie.services.mix import MIX_OPS_CSV, place_mix, read_mix
    from genie.topology import load_topology_file
    from genie.workloads.mix import merge_jobs

    from benchmarks.job_mix import OVERSUB

    path = replay_dir / MIX_OPS_CSV
    if not path.is_file():
        return None
    mix, traces = read_mix(mix_file)
    placed = place_mix(mix, traces, load_topology_file(OVERSUB))
    reps = [int(j["repetitions"]) for j in json.loads((replay_dir / "mix.json").read_text())["jobs"]]
    _, mix_map = merge_jobs(list(placed.traces), list(placed.names), list(placed.slots), reps,
                            list(placed.offsets_ns))
    jobs = len(placed.names)
    spans: dict[int, list[list[tuple[int, float, float]]]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            per_rank = spans.setdefault(int(row["iteration"]), [[] for _ in mix_map.ranks])
            per_rank[int(row["rank"])].append((int(row["node_id"]), float(row["start_ns"]), float(row["end_ns"])))
    counted: list[list[RepetitionTime]] = [[] for _ in range(jobs)]
    for per_rank in spans.values():
        times = repetition_times(mix_map, per_rank)
        if first_fired:  # the rule before session 25: from the moment the last job's first op fired
            begin = max((min((t.start_ns for t in times if t.job == j), default=0.0) for j in range(jobs)), default=0.0)
            end = min((max((t.end_ns for t in times if t.job == j), default=0.0) for j in range(jobs)), default=0.0)
            chosen = {j: tuple(t for t in times if t.job == j and t.start_ns >= begin and t.end_ns <= end + 1e-6)
                      or tuple(t for t in times if t.job == j) for j in range(jobs)}
        else:
            chosen = mixed_repetitions(times, jobs, mix_map.offsets_ns)
        for j in range(jobs):
            counted[j].extend(chosen[j])
    return {placed.names[j]: (float(median(t.iteration_ns for t in counted[j])) if counted[j] else 0.0,
                              len(counted[j])) for j in range(jobs)}
