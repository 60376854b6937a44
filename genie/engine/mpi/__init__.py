"""MPI launch: ranks started by mpiexec (MPICH's hydra) in testbed namespaces or on real hosts, with control
over MPI and data over genie's TCP engine or MPI point-to-point. See docs/mpi.md.

Importing this package does not import mpi4py: only the rank program initialises MPI.
"""

from genie.engine.mpi.discover import find_mpiexec, mpi4py_available
from genie.engine.mpi.plan import LaunchMap, Transport, launch_map, parse_port_range
from genie.engine.mpi.session import MpiLaunch, MpiSession, MpiSessions

__all__ = [
    "LaunchMap",
    "MpiLaunch",
    "MpiSession",
    "MpiSessions",
    "Transport",
    "find_mpiexec",
    "launch_map",
    "mpi4py_available",
    "parse_port_range",
]
