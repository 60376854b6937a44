"""One MPI rank of the peers harness: mpi4py collectives on numpy float32 buffers, started by MPICH's mpiexec
through genie's trampoline (`genie.engine.mpi.trampoline`), which puts it in its host's namespace:

    mpiexec -n N python -m genie.engine.mpi.trampoline --map MAP.json -- \
        python -m benchmarks.peers.mpi_rank --map MAP.json --job JOB.json --out RESULTS.jsonl

Before MPI_Init it points MPICH's TCP netmod at the interface holding its testbed address, as genie's own MPI
rank does (`genie.engine.mpi.rank.point_mpi_at`); the harness exports genie's `launch_env` (no shared memory,
libfabric over TCP). Sizes follow nccl-tests: Allreduce the buffer (in place), Allgather the total output,
Alltoall the per-rank send buffer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from genie.engine.mpi.netif import interface_of, local_ipv4_addresses
from genie.engine.mpi.rank import point_mpi_at
from genie.engine.mpi.trampoline import launcher_rank

from benchmarks.peers.timing import load_job, timed_loop, write_case


def make_op(comm, collective: str, size_bytes: int):
    import numpy as np
    from mpi4py import MPI

    count = size_bytes // 4
    world = comm.Get_size()
    if collective == "all_reduce":
        buf = np.zeros(count, dtype=np.float32)
        return lambda: comm.Allreduce(MPI.IN_PLACE, [buf, MPI.FLOAT], op=MPI.SUM)
    if collective == "all_gather":
        inp = np.zeros(count // world, dtype=np.float32)
        out = np.empty(count, dtype=np.float32)
        return lambda: comm.Allgather([inp, MPI.FLOAT], [out, MPI.FLOAT])
    if collective == "all_to_all":
        inp = np.zeros(count, dtype=np.float32)
        out = np.empty(count, dtype=np.float32)
        return lambda: comm.Alltoall([inp, MPI.FLOAT], [out, MPI.FLOAT])
    raise ValueError(f"unsupported collective {collective!r}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--map", required=True, help="genie's launch map (the trampoline's)")
    p.add_argument("--job", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    rank = launcher_rank(os.environ)
    with open(args.map, encoding="utf-8") as f:
        address = json.load(f)["addresses"][rank]
    iface = interface_of(address, local_ipv4_addresses())
    if iface is None:
        print(f"mpi_rank {rank}: address {address} is not in this namespace", file=sys.stderr)
        return 1
    point_mpi_at(iface)

    from mpi4py import MPI  # MPI_Init, after the environment is set

    comm = MPI.COMM_WORLD
    out = open(args.out, "a", encoding="utf-8") if comm.Get_rank() == 0 else None
    try:
        for case in load_job(args.job):
            op = make_op(comm, case["collective"], case["size_bytes"])
            spans = timed_loop(op, comm.Barrier, case["warmup"], case["iterations"])
            del op
            gathered = comm.gather(spans, root=0)
            if out is not None:
                write_case(out, case, gathered)
        comm.Barrier()
    finally:
        if out is not None:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
