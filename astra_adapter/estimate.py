"""Estimate a workload the way ASTRA-sim's analytical congestion-unaware backend does, without ASTRA-sim.

``estimate(trace, system, network)`` runs :class:`~astra_adapter.engine.Engine` and turns each rank's node
intervals into ASTRA-sim's statistics:

- finish = tick the rank's last node finished; exposed communication = finish - sum of GPU compute runtimes;
- "<type> time" = length of the union of that type's node intervals (issue -> finish);
- wall time = latest node end; overlap = GPU time + Comm time - wall time (when both exist).

``estimate_files(prefix, system, network, remote_memory)`` does the same from the files ASTRA-sim is given.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from genie.core.errors import GenieError, InputError
from genie.core.files import InputKind, read_input
from genie.core.intervals import union_ns
from genie.core.trace import Trace

from genie.core.collector import collector_paused
from astra_adapter.collective_plan import ring_log_lines
from astra_adapter.config import NetworkBackend, NetworkConfig, RemoteMemoryConfig, SystemConfig, load_network, \
    load_remote_memory, load_system
from astra_adapter.engine import EngineRun, RankRun, run_engine, stat_types
from astra_adapter.network import AnalyticalNetwork
from astra_adapter.output import AstraResult, RankResult, format_astra_output, rank_lines, timestamp_now
from astra_adapter.links import LinkNetwork
from astra_adapter.slot_holds import SlotHold, longest_hold
from astra_adapter.symmetry import mirrored_links, rank_classes
from astra_adapter.work import RankWork, StatType, trace_work

SYMMETRY_MIN_RANKS = 64


@dataclass(frozen=True)
class Estimate:
    """The estimator's answer: per-rank results plus what ASTRA-sim would have logged along the way."""

    result: AstraResult
    topology_lines: tuple[str, ...]  # logged while the logical topologies are built
    run_log: tuple[tuple[int, str | int], ...]  # (tick, message or finished rank)
    simulated_phases: int
    simulated_ranks: int  # fewer than the ranks when symmetric ranks were simulated once
    approximated_phases: int = 0  # > 0: some huge staggered phases were started together (an upper bound)
    #: with ``holds=True``: the longest wait of a send or collective for the communication slot
    slot_hold: SlotHold | None = None

    def stdout(self, timestamp: str | None = None) -> str:
        """ASTRA-sim's stdout for this run (one timestamp for every line)."""
        ts = timestamp or timestamp_now()
        lines = [f"[{ts}] [system::topology::RingTopology] [info] {line}" for line in self.topology_lines]
        by_rank = {r.rank: r for r in self.result.ranks}
        for _, item in self.run_log:
            lines += rank_lines(by_rank[item], ts) if isinstance(item, int) else [f"[{ts}] {item}"]
        return format_astra_output(AstraResult(()), preamble=tuple(lines), timestamp=ts)


def _utilisation(work: RankWork, run: RankRun) -> tuple[tuple[str, str], ...]:
    total = 1  # ASTRA-sim starts at 1 to avoid dividing by zero
    bound = compute = memory = intensity = 0.0
    for node, start, end in zip(work.nodes, run.starts, run.ends):
        if node.stat not in (StatType.CPU, StatType.GPU) or start < 0:
            continue
        duration = end - start
        total += duration
        info = node.roofline
        if info is not None:
            bound += 0 if info.memory_bound else duration
            compute += info.compute_utilization * duration
            memory += info.memory_utilization * duration
            intensity += info.operational_intensity * duration
    return (("Compute bound percentage", f"{bound / total * 100:.3f}%"),
            ("Average compute utilization", f"{compute / total * 100:.3f}%"),
            ("Average memory utilization", f"{memory / total * 100:.3f}%"),
            ("Average operation intensity", f"{intensity / total:.3f}"))


def rank_result(work: RankWork, run: RankRun, *, roofline: bool = False) -> RankResult:
    intervals: dict[StatType, list[tuple[int, int]]] = {}
    for node, start, end in zip(work.nodes, run.starts, run.ends):
        intervals.setdefault(node.stat, []).append((start, end))
    wall = max(run.ends, default=0)
    times = {stat: union_ns(spans) for stat, spans in intervals.items()}
    order = stat_types(work, run)
    overlap = 0
    if StatType.GPU in times and StatType.COMM in times:
        overlap = max(0, times[StatType.GPU] + times[StatType.COMM] - wall)
    return RankResult(rank=run.rank, finish_cycles=run.finish_ns,
                      exposed_comm_cycles=run.finish_ns - run.gpu_compute_ns, wall_time=wall,
                      type_times=tuple((stat.value, times[stat]) for stat in order), overlap=overlap,
                      utilisation=_utilisation(work, run) if roofline else ())


def results(work: tuple[RankWork, ...], run: EngineRun, representatives: tuple[int, ...] | None = None, *,
            roofline: bool = False) -> tuple[AstraResult, tuple[tuple[int, str | int], ...]]:
    """Per-rank results in finishing order, and the run log with every rank's finish (twins of a simulated
    representative finish with it, in rank order)."""
    runs = {r.rank: r for r in run.ranks}
    simulated = {rank: rank_result(work[rank], runs[rank], roofline=roofline) for rank in runs}
    twins: dict[int, list[int]] = {}
    for rank, rep in enumerate(representatives or range(len(work))):
        twins.setdefault(rep, []).append(rank)
    ordered, log = [], []
    for t, item in run.log:
        if not isinstance(item, int):
            log.append((t, item))
            continue
        for rank in twins[item]:
            ordered.append(replace(simulated[item], rank=rank))
            log.append((t, rank))
    return AstraResult(tuple(ordered)), tuple(log)


def estimate(trace: Trace, system: SystemConfig, network: NetworkConfig,
             remote_memory: RemoteMemoryConfig | None = None, *, queues_per_dim: int = 1,
             symmetry: bool | None = None,
             backend: NetworkBackend = NetworkBackend.CONGESTION_UNAWARE, holds: bool = False,
             compiled: bool = True) -> Estimate:
    """Estimate ``trace``. ``symmetry``: simulate one rank per class of identical ranks (exact, see
    :mod:`astra_adapter.symmetry`); None = when the trace has more than ``SYMMETRY_MIN_RANKS`` ranks. Without
    it the order of same-tick finish lines follows ASTRA-sim's event order; with it, rank order.
    ``backend``: which analytical network (the congestion-aware one simulates every rank, links shared).
    ``holds``: find where the one communication slot per NPU held a send or collective back
    (:mod:`astra_adapter.slot_holds`). ``compiled``: the congestion-aware backend's compiled loop where it is
    built (:mod:`astra_adapter.aware_core`; same results); False runs the pure Python reference."""
    with collector_paused():
        return _estimate(trace, system, network, remote_memory, queues_per_dim, symmetry, backend, holds, compiled)


def _estimate(trace: Trace, system: SystemConfig, network: NetworkConfig, remote_memory: RemoteMemoryConfig | None,
              queues_per_dim: int, symmetry: bool | None, backend: NetworkBackend, holds: bool,
              compiled: bool) -> Estimate:
    work = trace_work(trace, system)
    groups = {g.name: tuple(g.ranks) for g in trace.groups}
    net = AnalyticalNetwork(network)
    if len(work) != net.npus_count:
        raise GenieError(f"the workload has {len(work)} ranks but the network has {net.npus_count} NPUs")
    reps = None
    if symmetry or (symmetry is None and len(work) > SYMMETRY_MIN_RANKS):
        reps = rank_classes(work, groups, net, system, remote_memory)
        if backend is NetworkBackend.CONGESTION_AWARE and reps is not None:
            links = LinkNetwork(network, lambda *_: None) if len(network.dims) == 1 else None
            if links is None or not mirrored_links(work, groups, net, links, system, reps):
                reps = None  # the aware network is mirrored only where one rank provably stands for all
    run = run_engine(work, groups, system, net, remote_memory, queues_per_dim, reps, backend, compiled)
    result, log = results(work, run, reps, roofline=system.roofline_enabled)
    return Estimate(result, ring_log_lines(system, network.npus_per_dim), log, run.simulated_phases,
                    len(run.ranks), run.approximated_phases, longest_hold(work, run.ranks) if holds else None)


def estimate_files(workload_prefix: str | Path, system_path: str | Path, network_path: str | Path,
                   remote_memory_path: str | Path | None = None, comm_group_path: str | Path | None = None, *,
                   symmetry: bool | None = None, queues_per_dim: int = 1, injection_scale: float = 1.0,
                   backend: NetworkBackend = NetworkBackend.CONGESTION_UNAWARE) -> Estimate:
    """ASTRA-sim's command line as a call: ``<prefix>.<rank>.et`` files and the configuration files.

    Process groups come from ``comm_group_path`` (ASTRA-sim's ``{"<pg_name>": [ranks]}``) when given, else from
    ``<prefix>.comm_group.json`` if present. ``injection_scale`` multiplies ``endpoint-delay`` (ASTRA-sim's
    ``--injection-scale``); ``queues_per_dim`` is its ``--num-queues-per-dim``. Compute
    durations are ASTRA-sim's whole microseconds (``duration_micros``), whatever finer ``duration_ns`` genie's
    own export adds.
    """
    from genie.workloads.chakra_et import as_astra_reads, read_comm_groups, read_et_set

    system, network = load_system(system_path), load_network(network_path)
    if injection_scale != 1.0:
        delay = int(system.endpoint_delay_ns * injection_scale)
        if delay < 1:
            raise InputError("endpoint-delay x injection-scale must be >= 1 ns", path="injection_scale")
        system = replace(system, endpoint_delay_ns=delay)
    if queues_per_dim < 1:
        raise InputError("must be >= 1", path="queues_per_dim")
    remote = load_remote_memory(remote_memory_path) if remote_memory_path is not None else None
    trace = as_astra_reads(read_et_set(workload_prefix))  # duration_micros, as ASTRA-sim reads it
    if comm_group_path is not None:
        trace = replace(trace, groups=read_comm_groups(read_input(comm_group_path, InputKind.TRACE),
                                                          source=str(comm_group_path)))
    return estimate(trace, system, network, remote, symmetry=symmetry, queues_per_dim=queues_per_dim,
                    backend=backend)
