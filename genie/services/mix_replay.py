"""`genie replay --jobs FILE` as a service: every job of a mix alone on its placement (unless skipped), then all
of them at once on one target as one merged trace, each job's results split out as a single-job replay writes
them, plus the mix's table (job, iteration alone, together, slowdown). Bad input fails before anything runs.

Run directory: ``mix.csv`` / ``mix.json``; per job ``jobs/<name>/together/`` and ``jobs/<name>/alone/`` with
ops.csv, ranks.csv, timeline.json, replay.json. The repetitions each job runs in the mix come from its
measured iteration alone (or, with the alone runs skipped, the fabric model's estimate of it), so that every
job keeps running until the longest has timed its iterations."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from genie.core.topology import Host, Topology
from genie.services.mix import ALONE_LABEL, JOBS_PATHS_JSON, MIX_LABEL, MIX_OPS_CSV
from genie.services.options import RunOptions
from genie.services.replay import ReplayRequest


@dataclass(frozen=True)
class MixReplayCommand:
    jobs: Path
    request: ReplayRequest  # iterations / warmup of the merged replay (each job's own count is the file's)
    options: RunOptions
    alone: bool = True  # also replay each job alone on the same placement


@dataclass(frozen=True)
class MixReplayResult:
    run_dir: Path
    status: Any
    jobs: tuple[Any, ...]  # genie.measure.mix.JobComparison


def _target_topology(opts: RunOptions, total_ranks: int) -> Topology:
    """The topology whose host slots the jobs are placed on: the file's, the running testbed's, or for
    loopback one host per rank (each its own leaf)."""
    if opts.topology is not None:
        from genie.topology import load_topology_file
        return load_topology_file(opts.topology)
    if opts.testbed is not None:
        from genie.testbed import service
        return service.load_info(opts.testbed).topology
    return Topology("loopback", tuple(Host(f"rank{i}") for i in range(total_ranks)))


def _estimated_alone_ns(placed, opts: RunOptions) -> list[float]:
    """Each job's iteration alone on its slots, estimated (the alone runs skipped): the fabric model on the
    topology (expected ECMP share), or on loopback the critical path with free communication."""
    if opts.loopback:
        from genie.workloads.analysis import critical_path
        return [float(critical_path(t).length_ns) for t in placed.traces]
    from astra_adapter.fabric.estimate import play_draws
    from astra_adapter.fabric.flows import FabricParams
    from astra_adapter.fabric.network import FabricNetwork
    from genie.core.jobmix import repetition_times
    from genie.workloads.mix import merge_jobs

    network = FabricNetwork(placed.topology)
    out = []
    for j, trace in enumerate(placed.traces):
        solo, solo_map = merge_jobs([trace], [placed.names[j]], [placed.slots[j]], [1], [0],
                                    world=network.world_size)
        times = repetition_times(solo_map, play_draws(solo, [network], FabricParams())[0].spans)
        out.append(max((t.duration_ns for t in times), default=0.0))
    return out


def _slot_paths(info, flows, label: str, slots):
    """The paths a session's connections took, read from the testbed's kernels (None without ECMP or flows),
    its ranks renumbered to the topology's slots (``slots[rank]``)."""
    from dataclasses import replace

    from astra_adapter.fabric.network import FabricNetwork
    from genie.core.flowpath import SessionPaths

    if info is None or not flows or not FabricNetwork(info.topology).multipath:
        return None
    from genie.testbed.flow_paths import read_session_paths

    paths = read_session_paths(info, flows, label)
    return SessionPaths(label, tuple(replace(p, src_rank=slots[p.src_rank], dst_rank=slots[p.dst_rank])
                                     for p in paths.paths), paths.unresolved)


def _links_by_job(placed, reps, mixed_paths, info) -> str:
    """jobs_links.csv of a mix replayed on a testbed: the payload bytes each job's flows put on every link
    direction, routed on the paths the testbed's kernels gave the mix's connections (ECMP: read per
    connection, as paths.json is; a single-path topology: its one route)."""
    from astra_adapter.fabric.flows import FabricParams
    from astra_adapter.fabric.mix import link_shares
    from astra_adapter.fabric.network import FabricNetwork
    from genie.services.mix import links_csv
    from genie.workloads.mix import merge_jobs

    network = FabricNetwork(info.topology)
    world, world_map = merge_jobs(list(placed.traces), placed.names, list(placed.slots), list(reps),
                                  placed.offsets_ns, world=network.world_size)
    if mixed_paths is not None:
        network = network.with_paths(mixed_paths)
    shares = link_shares(world, world_map, network, FabricParams(), len(placed.traces))
    return links_csv([(placed.placement, placed.names, shares)])


def _no_fault_bounds(request: ReplayRequest):
    from genie.faults import service as faults_service
    return faults_service.replay_bounds((), request.iterations, request.warmup, request.timeout_s, [])


def mix_csv(rows) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(("job", "hosts", "repetitions", "alone_ns", "together_ns", "slowdown_pct", "alone_iterations",
                "together_iterations"))
    for r in rows:
        w.writerow((r.name, " ".join(r.hosts), r.repetitions, round(r.alone_ns) if r.alone_ns else "",
                    round(r.together_ns), f"{r.slowdown_pct:.2f}" if r.slowdown_pct is not None else "",
                    r.alone_iterations, r.together_iterations))
    return out.getvalue()


def format_mix_table(rows) -> str:
    lines = [f"#{'job':<12} {'ranks':>5} {'reps':>5} {'alone_ms':>10} {'together_ms':>12} {'slowdown':>9}"]
    for r in rows:
        alone = f"{r.alone_ns / 1e6:>10.3f}" if r.alone_ns else f"{'-':>10}"
        slow = f"{r.slowdown_pct:>8.1f}%" if r.slowdown_pct is not None else f"{'-':>9}"
        lines.append(f" {r.name:<12} {len(r.hosts):>5} {r.repetitions:>5} {alone} {r.together_ns / 1e6:>12.3f} {slow}")
    return "\n".join(lines)


def run_mix_replay_command(cmd: MixReplayCommand, progress: Callable[[str], None] = lambda _m: None
                           ) -> MixReplayResult:
    from genie.engine.program import build_programs
    from genie.report.manifest import input_digest
    from genie.services.mix import place_mix, read_mix, refuse_faults
    from genie.services.replay import check_request
    from genie.services.stage import staged

    opts, request = cmd.options, cmd.request
    check_request(request)
    refuse_faults(opts)
    if opts.inventory is None:  # the target's hosts place the jobs: none given is not loopback's
        from genie.services.target import check_one_target
        check_one_target(opts.topology, opts.testbed, opts.loopback, command="replay")
    mix, traces = read_mix(cmd.jobs)
    total = sum(t.num_ranks for t in traces)
    placed = place_mix(mix, traces, _target_topology(opts, total))
    for j, t in enumerate(traces):  # bad input fails before anything runs
        build_programs(t, source=f"{mix.source}: jobs[{j}]")

    def fits(placements):
        return placements  # every slot was checked against the same topology by the placement

    params = {"iterations": request.iterations, "warmup": request.warmup, "jobs": placed.names,
              "alone": cmd.alone, "slots": [list(s) for s in placed.slots]}
    inputs = (input_digest(cmd.jobs, "jobs"),
              *(input_digest(j.trace_path, "trace") for j in mix.jobs if j.trace_path and j.trace_path.is_file()))
    with staged("replay", opts, ranks=None, loopback_ranks=total, params=params, inputs=inputs, name="replay-jobs",
                bounds=lambda _n, _f: _no_fault_bounds(request), fits=fits) as stage:
        rows = replay_mix_on(stage, placed, request, alone=cmd.alone, jobs_path=cmd.jobs, progress=progress,
                             estimated_alone_ns=None if cmd.alone else _estimated_alone_ns(placed, opts))
        stage.run.set_summary({"jobs": len(rows), **{f"slowdown_pct.{r.name}": r.slowdown_pct for r in rows},
                               **stage.summary()})
    return MixReplayResult(stage.run.run_dir, stage.run.status, tuple(rows))


def replay_mix_on(stage, placed, request: ReplayRequest, *, alone: bool, jobs_path: Path,
                  progress: Callable[[str], None] = lambda _m: None, estimated_alone_ns: list[float] | None = None
                  ) -> tuple[Any, ...]:
    """The mix replayed on a stage that is up (``genie.services.stage.staged``): each job alone on its slots
    (``alone``), then all at once; every file written to ``stage.run`` (``mix.csv``, ``mix.json``,
    ``jobs/<name>/{alone,together}/``, ``jobs_paths.json``, ``jobs_links.csv``, and ``mix_ops.csv``: the merged
    replay's every node on every merged rank, all repetitions, times from each timed iteration's start); the per-job
    ``genie.measure.mix.JobComparison`` rows. Shared by ``genie replay --jobs`` and ``genie experiment``."""
    from genie.core.jobmix import outside_the_mix_warning
    from genie.engine.program import build_programs
    from genie.measure.mix import (JobComparison, job_outcome, job_placements, jobs_outside_mix, median_iteration_ns,
                                   mixed_iteration_ns, mixed_placements)
    from genie.report.replay import ops_csv, replay_files
    from genie.services.replay import run_replay
    from genie.workloads.mix import merge_jobs, repetition_counts

    run_alone = alone
    mix, traces = placed.mix, placed.traces
    programs = [tuple(build_programs(t, source=f"{mix.source}: jobs[{j}]")) for j, t in enumerate(traces)]
    used = sorted(s for job in placed.slots for s in job)
    alone_outcomes = {}
    sessions: list = []  # the paths each session's connections took (slot numbering), where read
    if run_alone:
        for j, trace in enumerate(traces):
            progress(f"job {placed.names[j]} alone on {', '.join(placed.hosts(j))}")
            alone_outcomes[j] = run_replay(
                trace, list(job_placements(stage.placements, placed.slots[j])),
                ReplayRequest(mix.jobs[j].iterations, request.warmup, request.timeout_s, request.spin_us),
                source=f"{mix.source}: jobs[{j}]", on_pids=stage.target.on_pids, sessions=stage.sessions,
                dilation=stage.dilation)
            sessions.append(_slot_paths(stage.target.info, alone_outcomes[j].flows,
                                        ALONE_LABEL + placed.names[j], placed.slots[j]))
            # written as it finishes: a run stopped later (Ctrl-C in the next job or the mix) keeps it
            meta = {"job": placed.names[j], "hosts": list(placed.hosts(j)), "target": stage.target.name,
                    "mix": str(jobs_path), "run": "alone"}
            for file_name, text in replay_files(alone_outcomes[j], meta)[1].items():
                stage.run.write(f"jobs/{placed.names[j]}/alone/{file_name}", text)
        alone_ns = [median_iteration_ns(alone_outcomes[j]) for j in range(len(traces))]
    else:
        alone_ns = list(estimated_alone_ns or ())
    reps = repetition_counts(alone_ns, placed.offsets_ns, placed.iterations)
    merged, mixmap = merge_jobs(list(traces), placed.names, list(placed.slots), list(reps), placed.offsets_ns)
    assert list(mixmap.slots) == used
    progress("all jobs at once: " + ", ".join(f"{n} x{r}" for n, r in zip(placed.names, reps)))
    with stage.watching():
        outcome = run_replay(merged, mixed_placements(stage.placements, mixmap), request,
                             source=f"{mix.source}: the mix", on_pids=stage.target.on_pids,
                             sessions=stage.sessions, dilation=stage.dilation)
    stage.run.write(MIX_OPS_CSV, ops_csv(outcome))  # every repetition, before any is chosen: rules re-applicable
    if stage.target.info is not None:  # while the testbed is up: the paths its kernels gave the connections
        mixed_paths = _slot_paths(stage.target.info, outcome.flows, MIX_LABEL, mixmap.slots)
        sessions.append(mixed_paths)
        stage.run.write("jobs_links.csv", _links_by_job(placed, reps, mixed_paths, stage.target.info))
    if any(p is not None for p in sessions):
        from genie.core.flowpath import RunPaths
        stage.run.write(JOBS_PATHS_JSON, RunPaths((), tuple(p for p in sessions if p is not None)).to_json())
    rows = []
    for j, name in enumerate(placed.names):
        mine = job_outcome(outcome, mixmap, j, programs[j], job_placements(stage.placements, placed.slots[j]))
        meta = {"job": name, "hosts": list(placed.hosts(j)), "target": stage.target.name, "mix": str(jobs_path),
                "repetitions": reps[j]}
        for file_name, text in replay_files(mine, {**meta, "run": "together"})[1].items():
            stage.run.write(f"jobs/{name}/together/{file_name}", text)
        alone = alone_outcomes.get(j)
        rows.append(JobComparison(name, placed.hosts(j), reps[j], mixed_iteration_ns(mine),
                                  len(mine.iterations), median_iteration_ns(alone) if alone else None,
                                  len(alone.iterations) if alone else 0))
    outside = jobs_outside_mix(outcome, mixmap, len(traces))
    for j in outside:
        message = outside_the_mix_warning(placed.names[j], rows[j].together_iterations, "together")
        stage.run.warn(message)
        progress(f"WARNING: {message}")
    stage.run.write("mix.csv", mix_csv(rows))
    stage.run.write("mix.json", json.dumps({"jobs": [
        {"name": r.name, "hosts": list(r.hosts), "repetitions": r.repetitions, "alone_ns": r.alone_ns,
         "together_ns": r.together_ns, "slowdown_pct": r.slowdown_pct,
         "alone_iterations": r.alone_iterations, "together_iterations": r.together_iterations,
         "saw_the_whole_mix": j not in outside}
        for j, r in enumerate(rows)], "estimated_alone_ns": None if run_alone else alone_ns}, indent=2) + "\n")
    return tuple(rows)
