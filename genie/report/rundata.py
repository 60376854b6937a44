"""Reading a run directory back (for `genie report` and `genie report compare`).

A run directory is recognised by its manifest.json, or — for directories written before manifests existed —
by one of the files genie writes. Every file is checked when read: a missing column, a non-number or a file the
manifest lists but the directory lacks is an InputError naming the file.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from genie.core.errors import InputError
from genie.report.links import read_links_csv, read_samples_csv, read_table
from genie.report.manifest import MANIFEST_NAME, Manifest, RunStatus, read_manifest
from genie.report.replay import OPS_COLUMNS, RANKS_COLUMNS
from genie.report.sweep import SweepRow, iteration_us_by_case, read_sweep_csv

KNOWN_FILES = ("sweep.csv", "sweep.json", "steps.csv", "ops.csv", "ranks.csv", "timeline.json", "replay.json",
               "links.csv", "tcp.csv", "link_samples.csv", "estimate.csv", "accuracy.csv", "compare.csv")
# files shown as a link and a row count rather than a table (they are long)
LONG_FILES = ("steps.csv", "ops.csv", "link_samples.csv")


@dataclass(frozen=True)
class AccuracyPair:
    """An estimated/measured column pair found in accuracy.csv."""

    quantity: str
    estimated: str
    measured: str


@dataclass(frozen=True)
class RunData:
    run_dir: Path
    kind: str  # bench, replay, estimate, experiment, compare... (the manifest's, or guessed from the files)
    manifest: Manifest | None
    sweep: tuple[SweepRow, ...] = ()
    iteration_us: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # (collective, size) -> times
    replay: dict[str, Any] | None = None  # replay.json
    ops: pd.DataFrame | None = None
    ranks: pd.DataFrame | None = None
    links: tuple[dict[str, Any], ...] = ()
    tcp: pd.DataFrame | None = None
    samples: tuple[dict[str, Any], ...] = ()
    accuracy: pd.DataFrame | None = None
    accuracy_pairs: tuple[AccuracyPair, ...] = ()
    other_tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # estimate.csv, compare.csv, unknown CSVs

    @property
    def status(self) -> str:
        return self.manifest.status.value if self.manifest else "unknown"

    @property
    def collectives(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.collective for r in self.sweep))

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


def _guess_kind(names: set[str]) -> str:
    for kind, marker in (("bench", "sweep.csv"), ("replay", "replay.json"), ("replay", "ops.csv"),
                         ("experiment", "accuracy.csv"), ("estimate", "estimate.csv"), ("compare", "compare.csv")):
        if marker in names:
            return kind
    return "unknown"


def _read(run_dir: Path, name: str) -> bytes:
    try:
        return (run_dir / name).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", source=str(run_dir / name)) from None


def _json(run_dir: Path, name: str) -> dict[str, Any]:
    try:
        doc = json.loads(_read(run_dir, name))
    except ValueError as exc:
        raise InputError(f"not JSON ({exc})", source=str(run_dir / name)) from None
    if not isinstance(doc, dict):
        raise InputError("expected a JSON object", source=str(run_dir / name))
    return doc


def _frame(run_dir: Path, name: str, columns: tuple[str, ...] = (), numeric: tuple[str, ...] = ()) -> pd.DataFrame:
    source = str(run_dir / name)
    rows = read_table(_read(run_dir, name), columns, source=source, numeric=numeric)
    header = next(csv.reader(io.StringIO(_read(run_dir, name).decode(errors="replace"))), [])
    return pd.DataFrame(rows, columns=header or None)


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


def load_run(run_dir: Path | str) -> RunData:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError("not a directory", source=str(run_dir))
    names = {p.name for p in run_dir.iterdir() if p.is_file()}
    manifest = read_manifest(run_dir) if MANIFEST_NAME in names else None
    if manifest is None and not (names & set(KNOWN_FILES)):
        raise InputError(f"not a genie run directory (no {MANIFEST_NAME}, sweep.csv, replay.json or other "
                         "file genie writes)", source=str(run_dir))
    if manifest is not None:
        for name in manifest.file_names():
            if not (run_dir / name).is_file():
                raise InputError("listed in manifest.json but missing", source=str(run_dir / name))
    kind = manifest.kind if manifest else _guess_kind(names)
    fields: dict[str, Any] = {}
    if "sweep.csv" in names:
        fields["sweep"] = tuple(read_sweep_csv(_read(run_dir, "sweep.csv"), source=str(run_dir / "sweep.csv")))
    elif kind == "bench" and manifest is not None and manifest.status is RunStatus.COMPLETE:
        raise InputError("missing (the run is complete, so it must have it)", source=str(run_dir / "sweep.csv"))
    if "sweep.json" in names:
        fields["iteration_us"] = iteration_us_by_case(_json(run_dir, "sweep.json"))
    if "replay.json" in names:
        doc = _json(run_dir, "replay.json")
        if "iteration_median_ns" not in doc:
            raise InputError("missing field", source=str(run_dir / "replay.json"), path="iteration_median_ns")
        fields["replay"] = doc
    elif kind == "replay" and manifest is not None and manifest.status is RunStatus.COMPLETE:
        raise InputError("missing (the run is complete, so it must have it)", source=str(run_dir / "replay.json"))
    if "ops.csv" in names:
        fields["ops"] = _frame(run_dir, "ops.csv", OPS_COLUMNS,
                               ("iteration", "rank", "node_id", "bytes", "start_ns", "end_ns"))
    if "ranks.csv" in names:
        fields["ranks"] = _frame(run_dir, "ranks.csv", RANKS_COLUMNS, RANKS_COLUMNS)
    if "links.csv" in names:
        fields["links"] = tuple(read_links_csv(_read(run_dir, "links.csv"), source=str(run_dir / "links.csv")))
    if "tcp.csv" in names:
        fields["tcp"] = _frame(run_dir, "tcp.csv")
    if "link_samples.csv" in names:
        fields["samples"] = tuple(read_samples_csv(_read(run_dir, "link_samples.csv"),
                                                   source=str(run_dir / "link_samples.csv")))
    if "accuracy.csv" in names:
        frame = _frame(run_dir, "accuracy.csv")
        fields["accuracy"] = frame
        fields["accuracy_pairs"] = tuple(accuracy_pairs(list(frame.columns)))
    shown = {"sweep.csv", "ops.csv", "ranks.csv", "links.csv", "tcp.csv", "link_samples.csv", "accuracy.csv",
             "steps.csv"}
    fields["other_tables"] = {n: _frame(run_dir, n) for n in sorted(names)
                              if n.endswith(".csv") and n not in shown}
    return RunData(run_dir=run_dir, kind=kind, manifest=manifest, **fields)
