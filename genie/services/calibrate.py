"""`genie calibrate` as a service: a real cluster's nccl-tests outputs and a topology in, the NCCL model fitted
to them out (``nccl_calibration.json``), with every point's residual, a plot of measured vs model per
collective, the "are my numbers expected?" findings and, for outputs given to ``predict``, the calibration's
predictions of measurements it did not see (``predictions.csv``). Reading, fitting and checking are the
adapter's (pure); this module reads the files and records the run."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from genie.core.collective import Collective

from astra_adapter.nccl.expected import Finding
from astra_adapter.nccl.fit import Fit, Observation, Residual
from astra_adapter.nccl.hardware import CpuVendor, Interconnect, NicPath

@dataclass(frozen=True)
class CalibrateRequest:
    outputs: tuple[Path, ...]  # nccl-tests stdout or -J JSON files to fit
    topology: Path
    predict: tuple[Path, ...] = ()  # outputs to predict with the fitted model
    gpus_per_node: Optional[int] = None  # where an output has no `# Using devices` lines
    gpu: Optional[str] = None  # the GPU model, where the outputs do not name it
    interconnect: Interconnect = Interconnect.NVSWITCH
    collective: Optional[Collective] = None  # for outputs that do not say (no header, ambiguous rows)
    out: Optional[Path] = None
    nccl_env: tuple[tuple[str, str], ...] = ()  # NCCL_* settings NCCL ran with; win over what outputs print
    nic_path: NicPath = NicPath.PXB  # a GPU's PCIe path to its nearest NIC (nvidia-smi topo -m)
    cpu: CpuVendor = CpuVendor.INTEL


@dataclass(frozen=True)
class CalibrateResult:
    run_dir: Path
    fit: Fit
    findings: tuple[Finding, ...]
    predictions: tuple[Residual, ...]
    calibration_path: Path
    warnings: tuple[str, ...] = ()  # outputs whose nccl-tests check counted wrong values (also in the manifest)

    @property
    def prediction_geomean_pct(self) -> float | None:
        from astra_adapter.nccl.fit import geomean_abs_error_pct
        return geomean_abs_error_pct(self.predictions) if self.predictions else None


def _read_tables(path: Path, collective: Optional[Collective]):
    from genie.core.files import InputKind, read_input
    from genie.measure.nccl_output import parse_nccl_tests

    return parse_nccl_tests(read_input(path, InputKind.NCCL_TESTS), source=str(path), collective=collective).tables


def _outputs_env(paths: tuple[Path, ...], given: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """The modelled NCCL_* settings the outputs print (NCCL_DEBUG=INFO) that the user did not give; outputs that
    disagree on one are refused."""
    from astra_adapter.nccl.env import env_from_output
    from genie.core.errors import InputError
    from genie.core.files import InputKind, read_input

    found: dict[str, tuple[str, Path]] = {}
    for path in paths:
        for name, value in env_from_output(read_input(path, InputKind.NCCL_TESTS)):
            if name in given:
                continue
            if name in found and found[name][0].lower() != value.lower():
                raise InputError(f"{name} is {found[name][0]!r} in {found[name][1]} but {value!r} here: calibrate "
                                 "outputs of one setting together (or give --nccl-env)", source=str(path), path=name)
            found.setdefault(name, (value, path))
    return tuple((name, value) for name, (value, _) in found.items())


def _gpu_name(tables, given: Optional[str], source: str) -> str:
    from genie.core.errors import InputError

    if given:
        return given
    names = {d.gpu for t in tables for d in t.devices if d.gpu}
    if len(names) > 1:
        raise InputError(f"the outputs name several GPU models ({', '.join(sorted(names))}): give the GPU",
                         source=source, path="gpu")
    if not names:
        raise InputError("the outputs do not name their GPUs (no `# Using devices` lines): give the GPU",
                         source=source, path="gpu")
    return names.pop()


def _observations(tables, cluster, request: CalibrateRequest, *, max_nodes: int | None,
                  time) -> tuple[Observation, ...]:
    from astra_adapter.nccl.observations import table_observations

    out: list[Observation] = []
    for table in tables:
        out += table_observations(table, cluster, gpus_per_node=request.gpus_per_node, max_nodes=max_nodes,
                                  time=time)
    return tuple(out)


def _curves(residuals: tuple[Residual, ...]) -> dict[str, list[tuple[int, float, float]]]:
    curves: dict[str, list[tuple[int, float, float]]] = {}
    for r in residuals:
        c = r.observation.call
        label = f"{c.collective.value} {c.ranks}r/{c.nodes}n"
        curves.setdefault(label, []).append((c.size_bytes, r.observation.measured_us, r.prediction.time_us))
    return curves


def run_calibrate(request: CalibrateRequest) -> CalibrateResult:
    from astra_adapter.nccl import calibration_io
    from astra_adapter.nccl.env import parse_env
    from astra_adapter.nccl.expected import check
    from astra_adapter.nccl.fit import fit, predict_all
    from astra_adapter.nccl.hardware import cluster_from_topology
    from astra_adapter.nccl.observations import RowTime, tables_nccl_version
    from genie.core.errors import InputError
    from genie.report.manifest import RunRecorder, input_digest
    from genie.report.plots import measured_vs_model
    from genie.topology import load_topology_file

    if not request.outputs:
        raise InputError("give at least one nccl-tests output to calibrate on", path="outputs")
    topology = load_topology_file(request.topology)
    train_tables = tuple(t for p in request.outputs for t in _read_tables(p, request.collective))
    predict_tables = tuple(t for p in request.predict for t in _read_tables(p, request.collective))
    gpu = _gpu_name(train_tables + predict_tables, request.gpu, str(request.outputs[0]))
    cluster = cluster_from_topology(topology, gpu=gpu, interconnect=request.interconnect,
                                    source=str(request.topology))
    cluster = replace(cluster, nic_path=request.nic_path, cpu=request.cpu)
    # NCCL's tuner constants of the release the outputs name (NCCL 2.23's if they name none)
    cluster = replace(cluster, nccl_version=tables_nccl_version(train_tables + predict_tables))
    # NCCL_ALGO / NCCL_PROTO / NCCL_NVLS_ENABLE as the outputs print them, the user's settings over them
    given = frozenset(name for name, _ in request.nccl_env)
    settings = (*_outputs_env(request.outputs + request.predict, given), *request.nccl_env)
    parse_env(settings, source="nccl-env")
    cluster = replace(cluster, nccl_env=tuple(dict(settings).items()))
    # fitted on each row's faster pass; predictions checked against nccl-tests' out-of-place column
    train = _observations(train_tables, cluster, request, max_nodes=cluster.nodes, time=RowTime.FASTER_PASS)
    held_out = _observations(predict_tables, cluster, request, max_nodes=None, time=RowTime.OUT_OF_PLACE)
    if not train:
        raise InputError("the outputs have no timed rows", source=str(request.outputs[0]))
    result = fit(cluster, train)
    predictions = predict_all(cluster, result.params, held_out)
    findings = check(cluster, result.nominal, train + held_out)
    warnings = tuple(t.wrong.describe(t.source) for t in train_tables + predict_tables if t.wrong)
    inputs = (*(input_digest(p, "nccl-tests") for p in request.outputs),
              *(input_digest(p, "predict") for p in request.predict), input_digest(request.topology, "topology"))
    params = {"gpu": gpu, "interconnect": request.interconnect.value, "nic_path": request.nic_path.value,
              "cpu": request.cpu.value, "gpus_per_node": request.gpus_per_node,
              "nccl_env": dict(cluster.nccl_env),
              "collective": request.collective.value if request.collective else None}
    with RunRecorder("calibrate", out=request.out, inputs=inputs, params=params) as run:
        path = run.write(calibration_io.NCCL_CALIBRATION_JSON,
                         calibration_io.calibration_json(result, findings, tuple(map(str, request.outputs))))
        run.write(calibration_io.POINTS_CSV, calibration_io.residuals_csv(result.residuals))
        plot = measured_vs_model(_curves(result.residuals), title=f"{cluster.name}: measured vs model")
        if plot:
            run.write("measured_vs_model.png", plot)
        summary = {"points": len(train), "rms_error_pct": round(result.rms_error_pct, 3),
                   "fitted": list(result.fitted), "findings": len(findings)}
        if predictions:
            run.write(calibration_io.PREDICTIONS_CSV, calibration_io.residuals_csv(predictions))
            plot = measured_vs_model(_curves(predictions), title=f"{cluster.name}: predicted vs measured")
            if plot:
                run.write("predicted_vs_measured.png", plot)
            from astra_adapter.nccl.fit import geomean_abs_error_pct
            summary["predicted_points"] = len(predictions)
            summary["prediction_geomean_error_pct"] = round(geomean_abs_error_pct(predictions), 3)
        for text in warnings + tuple(f.describe() for f in findings):
            run.warn(text)
        run.set_summary(summary)
    return CalibrateResult(run.run_dir, result, findings, predictions, path, warnings)
