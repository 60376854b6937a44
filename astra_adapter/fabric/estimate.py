"""``genie estimate --mode fabric`` and the experiment's fabric row: a trace's iteration time on the fabric
model (pure functions; a big trace's hash draws are played in forked workers, :func:`play_draws`, with the same
results). Where it is the default (:func:`fabric_by_default`, for ``genie estimate`` and the experiment's
fabric row): topologies ASTRA-sim's dimensions cannot express faithfully (:func:`needs_fabric`), and
workloads whose process groups share links (:func:`groups_share_links`) or whose ranks send beside their
collectives (:func:`sends_beside_collectives`)."""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from collections.abc import Callable, Sequence
from dataclasses import replace

from genie.core.collector import collector_paused
from genie.core.errors import InputError, RunFailure
from genie.core.flowpath import RunPaths, SessionPaths
from genie.core.process import die_with_parent
from genie.core.topology import Topology
from genie.core.trace import NodeKind, Trace

from astra_adapter.fabric.coflow import RING_MODEL, RingModel
from astra_adapter.fabric.flat_flows import engine_for
from astra_adapter.fabric.flows import ECMP_SAMPLES, END_PRECISION, FabricParams, StepSends
from astra_adapter.fabric.network import FabricNetwork, sample_networks
from astra_adapter.fabric.player import play_on_fabric
from astra_adapter.mapping import TopologyShape, map_topology
from astra_adapter.timeline import CompiledTrace, RankTimes, Timeline
from astra_adapter.workload_estimate import EstimateMode, TraceEstimate


def needs_fabric(topology: Topology) -> bool:
    """True where the topology is not a plain ASTRA-sim dimension stack: it does not map
    (:func:`astra_adapter.mapping.map_topology` refuses it), or maps only approximately (leaf-spine: one Switch
    for two tiers, oversubscription as a per-host cap, no ECMP; multi-GPU nodes: cross-rail paths through the
    spines or a peer's NVLink not modelled)."""
    try:
        mapping = map_topology(topology)
    except InputError:
        return True
    return mapping.shape in (TopologyShape.LEAF_SPINE, TopologyShape.GPU_NODES)


def groups_share_links(trace: Trace, topology: Topology) -> bool:
    """True when two disjoint process groups of ``trace`` send over a common link direction (each group's ring
    neighbours routed on ``topology``: e.g. TP2 x DP4 on an 8-host ring, where both DP rings cross every other
    link): their concurrent collectives compete for it, which ASTRA-sim's congestion-unaware model - and so
    the calibrated mode - cannot express (one bandwidth per dimension, no link ever shared); the fabric
    model can. The world group is not one of them (it is disjoint from nothing)."""
    network = FabricNetwork(topology)
    if trace.num_ranks != network.world_size:
        return False
    crossed: list[tuple[frozenset[int], set[int]]] = []
    for group in trace.groups:
        members = group.ranks
        if len(members) < 2:
            continue
        used: set[int] = set()
        for a, b in zip(members, (*members[1:], members[0])):
            used |= {r for r, _ in network.routes[network.route(a, b)].loads}
        crossed.append((frozenset(members), used))
    return any(not (ga & gb) and ua & ub for k, (ga, ua) in enumerate(crossed) for gb, ub in crossed[k + 1:])


def sends_beside_collectives(trace: Trace) -> bool:
    """True when some rank both sends point to point and runs collectives (a pipeline with data parallelism):
    the replay runs them at once, ASTRA-sim's one communication slot per NPU - and so the calibrated mode -
    one after the other (:mod:`astra_adapter.slot_holds`); the fabric model follows the replay."""
    for rank in trace.ranks:
        kinds = {node.kind for node in rank.nodes}
        if NodeKind.SEND in kinds and NodeKind.COLLECTIVE in kinds:
            return True
    return False


def fabric_by_default(trace: Trace, topology: Topology) -> bool:
    """True where the fabric model is the estimate to use for ``trace`` on ``topology``: the topology is not a
    plain ASTRA-sim dimension stack, or it is but ASTRA-sim's congestion-unaware model (behind the measured
    and calibrated modes) cannot express what this workload does on it."""
    return needs_fabric(topology) or groups_share_links(trace, topology) or sends_beside_collectives(trace)


PARALLEL_MIN_NODES = 20_000  # traces this big play their draws in parallel (a draw of 8 ranks: ~0.1 s)
MIN_DRAWS = 4  # the fewest ECMP hash draws an estimate stops at: their spread from >= 3 degrees of freedom
DRAW_PRECISION = 1e-3  # an estimate's hash draws stop once their mean's standard error is within this share of it
# (genie estimate --draw-precision; 0: all ECMP_SAMPLES; the 0.1 % of END_PRECISION - benchmarks/README.md)


def draw_standard_error(iterations_ns: Sequence[int]) -> float:
    """The standard error of the draws' mean iteration (sample standard deviation, ddof=1, over sqrt(k)) as a
    share of that mean (0 with fewer than 2 draws or a zero mean)."""
    k = len(iterations_ns)
    mean = sum(iterations_ns) / k if k else 0.0
    if k < 2 or not mean:
        return 0.0
    return math.sqrt(sum((x - mean) ** 2 for x in iterations_ns) / (k - 1) / k) / mean


def draws_enough(iterations_ns: Sequence[int], precision: float) -> bool:
    """True when the hash draws played so far (draws 0..k-1, in index order) pin their mean: at least
    :data:`MIN_DRAWS` of them and its standard error (:func:`draw_standard_error`) within ``precision`` of it.
    A precision of 0: never (every draw is played). A function of the draws' values alone, so where the draws
    stop never depends on timing or on how many workers play them."""
    return precision > 0 and len(iterations_ns) >= MIN_DRAWS and draw_standard_error(iterations_ns) <= precision


def play_draws(trace: Trace, nets: list[FabricNetwork], params: FabricParams, *, workers: int | None = None,
               enough: Callable[[list[Timeline]], bool] | None = None,
               before_plays: Callable[[], object] | None = None, spans: bool = True) -> list[Timeline]:
    """The trace played on each network, in order. Big traces with several draws play them in ``workers``
    forked processes (default: the CPUs this process may use), which inherit the trace's compiled structure
    and every op's sends (built here first, :func:`op_sends`) instead of pickling or building them each; each
    play is the same pure function either way, so the results are identical.
    With ``enough``: the plays of networks 0..k-1 for the first k where ``enough`` of them is true (the plays
    in flight are killed), else all of them - the same k whatever the workers. ``before_plays()`` is called
    once the trace is compiled and its sends built, before any play's result is taken (``genie estimate`` joins
    the trace's check there, run beside them): in this process before the first play; with workers, once they
    are forked and playing (the check's last second beside the first draws, not before them: its error still
    comes first, the draws in flight killed). ``spans=False``: the timelines without their nodes' spans (a forked
    worker then sends back only the ranks' times: ~11 MB less to pickle a 1024-rank draw)."""
    with collector_paused():  # millions of acyclic records: the collector would only rescan them
        compiled = CompiledTrace(trace)  # shared by the draws' plays
        sends = op_sends(compiled)
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if sum(len(r.nodes) for r in trace.ranks) >= PARALLEL_MIN_NODES \
            else 1
    workers = min(workers, len(nets))
    if workers <= 1:
        if before_plays is not None:
            before_plays()
        played: list[Timeline] = []
        for n in nets:
            timeline = play_on_fabric(trace, engine_for(n, params, sends), compiled)
            played.append(timeline if spans else Timeline(timeline.ranks))
            if enough is not None and enough(played):
                break
        return played
    return fork_map(_play_draw, (trace, nets, params, compiled, sends, spans), len(nets), workers, enough=enough,
                    when_forked=before_plays)


def op_sends(compiled: CompiledTrace) -> StepSends:
    """The sends of every op of ``compiled`` (each op's plan, independent of the network and the parameters),
    built once: the draws' plays share them (a forked worker by copy on write). A play asks for exactly these
    (the player plans each op it starts from ``compiled.ops``), so building them first changes no result; at
    1024 ranks they were ~2.7 s of CPU in each draw worker's first play (benchmarks/README.md, "The 1024-rank
    CLI's parent")."""
    sends = StepSends()
    for members, _, op in compiled.ops.values():
        sends.of(op, members)
    return sends


def _play_draw(draws: tuple, k: int) -> Timeline:
    trace, nets, params, compiled, sends, spans = draws  # sends: built before the fork, shared by every worker's plays
    played = play_on_fabric(trace, engine_for(nets[k], params, sends), compiled)
    return played if spans else Timeline(played.ranks)


def fork_map(run, state, count: int, workers: int, *, enough: Callable[[list], bool] | None = None,
             when_forked: Callable[[], object] | None = None) -> list:
    """``[run(state, k) for k in range(count)]`` in ``workers`` forked processes, in order (with ``enough``:
    only up to the first k results, in index order, of which ``enough`` is true): the children get
    ``state`` by fork, not pickle (``run``, a module-level function, and the results are pickled). Whatever
    happens the workers are gone when it returns or raises: killed by PID, so Ctrl-C or an error never waits for
    the calls in flight, and a worker wedged as it started (in C, on a lock another thread of this process held
    when it forked: seen in clean-clone CI, 2026-12-05) never holds it up. A worker that dies (the OOM killer, a
    crash) fails the map (RunFailure) instead of leaving it waiting: concurrent.futures' process pool notices
    (multiprocessing.Pool's map waits forever for the call that worker took). A worker ignores Ctrl-C (the
    parent's to handle). ``when_forked()``: called here once the workers are forked and every call submitted, before
    any result is taken (its error ends the map as any other). :func:`play_draws` and
    :func:`astra_adapter.fabric.mix.estimate_mixes` share it."""
    global _fork_hook
    if count == 0:
        return []
    if not _fork_hook:
        os.register_at_fork(after_in_child=_signals_in_forked_worker)
        _fork_hook = True
    others = set(multiprocessing.active_children())
    executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                   initializer=_start_forked_worker, initargs=(run, state))
    forked: list = []
    try:
        me = threading.get_ident()
        _forking.add(me)
        try:  # with fork, the first submit forks every worker, in this thread, before the pool starts its own
            futures = [executor.submit(_forked_call, 0)]
        finally:
            _forking.discard(me)
        forked = [p for p in multiprocessing.active_children() if p not in others]
        futures += [executor.submit(_forked_call, k) for k in range(1, count)]
        if when_forked is not None:
            when_forked()
        results: list = []
        try:
            for f in futures:
                results.append(f.result())
                if enough is not None and enough(results):
                    break
            return results
        except BrokenProcessPool:
            raise RunFailure(_worker_death(forked)) from None
    finally:
        _kill_workers(executor, forked)
        executor.shutdown(wait=True, cancel_futures=True)


def _kill_workers(executor: ProcessPoolExecutor, forked: list) -> None:
    """Kill the pool's workers still alive, none of them halfway through sending a result: the pool's thread
    would wait forever for the rest of a message cut short (the parent holds the pipe's write end too). A
    worker sends under the result queue's write lock, so holding it here, no send is under way (one that is
    ends first: the pool's thread reads it) and the workers die before their next one (CPython's
    ProcessPoolExecutor keeps it as ``_result_queue._wlock``; without it, killed as they are). A lock a worker
    took to its death (killed mid-send: its pool is broken anyway) is waited for 10 s at most."""
    lock = getattr(getattr(executor, "_result_queue", None), "_wlock", None)
    held = lock is not None and lock.acquire(timeout=10.0)
    try:
        killed = [p for p in forked if p.exitcode is None]
        for process in killed:
            process.kill()
        ended = {p.sentinel for p in killed}  # ready once a process is gone (the pool's thread reaps it)
        deadline = time.monotonic() + 5.0
        while ended and time.monotonic() < deadline:
            ended -= set(multiprocessing.connection.wait(list(ended), deadline - time.monotonic()))
    finally:
        if held:
            lock.release()


def _worker_death(forked: list) -> str:
    """What ended the worker that broke the pool: the pool SIGTERMs the others once it notices. Its exit status
    can take a moment to show (the pool's thread may be reaping it at once)."""
    deadline = time.monotonic() + 2.0
    while True:  # until the death that is not the pool's SIGTERM shows (the pool may reap the others first)
        ended = [p for p in forked if p.exitcode not in (None, 0)]
        gone = next((p for p in ended if p.exitcode != -signal.SIGTERM), None)
        if gone is not None or all(p.exitcode is not None for p in forked) or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    gone = gone or (ended[0] if ended else None)
    if gone is None:
        return "a worker process of the fabric model ended during its plays"
    how = f"signal {signal.Signals(-gone.exitcode).name}" if gone.exitcode < 0 else f"exit code {gone.exitcode}"
    return f"a worker process of the fabric model (pid {gone.pid}) died during its plays ({how})"


_forked: tuple | None = None  # in a forked worker of `fork_map` only: (run, state)
_forking: set[int] = set()  # the threads whose `fork_map` is forking its pool's workers (not other threads' forks)
_fork_hook = False  # `_signals_in_forked_worker` registered (once, by the first `fork_map`)


def _signals_in_forked_worker() -> None:
    """In a worker `fork_map` forks, at once (before any of multiprocessing's start-up code runs): SIGTERM and
    SIGHUP end it by the kernel's default action. With the parent's Python handler a worker wedged in C - on a
    lock some other thread of the parent held when it forked - runs no handler, and leaving the pool (its
    SIGTERM, then a join) would wait for it forever (clean-clone CI, 2026-12-05, under pytest-xdist's threads)."""
    if threading.get_ident() in _forking:  # the forking thread is the child's one thread, with the same id
        _forking.clear()  # the worker's own forks are not fork_map's
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


def _start_forked_worker(run, state) -> None:
    global _forked
    die_with_parent()  # (SIGINT is ignored from the fork on: `_signals_in_forked_worker`)
    _forked = (run, state)


def _forked_call(k: int):
    assert _forked is not None
    run, state = _forked
    return run(state, k)


def _mean_ranks(timelines: list[Timeline]) -> tuple[RankTimes, ...]:
    if len(timelines) == 1:
        return timelines[0].ranks
    k = len(timelines)
    return tuple(RankTimes(rs[0].rank, *(round(sum(getattr(r, f) for r in rs) / k) for f in
                                         ("iteration_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "overlap_ns")))
                 for rs in zip(*(t.ranks for t in timelines)))


def estimate_fabric(trace: Trace, topology: Topology, params: FabricParams = FabricParams(), *,
                    source: str | None = None, notes: tuple[str, ...] = (),
                    ecmp_samples: int = ECMP_SAMPLES, paths: tuple[SessionPaths, ...] = (),
                    end_precision: float = END_PRECISION, ring_model: RingModel = RING_MODEL,
                    draw_precision: float = DRAW_PRECISION,
                    before_plays: Callable[[], object] | None = None) -> TraceEstimate:
    """The trace played under the replay's rules with every op on the fabric model; with ECMP, the mean over
    draws of the hash (``ecmp_samples``: 0, the expected share, one run): draws 0, 1, ... in turn until the
    standard error of their mean is within ``draw_precision`` of it (:func:`draws_enough`: at least
    :data:`MIN_DRAWS`), at most ``ecmp_samples`` (``draw_precision`` 0: all of them) - or, given the ``paths``
    the replay's sessions took on a testbed, the mean over all those sessions' networks. Flow ends within
    ``end_precision`` of
    their step's time are one event (``FabricParams.end_precision``; 0: exact); ``ring_model``: a ring step's
    connections each a flow, or one (``FabricParams.ring_model``, :mod:`astra_adapter.fabric.coflow`);
    ``before_plays()``: called before any play's result is taken (:func:`play_draws`: with workers, once they are
    forked and playing)."""
    if not 0.0 <= end_precision < 1.0:
        raise InputError(f"end precision {end_precision:g} is not in [0, 1)", path="end_precision")
    if not 0.0 <= draw_precision < 1.0:
        raise InputError(f"draw precision {draw_precision:g} is not in [0, 1)", path="draw_precision")
    params = replace(params, end_precision=end_precision, ring_model=ring_model)
    network = FabricNetwork(topology, source=source)
    if trace.num_ranks != network.world_size:
        raise InputError(f"the trace has {trace.num_ranks} ranks but topology {topology.name} runs "
                         f"{network.world_size}", source=source, path="hosts")
    network.check_connected()
    traced = bool(paths) and network.multipath
    nets = [network.with_paths(p) for p in paths] if traced else sample_networks(network, ecmp_samples)
    adaptive = not traced and len(nets) > 1 and draw_precision > 0

    def enough(played: list[Timeline]) -> bool:
        return draws_enough([t.iteration_ns for t in played], draw_precision)

    timelines = play_draws(trace, nets, params, enough=enough if adaptive else None, before_plays=before_plays,
                           spans=False)  # (the estimate reads the ranks' times alone)
    ranks = _mean_ranks(timelines)
    draws = tuple(t.iteration_ns for t in timelines) if len(nets) > 1 or traced else ()
    if traced:
        ecmp = f"ECMP as the replay's connections took it: mean over its {len(nets)} session(s)"
    else:
        ecmp = f"mean of {len(timelines)} ECMP hash draws ({_draws_stop(timelines, draw_precision)})" \
            if len(nets) > 1 else ("ECMP as the expected share" if network.multipath else "no ECMP")
    described = (f"fabric model on {topology.name} ({ecmp}): {len(network.resources)} link directions, "
                 f"efficiency " + ", ".join(f"{c.value} {params.efficiency_of(c):.3f}" for c in network.classes())
                 + f", message overhead {params.message_overhead_ns / 1e3:.1f} us, endpoint delay "
                 f"{params.endpoint_delay_ns / 1e3:.1f} us" + (
                     f", flow ends within {end_precision:g} of their step's time as one event" if end_precision else
                     "") + (", a ring step one flow at its bottleneck rate (coflow ring model)"
                            if ring_model is RingModel.COFLOW else ""),)
    est = TraceEstimate(EstimateMode.FABRIC, ranks, (), (), draws)
    if draws:
        described += (f"one {'session' if traced else 'ECMP hash draw (what one testbed session gets)'} gives an "
                      f"iteration of "
                      f"{min(draws) / 1e6:.1f}-{max(draws) / 1e6:.1f} ms, standard deviation "
                      f"{est.draw_spread_pct:.1f}%",)
    return replace(est, notes=(*described, *notes))


def _draws_stop(timelines: list[Timeline], precision: float) -> str:
    """Why the hash draws stopped where they did, with their mean's standard error."""
    error = draw_standard_error([t.iteration_ns for t in timelines]) * 100
    if not precision:
        return f"standard error {error:.2f} %"
    if draws_enough([t.iteration_ns for t in timelines], precision):
        return f"standard error {error:.2f} % <= {precision * 100:g} %"
    return f"standard error {error:.2f} % > {precision * 100:g} %: all {len(timelines)}, the most"


def estimate_fabric_from_runs(trace: Trace, topology: Topology, *, run_dirs=(), calibration_dir=None,
                              source: str | None = None, end_precision: float = END_PRECISION,
                              ring_model: RingModel = RING_MODEL, draw_precision: float = DRAW_PRECISION,
                              before_plays: Callable[[], object] | None = None):
    """``genie estimate --mode fabric``: the fabric model's parameters from ``calibration_dir`` (a run directory
    with ``fabric_calibration.json``, fitted on another topology with the same link classes), else fitted on
    ``topology`` from the measurements in ``run_dirs`` (taken to come from that topology), else nominal rates.
    ``before_plays()``: as :func:`estimate_fabric`'s. Returns (estimate, the calibration fitted here or
    None)."""
    from astra_adapter.fabric.calibrate import calibrate_fabric
    from astra_adapter.fabric.calibration_io import check_classes, load_fabric_params
    from astra_adapter.measurements import read_measurements, read_run_paths, workload_weights

    network = FabricNetwork(topology, source=source)
    network.check_connected()
    if calibration_dir is not None:
        params, fitted, cal_source = load_fabric_params(calibration_dir)
        notes = check_classes(fitted, network, calibration_source=cal_source)
        return estimate_fabric(trace, topology, params, source=source, end_precision=end_precision,
                               ring_model=ring_model, draw_precision=draw_precision,
                               before_plays=before_plays, notes=(f"calibration from {cal_source}", *notes)), None
    if run_dirs:
        measurements = read_measurements(list(run_dirs))
        paths, note = _sweep_paths(network, read_run_paths(list(run_dirs)))
        cal = calibrate_fabric(measurements, network, paths=paths, weights=workload_weights(trace, measurements))
        return estimate_fabric(trace, topology, cal.params, source=source, end_precision=end_precision,
                               ring_model=ring_model, draw_precision=draw_precision, before_plays=before_plays,
                               notes=(*cal.notes, *note, *cal.warnings())), cal
    return estimate_fabric(trace, topology, source=source, end_precision=end_precision, ring_model=ring_model,
                           draw_precision=draw_precision, before_plays=before_plays,
                           notes=("uncalibrated: every link at its nominal rate, no overhead",)), None


def _sweep_paths(network: FabricNetwork, runs: tuple[RunPaths | None, ...]
                 ) -> tuple[tuple[SessionPaths, ...], tuple[str, ...]]:
    """The sweep sessions' paths to calibrate on (a topology with equal-cost paths): every run directory's,
    when each has them and they were taken on ``network``'s topology with its rank placement; else none (the
    fit takes ECMP hash draws) and a note why."""
    if not network.multipath or not any(r is not None and r.sweep for r in runs):
        return (), ()
    if any(r is None or not r.sweep for r in runs):
        return (), ("some measurement run directories have no paths.json sweep paths: ECMP as hash draws",)
    sessions = tuple(s for r in runs for s in r.sweep)
    if not all(network.took(s) for s in sessions):
        return (), ("the measurements' paths.json does not match this topology's links and rank placement "
                    "(taken on another one): ECMP as hash draws",)
    return sessions, ()
