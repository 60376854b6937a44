"""`genie estimate --jobs FILE` and `genie replay --jobs FILE`: a job mix (docs/jobs.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from genie.cli.flags import flag_names
from genie.core.errors import InputError

#: MixEstimateRequest fields -> flags
MIX_ESTIMATE_FLAGS = {"jobs": "--jobs", "topology": "--topology", "calibration": "--calibration",
                      "placements": "--placements", "out": "--out", "measurements": "--measurements",
                      "replay": "--replay-run", "standing_queues": "--standing-queues",
                      "htb_credit": "--htb-credit"}


def estimate_mix(trace: Optional[Path], jobs: Optional[Path], placements: Optional[str], *,
                 topology: Optional[Path], calibration: Optional[Path], out: Optional[Path],
                 measurements: tuple[Path, ...], mode: Optional[str], replay_run: Optional[Path] = None,
                 standing_queues: bool = True, htb_credit: Optional[bool] = None) -> None:
    from astra_adapter.fabric.mix import format_mix, format_ranking
    from genie.services.mix import MixEstimateRequest, run_mix_estimate

    if jobs is None:
        raise InputError("--placements and --replay-run are about a job mix: give --jobs FILE")
    if trace is not None:
        raise InputError("give a TRACE or --jobs FILE, not both")
    if mode not in (None, "fabric"):
        raise InputError("a job mix is estimated on the fabric model (--topology, optionally --calibration or "
                         "--measurements): --mode other than fabric does not apply")
    with flag_names(MIX_ESTIMATE_FLAGS):
        result = run_mix_estimate(MixEstimateRequest(jobs, topology, calibration,
                                                     (placements,) if placements else (), out, measurements,
                                                     replay_run, standing_queues, htb_credit))
    for est in result.estimates:
        typer.echo(format_mix(est))
    if result.ranked:
        typer.echo(format_ranking(list(result.estimates)))
    typer.echo(f"# wrote {result.run_dir / 'jobs_estimate.csv'}")


def replay_mix(trace: Optional[Path], jobs: Path, run, *, iterations: int, warmup: int, timeout: float,
               alone: bool, as_json: bool) -> None:
    import json

    from genie.cli.flags import RUN_FLAGS
    from genie.services.mix_replay import MixReplayCommand, format_mix_table, run_mix_replay_command
    from genie.services.replay import ReplayRequest

    if trace is not None:
        raise InputError("give a TRACE or --jobs FILE, not both")
    command = MixReplayCommand(jobs, ReplayRequest(iterations=iterations, warmup=warmup, timeout_s=timeout), run,
                               alone=alone)
    with flag_names({**RUN_FLAGS, "jobs": "--jobs", "iterations": "--iterations", "warmup": "--warmup"}):
        result = run_mix_replay_command(command, lambda message: typer.echo(f"# {message}", err=True))
    if as_json:
        typer.echo(json.dumps({"run_dir": str(result.run_dir), "status": result.status.value,
                               "jobs": [{"name": r.name, "alone_ns": r.alone_ns, "together_ns": r.together_ns,
                                         "slowdown_pct": r.slowdown_pct} for r in result.jobs]}, indent=2))
    else:
        typer.echo(format_mix_table(result.jobs))
    typer.echo(f"# results in {result.run_dir}", err=as_json)
