"""How a run's ranks start and move their data: the kinds every layer names (pure)."""

from __future__ import annotations

from enum import Enum


class LauncherKind(Enum):
    """Who starts the ranks."""

    LOCAL = "local"  # genie itself (ip netns exec, a unix-socket control channel)
    MPI = "mpi"      # MPICH's mpiexec (hydra)
    SLURM = "slurm"  # Slurm's srun, inside an allocation


class DataPath(Enum):
    """What carries a run's bytes between ranks (not to be confused with `genie.engine.transport.Transport`,
    the executor's byte mover, which a data path provides)."""

    TCP = "tcp"  # genie's own TCP connections
    MPI = "mpi"  # MPI point-to-point (needs an MPI or Slurm launcher)
