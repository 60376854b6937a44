"""``python -m genie.engine.mpi.trampoline --map MAP.json -- COMMAND...``: what mpiexec starts for every rank
of a namespace testbed. It reads its rank from the launcher's environment (PMI_RANK for MPICH's hydra) and
replaces itself (`os.execvp`, no shell, no child) with ``ip netns exec <namespace of that rank> COMMAND...``,
or with COMMAND itself for a rank without a namespace. The rank keeps the inherited PMI_FD, so it reaches
hydra in the root namespace whatever namespace it now lives in.

Stdlib only and no genie import: it runs once per rank and should cost nothing.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Mapping, Sequence

RANK_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


def launcher_rank(env: Mapping[str, str]) -> int | None:
    """The rank the MPI launcher gave this process, from the first variable it set."""
    for name in RANK_VARIABLES:
        value = env.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return None


def exec_argv(netns: Sequence[str | None], rank: int, command: Sequence[str]) -> list[str]:
    """The argv this rank becomes."""
    if not 0 <= rank < len(netns):
        raise ValueError(f"rank {rank} is not in the launch map ({len(netns)} ranks)")
    ns = netns[rank]
    return list(command) if ns is None else ["ip", "netns", "exec", ns, *command]


def _fail(message: str) -> int:
    doc = json.dumps({"message": f"genie trampoline: {message}"})
    os.write(2, f"@genie-mpi-error {doc}\n".encode())
    return 1


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[0] != "--map" or args[2] != "--":
        return _fail("usage: python -m genie.engine.mpi.trampoline --map MAP.json -- COMMAND...")
    map_path, command = args[1], args[3:]
    rank = launcher_rank(os.environ)
    if rank is None:
        return _fail(f"no rank from the MPI launcher (none of {', '.join(RANK_VARIABLES)} is set): "
                     "start it with MPICH's mpiexec")
    try:
        with open(map_path, encoding="utf-8") as f:
            netns = json.load(f)["netns"]
        target = exec_argv(netns, rank, command)
    except (OSError, ValueError, KeyError) as exc:
        return _fail(f"rank {rank}: {exc}")
    try:
        os.execvp(target[0], target)
    except OSError as exc:
        return _fail(f"rank {rank}: cannot run {target[0]}: {exc.strerror or exc}")
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
