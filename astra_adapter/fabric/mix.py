"""A job mix on the fabric model (pure): every job's iteration time beside the others and alone, its slowdown,
and the links where the jobs meet.

The mix is one merged trace (:func:`genie.workloads.mix.merge_jobs`) played under the replay's rules with
every op's flows on the topology graph: the jobs' phases interleave as their own DAGs and start offsets say,
and flows of different jobs share the links they cross (max-min fair). A job's iteration *alone* is its trace
alone on the same host slots (its window: first start to last end, as a barrier starts each of the replay's
iterations alone); *in the mix* it is the median of its repetitions that saw every job running
(:func:`genie.core.jobmix.mixed_repetitions`), each its longest rank's own span
(:func:`genie.core.jobmix.longest_rank_span_ns`: no barrier resets the offset between its ranks), the statistic
the replay reports of its iterations (:func:`genie.measure.mix.mixed_iteration_ns`): a job whose iterations
sometimes fall into another job's quiet phase has a few short ones, which move a mean and not a median. With
ECMP both are means over the same hash draws of each draw's median.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from statistics import fmean, median

from genie.core.flowpath import SessionPaths
from genie.core.jobmix import (MixMap, jobs_outside_in_any, mixed_repetitions, outside_the_mix_warning,
                               repetition_times)
from genie.core.topology import Topology
from genie.core.trace import Trace
from genie.workloads.mix import merge_jobs, repetition_counts

from astra_adapter.fabric.coflow import RingModel
from astra_adapter.fabric.estimate import fork_map, play_draws, sample_networks
from astra_adapter.fabric.flows import ECMP_SAMPLES, FabricParams, FlowEngine
from astra_adapter.fabric.network import FabricNetwork, LinkClass
from astra_adapter.timeline import CompiledTrace


@dataclass(frozen=True)
class JobEstimate:
    name: str
    slots: tuple[int, ...]
    repetitions: int
    alone_ns: float
    mixed_ns: float
    mixed_samples: int  # repetitions (x draws) behind mixed_ns
    hosts: tuple[str, ...] = ()  # the slots' hosts

    @property
    def slowdown_pct(self) -> float:
        if self.alone_ns <= 0:
            return 0.0
        pct = 100.0 * (self.mixed_ns / self.alone_ns - 1.0)
        return 0.0 if abs(pct) < 1e-6 else pct


@dataclass(frozen=True)
class LinkShare:
    """One link direction and the payload bytes each job's flows put on it (expected ECMP share)."""

    a: str
    b: str
    bytes_by_job: tuple[float, ...]

    @property
    def jobs(self) -> int:
        return sum(1 for b in self.bytes_by_job if b > 0)


@dataclass(frozen=True)
class MixEstimate:
    placement: str
    jobs: tuple[JobEstimate, ...]
    links: tuple[LinkShare, ...]  # every network link direction some job crosses
    notes: tuple[str, ...] = ()

    @property
    def mean_slowdown_pct(self) -> float:
        return fmean(j.slowdown_pct for j in self.jobs)

    @property
    def max_slowdown_pct(self) -> float:
        return max(j.slowdown_pct for j in self.jobs)

    @property
    def shared_links(self) -> tuple[LinkShare, ...]:
        """The links where jobs meet: crossed by flows of more than one job."""
        return tuple(s for s in self.links if s.jobs > 1)


def _rep_medians(mix: MixMap, timelines, jobs: int, *, mixed: bool) -> list[tuple[float, int]]:
    """Per job (the mean over every draw's timeline of its median repetition time, repetitions counted): in the
    mix each repetition's :attr:`genie.core.jobmix.RepetitionTime.iteration_ns` (its longest rank's span),
    alone its window."""
    medians: list[list[float]] = [[] for _ in range(jobs)]
    counts = [0] * jobs
    for timeline in timelines:
        times = repetition_times(mix, timeline.spans)
        chosen = mixed_repetitions(times, jobs, mix.offsets_ns) if mixed else {j: tuple(t for t in times if t.job == j)
                                                                for j in range(jobs)}
        for j in range(jobs):
            if chosen[j]:
                medians[j].append(median(t.iteration_ns if mixed else t.duration_ns for t in chosen[j]))
                counts[j] += len(chosen[j])
    return [(fmean(m) if m else 0.0, n) for m, n in zip(medians, counts)]


def link_shares(trace: Trace, mix: MixMap, network: FabricNetwork, params: FabricParams, jobs: int
                ) -> tuple[LinkShare, ...]:
    """Payload bytes per job on every network link direction, from every op's flows on the expected-share
    routes (a loopback is no link two jobs could meet on)."""
    engine = FlowEngine(network, params)
    compiled = CompiledTrace(trace)
    channels, p2p = trace.channels()
    load = [[0.0] * jobs for _ in network.resources]
    for key, (members, _sides, op) in compiled.ops.items():
        job = mix.ranks[members[0]].job
        channel = channels.get(key[1]) if key[0] == "coll" else p2p
        for step in engine.plan(op, members, channel):
            for rid, size in zip(step.routes.tolist(), step.bytes.tolist()):
                for resource, part in network.routes[rid].loads:
                    load[resource][job] += size * part
    return tuple(LinkShare(r.a, r.b, tuple(load[i])) for i, r in enumerate(network.resources)
                 if r.link_class is not LinkClass.LOOPBACK and any(load[i]))


def mix_play_params(params: FabricParams, standing_queues: bool = True) -> FabricParams:
    """The parameters a mix's jobs are played with, alone and together: with ``standing_queues`` the links'
    FIFOs (astra_adapter/fabric/queues.py) and the rings' connections each on their own step
    (astra_adapter/fabric/chains.py), and then no flow contention - a link shared by several TCP flows delivers
    its whole rate.

    ``flow_contention`` is fitted on the calibration's sweeps (a link crossed by n flows delivers ``1 / (1 + c
    (n - 1))`` of its rate); what it absorbs there is not the sharing of a shaped link: an HTB class is work
    conserving, and the window-limited flows of a mix fill its FIFO without a drop (the queue limit is far
    deeper than their windows), so the link delivers its rate whatever their number. Measured on six saved
    accuracy runs (benchmarks/README.md "Job mixes", session 22): the DDP4 job alone, two of its ring's flows on
    one 500 Mbit/s spine link, took 4592.8-4594.4 ms in every run - the model without contention says 4597.6 ms,
    with each run's fitted contention (0 to 0.025) up to 4711.7 ms; beside the DDP ring, the MoE job's 82 MB ring
    all-reduce ran at exactly half its alone rate (4110.6 ms against 2 x 2061.3), where the fitted contention
    made it 4219.2 ms. Without the standing queues (the rates alone) the calibration's contention stays.

    ``params.ring_model`` is not applied with standing queues: the chains model each ring connection on its own
    chunk (the pipelining the coflow ring model, astra_adapter/fabric/coflow.py, abstracts), so they play lock
    step; without them the ring model given stays."""
    if not standing_queues:
        return replace(params, standing_queues=False, ring_chains=False)
    return replace(params, standing_queues=True, ring_chains=True, flow_contention=0.0, ring_model=RingModel.LOCKSTEP)


def estimate_mix(traces: list[Trace], names: list[str], slots: tuple[tuple[int, ...], ...],
                 offsets_ns: list[int], iterations: list[int], topology: Topology,
                 params: FabricParams = FabricParams(), *, placement: str = "as placed",
                 ecmp_samples: int = ECMP_SAMPLES, source: str | None = None,
                 alone_paths: tuple[SessionPaths | None, ...] = (), mixed_paths: SessionPaths | None = None,
                 repetitions: tuple[int, ...] = (), standing_queues: bool = True,
                 workers: int | None = None) -> MixEstimate:
    """Every job alone on its slots, then all at once (each repeated as :func:`repetition_counts` says, or
    ``repetitions``). With ECMP, the mean over all ``ecmp_samples`` hash draws (a fixed set: no
    stopping rule as :func:`astra_adapter.fabric.estimate.estimate_fabric`'s) - or, given the paths a replay's
    sessions took (``alone_paths`` per job, ``mixed_paths``; ranks numbered as the topology's slots), on
    exactly those routes: the hash draw each session really got. ``standing_queues``: a step first waits for
    the other ops' queued windows on the full links it crosses (astra_adapter/fabric/queues.py), and a ring's
    ranks each go on their own step (astra_adapter/fabric/chains.py); off, the rates alone in lock step (faster at
    scale: the 256-host what-if in benchmarks/README.md). ``workers``: the processes a play's hash draws may take
    (:func:`astra_adapter.fabric.estimate.play_draws`; default its own choice)."""
    params = mix_play_params(params, standing_queues)
    network = FabricNetwork(topology, source=source)
    network.check_connected()
    nets = sample_networks(network, ecmp_samples)

    def networks(paths: SessionPaths | None) -> list[FabricNetwork]:
        return [network.with_paths(paths)] if paths is not None and network.multipath else nets

    world = network.world_size
    jobs = len(traces)
    alone = []
    for j in range(jobs):
        solo, solo_map = merge_jobs([traces[j]], [names[j]], [slots[j]], [1], [0], world=world)
        draws = networks(alone_paths[j] if j < len(alone_paths) else None)
        timelines = play_draws(solo, draws, params, workers=workers)
        alone.append(_rep_medians(solo_map, timelines, 1, mixed=False)[0][0])
    reps = repetitions or repetition_counts(alone, offsets_ns, iterations)
    merged, mix = merge_jobs(list(traces), list(names), list(slots), list(reps), list(offsets_ns), world=world)
    timelines = play_draws(merged, networks(mixed_paths), params, workers=workers)
    mixed = _rep_medians(mix, timelines, jobs, mixed=True)
    outside = jobs_outside_in_any((repetition_times(mix, t.spans) for t in timelines), jobs, mix.offsets_ns)
    rank_hosts = topology.rank_hosts()
    estimates = tuple(JobEstimate(names[j], slots[j], reps[j], alone[j], mixed[j][0], mixed[j][1],
                                  tuple(rank_hosts[s] for s in slots[j])) for j in range(jobs))
    ecmp = f"mean of {len(nets)} ECMP hash draws" if len(nets) > 1 else "no ECMP draws"
    if mixed_paths is not None and network.multipath:
        ecmp = "ECMP as the replay's sessions took it"
    notes = (f"fabric model on {topology.name} ({ecmp}); repetitions per job "
             + ", ".join(f"{n} x{r}" for n, r in zip(names, reps)),)
    notes += tuple(f"WARNING: {outside_the_mix_warning(names[j], reps[j], 'mixed')}" for j in outside)
    return MixEstimate(placement, estimates, link_shares(merged, mix, network, params, jobs), notes)


def estimate_mixes(calls: list[tuple[tuple, dict]], *, workers: int | None = None) -> list[MixEstimate]:
    """:func:`estimate_mix` ``(*args, **kwargs)`` of each call (several placements of one mix), in order. With
    several calls, in ``workers`` forked processes (default: the CPUs this process may use), each call in one
    process with its hash draws played one after the other there; every estimate is the same pure function's
    result either way."""
    if workers is None:
        workers = len(os.sched_getaffinity(0))
    workers = min(workers, len(calls))
    if workers <= 1:
        return [estimate_mix(*args, **kwargs) for args, kwargs in calls]
    return fork_map(_estimate_call, calls, len(calls), workers)  # the children get the traces by fork, not pickle


def _estimate_call(calls: list[tuple[tuple, dict]], k: int) -> MixEstimate:
    args, kwargs = calls[k]
    return estimate_mix(*args, **{**kwargs, "workers": 1})  # a worker's draws in it: no pool in a pool


def rank_placements(estimates: list[MixEstimate]) -> list[MixEstimate]:
    """Placements best first: by mean slowdown over the jobs, then the worst job's."""
    return sorted(estimates, key=lambda e: (e.mean_slowdown_pct, e.max_slowdown_pct, e.placement))


def format_mix(est: MixEstimate) -> str:
    lines = [f"# job mix, placement {est.placement}",
             f"#{'job':<12} {'ranks':>5} {'reps':>5} {'alone_ms':>10} {'mixed_ms':>10} {'slowdown':>9}"]
    for j in est.jobs:
        lines.append(f" {j.name:<12} {len(j.slots):>5} {j.repetitions:>5} {j.alone_ns / 1e6:>10.3f} "
                     f"{j.mixed_ns / 1e6:>10.3f} {j.slowdown_pct:>8.1f}%")
    shared = est.shared_links
    lines.append(f"# mean slowdown {est.mean_slowdown_pct:.1f}%, worst {est.max_slowdown_pct:.1f}%; jobs meet on "
                 + (", ".join(f"{s.a}->{s.b}" for s in shared) if shared else "no link"))
    lines.extend(f"# {n}" for n in est.notes)
    return "\n".join(lines)


def format_ranking(ranked: list[MixEstimate]) -> str:
    names = [j.name for j in ranked[0].jobs]
    lines = ["# placements ranked by mean slowdown (best first)",
             f"#{'rank':>4} {'placement':<12} {'mean':>7} {'worst':>7} "
             + " ".join(f"{n[:10]:>10}" for n in names) + "  shared links"]
    for k, e in enumerate(ranked, 1):
        lines.append(f" {k:>4} {e.placement:<12} {e.mean_slowdown_pct:>6.1f}% {e.max_slowdown_pct:>6.1f}% "
                     + " ".join(f"{j.slowdown_pct:>9.1f}%" for j in e.jobs)
                     + (f"  {len(e.shared_links)}: " + ", ".join(f"{s.a}->{s.b}" for s in e.shared_links[:6])
                        + (" ..." if len(e.shared_links) > 6 else "") if e.shared_links else "  none"))
    return "\n".join(lines)
