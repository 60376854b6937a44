"""calibration.json and calibration.csv: writing and reading a :class:`~astra_adapter.calibrate.Calibration`.

``calibration.json`` (``format: genie-calibration``): dims (role, topology, npus_count, bandwidth_gb_per_s,
latency_ns, fitted), endpoint_delay_ns, size_factors, the system knobs, the rms residual, the points, the
points left out of the fit as physically impossible (``excluded``: measured below ``bound_us``) and notes.
``calibration.csv``: one row per measurement with the estimator's time at the fitted values.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from genie.core.collective import Collective
from genie.core.errors import InputError
from genie.core.files import InputKind, read_input, write_atomic
from genie.core.jsondoc import decode_json

from astra_adapter.calibrate import CalibratedDim, Calibration
from astra_adapter.config import TopologyKind
from astra_adapter.export import SystemParams
from astra_adapter.mapping import DimRole

CALIBRATION_JSON = "calibration.json"
CALIBRATION_CSV = "calibration.csv"


POINT_COLUMNS = ("collective", "algorithm", "ranks", "group", "size_bytes", "measured_us", "model_us", "residual_pct")


def calibration_csv(cal: Calibration) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(POINT_COLUMNS)
    for p in cal.points:
        writer.writerow((p.collective.value, p.algorithm.value, p.ranks, " ".join(map(str, p.group)), p.size_bytes,
                         round(p.measured_us, 3),
                         round(p.model_us, 3), round(p.residual_pct, 4)))
    return out.getvalue()


def calibration_json(cal: Calibration) -> str:
    p = cal.params
    doc = {
        "format": "genie-calibration", "version": 1, "topology": cal.topology,
        "dims": [{"role": d.role.value, "topology": d.topology.value, "npus_count": d.npus_count,
                  "bandwidth_gb_per_s": d.bandwidth_gb_per_s, "latency_ns": d.latency_ns, "fitted": d.fitted}
                 for d in cal.dims],
        "endpoint_delay_ns": cal.endpoint_delay_ns,
        "size_factors": {c.value: f for c, f in cal.size_factors},
        "system": {"preferred_dataset_splits": p.preferred_dataset_splits,
                   "active_chunks_per_dimension": p.active_chunks_per_dimension,
                   "local_mem_bw_gb_per_s": p.local_mem_bw_gb_per_s},
        "rms_residual_pct": round(cal.rms_residual_pct, 4),
        "points": [{"collective": q.collective.value, "algorithm": q.algorithm.value, "ranks": q.ranks,
                    "group": list(q.group), "size_bytes": q.size_bytes, "measured_us": q.measured_us, "model_us": q.model_us,
                    "residual_pct": round(q.residual_pct, 4)} for q in cal.points],
        "excluded": [{"collective": q.collective.value, "algorithm": q.algorithm.value, "ranks": q.ranks,
                      "group": list(q.group), "size_bytes": q.size_bytes, "measured_us": q.measured_us,
                      "bound_us": q.bound_us, "model_us": q.model_us} for q in cal.excluded],
        "notes": list(cal.notes),
    }
    return json.dumps(doc, indent=1) + "\n"


def write_calibration(cal: Calibration, out_dir: str | Path) -> tuple[Path, Path]:
    out = Path(out_dir)
    return (write_atomic(out / CALIBRATION_JSON, calibration_json(cal).encode()),
            write_atomic(out / CALIBRATION_CSV, calibration_csv(cal).encode()))


def _field(doc: dict, key: str, kind, source: str, path: str):
    value = doc.get(key)
    ok = isinstance(value, kind) and not isinstance(value, bool) if kind is not bool else isinstance(value, bool)
    if not ok:
        raise InputError(f"expected {getattr(kind, '__name__', 'a number')}, got {value!r}", source=source,
                         path=f"{path}{key}")
    return value


def parse_calibration(data: bytes | str, *, source: str = CALIBRATION_JSON) -> Calibration:
    doc = decode_json(data, source=source)
    if not isinstance(doc, dict) or doc.get("format") != "genie-calibration":
        raise InputError("not a genie calibration (expected format: genie-calibration)", source=source, path="format")
    dims_doc = doc.get("dims")
    if not isinstance(dims_doc, list) or not dims_doc:
        raise InputError("expected a non-empty list", source=source, path="dims")
    dims = []
    for i, d in enumerate(dims_doc):
        where = f"dims[{i}]."
        if not isinstance(d, dict):
            raise InputError("expected an object", source=source, path=f"dims[{i}]")
        try:
            role, kind = DimRole(d.get("role")), TopologyKind(d.get("topology"))
        except ValueError as exc:
            raise InputError(str(exc), source=source, path=f"dims[{i}]") from None
        bw = float(_field(d, "bandwidth_gb_per_s", (int, float), source, where))
        lat = float(_field(d, "latency_ns", (int, float), source, where))
        if not bw > 0 or lat < 0:
            raise InputError("needs bandwidth_gb_per_s > 0 and latency_ns >= 0", source=source, path=f"dims[{i}]")
        dims.append(CalibratedDim(role, kind, int(_field(d, "npus_count", int, source, where)), bw, lat,
                                  bool(d.get("fitted", True))))
    delay = _field(doc, "endpoint_delay_ns", int, source, "")
    if delay < 1:
        raise InputError("must be >= 1", source=source, path="endpoint_delay_ns")
    factors_doc = doc.get("size_factors") or {}
    if not isinstance(factors_doc, dict):
        raise InputError("expected an object {collective: factor}", source=source, path="size_factors")
    factors = []
    for key, value in factors_doc.items():
        try:
            coll = Collective.parse(key)
        except ValueError as exc:
            raise InputError(str(exc), source=source, path=f"size_factors.{key}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise InputError(f"expected a number > 0, got {value!r}", source=source, path=f"size_factors.{key}")
        factors.append((coll, float(value)))
    system = doc.get("system") or {}
    params = SystemParams(preferred_dataset_splits=int(system.get("preferred_dataset_splits", 1)),
                          active_chunks_per_dimension=int(system.get("active_chunks_per_dimension", 1)),
                          local_mem_bw_gb_per_s=float(system.get("local_mem_bw_gb_per_s", 1600.0)),
                          endpoint_delay_ns=delay)
    return Calibration(str(doc.get("topology", "")), tuple(dims), delay, (), params,
                       tuple(str(n) for n in doc.get("notes", ())), tuple(factors))


def load_calibration(path: str | Path) -> Calibration:
    p = Path(path)
    if p.is_dir():
        p = p / CALIBRATION_JSON
    return parse_calibration(read_input(p, InputKind.MEASUREMENTS), source=str(p))

