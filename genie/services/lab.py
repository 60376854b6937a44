"""`genie lab shape` and `genie lab verify` as services: a rendered lab directory (its ``topology.yaml`` and
``inventory.yaml``) in, the VM's shaping applied / the lab's links measured out.

* shape runs *inside* one VM (provisioner "shape", every boot): the emulated testbed's shaping steps of the node
  the VM stands for (`genie.lab.shape`), applied to the VM's own lab NICs by the same backends the namespace
  testbed uses (`HostNetlinkBackend`, `EmulatorBackend(here=True)`), undone first when they are there from an
  earlier run (state in ``<state dir>/lab-shape/<machine>.json``);
* verify runs the testbed's link checks (`genie.testbed.verify_run.measure_links`) between the lab's hosts:
  probes over ssh (from a host VM, whose ``~/.ssh/config`` genie.sh wrote), against the topology's shapes.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from genie.core.errors import InputError
from genie.inventory.model import Inventory
from genie.lab.plan import DEFAULT_BOX, Lab
from genie.lab.shape import MachineShaping
from genie.testbed.steps import AddQueueRule, ShaperChoice
from genie.testbed.verify import VerifyRow
from genie.testbed.verify_run import ProbeCommand, VerifySettings

LAB_TOPOLOGY = "topology.yaml"
LAB_INVENTORY = "inventory.yaml"
VM_PYTHON = "/opt/genie/.venv/bin/python"  # genie's venv in every VM (provision/genie.sh)
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")

if TYPE_CHECKING:
    from genie.services.verify import VerifyResult


VM_PYTHON_VERSION = "3.11"  # Debian 12, the default box
VM_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
PIP_DOWNLOAD_TIMEOUT_S = 1800


@dataclass(frozen=True)
class LabRenderRequest:
    topology: Path
    outdir: Path
    box: str = DEFAULT_BOX
    memory_mb: Optional[int] = None  # None: from this machine's resources (`default_sizing`)
    cpus: Optional[int] = None
    router_memory_mb: Optional[int] = None
    router_cpus: Optional[int] = None
    repo: Optional[Path] = None
    offline: bool = False  # download a wheelhouse once; every VM installs from it


@dataclass(frozen=True)
class LabRenderResult:
    lab: Lab
    files: tuple[Path, ...]
    warnings: tuple[str, ...]
    wheelhouse: Optional[Path] = None


def host_resources() -> tuple[int, int]:
    """(memory MiB, CPUs) of this machine."""
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    return int(memory_mb), os.cpu_count() or 1


def run_lab_render(request: LabRenderRequest, *, resources: tuple[int, int] | None = None) -> LabRenderResult:
    """Plan the lab (sizes not given come from this machine's resources), write it, warn when it does not fit,
    and with ``offline`` download its Python packages into ``OUTDIR/wheelhouse`` once."""
    from genie.lab.plan import default_sizing, plan_lab, sizing_warnings
    from genie.lab.render import WHEELHOUSE, find_repo, write_lab
    from genie.topology import load_topology_file

    source = str(request.topology)
    topology = load_topology_file(request.topology)
    memory_mb, cpus = resources or host_resources()
    sizing = default_sizing(topology, host_memory_mb=memory_mb, host_cpus=cpus)
    lab = plan_lab(topology, box=request.box, memory_mb=_given(request.memory_mb, sizing.memory_mb),
                   cpus=_given(request.cpus, sizing.cpus),
                   router_memory_mb=_given(request.router_memory_mb, sizing.router_memory_mb),
                   router_cpus=_given(request.router_cpus, sizing.router_cpus), source=source)
    wheelhouse = WHEELHOUSE if request.offline else None
    files = write_lab(lab, request.outdir, repo=request.repo, source=source, wheelhouse=wheelhouse)
    downloaded = None
    if request.offline:
        downloaded = Path(request.outdir) / WHEELHOUSE
        _download(wheelhouse_argv(find_repo(request.repo), downloaded))
    return LabRenderResult(lab, tuple(files), tuple(sizing_warnings(lab, host_memory_mb=memory_mb, host_cpus=cpus)),
                           downloaded)


def _given(value: Optional[int], default: int) -> int:
    return default if value is None else value


def wheelhouse_argv(repo: Path, dest: Path, python: str | None = None) -> list[str]:
    """`pip download` of everything genie.sh installs in a VM (genie's dependencies with its test and mpi
    extras, its build backend, pip itself), as wheels for the box's Python and platform."""
    import sys
    import tomllib

    project = tomllib.loads((repo / "pyproject.toml").read_text())
    extras = project["project"].get("optional-dependencies", {})
    requirements = [*project["project"].get("dependencies", []), *extras.get("test", []), *extras.get("mpi", []),
                    *project.get("build-system", {}).get("requires", []), "pip"]
    platforms = [arg for platform in VM_PLATFORMS for arg in ("--platform", platform)]
    return [python or sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--quiet",
            "--dest", str(dest), "--only-binary=:all:", "--python-version", VM_PYTHON_VERSION, *platforms,
            *dict.fromkeys(requirements)]


def _download(argv: list[str]) -> None:
    import subprocess

    from genie.core.errors import EnvironmentProblem

    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=PIP_DOWNLOAD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"pip download did not finish within {PIP_DOWNLOAD_TIMEOUT_S} s") from None
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        raise EnvironmentProblem(f"pip download of the lab's wheelhouse failed: {reason}")


@dataclass(frozen=True)
class LabShapeRequest:
    lab_dir: Path
    machine: str
    shaper: ShaperChoice = ShaperChoice.AUTO
    dry_run: bool = False
    remove: bool = False  # only undo what an earlier run made (emulator, queue rules, the lab NICs' qdiscs)


@dataclass(frozen=True)
class LabShapeResult:
    shaping: MachineShaping
    applied: bool
    undone_steps: int = 0  # steps of an earlier `genie lab shape` undone first


@dataclass(frozen=True)
class LabVerifyRequest:
    lab_dir: Path
    settings: VerifySettings = VerifySettings()
    pairs: Optional[tuple[tuple[str, str], ...]] = None
    csv_path: Optional[Path] = None
    out: Optional[Path] = None
    python: str = VM_PYTHON  # genie's python on the hosts


@dataclass(frozen=True)
class RenderedLab:
    lab: Lab
    inventory: Inventory
    topology_path: Path
    inventory_path: Path


def load_rendered_lab(lab_dir: Path) -> RenderedLab:
    """The lab `genie lab render` wrote into `lab_dir`: planned again from its topology.yaml (the same plan,
    so the same addresses), with its inventory."""
    from genie.inventory import load_inventory_file
    from genie.lab.plan import plan_lab
    from genie.topology import load_topology_file

    topology_path = Path(lab_dir) / LAB_TOPOLOGY
    inventory_path = Path(lab_dir) / LAB_INVENTORY
    for path in (topology_path, inventory_path):
        if not path.is_file():
            raise InputError(f"expected a lab directory written by `genie lab render` (no {path.name})",
                             source=str(lab_dir))
    lab = plan_lab(load_topology_file(topology_path), source=str(topology_path))
    return RenderedLab(lab, load_inventory_file(inventory_path), topology_path, inventory_path)


def shape_record_path(machine: str) -> Path:
    from genie.testbed.state import state_dir

    return state_dir() / "lab-shape" / f"{machine}.json"


def run_lab_shape(request: LabShapeRequest) -> LabShapeResult:
    """Plan (and unless ``dry_run`` apply) the shaping of lab VM ``request.machine`` in this namespace; refused
    before anything is probed or changed unless this machine is that VM (`genie.lab.shape.check_lab_machine`)."""
    import socket

    from genie.lab.shape import check_lab_machine, plan_machine_shaping
    from genie.testbed import netlink
    from genie.testbed.service import require_net_admin, resolve_shaper

    rendered = load_rendered_lab(request.lab_dir)
    if not request.dry_run:  # it changes this machine's network (--remove too)
        check_lab_machine(rendered.lab, request.machine, socket.gethostname())
    shaper = resolve_shaper(rendered.lab.topology, request.shaper, netem_available=netlink.probe_netem)
    shaping = plan_machine_shaping(rendered.lab, request.machine, shaper,
                                   {**netlink.local_addresses(), **local_macs()})
    if request.dry_run:
        return LabShapeResult(shaping, applied=False)
    require_net_admin()
    undone = _undo_earlier(request.machine)
    for interface in shaping.interfaces:
        undone += netlink.clear_local_root_qdisc(interface.ifname)
    if request.remove:
        return LabShapeResult(shaping, applied=False, undone_steps=undone)
    _apply(shaping)
    return LabShapeResult(shaping, applied=True, undone_steps=undone)


def local_macs(sys_class_net: Path = Path("/sys/class/net")) -> dict[str, str]:
    """MAC address (lower case) -> interface name in this network namespace (a bridge VM's ports have no IPv4
    address: `genie lab shape` finds them by the MACs the Vagrantfile gave them). Bridges are left out: br0
    takes the MAC of one of its ports."""
    macs = {}
    for device in sorted(sys_class_net.iterdir()):
        if (device / "bridge").is_dir():
            continue
        try:
            mac = (device / "address").read_text().strip().lower()
        except OSError:
            continue
        macs.setdefault(mac, device.name)
    return macs


def _apply(shaping: MachineShaping) -> None:
    from genie.core.files import write_atomic
    from genie.testbed.backend import TestbedBackend, apply_plan
    from genie.testbed.emulators import EmulatorBackend, EmulatorProcess
    from genie.testbed.netlink import HostNetlinkBackend

    started: list[EmulatorProcess] = []
    record = shape_record_path(shaping.machine)
    record.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        write_atomic(record, json.dumps({
            "emulators": [{"pid": p.pid, "start_ticks": p.start_ticks} for p in started],
            "queue_rules": [[s.ifname, s.queue_num] for s in shaping.steps if isinstance(s, AddQueueRule)],
        }, indent=1) + "\n")

    def on_started(process: EmulatorProcess) -> None:
        started.append(process)
        save()

    emulators = EmulatorBackend(f"lab-{shaping.machine}", here=True, on_started=on_started)
    with HostNetlinkBackend() as host:
        apply_plan(TestbedBackend(netlink=host, userspace=emulators), shaping.steps)
    save()


def _undo_earlier(machine: str) -> int:
    """End the emulator and remove the queue rules an earlier `genie lab shape` of `machine` left."""
    from genie.testbed.emulators import EmulatorBackend, EmulatorProcess, end_emulators

    record = shape_record_path(machine)
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return 0
    processes = [EmulatorProcess(machine, int(p["pid"]), p.get("start_ticks")) for p in data.get("emulators", [])]
    end_emulators(processes)
    rules = [AddQueueRule(machine, str(ifname), int(queue)) for ifname, queue in data.get("queue_rules", [])]
    backend = EmulatorBackend(f"lab-{machine}", here=True)
    for rule in rules:
        backend.undo(rule)
    os.unlink(record)
    return len(processes) + len(rules)


def ssh_probe_command(inventory: Inventory, python: str = VM_PYTHON, *, tty: bool = False) -> ProbeCommand:
    """Probes on the inventory's hosts over ssh (``user@address``); the remote command line is the probe's argv,
    each word quoted. ``tty`` (servers): a pseudo-terminal, so that ending ssh ends the remote server."""
    hosts = {h.name: h for h in inventory.hosts}

    def command(host: str, args: Sequence[str]) -> list[str]:
        entry = hosts[host]
        target = f"{entry.ssh_user}@{entry.address}" if entry.ssh_user else entry.address
        remote = shlex.join([python, "-m", "genie.testbed.probe", *args])
        return ["ssh", *SSH_OPTIONS, *(["-tt"] if tty else []), target, remote]

    return command


def run_lab_verify(request: LabVerifyRequest, progress: Callable[[str], None] | None = None, *,
                   command: ProbeCommand | None = None, server_command: ProbeCommand | None = None) -> VerifyResult:
    """The testbed's link checks across the lab's hosts (see the module doc); `command` / `server_command`
    replace the ssh transport (tests run the probes in namespaces standing in for the VMs)."""
    from genie.services.verify import record_verify
    from genie.testbed.layout import plan_layout
    from genie.testbed.verify_run import Probes, measure_links

    rendered = load_rendered_lab(request.lab_dir)
    hosts = [m.name for m in rendered.lab.hosts]
    if [h.name for h in rendered.inventory.hosts] != hosts:
        raise InputError(f"its hosts ({', '.join(h.name for h in rendered.inventory.hosts)}) are not the lab's "
                         f"({', '.join(hosts)}): render the lab again", source=str(rendered.inventory_path))
    address = {h.name: h.address for h in rendered.inventory.hosts}
    probes = Probes(command or ssh_probe_command(rendered.inventory, request.python),
                    server_command=server_command or (None if command else
                                                      ssh_probe_command(rendered.inventory, request.python,
                                                                        tty=True)))
    layout = plan_layout(rendered.lab.topology, "lab")

    def measure() -> list[VerifyRow]:
        return measure_links(layout, probes, address, request.settings,
                             pairs=list(request.pairs) if request.pairs is not None else None, progress=progress)

    return record_verify(f"lab {rendered.lab.name}", rendered.lab.topology, rendered.topology_path, request.settings,
                         request.pairs, measure, out=request.out, csv_path=request.csv_path, shaper=None)
