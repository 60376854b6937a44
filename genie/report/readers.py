"""Reading back the files of experiment, estimate, diagnose and verify runs (for `genie report`).

The report may not import their writers (astra_adapter, genie.testbed sit beside or above it), so each file's
columns are named here; tests write the files with the real writers, which keeps the two in step. Every file is
checked when read: a missing column or a non-number is an InputError naming the file and line.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Any, Mapping

import pandas as pd

from genie.core.errors import InputError
from genie.core.jsondoc import decode_json
from genie.report.cases import CaseKey
from genie.report.links import read_table

DETAIL_FILE = "sweep_detail.csv"  # genie experiment: every pooled iteration of each sweep row
DETAIL_COLUMNS = ("collective", "algorithm", "ranks", "size_bytes", "groups", "iterations_us")
CALIBRATION_JSON = "calibration.json"
CALIBRATION_CSV = "calibration.csv"
CALIBRATION_POINT_COLUMNS = ("collective", "algorithm", "ranks", "group", "size_bytes", "measured_us", "model_us",
                             "residual_pct")
ESTIMATE_COLUMNS = ("mode", "rank", "iteration_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "overlap_ns")
VERIFY_FILES = ("links_verify.csv", "verify.csv")
VERIFY_COLUMNS = ("links", "direction", "metric", "configured", "measured", "error_pct", "status")
DIAGNOSE_JSON = "diagnose.json"


@dataclass(frozen=True)
class DetailRow:
    """One row of sweep_detail.csv: the rank groups that ran the case at once and its iteration times."""

    key: CaseKey
    groups: str
    iterations_us: tuple[float, ...]


def read_detail_csv(data: bytes, *, source: str) -> list[DetailRow]:
    text = data.decode(errors="replace")
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in DETAIL_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"missing column {missing[0]!r}", source=source)
    rows = []
    for line, raw in enumerate(reader, start=2):
        try:
            key = CaseKey(raw["collective"], int(raw["ranks"]), raw["algorithm"], int(raw["size_bytes"]))
            times = tuple(float(t) for t in (raw["iterations_us"] or "").split())
        except (TypeError, ValueError):
            raise InputError("ranks, size_bytes and iterations_us must be numbers", source=source,
                             path=f"line {line}") from None
        rows.append(DetailRow(key, raw["groups"] or "", times))
    return rows


@dataclass(frozen=True)
class CalibrationData:
    """calibration.json (the fitted link classes) and calibration.csv (one row per measured point)."""

    dims: pd.DataFrame  # one row per link class (ASTRA-sim dimension): role, topology, npus, bandwidth, latency
    points: pd.DataFrame | None  # CALIBRATION_POINT_COLUMNS, numbers as floats
    rms_residual_pct: float | None = None
    endpoint_delay_ns: float | None = None
    size_factors: Mapping[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def _points(doc_points: Any) -> pd.DataFrame | None:
    if not isinstance(doc_points, list) or not doc_points:
        return None
    frame = pd.DataFrame([p for p in doc_points if isinstance(p, dict)])
    if "group" in frame:
        frame["group"] = [" ".join(map(str, g)) if isinstance(g, list) else g for g in frame["group"]]
    return frame


def read_calibration(json_data: bytes | None, csv_data: bytes | None, *, source_json: str,
                     source_csv: str) -> CalibrationData:
    doc: dict[str, Any] = {}
    if json_data is not None:
        doc = decode_json(json_data, source=source_json)  # type: ignore[assignment]
        if not isinstance(doc, dict) or doc.get("format") != "genie-calibration":
            raise InputError("not a genie calibration (expected format: genie-calibration)", source=source_json,
                             path="format")
    dims = []
    for d in doc.get("dims") or ():
        if isinstance(d, dict):
            bw = d.get("bandwidth_gb_per_s")
            dims.append({"link class": d.get("role"), "topology": d.get("topology"), "npus": d.get("npus_count"),
                         "bandwidth_gbit_per_s": None if bw is None else float(bw) * 2**30 * 8 / 1e9,
                         "latency_us": None if d.get("latency_ns") is None else float(d["latency_ns"]) / 1e3,
                         "fitted": "yes" if d.get("fitted", True) else "no (not spanned by a measurement)"})
    points = None
    if csv_data is not None:
        numeric = ("ranks", "size_bytes", "measured_us", "model_us", "residual_pct")
        rows = read_table(csv_data, CALIBRATION_POINT_COLUMNS, source=source_csv, numeric=numeric)
        points = pd.DataFrame(rows, columns=list(CALIBRATION_POINT_COLUMNS)) if rows else None
    if points is None:
        points = _points(doc.get("points"))
    rms = doc.get("rms_residual_pct")
    if rms is None and points is not None and "residual_pct" in points:
        rms = float((pd.to_numeric(points["residual_pct"]) ** 2).mean() ** 0.5)
    delay = doc.get("endpoint_delay_ns")
    factors = {str(k): float(v) for k, v in (doc.get("size_factors") or {}).items()
               if isinstance(v, (int, float))}
    return CalibrationData(pd.DataFrame(dims), points, None if rms is None else float(rms),
                           None if delay is None else float(delay), factors,
                           tuple(str(n) for n in doc.get("notes") or ()))


def read_estimate_csv(data: bytes, *, source: str) -> pd.DataFrame:
    rows = read_table(data, ESTIMATE_COLUMNS, source=source, numeric=ESTIMATE_COLUMNS[1:])
    return pd.DataFrame(rows, columns=list(ESTIMATE_COLUMNS))


def is_verify_table(columns: list[str]) -> bool:
    return all(c in columns for c in VERIFY_COLUMNS)


def read_diagnose_json(data: bytes, *, source: str) -> dict[str, Any]:
    return decode_json(data, source=source, top=dict)  # type: ignore[return-value]
