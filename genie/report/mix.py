"""A job mix's files in a run directory (docs/jobs.md), as `genie report` reads them; the page's section is
:mod:`genie.report.mix_section`."""

from __future__ import annotations

from pathlib import Path
from typing import Any


MIX_REPLAY_CSV = "mix.csv"  # genie replay --jobs
MIX_ESTIMATE_CSV = "jobs_estimate.csv"  # genie estimate --jobs
MIX_LINKS_CSV = "jobs_links.csv"  # both: per link direction and job
MIX_FILES = (MIX_REPLAY_CSV, MIX_ESTIMATE_CSV, MIX_LINKS_CSV)


def mix_fields(run_dir: Path, names: set[str], frame) -> dict[str, Any]:
    """RunData fields of a mix run (``frame(run_dir, name, columns, numeric)`` reads a CSV)."""
    fields: dict[str, Any] = {}
    if MIX_REPLAY_CSV in names:
        fields["mix"] = frame(run_dir, MIX_REPLAY_CSV, ("job", "alone_ns", "together_ns", "slowdown_pct"),
                              ("together_ns",))
    elif MIX_ESTIMATE_CSV in names:
        fields["mix"] = frame(run_dir, MIX_ESTIMATE_CSV, ("placement", "job", "alone_ns", "mixed_ns", "slowdown_pct"),
                              ("alone_ns", "mixed_ns", "slowdown_pct"))
    if MIX_LINKS_CSV in names:
        fields["mix_links"] = frame(run_dir, MIX_LINKS_CSV, ("link", "job"), ())
    return fields
