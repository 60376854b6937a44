"""What an MPI launch looks like, as pure data: the rank map, the mpiexec/trampoline/rank argv lists, the
environment MPICH gets and the hostfile of a real-host run. No processes here (see `session`).

The **launch map** tells every rank, before MPI is initialised, where it is: its host (name, inventory
address, namespace, inventory interface/subnet) and the address its placement listens on. It travels inline
in the rank's argv (real hosts share no file system with the launcher) and as a file for the trampoline
(`python -m genie.engine.mpi.trampoline --map MAP.json -- ...`, only for namespace testbeds, where the
launcher and the ranks are on one machine).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from genie.core.errors import InputError
from genie.core.placement import RankPlacement
from genie.inventory.model import HostfileFormat, Inventory, InventoryHost
from genie.inventory.writer import hostfile

MARKER = "@genie-mpi "          # rank 0's stdout lines to the orchestrator (and its input lines back)
ERROR_MARKER = "@genie-mpi-error "  # any rank's last words on stderr before it aborts
PORT_RANGE_ENV = "GENIE_PORT_RANGE"


class Transport:
    """Values of --transport."""

    TCP = "tcp"
    MPI = "mpi"
    ALL = (TCP, MPI)


@dataclass(frozen=True)
class MpiHost:
    name: str
    address: str
    netns: str | None = None
    interface: str | None = None
    subnet: str | None = None

    def inventory_host(self) -> InventoryHost:
        return InventoryHost(name=self.name, address=self.address, interface=self.interface, subnet=self.subnet)


@dataclass(frozen=True)
class LaunchMap:
    """Rank r runs on ``hosts[rank_hosts[r]]`` and listens on ``addresses[r]`` (unless the host's inventory
    interface/subnet pick the traffic address on the machine itself)."""

    hosts: tuple[MpiHost, ...]
    rank_hosts: tuple[int, ...]
    addresses: tuple[str, ...]

    @property
    def world(self) -> int:
        return len(self.rank_hosts)

    def host_of(self, rank: int) -> MpiHost:
        return self.hosts[self.rank_hosts[rank]]

    def local_rank(self, rank: int) -> int:
        """The rank's index among the ranks of its host (ranks of a host are consecutive or not: counted)."""
        host = self.rank_hosts[rank]
        return sum(1 for r in range(rank) if self.rank_hosts[r] == host)

    @property
    def namespaced(self) -> bool:
        return any(h.netns for h in self.hosts)

    def to_json(self) -> dict[str, Any]:
        return {"hosts": [{k: v for k, v in (("name", h.name), ("address", h.address), ("netns", h.netns),
                                             ("interface", h.interface), ("subnet", h.subnet)) if v is not None}
                          for h in self.hosts],
                "rank_hosts": list(self.rank_hosts), "addresses": list(self.addresses),
                # for the trampoline, which reads only this (stdlib json, no genie import)
                "netns": [self.hosts[h].netns for h in self.rank_hosts]}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "LaunchMap":
        hosts = tuple(MpiHost(name=h["name"], address=h["address"], netns=h.get("netns"),
                              interface=h.get("interface"), subnet=h.get("subnet")) for h in doc["hosts"])
        return cls(hosts=hosts, rank_hosts=tuple(int(i) for i in doc["rank_hosts"]),
                   addresses=tuple(str(a) for a in doc["addresses"]))


def launch_map(placements: Sequence[RankPlacement], inventory: Inventory | None = None) -> LaunchMap:
    """The map of `placements` (sorted by rank), with interface/subnet from `inventory` for real hosts."""
    ordered = sorted(placements, key=lambda p: p.rank)
    if [p.rank for p in ordered] != list(range(len(ordered))):
        raise ValueError("placements must be ranks 0..n-1")
    index: dict[str, int] = {}
    hosts: list[MpiHost] = []
    rank_hosts: list[int] = []
    for p in ordered:
        if p.host not in index:
            inv = inventory.host(p.host) if inventory is not None else None
            index[p.host] = len(hosts)
            hosts.append(MpiHost(name=p.host, address=inv.address if inv else p.address, netns=p.netns,
                                 interface=inv.interface if inv else None, subnet=inv.subnet if inv else None))
        rank_hosts.append(index[p.host])
    return LaunchMap(hosts=tuple(hosts), rank_hosts=tuple(rank_hosts), addresses=tuple(p.address for p in ordered))


def mpi_hostfile(launch: LaunchMap) -> str:
    """MPICH hostfile (``address:slots`` in rank order) of the hosts the run uses, with their used ranks.
    Ranks must be numbered host by host (as `placements_for` numbers them): hydra fills hosts in order."""
    counts: dict[int, int] = {}
    previous = -1
    for host in launch.rank_hosts:
        if host != previous and host in counts:
            raise ValueError("an MPI hostfile needs the ranks of each host to be consecutive")
        counts[host] = counts.get(host, 0) + 1
        previous = host
    inventory = Inventory(name="genie-mpi", hosts=tuple(
        InventoryHost(name=launch.hosts[h].name, address=launch.hosts[h].address, ranks=n)
        for h, n in counts.items()))
    return hostfile(inventory, HostfileFormat.MPICH)


def rank_argv(python: str, launch: LaunchMap, *, transport: str, port_range: range | None = None,
              clock_rounds: int = 8, watch: tuple[str, str] | None = None) -> list[str]:
    """`watch`: (the session's watch socket, its machine's boot id) — ranks on that machine connect to it."""
    argv = [python, "-m", "genie.engine.mpi.rank", "--map-json", launch.dumps(), "--transport", transport,
            "--clock-rounds", str(clock_rounds)]
    if port_range is not None:
        argv += ["--port-range", format_port_range(port_range)]
    if watch is not None:
        argv += ["--watch", watch[0], "--watch-boot", watch[1]]
    return argv


def trampoline_argv(python: str, map_path: str | Path, command: Sequence[str]) -> list[str]:
    """Run `command` in the namespace of the rank that hydra says this process is (PMI_RANK)."""
    return [python, "-m", "genie.engine.mpi.trampoline", "--map", str(map_path), "--", *command]


def mpiexec_argv(mpiexec: str | Path, world: int, command: Sequence[str], *, hostfile_path: str | Path | None = None,
                 extra: Sequence[str] = ()) -> list[str]:
    argv = [str(mpiexec)]
    if hostfile_path is not None:
        argv += ["-f", str(hostfile_path)]
    return [*argv, *extra, "-n", str(world), *command]


def launch_env(base: Mapping[str, str], *, port_range: range | None = None,
               real_hosts: bool = False) -> dict[str, str]:
    """mpiexec's environment (hydra passes it on to every rank, local or remote): MPICH's traffic forced onto
    TCP over the network, never shared memory, so MPI bytes cross the testbed links like genie's own. Every
    setting the user made already wins. The interface (FI_TCP_IFACE / UCX_NET_DEVICES) is chosen per rank by
    the rank program, from the address it listens on. Hydra's own NIC (HYDRA_IFACE, as ``-iface``) follows a
    Vagrant lab's GENIE_LAB_IFACE on real hosts; a run on this machine ignores a HYDRA_HOST_FILE."""
    env = dict(base)
    if real_hosts:
        if env.get("GENIE_LAB_IFACE"):
            env.setdefault("HYDRA_IFACE", env["GENIE_LAB_IFACE"])
    else:
        env.pop("HYDRA_HOST_FILE", None)
    defaults = {"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": "ofi"}
    netmod = env.get("MPIR_CVAR_CH4_NETMOD", defaults["MPIR_CVAR_CH4_NETMOD"]).lower()
    if netmod == "ofi":
        defaults["FI_PROVIDER"] = "tcp"
    elif netmod == "ucx":
        defaults["UCX_TLS"] = "tcp,self"
    if port_range is not None:
        low, high = port_range.start, port_range.stop - 1
        defaults["MPIR_CVAR_CH3_PORT_RANGE"] = f"{low}:{high}"  # hydra's own listener
        defaults["FI_TCP_PORT_LOW_RANGE"] = str(low)
        defaults["FI_TCP_PORT_HIGH_RANGE"] = str(high)
    for key, value in defaults.items():
        env.setdefault(key, value)
    return env


_PORT_RANGE = re.compile(r"^\s*(\d{1,5})\s*[-:]\s*(\d{1,5})\s*$")


def parse_port_range(text: str, *, path: str = "--port-range") -> range:
    """``"40000-40099"`` (or ``40000:40099``) -> range(40000, 40100); InputError naming `path` otherwise."""
    match = _PORT_RANGE.match(text or "")
    if not match:
        raise InputError(f"expected a port range LOW-HIGH such as 40000-40099, got {text!r}", path=path)
    low, high = int(match.group(1)), int(match.group(2))
    if not 1024 <= low <= high <= 65535:
        raise InputError(f"expected 1024 <= LOW <= HIGH <= 65535, got {low}-{high}", path=path)
    if high - low < 1:
        raise InputError(f"expected at least 2 ports (one per rank of a host, plus one), got {low}-{high}",
                         path=path)
    return range(low, high + 1)


def format_port_range(ports: range) -> str:
    return f"{ports.start}-{ports.stop - 1}"


def port_candidates(ports: range, local_rank: int) -> list[int]:
    """Where a rank tries to listen: from ``LOW + 1 + local_rank`` upwards, then the rest of the range
    (LOW stays for a launcher's control port), so ranks of one host rarely collide."""
    first = ports.start + 1 + local_rank
    usable = range(ports.start + 1, ports.stop) if len(ports) > 1 else ports
    if first not in usable:
        first = usable.start
    return [p for p in usable if p >= first] + [p for p in usable if p < first]
