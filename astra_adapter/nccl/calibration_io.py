"""``nccl_calibration.json`` and the calibration's tables (pure): what ``genie calibrate`` writes and what
``genie estimate --calibration`` reads back.

``nccl_calibration.json`` (``format: genie-nccl-calibration``): the cluster (the topology's nodes and links, the
GPU, the interconnect), the fitted parameters and their nominal values (which ones the measurements moved), the
rms residual, the findings. ``calibration_points.csv``: per measured point the model's time, the error and NCCL's
choice; ``predictions.csv``: the same for the outputs the calibration did not see, with the columns the issue
names first (collective, ranks, size_bytes, measured_us, predicted_us, error_pct).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path

from genie.core.errors import InputError
from genie.core.files import InputKind, read_input
from genie.core.jsondoc import decode_json

from astra_adapter.nccl.env import parse_env
from astra_adapter.nccl.expected import Finding
from astra_adapter.nccl.fit import Fit, Residual
from astra_adapter.nccl.hardware import Cluster, CpuVendor, Interconnect, NicPath
from astra_adapter.nccl.model import FILL_US, NcclParams

NCCL_CALIBRATION_JSON = "nccl_calibration.json"
POINTS_CSV = "calibration_points.csv"
PREDICTIONS_CSV = "predictions.csv"
FORMAT = "genie-nccl-calibration"
PREDICTION_COLUMNS = ("collective", "ranks", "size_bytes", "measured_us", "predicted_us", "error_pct", "nodes",
                      "nccl_choice", "source", "line")


def residuals_csv(residuals: tuple[Residual, ...] | list[Residual]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(PREDICTION_COLUMNS)
    for r in residuals:
        o, p = r.observation, r.prediction
        writer.writerow((o.call.collective.value, o.call.ranks, o.call.size_bytes, o.measured_us,
                         round(p.time_us, 3), round(r.error_pct, 3), o.call.nodes, p.how, o.source, o.line))
    return out.getvalue()


def calibration_json(fit: Fit, findings: tuple[Finding, ...], sources: tuple[str, ...]) -> str:
    c = fit.cluster
    cluster = asdict(c)
    cluster["interconnect"] = c.interconnect.value
    cluster["nic_path"] = c.nic_path.value
    cluster["cpu"] = c.cpu.value
    doc = {"format": FORMAT, "version": 1, "cluster": cluster,
           "params": dict(zip(NcclParams.names(), fit.params.values())),
           "nominal": dict(zip(NcclParams.names(), fit.nominal.values())),
           "fitted": list(fit.fitted), "rms_error_pct": round(fit.rms_error_pct, 4), "points": len(fit.residuals),
           "sources": list(sources),
           "findings": [{"source": f.source, "collective": f.collective, "ranks": f.ranks, "nodes": f.nodes,
                         "measured_busbw_gb_s": round(f.measured_busbw_gb_s, 3),
                         "expected_busbw_gb_s": round(f.expected_busbw_gb_s, 3), "cause": f.cause,
                         "confidence": f.confidence.value, "line": f.line} for f in findings]}
    return json.dumps(doc, indent=1) + "\n"


def parse_calibration(data: bytes, *, source: str) -> tuple[Cluster, NcclParams]:
    """The cluster and fitted parameters of an ``nccl_calibration.json``."""
    doc = decode_json(data, source=source)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InputError(f"not a genie NCCL calibration (format is not {FORMAT!r})", source=source, path="format")
    try:
        raw = dict(doc["cluster"])
        raw["interconnect"] = Interconnect.parse(raw["interconnect"], source=source, path="cluster.interconnect")
        # calibrations written before the GPU-NIC path and the CPU were recorded: a DGX/HGX's
        raw["nic_path"] = NicPath.parse(raw.get("nic_path", NicPath.PXB.value), source=source,
                                        path="cluster.nic_path")
        raw["cpu"] = CpuVendor.parse(raw.get("cpu", CpuVendor.INTEL.value), source=source, path="cluster.cpu")
        raw["nccl_env"] = tuple((str(k), str(v)) for k, v in raw.get("nccl_env", ()))
        cluster = Cluster(**raw)
        parse_env(cluster.nccl_env, source=source)
        values = {k: float(v) for k, v in doc["params"].items()}
        if "fill_bytes_per_channel" in values and "fill_us" not in values:
            # written before the fill became a time (2026-12-05): its fitted ratio to the prior of then (1 MiB)
            values["fill_us"] = FILL_US * values.pop("fill_bytes_per_channel") / (1 << 20)
        params = NcclParams(**values)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"malformed calibration: {exc}", source=source, path="cluster") from None
    for name, value in zip(NcclParams.names(), params.values()):
        if not value >= 0:
            raise InputError(f"expected a value >= 0, got {value}", source=source, path=f"params.{name}")
    return cluster, params


def load_calibration(path: Path) -> tuple[Cluster, NcclParams, str]:
    """From a run directory (its ``nccl_calibration.json``) or the file itself; the file read."""
    file = path / NCCL_CALIBRATION_JSON if path.is_dir() else path
    if not file.is_file():
        raise InputError(f"no {NCCL_CALIBRATION_JSON} in {path} (run genie calibrate)", source=str(path),
                         path="calibration")
    cluster, params = parse_calibration(read_input(file, InputKind.MEASUREMENTS), source=str(file))
    return cluster, params, str(file)


def has_nccl_calibration(path: Path) -> bool:
    return (path / NCCL_CALIBRATION_JSON).is_file() if path.is_dir() else path.name == NCCL_CALIBRATION_JSON


def _size(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def format_residuals(residuals: tuple[Residual, ...] | list[Residual], title: str) -> str:
    """Per collective and size: measured vs model and what NCCL would have chosen."""
    lines = [f"# {title}", f"# {'collective':<15}{'ranks':>6}{'nodes':>6}{'size':>8}{'measured_us':>13}"
                           f"{'model_us':>12}{'error%':>9}  nccl choice"]
    for r in residuals:
        o, p = r.observation, r.prediction
        lines.append(f"  {o.call.collective.value:<15}{o.call.ranks:>6}{o.call.nodes:>6}{_size(o.call.size_bytes):>8}"
                     f"{o.measured_us:>13.2f}{p.time_us:>12.2f}{r.error_pct:>9.1f}  {p.how}")
    return "\n".join(lines)
