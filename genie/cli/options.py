"""Options shared by the commands that run ranks (bench, replay, experiment): one definition each, collected into
one `RunOptions` by `run_options`."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from genie.core.dilation import DilationChoice
from genie.core.launch import DataPath, LauncherKind

TOPOLOGY = typer.Option(None, "--topology", help="Bring this topology up for the run.")
TESTBED = typer.Option(None, "--testbed", help="Use a testbed that is already up.")
LOOPBACK = typer.Option(False, "--loopback", help="All ranks on 127.0.0.1 here (no testbed, no root).")
TIMEOUT = typer.Option(60.0, "--timeout", help="Per-op timeout in seconds.")
AS_JSON = typer.Option(False, "--json", help="Print the result document as JSON instead of the table.")
TIME_DILATION = typer.Option(
    None, "--time-dilation", metavar="N|auto",
    help="Run the topology's fabric N times slower (links at rate/N, delay x N, compute x N) and report every "
         "time and rate in the fabric's own time; auto measures this host and picks N (docs/dilation.md).")

# (parameter, annotation, option): the RunOptions fields every rank-running command takes
_TARGET = (("topology", Optional[Path], TOPOLOGY), ("testbed", Optional[str], TESTBED),
           ("loopback", bool, LOOPBACK))
_LAUNCH = (
    ("sample_ms", int, typer.Option(200, "--sample-ms", help="Link counter sampling period on a testbed (0: off).")),
    ("capture", Optional[str], typer.Option(
        None, "--capture", metavar="LINK",
        help="Record link LINK (e.g. h0-s0: at h0's end) to capture-LINK.pcap and write flows.csv (testbed only).")),
    ("launcher", str, typer.Option(
        "local", "--launcher",
        help="Who starts the ranks: local (genie), mpi (MPICH's mpiexec; docs/mpi.md) or slurm (srun, inside a "
             "Slurm allocation; docs/real-hosts.md).")),
    ("transport", str, typer.Option(
        "tcp", "--transport",
        help="Data over genie's TCP engine (tcp) or MPI point-to-point (mpi; needs --launcher mpi or slurm).")),
    ("inventory", Optional[Path], typer.Option(
        None, "--inventory",
        help="Run on the real hosts of this inventory (docs/inventory.md; needs --launcher mpi or slurm).")),
    ("mpiexec", Optional[Path], typer.Option(None, "--mpiexec",
                                             help="MPICH's mpiexec (default: beside python, then PATH).")),
    ("port_range", Optional[str], typer.Option(
        None, "--port-range",
        help="Ports of rank listeners and MPI, LOW-HIGH (default: $GENIE_PORT_RANGE, else any).")),
    ("faults_file", Optional[Path], typer.Option(
        None, "--faults", metavar="FILE", help="Inject the faults of this YAML file live during the run "
                                               "(docs/faults.md).")),
    ("shared", bool, typer.Option(False, "--shared", help="Run on a --testbed another run may be using at the "
                                                          "same time (the manifest warns; numbers are disturbed).")),
    ("time_dilation", Optional[str], TIME_DILATION),
    ("force", bool, typer.Option(False, "--force", help="Write into an --out directory that already holds files.")),
    ("fault", list[str], typer.Option(
        [], "--fault", metavar="SPEC",
        help="Inject one fault, e.g. 'degrade h3-s0 rate=100mbit at=op10', 'flap h1-s0 for=200ms at=2s' "
             "(repeatable; docs/faults.md).")),
)


def run_options(*, target: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the shared run options (with `target`: --topology/--testbed/--loopback too); it receives
    them as one `run: genie.services.options.RunOptions` (its `out` from the command's own --out)."""
    shared = (_TARGET if target else ()) + _LAUNCH

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != "run"]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)
                 for name, annotation, option in shared]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            from genie.cli.flags import RUN_FLAGS, flag_names
            from genie.services.launch import parse_kind
            from genie.services.options import RunOptions

            values = {name: kwargs.pop(name) for name, _, _ in shared}
            fault = tuple(values.pop("fault"))
            with flag_names(RUN_FLAGS):
                values["launcher"] = parse_kind(LauncherKind, values["launcher"], "launcher", LauncherKind.LOCAL)
                values["transport"] = parse_kind(DataPath, values["transport"], "transport", DataPath.TCP)
                values["time_dilation"] = DilationChoice.parse(values["time_dilation"])
            return command(run=RunOptions(**values, faults=fault, out=kwargs.get("out")), **kwargs)

        wrapper.__signature__ = signature.replace(parameters=own + added)  # type: ignore[attr-defined]
        return wrapper

    return decorate

# the link checks of `genie testbed verify` and `genie lab verify`
VERIFY_SECONDS = typer.Option(2.0, "--seconds", min=0.5, help="Measured seconds of each TCP flow.")
VERIFY_LOSS_PROBES = typer.Option(5000, "--loss-probes", min=100, help="UDP probes per direction for loss.")
VERIFY_RTT_PROBES = typer.Option(200, "--rtt-probes", min=10, help="UDP echo probes for the round trip.")
VERIFY_PAIR = typer.Option(None, "--pair", help="Measure this host pair only, e.g. h0,h1 (repeatable; default: "
                                                "pairs covering every link).")
VERIFY_OUT = typer.Option(None, "--out", help="Run directory (default: runs/<time>-verify).")
