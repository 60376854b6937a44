"""`genie estimate` as a service: a trace's iteration time per rank from measured collective latencies (bench or
experiment run directories), interpolated or through the calibrated network model, in a run directory with
its manifest. The estimating itself is the adapter's (pure); this module reads the inputs and records them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

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
    from astra_adapter.calibration_io import CALIBRATION_CSV, CALIBRATION_JSON, calibration_csv, calibration_json
    from astra_adapter.fabric.calibration_io import FABRIC_CALIBRATION_JSON, fabric_calibration_json
    from astra_adapter.fabric.estimate import estimate_fabric_from_runs, fabric_by_default
    from astra_adapter.mapping import map_topology
    from astra_adapter.workload_estimate import estimate_csv, estimate_from_runs
    from genie.core.errors import InputError
    from genie.report.manifest import RunRecorder, input_digest
    from genie.services.replay import load_checked_trace
    from genie.topology import load_topology_file

    topology = load_topology_file(request.topology) if request.topology is not None else None
    loaded, warnings = load_checked_trace(request.trace, request.npus)
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
        return _estimate_nccl(request, loaded, topology, warnings, mode)
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
                                                    draw_precision=draws)
    else:
        if request.calibration is not None:
            raise InputError(f"`calibration` (a fabric calibration) needs mode fabric, not {mode.value}",
                             path="calibration")
        mapping = map_topology(topology, source=str(request.topology)) if topology is not None else None
        est, calibration = estimate_from_runs(loaded, list(request.measurements), mode, mapping=mapping,
                                              topology=topology, extrapolate=request.extrapolate,
                                              share_nic=request.share_nic)
    inputs = (input_digest(request.trace, "trace"), *(input_digest(m, "measurements") for m in request.measurements),
              *((input_digest(request.topology, "topology"),) if request.topology is not None else ()))
    params = {"mode": mode.value, "extrapolate": request.extrapolate, "share_nic": request.share_nic,
              "npus": request.npus, "calibration": str(request.calibration) if request.calibration else None,
              **({"end_precision": precision, "ring_model": ring_model.value, "draw_precision": draws}
                 if mode is EstimateMode.FABRIC else {})}
    with RunRecorder("estimate", out=request.out, inputs=inputs, params=params) as run:
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


def _estimate_nccl(request: EstimateRequest, loaded, topology, warnings: tuple[str, ...],
                   mode: EstimateMode = EstimateMode.NCCL) -> EstimateResult:
    """With a real cluster's calibration (genie calibrate): NCCL mode, every op through the NCCL model; or
    fabric mode, every op's NCCL choice as flows on the topology's links (astra_adapter.fabric.nccl_flows)."""
    from astra_adapter.fabric.nccl_estimate import estimate_fabric_nccl
    from astra_adapter.nccl.calibration_io import load_calibration
    from astra_adapter.nccl.estimate import choices_csv, estimate_nccl
    from astra_adapter.workload_estimate import estimate_csv
    from genie.core.errors import InputError
    from genie.report.manifest import RunRecorder, input_digest

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
    params_doc = {"mode": mode.value, "npus": request.npus, "calibration": str(request.calibration)}
    with RunRecorder("estimate", out=request.out, inputs=inputs, params=params_doc) as run:
        for warning in warnings:
            run.warn(warning)
        path = run.write("estimate.csv", estimate_csv(est))
        run.write("nccl_choices.csv", choices_csv(result.choices))
        run.set_summary({"iteration_ns": est.iteration_ns, "ranks": len(est.ranks),
                         "op_kinds": len(result.choices)})
    return EstimateResult(run.run_dir, est, None, path, None, result.choices, warnings)
