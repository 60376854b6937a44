"""Reading a run directory back (for `genie report` and `genie report compare`).

A run directory is recognised by its manifest.json, or — for directories written before manifests existed —
by one of the files genie writes (its kind is then guessed from them). Every file is checked when read: a
missing column, a non-number or a file the manifest lists but the directory lacks is an InputError naming the
file. An experiment's replay lives in its ``replay/`` subdirectory and is read into the same fields as a replay
run's.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import pandas as pd

from genie.core.errors import InputError
from genie.core.files import InputKind, read_input
from genie.core.jsondoc import decode_json
from genie.report import readers
from genie.report.cases import CaseKey
from genie.report.diagnose import DIAGNOSE_COLUMNS
from genie.report.links import read_links_csv, read_samples_csv, read_table
from genie.report.manifest import MANIFEST_NAME, Manifest, RunStatus, read_manifest
from genie.report.mix import MIX_FILES, mix_fields
from genie.report.replay import OPS_COLUMNS, RANKS_COLUMNS
from genie.report.sweep import SweepRow, read_sweep_csv

KNOWN_FILES = ("sweep.csv", "sweep.json", "steps.csv", "ops.csv", "ranks.csv", "timeline.json", "replay.json",
               "links.csv", "tcp.csv", "link_samples.csv", "estimate.csv", "accuracy.csv", "compare.csv",
               "sweep_detail.csv", "experiment.json", "calibration.json", "diagnose.csv", *readers.VERIFY_FILES)
# files shown as a link and a row count rather than a table (they are long)
LONG_FILES = ("steps.csv", "ops.csv", "link_samples.csv")
REPLAY_SUBDIR = "replay"  # genie experiment's replay
NCCL_CALIBRATION_JSON = "nccl_calibration.json"  # genie calibrate (astra_adapter.nccl.calibration_io)
CALIBRATE_PLOTS = ("measured_vs_model.png", "predicted_vs_measured.png")


class RunKind(StrEnum):
    BENCH = "bench"
    REPLAY = "replay"
    EXPERIMENT = "experiment"
    ESTIMATE = "estimate"
    DIAGNOSE = "diagnose"
    VERIFY = "verify"
    COMPARE = "compare"
    CALIBRATE = "calibrate"
    UNKNOWN = "unknown"

    @classmethod
    def of(cls, kind: object) -> RunKind:
        """The manifest's kind (a string, or an enum whose value is one)."""
        text = str(getattr(kind, "value", kind))
        return next((k for k in cls if k.value == text), cls.UNKNOWN)


@dataclass(frozen=True)
class AccuracyPair:
    """An estimated/measured column pair found in accuracy.csv."""

    quantity: str
    estimated: str
    measured: str


@dataclass(frozen=True)
class RunData:
    run_dir: Path
    kind: RunKind  # the manifest's, or guessed from the files
    manifest: Manifest | None
    sweep: tuple[SweepRow, ...] = ()
    iteration_us: dict[CaseKey, tuple[float, ...]] = field(default_factory=dict)  # per-iteration times per case
    iteration_source: str = ""  # the file iteration_us came from (sweep.json, sweep_detail.csv)
    detail: tuple[readers.DetailRow, ...] = ()  # sweep_detail.csv
    replay: dict[str, Any] | None = None  # replay.json
    replay_prefix: str = ""  # where the replay files are: "" or "replay/" (an experiment's)
    ops: pd.DataFrame | None = None
    ranks: pd.DataFrame | None = None
    links: tuple[dict[str, Any], ...] = ()
    tcp: pd.DataFrame | None = None
    samples: tuple[dict[str, Any], ...] = ()
    accuracy: pd.DataFrame | None = None
    accuracy_pairs: tuple[AccuracyPair, ...] = ()
    calibration: readers.CalibrationData | None = None
    estimates: dict[str, pd.DataFrame] = field(default_factory=dict)  # estimate.csv, estimate-<mode>.csv
    experiment: dict[str, Any] | None = None  # experiment.json
    summary_text: str | None = None  # summary.txt
    diagnosis: pd.DataFrame | None = None  # diagnose.csv
    diagnosis_verdict: dict[str, Any] | None = None  # diagnose.json
    verify: pd.DataFrame | None = None  # links_verify.csv
    verify_source: str = ""
    comparison: pd.DataFrame | None = None  # compare.csv
    nccl_calibration: dict[str, Any] | None = None  # nccl_calibration.json (genie calibrate)
    pictures: dict[str, bytes] = field(default_factory=dict)  # PNGs the run wrote itself (genie calibrate's)
    other_tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # unknown CSVs
    mix: pd.DataFrame | None = None  # a job mix's mix.csv (replay) or jobs_estimate.csv (estimate)
    mix_links: pd.DataFrame | None = None  # jobs_links.csv

    @property
    def status(self) -> str:
        return self.manifest.status.value if self.manifest else "unknown"

    @property
    def collectives(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.collective for r in self.sweep))

    @property
    def group_sizes(self) -> tuple[int, ...]:
        return tuple(sorted({r.ranks for r in self.sweep}))

    @property
    def trace_digest(self) -> str | None:
        if self.manifest:
            for i in self.manifest.inputs:
                if i.role == "trace":
                    return i.sha256
        return None

    @property
    def link_rate_bps(self) -> int | None:
        topo = self.manifest.topology if self.manifest else None
        return (topo or {}).get("link_rate_bps")


def guess_kind(names: set[str], subdirs: frozenset[str] | set[str] = frozenset()) -> RunKind:
    """A manifest-less directory's kind, from the files only that kind writes (most specific first)."""
    if names & {"experiment.json", "accuracy.csv", readers.DETAIL_FILE}:
        return RunKind.EXPERIMENT
    if "sweep.csv" in names and REPLAY_SUBDIR in subdirs:
        return RunKind.EXPERIMENT
    for kind, markers in ((RunKind.COMPARE, {"compare.csv"}), (RunKind.DIAGNOSE, {"diagnose.csv"}),
                          (RunKind.VERIFY, set(readers.VERIFY_FILES)), (RunKind.BENCH, {"sweep.csv"}),
                          (RunKind.REPLAY, {"replay.json", "ops.csv"})):
        if names & markers:
            return kind
    if any(n == "estimate.csv" or (n.startswith("estimate-") and n.endswith(".csv")) for n in names):
        return RunKind.ESTIMATE
    return RunKind.UNKNOWN


def _read(run_dir: Path, name: str) -> bytes:
    return read_input(run_dir / name, InputKind.RUN_FILE)


def _json(run_dir: Path, name: str) -> dict[str, Any]:
    return decode_json(_read(run_dir, name), source=str(run_dir / name), top=dict,  # type: ignore[return-value]
                       allow_nan=True)  # genie wrote it: a NaN figure reads back


def _header(data: bytes) -> list[str]:
    return next(csv.reader(io.StringIO(data.decode(errors="replace"))), [])


def _frame(run_dir: Path, name: str, columns: tuple[str, ...] = (), numeric: tuple[str, ...] = ()) -> pd.DataFrame:
    source = str(run_dir / name)
    data = _read(run_dir, name)
    rows = read_table(data, columns, source=source, numeric=numeric)
    return pd.DataFrame(rows, columns=_header(data) or None)


def accuracy_pairs(columns: list[str]) -> list[AccuracyPair]:
    """Column pairs ``estimated_X``/``measured_X`` (also ``X_estimated``/``X_measured``, ``est_``/``meas_``)."""
    pairs = []
    for col in columns:
        for est, meas in (("estimated_", "measured_"), ("est_", "meas_")):
            if col.startswith(est) and meas + col[len(est):] in columns:
                pairs.append(AccuracyPair(col[len(est):], col, meas + col[len(est):]))
        for est, meas in (("_estimated", "_measured"), ("_est", "_meas")):
            if col.endswith(est) and col[:-len(est)] + meas in columns:
                pairs.append(AccuracyPair(col[:-len(est)], col, col[:-len(est)] + meas))
    return pairs


def sweep_json_iterations(doc: dict[str, Any]) -> dict[CaseKey, tuple[float, ...]]:
    """Per-iteration times per case from sweep.json's results (those that recorded them)."""
    out: dict[CaseKey, tuple[float, ...]] = {}
    for r in doc.get("results") or ():
        if isinstance(r, dict) and r.get("iteration_us"):
            key = CaseKey(str(r["collective"]), int(r.get("ranks") or 0), str(r.get("algorithm") or ""),
                          int(r["size_bytes"]))
            out[key] = tuple(float(t) for t in r["iteration_us"])
    return out


def _replay_fields(base: Path, prefix: str, names: set[str], required: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if "replay.json" in names:
        doc = _json(base, "replay.json")
        if "iteration_median_ns" not in doc:
            raise InputError("missing field", source=str(base / "replay.json"), path="iteration_median_ns")
        fields["replay"] = doc
        fields["replay_prefix"] = prefix
    elif required:
        raise InputError("missing (the run is complete, so it must have it)", source=str(base / "replay.json"))
    if "ops.csv" in names:
        fields["ops"] = _frame(base, "ops.csv", OPS_COLUMNS,
                               ("iteration", "rank", "node_id", "bytes", "start_ns", "end_ns"))
    if "ranks.csv" in names:
        fields["ranks"] = _frame(base, "ranks.csv", RANKS_COLUMNS, RANKS_COLUMNS)
    return fields


def _sweep_fields(run_dir: Path, names: set[str]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    fields["sweep"] = tuple(read_sweep_csv(_read(run_dir, "sweep.csv"), source=str(run_dir / "sweep.csv")))
    if readers.DETAIL_FILE in names:
        detail = readers.read_detail_csv(_read(run_dir, readers.DETAIL_FILE), source=str(run_dir / readers.DETAIL_FILE))
        fields["detail"] = tuple(detail)
        fields["iteration_us"] = {d.key: d.iterations_us for d in detail if d.iterations_us}
        fields["iteration_source"] = readers.DETAIL_FILE
    elif "sweep.json" in names:
        fields["iteration_us"] = sweep_json_iterations(_json(run_dir, "sweep.json"))
        fields["iteration_source"] = "sweep.json" if fields["iteration_us"] else ""
    return fields


def _kind_fields(run_dir: Path, names: set[str]) -> dict[str, Any]:
    """experiment, estimate, diagnose, verify and compare files."""
    fields: dict[str, Any] = {}
    if "accuracy.csv" in names:
        frame = _frame(run_dir, "accuracy.csv")
        fields["accuracy"] = frame
        fields["accuracy_pairs"] = tuple(accuracy_pairs(list(frame.columns)))
    if names & {readers.CALIBRATION_JSON, readers.CALIBRATION_CSV}:
        fields["calibration"] = readers.read_calibration(
            _read(run_dir, readers.CALIBRATION_JSON) if readers.CALIBRATION_JSON in names else None,
            _read(run_dir, readers.CALIBRATION_CSV) if readers.CALIBRATION_CSV in names else None,
            source_json=str(run_dir / readers.CALIBRATION_JSON), source_csv=str(run_dir / readers.CALIBRATION_CSV))
    fields["estimates"] = {n: readers.read_estimate_csv(_read(run_dir, n), source=str(run_dir / n))
                           for n in sorted(names)
                           if n == "estimate.csv" or (n.startswith("estimate-") and n.endswith(".csv"))}
    if "experiment.json" in names:
        fields["experiment"] = _json(run_dir, "experiment.json")
    if NCCL_CALIBRATION_JSON in names:
        fields["nccl_calibration"] = _json(run_dir, NCCL_CALIBRATION_JSON)
        fields["pictures"] = {n: (run_dir / n).read_bytes() for n in sorted(names) if n in CALIBRATE_PLOTS}
    if "summary.txt" in names:
        fields["summary_text"] = _read(run_dir, "summary.txt").decode(errors="replace")
    if "diagnose.csv" in names:
        fields["diagnosis"] = _frame(run_dir, "diagnose.csv", DIAGNOSE_COLUMNS,
                                     ("latency_us", "reference_latency_us", "bandwidth_GBps",
                                      "expected_bandwidth_GBps", "reference_bandwidth_GBps", "slow_bandwidth",
                                      "slow_latency"))
    if readers.DIAGNOSE_JSON in names:
        fields["diagnosis_verdict"] = readers.read_diagnose_json(_read(run_dir, readers.DIAGNOSE_JSON),
                                                                 source=str(run_dir / readers.DIAGNOSE_JSON))
    if "compare.csv" in names:
        fields["comparison"] = _frame(run_dir, "compare.csv")
    return fields


_READ_HERE = {"sweep.csv", "ops.csv", "ranks.csv", "links.csv", "tcp.csv", "link_samples.csv", "accuracy.csv",
              "steps.csv", readers.DETAIL_FILE, readers.CALIBRATION_CSV, "diagnose.csv", "compare.csv", *MIX_FILES}


def load_run(run_dir: Path | str) -> RunData:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError("not a directory", source=str(run_dir))
    names = {p.name for p in run_dir.iterdir() if p.is_file()}
    subdirs = {p.name for p in run_dir.iterdir() if p.is_dir()}
    manifest = read_manifest(run_dir) if MANIFEST_NAME in names else None
    if manifest is None and not (names & set(KNOWN_FILES)):
        raise InputError(f"not a genie run directory (no {MANIFEST_NAME}, sweep.csv, replay.json or other "
                         "file genie writes)", source=str(run_dir))
    if manifest is not None:
        for name in manifest.file_names():
            if not (run_dir / name).is_file():
                raise InputError("listed in manifest.json but missing", source=str(run_dir / name))
    kind = RunKind.of(manifest.kind) if manifest else guess_kind(names, subdirs)
    complete = manifest is not None and manifest.status is RunStatus.COMPLETE
    fields: dict[str, Any] = {}
    if "sweep.csv" in names:
        fields.update(_sweep_fields(run_dir, names))
    elif kind is RunKind.BENCH and complete:
        raise InputError("missing (the run is complete, so it must have it)", source=str(run_dir / "sweep.csv"))
    fields.update(_replay_fields(run_dir, "", names, kind is RunKind.REPLAY and complete and "mix.csv" not in names))
    fields.update(mix_fields(run_dir, names, _frame))
    nested = run_dir / REPLAY_SUBDIR
    if "replay" not in fields and kind in (RunKind.EXPERIMENT, RunKind.UNKNOWN) and nested.is_dir():
        fields.update(_replay_fields(nested, f"{REPLAY_SUBDIR}/", {p.name for p in nested.iterdir() if p.is_file()},
                                     False))
    if "links.csv" in names:
        fields["links"] = tuple(read_links_csv(_read(run_dir, "links.csv"), source=str(run_dir / "links.csv")))
    if "tcp.csv" in names:
        fields["tcp"] = _frame(run_dir, "tcp.csv")
    if "link_samples.csv" in names:
        fields["samples"] = tuple(read_samples_csv(_read(run_dir, "link_samples.csv"),
                                                   source=str(run_dir / "link_samples.csv")))
    fields.update(_kind_fields(run_dir, names))
    others = {}
    for n in sorted(names):
        if not n.endswith(".csv") or n in _READ_HERE or n in fields["estimates"]:
            continue
        data = _read(run_dir, n)
        if readers.is_verify_table(_header(data)) and "verify" not in fields:
            fields["verify"] = _frame(run_dir, n, readers.VERIFY_COLUMNS)
            fields["verify_source"] = n
        else:
            others[n] = _frame(run_dir, n)
    fields["other_tables"] = others
    return RunData(run_dir=run_dir, kind=kind, manifest=manifest, **fields)
