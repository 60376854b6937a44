"""`genie estimate` as a service: a trace's iteration time per rank from measured collective latencies (bench or
experiment run directories), interpolated or through the calibrated network model, in a run directory with
its manifest. The estimating itself is the adapter's (pure); this module reads the inputs and records them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from astra_adapter.calibrate import Calibration
from astra_adapter.workload_estimate import EstimateMode, TraceEstimate


@dataclass(frozen=True)
class EstimateRequest:
    trace: Path
    measurements: tuple[Path, ...]
    mode: EstimateMode = EstimateMode.MEASURED
    topology: Optional[Path] = None
    extrapolate: bool = False
    share_nic: bool = True
    npus: Optional[int] = None
    out: Optional[Path] = None


@dataclass(frozen=True)
class EstimateResult:
    run_dir: Path
    estimate: TraceEstimate
    calibration: Optional[Calibration]
    estimate_path: Path


def run_estimate(request: EstimateRequest) -> EstimateResult:
    from astra_adapter.calibration_io import CALIBRATION_CSV, CALIBRATION_JSON, calibration_csv, calibration_json
    from astra_adapter.mapping import map_topology
    from astra_adapter.workload_estimate import estimate_csv, estimate_from_runs
    from genie.report.manifest import RunRecorder, input_digest
    from genie.services.replay import load_checked_trace
    from genie.topology import load_topology_file

    mapping = None
    if request.topology is not None:
        mapping = map_topology(load_topology_file(request.topology), source=str(request.topology))
    loaded = load_checked_trace(request.trace, request.npus)
    est, calibration = estimate_from_runs(loaded, list(request.measurements), request.mode, mapping=mapping,
                                          extrapolate=request.extrapolate, share_nic=request.share_nic)
    inputs = (input_digest(request.trace, "trace"), *(input_digest(m, "measurements") for m in request.measurements),
              *((input_digest(request.topology, "topology"),) if request.topology is not None else ()))
    params = {"mode": request.mode.value, "extrapolate": request.extrapolate, "share_nic": request.share_nic,
              "npus": request.npus}
    with RunRecorder("estimate", out=request.out, inputs=inputs, params=params) as run:
        path = run.write("estimate.csv", estimate_csv(est))
        if calibration is not None and calibration.points:
            run.write(CALIBRATION_JSON, calibration_json(calibration))
            run.write(CALIBRATION_CSV, calibration_csv(calibration))
        run.set_summary({"iteration_ns": est.iteration_ns, "ranks": len(est.ranks)})
    return EstimateResult(run.run_dir, est, calibration, path)
