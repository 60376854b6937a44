"""A job mix's inputs read and placed (shared by `genie estimate --jobs` and `genie replay --jobs`), and the
estimate of a mix on the fabric model with its run directory. Bad input fails here, before anything runs."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from genie.core.errors import InputError
from genie.core.jobmix import JobMix, JobPlacement
from genie.core.topology import Topology
from genie.core.trace import Trace


#: a mix replay's sessions' paths: "alone <job>" (channels: the job's own trace's) and "mix" (the merged
#: trace's), ranks numbered as the topology's slots
JOBS_PATHS_JSON = "jobs_paths.json"
ALONE_LABEL, MIX_LABEL = "alone ", "mix"
MIX_OPS_CSV = "mix_ops.csv"  # a mix replay's merged records, every repetition (genie.services.mix_replay)


@dataclass(frozen=True)
class PlacedMix:
    """A mix file read, its traces loaded and checked, its jobs placed on ``topology``'s host slots."""

    mix: JobMix
    traces: tuple[Trace, ...]
    topology: Topology
    slots: tuple[tuple[int, ...], ...]
    placement: str  # "as placed" (the file's own) or the policy every job was given

    @property
    def names(self) -> list[str]:
        return [j.name for j in self.mix.jobs]

    @property
    def offsets_ns(self) -> list[int]:
        return [j.start_offset_ns for j in self.mix.jobs]

    @property
    def iterations(self) -> list[int]:
        return [j.iterations for j in self.mix.jobs]

    def hosts(self, job: int) -> tuple[str, ...]:
        rank_hosts = self.topology.rank_hosts()
        return tuple(rank_hosts[s] for s in self.slots[job])


def read_mix(path: Path) -> tuple[JobMix, tuple[Trace, ...]]:
    from genie.workloads.jobmix_file import load_job_mix, load_job_traces

    mix = load_job_mix(path)
    return mix, load_job_traces(mix)


def place_mix(mix: JobMix, traces: tuple[Trace, ...], topology: Topology,
              placement: JobPlacement | None = None) -> PlacedMix:
    """The mix placed as its file says, or with every job given ``placement``."""
    from genie.topology.job_placement import place_jobs

    chosen = mix.with_policy(placement) if placement is not None else mix
    slots = place_jobs([j.placement for j in chosen.jobs], [t.num_ranks for t in traces], topology,
                       source=mix.source)
    return PlacedMix(chosen, traces, topology, slots, placement.label() if placement else "as placed")


def parse_placements(texts: tuple[str, ...]) -> tuple[JobPlacement, ...]:
    out = []
    for text in (t for item in texts for t in item.split(",") if t.strip()):
        try:
            out.append(JobPlacement.parse(text))
        except ValueError as exc:
            raise InputError(str(exc), path="placements") from None
    return tuple(out)


@dataclass(frozen=True)
class MixEstimateRequest:
    jobs: Path
    topology: Optional[Path] = None
    calibration: Optional[Path] = None  # a run directory with fabric_calibration.json
    placements: tuple[str, ...] = ()  # e.g. ("packed", "spread", "random:8"); none: the file's own
    out: Optional[Path] = None
    measurements: tuple[Path, ...] = ()  # run directories with sweep.csv taken on `topology`: the model fitted on them
    replay: Optional[Path] = None  # a `genie replay --jobs` run directory: ECMP on the paths its sessions took,
    # its repetitions
    standing_queues: bool = True  # steps wait for other jobs' queued windows on full links (fabric/queues.py)
    htb_credit: Optional[bool] = None  # links shaped below 10 Gbit/s carry the testbed's HTB buckets
    # (astra_adapter/fabric/credit.py); None: where the topology's testbed has bucket links (no delay on any link)


@dataclass(frozen=True)
class MixEstimateResult:
    run_dir: Path
    estimates: tuple[Any, ...]  # astra_adapter.fabric.mix.MixEstimate, best placement first when ranked
    ranked: bool


ESTIMATE_COLUMNS = ("placement", "job", "ranks", "hosts", "repetitions", "alone_ns", "mixed_ns", "slowdown_pct")
LINK_COLUMNS = ("placement", "link", "job", "payload_bytes")


def estimates_csv(estimates) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(ESTIMATE_COLUMNS)
    for e in estimates:
        for j in e.jobs:
            w.writerow((e.placement, j.name, len(j.slots), " ".join(j.hosts), j.repetitions, round(j.alone_ns),
                        round(j.mixed_ns), f"{j.slowdown_pct:.2f}"))
    return out.getvalue()


def links_csv(entries) -> str:
    """jobs_links.csv: per (placement, job names, astra_adapter.fabric.mix.LinkShare tuple) every link direction
    and job with the payload bytes the job's flows put on it."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(LINK_COLUMNS)
    for placement, names, shares in entries:
        for share in shares:
            for name, size in zip(names, share.bytes_by_job):
                if size > 0:
                    w.writerow((placement, f"{share.a}->{share.b}", name, round(size)))
    return out.getvalue()


def _bucket_links(topology) -> bool:
    """Would the topology's testbed (undilated) shape its links with HTB buckets alone (`--links bucket`, the
    default where no link has a delay): then the fabric model plays their after-idle credit."""
    from genie.core.dilation import TimeDilation
    from genie.core.testbed import LinkModel
    from genie.testbed.shaping import default_link_model

    return default_link_model(topology, TimeDilation()) is LinkModel.BUCKET


def run_mix_estimate(request: MixEstimateRequest) -> MixEstimateResult:
    """Every placement asked for (or the file's own) estimated on the fabric model; ranked when several."""
    import json

    from astra_adapter.fabric.calibration_io import load_fabric_params
    from astra_adapter.fabric.flows import FabricParams
    from astra_adapter.fabric.mix import estimate_mixes, rank_placements
    from genie.report.manifest import RunRecorder, input_digest, topology_summary
    from genie.topology import load_topology_file

    if request.topology is None:
        raise InputError("a job mix is estimated on a topology: give `topology`", path="topology")
    placements = parse_placements(request.placements)
    topology = load_topology_file(request.topology)
    mix, traces = read_mix(request.jobs)
    placed = [place_mix(mix, traces, topology, p) for p in placements] or [place_mix(mix, traces, topology)]
    params, notes = FabricParams(), ("uncalibrated: every link at its nominal rate, no overhead",)
    if request.calibration is not None and request.measurements:
        raise InputError("give `calibration` or `measurements`, not both", path="measurements")
    fitted = None
    if request.calibration is not None:
        params, _fitted, cal_source = load_fabric_params(request.calibration)
        notes = (f"calibration from {cal_source}",)
    elif request.measurements:
        fitted = _fit(placed[0], request.measurements)
        params, notes = fitted.params, (*fitted.notes, *fitted.warnings())
    traced: dict = {}
    if request.replay is not None:
        if placements:
            raise InputError("the paths of a replay are those of its own placement: give `replay` or "
                             "`placements`, not both", path="replay")
        traced = replay_paths(request.replay, placed[0])
        notes = (*notes, f"ECMP and repetitions as replay {request.replay} had them")
    htb_credit = request.htb_credit if request.htb_credit is not None else _bucket_links(topology)
    if htb_credit:
        from dataclasses import replace
        params = replace(params, htb_credit=True)
        notes = (*notes, "HTB's after-idle credit on the links shaped below 10 Gbit/s")
    calls = [((list(p.traces), p.names, p.slots, p.offsets_ns, p.iterations, topology, params),
              {"placement": p.placement, "source": str(request.topology), "standing_queues": request.standing_queues,
               **traced}) for p in placed]
    inputs = (input_digest(request.jobs, "jobs"), input_digest(request.topology, "topology"),
              *(input_digest(m, "measurements") for m in request.measurements),
              *(input_digest(j.trace_path, "trace") for j in mix.jobs
                if j.trace_path is not None and j.trace_path.is_file()))
    # the run's record opens before the play, so its duration is the estimate's (the 256-host what-if: a minute)
    with RunRecorder("estimate", name="estimate-jobs", out=request.out, inputs=inputs) as run:
        run.describe(topology=topology_summary(topology))
        estimates = [type(est)(est.placement, est.jobs, est.links, est.notes + notes)
                     for est in estimate_mixes(calls)]  # several placements at once where there are CPUs for them
        ranked = len(estimates) > 1
        if ranked:
            estimates = rank_placements(estimates)
        run.describe(params={"placements": [e.placement for e in estimates],
                             "calibration": str(request.calibration) if request.calibration else None,
                             "standing_queues": request.standing_queues, "htb_credit": htb_credit})
        run.write("jobs_estimate.csv", estimates_csv(estimates))
        run.write("jobs_links.csv", links_csv([(e.placement, [j.name for j in e.jobs], e.links)
                                               for e in estimates]))
        if fitted is not None:
            from astra_adapter.fabric.calibration_io import FABRIC_CALIBRATION_JSON, fabric_calibration_json
            run.write(FABRIC_CALIBRATION_JSON, fabric_calibration_json(fitted))
        best = estimates[0]
        run.write("jobs_estimate.json", json.dumps({"placements": [_doc(e) for e in estimates]}, indent=2) + "\n")
        run.set_summary({"placement": best.placement, "mean_slowdown_pct": round(best.mean_slowdown_pct, 2),
                         "jobs": len(best.jobs)})
    return MixEstimateResult(run.run_dir, tuple(estimates), ranked)


def replay_paths(run_dir: Path, placed: PlacedMix) -> dict:
    """estimate_mix's ``alone_paths``, ``mixed_paths`` and ``repetitions`` from a mix replay's run directory
    (its jobs_paths.json and mix.json), checked against this mix's jobs and slots."""
    import json

    from genie.core.files import InputKind, read_input
    from genie.core.flowpath import RunPaths

    doc_path = run_dir / "mix.json"
    try:
        jobs = json.loads(read_input(doc_path, InputKind.RUN_FILE))["jobs"]
        names, reps = [j["name"] for j in jobs], tuple(int(j["repetitions"]) for j in jobs)
        hosts = [tuple(j["hosts"]) for j in jobs]
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"not a job mix's mix.json ({type(exc).__name__}: {exc})", source=str(doc_path)) from None
    if names != placed.names or hosts != [placed.hosts(j) for j in range(len(names))]:
        raise InputError("that replay ran other jobs or placed them elsewhere than this mix", source=str(doc_path),
                         path="replay")
    sessions = {}
    if (run_dir / JOBS_PATHS_JSON).is_file():
        source = str(run_dir / JOBS_PATHS_JSON)
        sessions = {s.label: s for s in RunPaths.parse(read_input(run_dir / JOBS_PATHS_JSON, InputKind.RUN_FILE),
                                                       source=source).replay}
    alone = tuple(_solo_channels(sessions.get(ALONE_LABEL + n), placed, j) for j, n in enumerate(names))
    return {"alone_paths": alone, "mixed_paths": sessions.get(MIX_LABEL), "repetitions": reps}


def _solo_channels(paths, placed: PlacedMix, job: int):
    """A job's alone session (its connections numbered by the job's own trace's channels) with the channels of
    the job alone as the estimate plays it (the merged trace of that job only: its groups renamed per job)."""
    from dataclasses import replace

    from genie.core.flowpath import SessionPaths
    from genie.workloads.mix import merge_jobs

    if paths is None:
        return None
    trace, name = placed.traces[job], placed.names[job]
    own, own_p2p = trace.channels()
    solo, solo_p2p = merge_jobs([trace], [name], [placed.slots[job]], [1], [0])[0].channels()
    renumber = {number: solo[f"{name}/{group}" if group else name] for group, number in own.items()}
    renumber[own_p2p] = solo_p2p
    return SessionPaths(paths.label, tuple(replace(p, channel=renumber.get(p.channel, p.channel))
                                           for p in paths.paths), paths.unresolved)


def _fit(placed: PlacedMix, run_dirs: tuple[Path, ...]):
    """The fabric model fitted on sweeps taken on the mix's topology, each point weighted by its share of the
    mix's communication (every job once)."""
    from astra_adapter.fabric.calibrate import calibrate_fabric
    from astra_adapter.fabric.network import FabricNetwork
    from astra_adapter.measurements import read_measurements, workload_weights
    from genie.workloads.mix import merge_jobs

    measurements = read_measurements(list(run_dirs))
    merged, _ = merge_jobs(list(placed.traces), placed.names, list(placed.slots), [1] * len(placed.traces),
                           [0] * len(placed.traces))
    return calibrate_fabric(measurements, FabricNetwork(placed.topology),
                            weights=workload_weights(merged, measurements))


def _doc(e) -> dict:
    return {"placement": e.placement, "mean_slowdown_pct": e.mean_slowdown_pct,
            "max_slowdown_pct": e.max_slowdown_pct,
            "jobs": [{"name": j.name, "hosts": list(j.hosts), "repetitions": j.repetitions, "alone_ns": j.alone_ns,
                      "mixed_ns": j.mixed_ns, "slowdown_pct": j.slowdown_pct} for j in e.jobs],
            "shared_links": [f"{s.a}->{s.b}" for s in e.shared_links], "notes": list(e.notes)}


def refuse_faults(opts: Any) -> None:
    """A job mix is replayed without faults (`genie replay --jobs`, an experiment's mix): InputError naming the
    faults given (`RunOptions.faults_field`)."""
    if opts.faults or opts.faults_file is not None:
        raise InputError("faults are not injected into a job mix (replay a job alone to study one)",
                         path=opts.faults_field)
