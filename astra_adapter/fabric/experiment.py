"""``genie experiment``'s fabric row (pure): on a topology that needs the fabric model
(:func:`astra_adapter.fabric.estimate.needs_fabric`), or where the workload's process groups share links
(:func:`astra_adapter.fabric.estimate.groups_share_links`), calibrate it per link class on the sweep and
estimate the trace with it, beside the measured and ASTRA-sim calibrated modes."""

from __future__ import annotations

from dataclasses import replace
from statistics import median

from genie.core.collective import Algorithm, Collective
from genie.core.flowpath import SessionPaths
from genie.core.topology import Topology

from astra_adapter.experiment_types import AccuracyRow, PreparedExperiment, Statistic
from astra_adapter.experiment_spec import SweepCase
from astra_adapter.fabric.calibrate import FabricCalibration, calibrate_fabric
from astra_adapter.fabric.estimate import estimate_fabric
from astra_adapter.fabric.flows import FlowEngine
from astra_adapter.fabric.network import FabricNetwork, LinkClass
from astra_adapter.measurements import CommOp, Measurement, workload_weights
from astra_adapter.workload_estimate import TraceEstimate


#: how the note of :func:`evaluate_fabric` on the replay's own paths starts (the experiment's summary prints it)
SESSION_NOTE = "on each replay session's own paths (paths.json) the model gives "


def session_of_each_iteration(sessions: int, iterations: int) -> tuple[int, ...] | None:
    """The session (0-based) each replay iteration ran in: the replay's iterations are its sessions' in order,
    the same number each (rounds x iterations). None when they do not divide evenly."""
    if not sessions or iterations % sessions:
        return None
    return tuple(k for k in range(sessions) for _ in range(iterations // sessions))


def evaluate_fabric(prepared: PreparedExperiment, measurements: tuple[Measurement, ...], replay_ns: tuple[int, ...],
                    statistic: Statistic = Statistic.TYPICAL, *, sweep_paths: tuple[SessionPaths, ...] = (),
                    replay_paths: tuple[SessionPaths, ...] = ()
                    ) -> tuple[FabricCalibration, TraceEstimate, AccuracyRow]:
    """Calibrate on the sweep (with the paths its sessions' connections took, read from the testbed: the fit
    sees the ECMP draws the measurements really got; weighted by the workload's time) and estimate the trace as
    the mean over ECMP hash draws (what the model predicts for a run whose draw is not known yet: the estimate
    returned, estimate-fabric.csv).

    The row compares like with like: with the replay's paths (a topology with equal-cost paths), each replay
    iteration is estimated on the paths its session's connections took and the row takes the same statistic
    (median, or min for BEST) of those as of the replay. A session's hash draw moves a collective 30-50% on an
    oversubscribed fabric; which draws 4 sessions happen to get is luck no model of the links can predict, and
    the paths are not timings (a switch's hash is a function of the headers). The note keeps both: each
    session's model beside what it measured, and the mean over draws with its error."""
    source = str(prepared.spec.topology_path)
    cal = calibrate_fabric(measurements, FabricNetwork(prepared.topology, source=source), paths=sweep_paths,
                           weights=workload_weights(prepared.trace, measurements))
    est = estimate_fabric(prepared.trace, prepared.topology, cal.params, source=source, notes=cal.warnings())
    pick = median if statistic is Statistic.TYPICAL else min
    measured_ns = pick(replay_ns)
    estimated_ns = est.iteration_ns
    if replay_paths and FabricNetwork(prepared.topology).multipath:
        traced = estimate_fabric(prepared.trace, prepared.topology, cal.params, source=source, paths=replay_paths)
        models = traced.draw_iterations_ns  # one per session
        session = session_of_each_iteration(len(models), len(replay_ns))
        note = SESSION_NOTE + ", ".join(f"{m / 1e6:.1f}" for m in models) + " ms"
        if session is not None:
            estimated_ns = pick([models[k] for k in session])
            measured = [median(t for t, k in zip(replay_ns, session) if k == s) for s in range(len(models))]
            note += ("; those sessions measured " + ", ".join(f"{m / 1e6:.1f}" for m in measured)
                     + f" ms (median iteration); the row pairs each replay iteration with its session's model; "
                     f"over the model's {len(est.draw_iterations_ns) or 1} ECMP hash draws (a run whose paths are "
                     f"not known; estimate-fabric.csv) {est.iteration_ns / 1e6:.1f} ms, "
                     f"{(est.iteration_ns - measured_ns) / measured_ns * 100:+.2f}% off the replay")
        est = replace(est, notes=(*est.notes, note))
    row = AccuracyRow(prepared.spec.workload.describe(), prepared.topology.name, est.mode.value,
                      estimated_ns / 1e9, measured_ns / 1e9)
    return cal, est, row


def cover_link_classes(sweep: tuple[SweepCase, ...], topology: Topology, grid_bytes: tuple[int, ...]
                       ) -> tuple[SweepCase, ...]:
    """The sweep plus, for every link class of the topology that none of its groups crosses (e.g. a trace whose
    groups all stay on one leaf), a message curve between the first pair of ranks whose path crosses it, at the
    grid sizes: so the calibration can fit every class."""
    network = FabricNetwork(topology)
    engine = FlowEngine(network)

    def crossed(collective, algorithm, ranks, groups) -> set[LinkClass]:
        op = CommOp(collective, algorithm or Algorithm.RING, ranks, max(grid_bytes))
        out: set[LinkClass] = set()
        for g in groups:
            try:
                steps = engine.plan(op, g)
            except ValueError:
                continue
            for step in steps:
                for rid in set(step.routes.tolist()):
                    out |= {network.resources[r].link_class for r, _ in network.routes[rid].loads}
        return out

    covered: set[LinkClass] = set()
    for case in sweep:
        covered |= crossed(case.collective, case.algorithm if case.collective is not Collective.SEND_RECV
                           else Algorithm.P2P, case.ranks, case.groups)
    extra = []
    for cls in network.classes():
        if cls in covered:
            continue
        pair = next(((0, r) for r in range(1, network.world_size)
                     if cls in {network.resources[i].link_class for i, _ in
                                network.routes[network.route(0, r)].loads}), None)
        if pair is not None:
            extra.append(SweepCase(Collective.SEND_RECV, Algorithm.P2P, 2, tuple(sorted(grid_bytes)), (pair,)))
            covered |= crossed(Collective.SEND_RECV, Algorithm.P2P, 2, (pair,))
    return (*sweep, *extra)
