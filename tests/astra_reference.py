"""Where the tests find ASTRA-sim's reference runs: the copy under ``tests/data/astra-reference`` (always there),
plus any extra case a ``../shared/astra-reference`` next to the repository has (optional)."""

from __future__ import annotations

import csv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "data" / "astra-reference"
SHARED = ROOT.parent / "shared" / "astra-reference"


def result_rows(backend: str) -> list[dict]:
    """``results.csv`` rows of one backend, each with its case folder under ``"folder"``: the bundled cases,
    then the shared data's cases that are not bundled."""
    rows, seen = [], set()
    for base in (REFERENCE, SHARED):
        table = base / "results.csv"
        if not table.is_file():
            continue
        for row in csv.DictReader(table.open()):
            if row["backend"] != backend or row["case"] in seen or not (base / row["case"]).is_dir():
                continue
            seen.add(row["case"])
            rows.append({**row, "folder": base / row["case"]})
    return rows
