"""`genie estimate` as a service: a trace's iteration time per rank from measured collective latencies (bench or
experiment run directories), interpolated or through the calibrated network model, in a run directory with
its manifest. The estimating itself is the adapter's (pure); this module reads the inputs and records them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from astra_adapter.calibrate import Calibration
from astra_adapter.workload_estimate import EstimateMode, TraceEstimate


@dataclass(frozen=True)
class EstimateRequest:
    trace: Path
    measurements: tuple[Path, ...] = ()
    mode: Optional[EstimateMode] = None  # None: fabric where the topology needs it (or with a calibration), else
    # measured; with an NCCL calibration: nccl, or fabric (with NCCL's choices) where the workload's ops contend
    topology: Optional[Path] = None
    extrapolate: bool = False
    share_nic: bool = True
    npus: Optional[int] = None
    out: Optional[Path] = None
    calibration: Optional[Path] = None  # a run directory with fabric_calibration.json (fabric mode) or
    # nccl_calibration.json (genie calibrate: nccl mode)
    end_precision: Optional[float] = None  # fabric mode: flow ends within this share of their step's time as one
    # event (None: the model's default, astra_adapter.fabric.flows.END_PRECISION; 0: exact)
    ring_model: Optional[Any] = None  # fabric mode: astra_adapter.fabric.coflow.RingModel (None: its RING_MODEL)
    draw_precision: Optional[float] = None  # fabric mode: ECMP hash draws stop once their mean's standard error is
    # within this share of it (None: astra_adapter.fabric.estimate.DRAW_PRECISION; 0: all of them)


@dataclass(frozen=True)
class EstimateResult:
    run_dir: Path
    estimate: TraceEstimate
    calibration: Optional[Calibration]
    estimate_path: Path
    fabric_calibration: Optional[Any] = None  # astra_adapter.fabric.calibrate.FabricCalibration
    nccl_choices: tuple[Any, ...] = ()  # nccl mode: astra_adapter.nccl.estimate.OpChoice per op kind
    warnings: tuple[str, ...] = ()  # the trace's (e.g. dependencies on missing nodes treated as met); in the manifest


def run_estimate(request: EstimateRequest) -> EstimateResult:
    """The estimate in its run directory. The cyclic garbage collector is paused throughout (and so in the fabric
    model's forked draw workers): the trace, its compile and the plays are millions of acyclic records it would
    only rescan - about a third of the 1024-rank MoE estimate's serial CPU before its draws (benchmarks/README.md,
    "The 1024-rank CLI's parent"); reference counting frees them."""
    from genie.core.collector import collector_paused

    with collector_paused():
        return _run_estimate(request)


CHECK_ASIDE_MIN_NODES = 20_000  # traces this big are checked in a forked child beside the fabric model's compile


def _run_estimate(request: EstimateRequest) -> EstimateResult:
    """The trace read, then checked - a big one in a forked child (:class:`genie.core.forked_call.ForkedCall`)
    while this process goes on to the fabric model's compile and plans; its check is joined before the first play's
    result is taken (with draw workers, once they are forked: `astra_adapter.fabric.estimate.play_draws`), and
    before any other error is raised (a bad trace's error comes first, as when the check ran before all)."""
    from genie.report.manifest import RunRecorder, input_digest
    from genie.topology import load_topology_file
    from genie.workloads.analysis import check, checked_problems, validate
    from genie.workloads.loader import load_trace

    inputs = (input_digest(request.trace, "trace"), *(input_digest(m, "measurements") for m in request.measurements),
              *((input_digest(request.topology, "topology"),) if request.topology is not None else ()))
    # the run's record opens first, so its duration is the estimate's (bad input still leaves no run directory)
    with RunRecorder("estimate", out=request.out, inputs=inputs) as run:
        topology = load_topology_file(request.topology) if request.topology is not None else None
        loaded = load_trace(request.trace, npus=request.npus)
        source = str(request.trace)
        if sum(len(r.nodes) for r in loaded.ranks) < CHECK_ASIDE_MIN_NODES:
            warnings = check(loaded, source=source)
            return _estimate_checked(request, loaded, topology, lambda: warnings, run)
        from genie.core.forked_call import ForkedCall

        with ForkedCall(validate, loaded) as validation:
            def checked() -> tuple[str, ...]:
                return checked_problems(validation.result(), source=source)
            try:
                return _estimate_checked(request, loaded, topology, checked, run)
            except Exception:
                checked()  # the trace's own error, if it has one, before any other
                raise


def _estimate_checked(request: EstimateRequest, loaded, topology, checked: Callable[[], tuple[str, ...]],
                      run: Any) -> EstimateResult:
    """The estimate of the loaded trace; ``checked()`` its check (warnings; InputError naming the file), called
    before any play's result is taken (`astra_adapter.fabric.estimate.play_draws`: with draw workers, once they are
    forked and playing) or the trace is estimated otherwise."""
    from astra_adapter.calibration_io import CALIBRATION_CSV, CALIBRATION_JSON, calibration_csv, calibration_json
    from astra_adapter.fabric.calibration_io import FABRIC_CALIBRATION_JSON, fabric_calibration_json
    from astra_adapter.fabric.estimate import estimate_fabric_from_runs, fabric_by_default
    from astra_adapter.mapping import map_topology
    from astra_adapter.workload_estimate import estimate_csv, estimate_from_runs
    from genie.core.errors import InputError

    mode = request.mode
    nccl_calibration = False
    if request.calibration is not None and mode in (None, EstimateMode.FABRIC):
        from astra_adapter.nccl.calibration_io import has_nccl_calibration
        nccl_calibration = has_nccl_calibration(request.calibration)
    if mode is None and nccl_calibration:
        # NCCL's model times each op alone; where the workload's ops contend for links, the fabric model does
        from astra_adapter.fabric.estimate import groups_share_links, sends_beside_collectives
        contends = topology is not None and (groups_share_links(loaded, topology) or sends_beside_collectives(loaded))
        mode = EstimateMode.FABRIC if contends else EstimateMode.NCCL
    if mode is EstimateMode.NCCL or nccl_calibration:
        return _estimate_nccl(request, loaded, topology, checked(), run, mode)
    if mode is None:
        fabric = topology is not None and (request.calibration is not None or fabric_by_default(loaded, topology))
        mode = EstimateMode.FABRIC if fabric else EstimateMode.MEASURED
    calibration = fabric_cal = None
    if mode is EstimateMode.FABRIC:
        if topology is None:
            raise InputError("the fabric model estimates on a topology: give `topology`", path="topology")
        from astra_adapter.fabric.coflow import RING_MODEL
        from astra_adapter.fabric.estimate import DRAW_PRECISION
        from astra_adapter.fabric.flows import END_PRECISION
        precision = END_PRECISION if request.end_precision is None else request.end_precision
        ring_model = RING_MODEL if request.ring_model is None else request.ring_model
        draws = DRAW_PRECISION if request.draw_precision is None else request.draw_precision
        est, fabric_cal = estimate_fabric_from_runs(loaded, topology, run_dirs=request.measurements,
                                                    calibration_dir=request.calibration, source=str(request.topology),
                                                    end_precision=precision, ring_model=ring_model,
                                                    draw_precision=draws, before_plays=checked)
        warnings = checked()
    else:
        warnings = checked()
        if request.calibration is not None:
            raise InputError(f"`calibration` (a fabric calibration) needs mode fabric, not {mode.value}",
                             path="calibration")
        mapping = map_topology(topology, source=str(request.topology)) if topology is not None else None
        est, calibration = estimate_from_runs(loaded, list(request.measurements), mode, mapping=mapping,
                                              topology=topology, extrapolate=request.extrapolate,
                                              share_nic=request.share_nic)
    params = {"mode": mode.value, "extrapolate": request.extrapolate, "share_nic": request.share_nic,
              "npus": request.npus, "calibration": str(request.calibration) if request.calibration else None,
              **({"end_precision": precision, "ring_model": ring_model.value, "draw_precision": draws}
                 if mode is EstimateMode.FABRIC else {})}
    run.describe(params=params)
    for warning in warnings:
        run.warn(warning)
    path = run.write("estimate.csv", estimate_csv(est))
    if calibration is not None and calibration.points:
        run.write(CALIBRATION_JSON, calibration_json(calibration))
        run.write(CALIBRATION_CSV, calibration_csv(calibration))
    if fabric_cal is not None:
        run.write(FABRIC_CALIBRATION_JSON, fabric_calibration_json(fabric_cal))
    run.set_summary({"iteration_ns": est.iteration_ns, "ranks": len(est.ranks)})
    return EstimateResult(run.run_dir, est, calibration, path, fabric_cal, warnings=warnings)


def _estimate_nccl(request: EstimateRequest, loaded, topology, warnings: tuple[str, ...], run: Any,
                   mode: EstimateMode = EstimateMode.NCCL) -> EstimateResult:
    """With a real cluster's calibration (genie calibrate): NCCL mode, every op through the NCCL model; or
    fabric mode, every op's NCCL choice as flows on the topology's links (astra_adapter.fabric.nccl_flows)."""
    from astra_adapter.fabric.nccl_estimate import estimate_fabric_nccl
    from astra_adapter.nccl.calibration_io import load_calibration
    from astra_adapter.nccl.estimate import choices_csv, estimate_nccl
    from astra_adapter.workload_estimate import estimate_csv
    from genie.core.errors import InputError
    from genie.report.manifest import input_digest

    if request.calibration is None:
        raise InputError("the NCCL model needs a calibration: give `calibration` (a genie calibrate run "
                         "directory)", path="calibration")
    if topology is None:
        raise InputError("the NCCL model estimates on a cluster: give `topology`", path="topology")
    if request.measurements:
        raise InputError("`measurements` (sweeps of genie bench) do not calibrate the NCCL model: give a genie "
                         "calibrate run directory as `calibration`", path="measurements")
    cluster, params, cal_file = load_calibration(request.calibration)
    if mode is EstimateMode.FABRIC:
        result, _ = estimate_fabric_nccl(loaded, topology, cluster, params, source=str(request.topology))
    else:
        result = estimate_nccl(loaded, topology, cluster, params, source=str(request.topology))
    est = result.estimate
    inputs = (input_digest(request.trace, "trace"), input_digest(Path(cal_file), "calibration"),
              input_digest(request.topology, "topology"))
    run.describe(inputs=inputs, params={"mode": mode.value, "npus": request.npus,
                                        "calibration": str(request.calibration)})
    for warning in warnings:
        run.warn(warning)
    path = run.write("estimate.csv", estimate_csv(est))
    run.write("nccl_choices.csv", choices_csv(result.choices))
    run.set_summary({"iteration_ns": est.iteration_ns, "ranks": len(est.ranks), "op_kinds": len(result.choices)})
    return EstimateResult(run.run_dir, est, None, path, None, result.choices, warnings)
