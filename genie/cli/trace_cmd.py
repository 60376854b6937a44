"""`genie trace`: convert, show and validate workload traces."""

from __future__ import annotations

from typing import Optional

import typer

from genie.core.errors import InputError
from genie.core.units import format_size
from genie.cli.flags import flag_names

app = typer.Typer(help="Workload traces: Chakra ET, PARAM basic JSON, ASTRA-sim text, genie JSON/YAML.",
                  no_args_is_help=True)

_NPUS = typer.Option(None, "--npus", min=1, help="Number of ranks (needed for ASTRA-sim text workloads).")
_DIM0 = typer.Option(None, "--dim0-npus", min=1,
                     help="Ranks in network dimension 0 (ASTRA-sim HYBRID_DATA_MODEL / HYBRID_MODEL_DATA).")


@app.command()
def convert(
    source: str = typer.Argument(..., help="Trace to read: ET prefix or file, directory, JSON/YAML, text."),
    out: str = typer.Argument(..., help="Output: an ET prefix (writes OUT.<rank>.et) or a JSON/YAML file."),
    to: str = typer.Option(..., "--to", help="et | json | yaml (json writes YAML when OUT ends in .yaml)."),
    npus: Optional[int] = _NPUS,
    dim0_npus: Optional[int] = _DIM0,
    check: bool = typer.Option(True, "--check/--no-check", help="Refuse traces that fail validation."),
) -> None:
    """Convert a trace to Chakra ET or genie JSON/YAML."""
    from genie.workloads.analysis import errors, validate
    from genie.workloads.loader import load_trace, output_format, save_trace

    with flag_names({"to": "--to"}):
        fmt = output_format(to, out)
    trace = load_trace(source, npus=npus, dim0_npus=dim0_npus)
    if check:
        problems = errors(validate(trace))
        if problems:
            raise InputError(f"{problems[0]} ({len(problems)} problem(s); --no-check converts anyway)",
                             source=source)
    paths = save_trace(trace, out, to=fmt)
    typer.echo(f"wrote {len(paths)} file(s): {paths[0]}{' ...' if len(paths) > 1 else ''}")


@app.command()
def show(
    trace_path: str = typer.Argument(..., metavar="TRACE"),
    npus: Optional[int] = _NPUS,
    dim0_npus: Optional[int] = _DIM0,
) -> None:
    """Ranks, nodes by type, bytes per collective and group, compute total, critical path."""
    from genie.workloads.analysis import comm_ops_as_compute, critical_path, summarize
    from genie.workloads.loader import load_trace

    trace = load_trace(trace_path, npus=npus, dim0_npus=dim0_npus)
    s = summarize(trace)
    info = ", ".join(f"{k}={v}" for k, v in trace.info)
    typer.echo(f"trace: {trace_path}" + (f" ({info})" if info else ""))
    typer.echo(f"ranks: {s.num_ranks}   nodes: {s.num_nodes}   groups: {len(trace.groups)}")
    typer.echo("nodes by type: " + ", ".join(f"{k} {v}" for k, v in sorted(s.nodes_by_kind.items())))
    for name, size in sorted(s.bytes_by_collective.items()):
        typer.echo(f"  {name:<16} {s.count_by_collective.get(name, 0):>7} ops  {size:>16} B  ({format_size(size)})")
    for group, size in sorted(s.bytes_by_group.items()):
        ranks = trace.group("" if group == "world" else group)
        members = f"{len(ranks.ranks)} ranks" if ranks else "unknown group"
        typer.echo(f"  group {group:<10} ({members}) {size:>16} B")
    as_compute = comm_ops_as_compute(trace)
    if as_compute:
        names = ", ".join(f"{name} x{count}" for name, count in sorted(as_compute.items()))
        typer.echo(f"warning: {sum(as_compute.values())} communication op(s) are compute nodes here ({names}): "
                   "a CPU-captured trace converted by chakra_converter, which makes communication nodes only "
                   "from GPU kernels. Import the PyTorch traces themselves instead: "
                   "`genie trace import DIR OUT` (DIR holding the execution traces and Kineto traces)", err=True)
    typer.echo(f"compute: total {s.compute_total_ns / 1e3:.3f} us over all ranks, "
               f"busiest rank {s.compute_max_rank_ns / 1e3:.3f} us")
    typer.echo(f"critical path, compute only (per rank): {s.critical_path_compute_ns / 1e3:.3f} us")
    if s.critical_path_ns is None:
        typer.echo("critical path with zero-cost comm: none (the ranks deadlock; run `genie trace validate`)")
    else:
        path = critical_path(trace)
        typer.echo(f"critical path with zero-cost comm: {s.critical_path_ns / 1e3:.3f} us over {len(path.nodes)} "
                   f"nodes")


@app.command(name="validate")
def validate_cmd(
    trace_path: str = typer.Argument(..., metavar="TRACE"),
    npus: Optional[int] = _NPUS,
    dim0_npus: Optional[int] = _DIM0,
) -> None:
    """Check dependencies, comm types, ranks and groups; exit 2 on any problem."""
    from genie.workloads.analysis import Severity, errors, validate
    from genie.workloads.loader import load_trace

    trace = load_trace(trace_path, npus=npus, dim0_npus=dim0_npus)
    problems = validate(trace)
    for p in problems[:50]:
        prefix = "warning: " if p.severity is Severity.WARNING else ""
        typer.echo(f"{prefix}{p.kind.value}: {p}", err=True)
    if len(problems) > 50:
        typer.echo(f"... {len(problems) - 50} more", err=True)
    bad = errors(problems)
    if bad:
        raise InputError(f"{len(bad)} problem(s); first: {bad[0]}", source=trace_path)
    warned = len(problems) - len(bad)
    typer.echo(f"ok: {trace.num_ranks} ranks, {sum(len(r.nodes) for r in trace.ranks)} nodes"
               + (f" ({warned} warning(s))" if warned else ""))




@app.command(name="import")
def import_cmd(
    sources: list[str] = typer.Argument(..., metavar="SOURCE... OUT",
                                        help="Directories or files of PyTorch execution traces (+ Kineto traces, "
                                             "optional), .json or .json.gz; then OUT."),
    to: str = typer.Option("et", "--to", help="et | json | yaml (default et: OUT.<rank>.et for ASTRA-sim)."),
) -> None:
    """Import a PyTorch job's execution traces (ExecutionTraceObserver) and Kineto traces as a genie trace."""
    from genie.services.trace_import import ImportRequest, import_traces
    from genie.workloads.loader import output_format

    if len(sources) < 2:
        raise InputError("give the traces to import and then OUT", path="SOURCE... OUT")
    *inputs, out = sources
    with flag_names({"to": "--to"}):
        fmt = output_format(to, out)
    outcome = import_traces(ImportRequest(tuple(inputs), out, fmt))
    for warning in outcome.result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    trace = outcome.result.trace
    typer.echo(f"imported {trace.num_ranks} ranks: {sum(len(r.nodes) for r in trace.ranks)} nodes, "
               f"{sum(r.comm_ops for r in outcome.result.ranks)} communication ops")
    for line in outcome.comms:
        typer.echo(f"  {line.kind:<16} {line.count:>5} x {line.size_bytes:>12} B ({format_size(line.size_bytes)}) "
                   f"on {line.group}")
    for r in outcome.result.ranks:
        step = f"{r.step_ns / 1e6:.3f} ms" if r.step_ns is not None else "unknown"
        typer.echo(f"  rank {r.rank}: step {step}, compute {r.compute_ns / 1e6:.3f} ms, {r.comm_ops} comm ops")
    typer.echo(f"wrote {len(outcome.paths)} file(s): {outcome.paths[0]}{' ...' if len(outcome.paths) > 1 else ''}")


@app.command(name="capture", context_settings={"allow_interspersed_args": False})
def capture_cmd(
    command: list[str] = typer.Argument(..., metavar="-- SCRIPT [ARGS...]", help="The training script and its "
                                        "arguments (after --)."),
    out: str = typer.Option(..., "--out", help="Directory to create: raw traces, OUT/<script>.<rank>.et, "
                                                "summary.json."),
    nproc: int = typer.Option(4, "--nproc", help="Ranks (torchrun --nproc_per_node)."),
    warmup: int = typer.Option(2, "--warmup", help="Untraced optimizer steps before the traced one."),
    timeout_s: float = typer.Option(600.0, "--timeout", help="Seconds before the job is killed."),
) -> None:
    """Run a PyTorch training script on this machine's CPU (gloo, torchrun), trace one step, import it."""
    from genie.services.trace_capture import CaptureRequest, capture
    script, *args = command
    with flag_names({"nproc": "--nproc", "warmup_steps": "--warmup", "out_dir": "--out", "script": "SCRIPT"}):
        outcome = capture(CaptureRequest(script, tuple(args), out, nproc, warmup, timeout_s))
    for warning in outcome.result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    typer.echo(f"captured {len(outcome.timings)} ranks in {outcome.capture_s:.1f} s")
    for line in outcome.comms:
        typer.echo(f"  {line.kind:<16} {line.count:>5} x {line.size_bytes:>12} B ({format_size(line.size_bytes)}) "
                   f"on {line.group}")
    for t, r in zip(outcome.timings, outcome.result.ranks):
        untraced = f"{t.untraced_step_ms:.3f} ms" if t.untraced_step_ms is not None else "n/a"
        typer.echo(f"  rank {t.rank}: traced step {t.traced_step_ms:.3f} ms (untraced {untraced}), compute "
                   f"{r.compute_ns / 1e6:.3f} ms, {r.comm_ops} comm ops")
    typer.echo(f"trace: {outcome.et_prefix} (replay: genie replay {outcome.et_prefix} --loopback)")
    typer.echo(f"summary: {outcome.out_dir / 'summary.json'}")


from genie.cli.gen_cmd import gen  # noqa: E402  (the generator command lives in its own module)

app.command("gen")(gen)
