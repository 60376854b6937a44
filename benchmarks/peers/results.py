"""Peer results files (one JSON line per case, written by rank 0 of the gloo/MPI rank programs) turned into
report rows with genie's own definitions: iteration times from every rank's spans
(`genie.measure.metrics.iteration_times_ns`), median time, algbw and busbw (`case_stats`)."""

from __future__ import annotations

import json

from genie.core.collective import Algorithm, Collective
from genie.measure.metrics import case_stats, iteration_times_ns

from benchmarks.peers.report import DTYPE_BYTES, Row, row_from_stats


def rows_from_results(text: str, system: str, shaped: bool, ranks: int) -> list[Row]:
    """Complete lines only (a killed run may leave half a line)."""
    rows = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        spans = doc["spans"]
        if len(spans) != ranks:
            raise ValueError(f"{system}: {len(spans)} ranks reported, expected {ranks}")
        times = iteration_times_ns({r: [tuple(s) for s in per_rank] for r, per_rank in enumerate(spans)})
        if not times:
            continue
        stats = case_stats(Collective.parse(doc["collective"]), Algorithm.AUTO, ranks, int(doc["size_bytes"]),
                           DTYPE_BYTES, times)
        rows.append(row_from_stats(system, shaped, stats))
    return rows
