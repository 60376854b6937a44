"""Options shared by the commands that run ranks (bench, replay): one definition each."""

from __future__ import annotations

import typer

TOPOLOGY = typer.Option(None, "--topology", help="Bring this topology up for the run.")
TESTBED = typer.Option(None, "--testbed", help="Use a testbed that is already up.")
LOOPBACK = typer.Option(False, "--loopback", help="All ranks on 127.0.0.1 here (no testbed, no root).")
TIMEOUT = typer.Option(60.0, "--timeout", help="Per-op timeout in seconds.")
SAMPLE_MS = typer.Option(200, "--sample-ms", help="Link counter sampling period on a testbed (0: off).")
CAPTURE = typer.Option(None, "--capture", metavar="LINK",
                       help="Record link LINK (e.g. h0-s0: at h0's end) to capture-LINK.pcap and write flows.csv "
                            "(testbed only).")
LAUNCHER = typer.Option("local", "--launcher",
                        help="Who starts the ranks: local (genie), mpi (MPICH's mpiexec; docs/mpi.md) or slurm "
                             "(srun, inside a Slurm allocation; docs/real-hosts.md).")
TRANSPORT = typer.Option("tcp", "--transport",
                         help="Data over genie's TCP engine (tcp) or MPI point-to-point (mpi; needs --launcher mpi "
                              "or slurm).")
INVENTORY = typer.Option(None, "--inventory",
                         help="Run on the real hosts of this inventory (docs/inventory.md; needs --launcher mpi or "
                              "slurm).")
MPIEXEC = typer.Option(None, "--mpiexec", help="MPICH's mpiexec (default: beside python, then PATH).")
PORT_RANGE = typer.Option(None, "--port-range",
                          help="Ports of rank listeners and MPI, LOW-HIGH (default: $GENIE_PORT_RANGE, else any).")
AS_JSON = typer.Option(False, "--json", help="Print the result document as JSON instead of the table.")
FAULTS = typer.Option(None, "--faults", metavar="FILE",
                      help="Inject the faults of this YAML file live during the run (docs/faults.md).")
FAULT = typer.Option([], "--fault", metavar="SPEC",
                     help="Inject one fault, e.g. 'degrade h3-s0 rate=100mbit at=op10', 'flap h1-s0 for=200ms "
                          "at=2s' (repeatable; docs/faults.md).")
