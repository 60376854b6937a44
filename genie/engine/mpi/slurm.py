"""``--launcher slurm``: genie runs inside a Slurm allocation and has ``srun`` start the ranks (pure parts).

* `SlurmAllocation.from_env` reads the allocation from the variables salloc/sbatch set (SLURM_JOB_ID,
  SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE, SLURM_NTASKS); outside an allocation it is a one-line error;
* `allocation_inventory` turns the allocation into an inventory (one host per node, its tasks as ranks);
  `match_inventory` checks a given inventory against it (every host a node of the allocation);
* `SlurmLaunch` is what the MPI session needs to build srun's argv: the node of every rank (written to a
  ``SLURM_HOSTFILE`` for ``--distribution=arbitrary``, so srun places rank r exactly where genie's placement
  says), checked against the tasks the allocation has on each node.

The ranks bootstrap MPI through Slurm's PMI (``--mpi=pmi2``, which the MPICH wheel speaks; a
``SLURM_MPI_TYPE`` the user set wins) — no hydra, no ssh. See docs/real-hosts.md ("Slurm").
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from genie.core.errors import InputError
from genie.core.placement import RankPlacement
from genie.engine.mpi.hostlist import expand_counts, expand_hostlist
from genie.inventory.model import Inventory, InventoryHost
from genie.inventory.validation import normalized_address

DEFAULT_MPI_TYPE = "pmi2"
HOSTFILE_ENV = "SLURM_HOSTFILE"
_HOST_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,14}$")
_OPTION = "launcher"  # the run option these problems are about (the CLI shows its flag)


def _hint() -> str:
    return "run genie inside an allocation, e.g. salloc -N 2 --ntasks-per-node=2 genie bench ... --launcher slurm"


@dataclass(frozen=True)
class SlurmAllocation:
    """A Slurm job's allocation as its environment describes it. `tasks_per_node` follows `nodes` (None when
    the job did not ask for tasks; then CPUs per node, then 1, bound the ranks of a node)."""

    job_id: str
    nodes: tuple[str, ...]
    tasks_per_node: tuple[int, ...] | None = None
    ntasks: int | None = None
    nodelist: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "SlurmAllocation":
        job = (environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or "").strip()
        if not job:
            raise InputError(f"slurm starts the ranks with srun inside a Slurm allocation, but SLURM_JOB_ID is not "
                             f"set; {_hint()}", path=_OPTION)
        nodelist = (environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or "").strip()
        try:
            nodes = tuple(expand_hostlist(nodelist))
        except ValueError as exc:
            raise InputError(f"Slurm job {job}: {exc}", path="SLURM_JOB_NODELIST") from None
        counts = None
        for var in ("SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"):
            text = (environ.get(var) or "").strip()
            if text:
                try:
                    counts = tuple(expand_counts(text))
                except ValueError as exc:
                    raise InputError(f"Slurm job {job}: {exc}", path=var) from None
                if len(counts) != len(nodes):
                    raise InputError(f"Slurm job {job}: {len(counts)} counts for {len(nodes)} nodes "
                                     f"({nodelist})", path=var)
                break
        ntasks_text = (environ.get("SLURM_NTASKS") or environ.get("SLURM_NPROCS") or "").strip()
        if ntasks_text and not ntasks_text.isdigit():
            raise InputError(f"Slurm job {job}: expected a number of tasks, got {ntasks_text!r}", path="SLURM_NTASKS")
        return cls(job_id=job, nodes=nodes, tasks_per_node=counts,
                   ntasks=int(ntasks_text) if ntasks_text else None, nodelist=nodelist)

    def slots(self, node: str) -> int:
        return self.tasks_per_node[self.nodes.index(node)] if self.tasks_per_node else 1

    def describe(self) -> str:
        return f"Slurm allocation {self.job_id} ({self.nodelist or ', '.join(self.nodes)})"


def local_node(allocation: SlurmAllocation, environ: Mapping[str, str], hostname: str | None = None) -> str | None:
    """This machine's node name in the allocation: SLURMD_NODENAME inside a job step or batch script, else the
    short host name if it is one of the nodes; None when this machine is not part of the allocation."""
    named = (environ.get("SLURMD_NODENAME") or "").strip()
    if named in allocation.nodes:
        return named
    short = (hostname or socket.gethostname()).split(".")[0]
    for node in allocation.nodes:
        if node.lower() == short.lower():
            return node
    return None


def allocation_inventory(allocation: SlurmAllocation) -> Inventory:
    """One host per node (named like the node where the name fits genie's host-name rule, else n0, n1, ...;
    reached at the node name) with the node's tasks as ranks."""
    hosts = []
    for i, node in enumerate(allocation.nodes):
        name = node if _HOST_NAME.match(node) else f"n{i}"
        hosts.append(InventoryHost(name=name, address=node, ranks=max(1, allocation.slots(node))))
    return Inventory(name=f"slurm-{allocation.job_id}"[:64], hosts=tuple(hosts))


def match_inventory(inventory: Inventory, allocation: SlurmAllocation, *, source: str) -> dict[str, str]:
    """{inventory host name: Slurm node}: a host is the node its name or address names (case-insensitive; an
    address's first DNS label counts). An error naming the first host that is not in the allocation."""
    by_key = {n.lower(): n for n in allocation.nodes}
    out: dict[str, str] = {}
    for i, host in enumerate(inventory.hosts):
        address = normalized_address(host.address)
        keys = [host.name.lower(), address, address.split(".")[0]]
        node = next((by_key[k] for k in keys if k in by_key), None)
        if node is None:
            raise InputError(f"host {host.name!r} ({host.address}) is not a node of {allocation.describe()}; "
                             "expected the inventory's hosts to be allocated nodes", source=source,
                             path=f"hosts[{i}]")
        out[host.name] = node
    return out


def find_srun(environ: Mapping[str, str] = os.environ) -> Path:
    found = shutil.which("srun", path=environ.get("PATH", os.defpath))
    if found is None:
        raise InputError("slurm needs Slurm's srun, and there is none on PATH; run genie on a Slurm login or "
                         "compute node (or put srun on PATH)", path=_OPTION)
    return Path(found)


@dataclass(frozen=True)
class SlurmLaunch:
    """What `MpiSession` needs to start ranks with srun: the allocation, the node of each inventory host, and
    this machine's node (for ranks in testbed namespaces or on loopback, which must run here)."""

    allocation: SlurmAllocation
    host_nodes: Mapping[str, str] = field(default_factory=dict)
    local_node: str | None = None
    mpi_type: str | None = DEFAULT_MPI_TYPE  # None: srun's default / the user's SLURM_MPI_TYPE

    def rank_nodes(self, placements: Sequence[RankPlacement]) -> list[str]:
        """The node of every rank (placements sorted by rank); an error when a rank has no node in the
        allocation or a node would get more ranks than the allocation has tasks there."""
        nodes = []
        for p in sorted(placements, key=lambda p: p.rank):
            node = self.host_nodes.get(p.host) if p.netns is None else None
            if node is None:
                if self.local_node is None:
                    raise InputError(f"rank {p.rank} (host {p.host}) must run on this machine, which is not a node of "
                                     f"{self.allocation.describe()}; run genie on an allocated node (inside sbatch "
                                     "or srun --pty), or give `inventory`", path=_OPTION)
                node = self.local_node
            nodes.append(node)
        alloc = self.allocation
        if alloc.ntasks is not None and len(nodes) > alloc.ntasks:
            raise InputError(f"the run needs {len(nodes)} ranks but {alloc.describe()} has {alloc.ntasks} tasks "
                             "(SLURM_NTASKS); ask salloc for more tasks or run fewer ranks", path=_OPTION)
        if alloc.tasks_per_node is not None:
            for node, count in Counter(nodes).items():
                if count > alloc.slots(node):
                    raise InputError(f"the run needs {count} ranks on node {node} but {alloc.describe()} has "
                                     f"{alloc.slots(node)} tasks there (SLURM_TASKS_PER_NODE); ask salloc for more "
                                     "tasks per node or run fewer ranks", path=_OPTION)
        return nodes


def slurm_hostfile(rank_nodes: Sequence[str]) -> str:
    """SLURM_HOSTFILE for ``--distribution=arbitrary``: line r is the node of rank r."""
    return "".join(f"{node}\n" for node in rank_nodes)


def srun_argv(srun: str | Path, world: int, command: Sequence[str], *, mpi_type: str | None = DEFAULT_MPI_TYPE,
              extra: Sequence[str] = ()) -> list[str]:
    """srun starting `world` tasks of `command` where SLURM_HOSTFILE says; stdin to task 0 only (the job
    arrives there), any task failing ends the step, and the step may share the allocation's CPUs with the
    step genie itself runs in (``srun --pty``)."""
    argv = [str(srun), f"--ntasks={world}", "--distribution=arbitrary", "--kill-on-bad-exit=1", "--input=0",
            "--overlap", "--job-name=genie-ranks"]
    if mpi_type:
        argv.append(f"--mpi={mpi_type}")
    return [*argv, *extra, *command]


def resolve_slurm(environ: Mapping[str, str], inventory: Inventory | None, *, inventory_source: str = "<inventory>",
                  hostname: str | None = None) -> tuple[Path, SlurmLaunch]:
    """(srun, the launch) inside the allocation `environ` describes, with `inventory`'s hosts (None: the ranks
    run on this machine, in testbed namespaces or on loopback) matched to its nodes. One-line errors naming
    the option when there is no allocation, no srun, or a host outside the allocation."""
    allocation = SlurmAllocation.from_env(environ)
    srun = find_srun(environ)
    mpi_type = None if environ.get("SLURM_MPI_TYPE") else DEFAULT_MPI_TYPE
    host_nodes = match_inventory(inventory, allocation, source=inventory_source) if inventory is not None else {}
    return srun, SlurmLaunch(allocation, host_nodes, local_node(allocation, environ, hostname), mpi_type)
