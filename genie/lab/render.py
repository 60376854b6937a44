"""Lab plan -> the files of a Vagrant lab directory, written atomically.

``OUTDIR/`` gets:
* ``Vagrantfile`` — one VM per topology host and switch (router or bridge), a private network per link, libvirt
  and VirtualBox blocks;
* ``provision/network.sh`` (routes, forwarding, MTUs, a bridge VM's ``br0``; every boot), ``provision/genie.sh``
  (genie in every VM; in host VMs also MPICH, /etc/hosts, passwordless ssh; first boot) and
  ``provision/shape.sh`` (the links' shaping, `genie lab shape`; every boot);
* ``topology.yaml`` — the topology, which `genie lab shape` and `genie lab verify` plan from inside the VMs;
* ``inventory.yaml`` (docs/inventory.md) and the MPI hostfiles ``hostfile`` (MPICH) / ``hostfile.openmpi``;
* ``ssh/id_ed25519[.pub]`` — one key the VMs share (made with ssh-keygen once, kept on later renders);
* ``.gitignore`` — keeps ``.vagrant/`` and the key out of git.
`lab_files` is pure (text per relative path); `write_lab` / `render_lab` touch the disk.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import jinja2

import genie
from genie.core.errors import EnvironmentProblem, InputError
from genie.core.topology import Topology
from genie.inventory.model import HostfileFormat, Inventory, InventoryHost
from genie.inventory.writer import dump_inventory, hostfile, ssh_config
from genie.lab.plan import (DEFAULT_BOX, DEFAULT_CPUS, DEFAULT_MEMORY_MB, DEFAULT_MTU_BYTES,
                            DEFAULT_ROUTER_MEMORY_MB, Lab, LabMachine, MachineRole, NetworkKind, plan_lab)
from genie.core.files import write_atomic
from genie.topology.writer import dump_topology

LAB_USER = "vagrant"
KEY_PATH = Path("ssh") / "id_ed25519"
KEY_IN_VM = "~/.ssh/genie_lab_ed25519"
SSH_KEYGEN_TIMEOUT_S = 30
REPO_EXCLUDES = (".git/", ".venv/", ".vagrant/", "runs/", "__pycache__/", "*.egg-info/")
_EXECUTABLE = ("provision/network.sh", "provision/genie.sh", "provision/shape.sh")
PROVISION_SCRIPTS = _EXECUTABLE
VIRTUALBOX_NAT_NICS = 1  # Vagrant's management NIC
VIRTUALBOX_PIIX3_MAX_NICS = 8  # VirtualBox's default chipset
VIRTUALBOX_ICH9_MAX_NICS = 36
LIBVIRT_DEFAULT_NICS = 9  # vagrant-libvirt's nic_adapter_count (8) counts slots 0..8
WHEELHOUSE = "wheelhouse"  # `--offline`: Python packages downloaded once, installed from in every VM


def lab_inventory(lab: Lab) -> Inventory:
    """The lab's host VMs as an inventory: rank address, ranks, the /24 that carries genie traffic, user vagrant."""
    return Inventory(name=lab.name, hosts=tuple(
        InventoryHost(name=m.name, address=m.address or "", ranks=m.ranks, subnet=lab.primary_network(m.name).network,
                      ssh_user=LAB_USER)
        for m in lab.hosts))


def network_args(lab: Lab, machine: LabMachine) -> list[list[str]]:
    """provision/network.sh's arguments for `machine`, grouped one option per group."""
    groups: list[list[str]] = []
    if machine.forwards:
        groups.append(["--forward"])
    if machine.multipath:
        groups.append(["--multipath"])
    if machine.address:
        groups.append(["--source", machine.address])
    for name in machine.networks:
        network = lab.network(name)
        if machine.role is MachineRole.BRIDGE:  # a port: found by its MAC (it has no address)
            groups.append(["--port", f"{network.mac_of(machine.name)}={network.mtu_bytes}"])
        elif network.mtu_bytes != DEFAULT_MTU_BYTES:
            groups.append(["--mtu", f"{network.network}={network.mtu_bytes}"])
    groups.extend(["--route", f"{route.destination}={','.join(route.gateways)}"] for route in machine.routes)
    return groups


def virtualbox_nics(lab: Lab, source: str | None = None) -> dict[str, int]:
    """NICs of every VM (NAT / management + one per lab network). Under VirtualBox more than 8 need the ICH9
    chipset, under libvirt more than 9 a larger ``nic_adapter_count`` (the Vagrantfile sets both); more than 36
    are refused, naming the node."""
    nics = {m.name: VIRTUALBOX_NAT_NICS + len(m.networks) for m in lab.machines}
    for machine in lab.machines:
        if nics[machine.name] > VIRTUALBOX_ICH9_MAX_NICS:
            raise InputError(f"{machine.role.value} {machine.name} needs {nics[machine.name]} NICs (NAT + "
                             f"{len(machine.networks)} lab networks), more than the {VIRTUALBOX_ICH9_MAX_NICS} "
                             "VirtualBox's ICH9 chipset allows; expected at most "
                             f"{VIRTUALBOX_ICH9_MAX_NICS - VIRTUALBOX_NAT_NICS} links per VM", source=source,
                             path="links")
    return nics


def genie_args(machine: LabMachine) -> list[str]:
    """provision/genie.sh's arguments: ``host RANK_ADDRESS``, ``router`` or ``bridge``."""
    return ["host", machine.address or ""] if machine.role is MachineRole.HOST else [machine.role.value]


def vagrant_mac(mac: str) -> str:
    """A MAC address as Vagrant passes it to both providers: 12 hex digits (VirtualBox takes no colons)."""
    return mac.replace(":", "")


def lab_files(lab: Lab, *, repo: str, repo_excludes: tuple[str, ...] = REPO_EXCLUDES,
              source: str | None = None, wheelhouse: str | None = None) -> dict[str, str]:
    """Relative path -> text of every lab file but the ssh key. `repo` is the genie tree as the Vagrantfile
    names it (relative to the lab directory, or absolute); `wheelhouse` the lab-relative directory the VMs
    install Python packages from (None: from PyPI)."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("genie.lab", "templates"), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters["rb"] = ruby_string
    env.filters["rb_list"] = lambda values: "[" + ", ".join(ruby_string(v) for v in values) + "]"
    env.filters["rb_args"] = ruby_argument_lines
    env.filters["vagrant_mac"] = vagrant_mac
    inventory = lab_inventory(lab)
    context = {
        "lab": lab, "NetworkKind": NetworkKind, "MachineRole": MachineRole, "repo": repo,
        "repo_excludes": list(repo_excludes), "source": source,
        "name_width": max(len(n.name) for n in lab.networks),
        "network_args": {m.name: network_args(lab, m) for m in lab.machines},
        "genie_args": {m.name: genie_args(m) for m in lab.machines},
        "virtualbox_nics": virtualbox_nics(lab, source), "libvirt_default_nics": LIBVIRT_DEFAULT_NICS,
        "wheelhouse": wheelhouse,
        "ssh_config": ssh_config(inventory, identity_file=KEY_IN_VM,
                                 extra=("StrictHostKeyChecking accept-new", "IdentitiesOnly yes")),
    }
    header = (f"genie host inventory of the Vagrant lab {lab.name} (written by genie lab render; "
              "format: docs/inventory.md).\nAddresses are the hosts' rank addresses on the lab networks.")
    return {
        "Vagrantfile": env.get_template("Vagrantfile.j2").render(context),
        "provision/network.sh": env.get_template("network.sh.j2").render(context),
        "provision/genie.sh": env.get_template("genie.sh.j2").render(context),
        "provision/shape.sh": env.get_template("shape.sh.j2").render(context),
        "topology.yaml": f"# the topology of lab {lab.name}, written by genie lab render"
                         f"{f' from {source}' if source else ''}\n" + dump_topology(lab.topology),
        "inventory.yaml": dump_inventory(inventory, header=header),
        "hostfile": hostfile(inventory, HostfileFormat.MPICH),
        "hostfile.openmpi": hostfile(inventory, HostfileFormat.OPENMPI),
        ".gitignore": "# genie lab: Vagrant's machine state and the lab's private ssh key stay out of git\n"
                      ".vagrant/\nssh/\n",
    }


def ruby_string(value: object) -> str:
    """A single-quoted Ruby literal: no interpolation, only backslash and quote escaped."""
    text = str(value)
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def ruby_argument_lines(groups: list[list[str]], indent: int) -> str:
    """A Ruby array of strings, one group (an option and its value) per line."""
    if not groups:
        return "[]"
    pad = " " * indent
    lines = [pad + ", ".join(ruby_string(v) for v in group) for group in groups]
    return "[\n" + ",\n".join(lines) + ",\n" + " " * (indent - 2) + "]"


def render_lab(topology: Topology, outdir: str | os.PathLike[str], *, box: str = DEFAULT_BOX,
               provider_memory_mb: int = DEFAULT_MEMORY_MB, cpus: int = DEFAULT_CPUS,
               router_memory_mb: int = DEFAULT_ROUTER_MEMORY_MB, repo: str | os.PathLike[str] | None = None,
               source: str | None = None) -> list[Path]:
    """Plan the lab of `topology` and write it into `outdir`; returns the files written (key included)."""
    lab = plan_lab(topology, box=box, memory_mb=provider_memory_mb, cpus=cpus, router_memory_mb=router_memory_mb,
                   source=source)
    return write_lab(lab, outdir, repo=repo, source=source)


def write_lab(lab: Lab, outdir: str | os.PathLike[str], *, repo: str | os.PathLike[str] | None = None,
              source: str | None = None, wheelhouse: str | None = None) -> list[Path]:
    """Write the lab's files into `outdir` (created if needed), each atomically; keep an existing ssh key."""
    out = Path(outdir)
    if out.exists() and not out.is_dir():
        raise InputError("expected a directory for the lab, found a file", source=str(out))
    repo_dir = find_repo(repo)
    lab_dir = out.resolve()
    if lab_dir == repo_dir:
        raise InputError("expected a directory of its own for the lab (such as lab/), not genie's source tree",
                         source=str(out))
    # relative to the lab directory, so that the lab (with its checkout) can be moved or shared
    repo_in_vagrantfile, excludes = os.path.relpath(repo_dir, lab_dir), REPO_EXCLUDES
    if lab_dir.is_relative_to(repo_dir):  # e.g. lab/ in the checkout: '..', and the lab (its key) stays out of VMs
        excludes += (f"/{lab_dir.relative_to(repo_dir).as_posix()}/",)
    files = lab_files(lab, repo=repo_in_vagrantfile, repo_excludes=excludes, source=source, wheelhouse=wheelhouse)
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = list(_ensure_key(out, lab.name))
        for relative, text in files.items():
            path = out / relative
            write_atomic(path, text)
            os.chmod(path, 0o755 if relative in _EXECUTABLE else 0o644)
            written.append(path)
    except OSError as error:
        raise InputError(f"cannot write the lab: {error.strerror or error}", source=str(out)) from None
    return written


def find_repo(repo: str | os.PathLike[str] | None) -> Path:
    """The genie source tree to sync into the VMs: `repo`, else the tree this genie runs from (editable install)."""
    candidate = Path(repo) if repo is not None else Path(genie.__file__).resolve().parent.parent
    if not (candidate / "scripts" / "setup.sh").is_file() or not (candidate / "pyproject.toml").is_file():
        where = f"{candidate} is not" if repo is not None else f"genie runs from {candidate}, which is not"
        raise InputError(f"{where} a genie source tree (no scripts/setup.sh and pyproject.toml); expected "
                         "`repo` pointing at a checkout of genie to install in the VMs", path="repo")
    return candidate.resolve()


def _ensure_key(out: Path, lab_name: str) -> list[Path]:
    """ssh/id_ed25519 and .pub: kept when both exist, else made by ssh-keygen (argv, no passphrase)."""
    private = out / KEY_PATH
    public = private.with_name(private.name + ".pub")
    if private.is_file() and public.is_file():
        return [private, public]
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise EnvironmentProblem("ssh-keygen not found: install openssh-client (the lab's VMs share one ssh key "
                                 "that genie lab render generates)")
    private.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(private.parent, 0o700)
    with tempfile.TemporaryDirectory(dir=private.parent, prefix=".keygen-") as tmp:
        tmp_key = Path(tmp) / "id_ed25519"
        argv = [keygen, "-q", "-t", "ed25519", "-N", "", "-C", f"genie-lab-{lab_name}", "-f", str(tmp_key)]
        try:
            result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                    timeout=SSH_KEYGEN_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem(f"ssh-keygen did not finish within {SSH_KEYGEN_TIMEOUT_S} s") from None
        if result.returncode != 0:
            raise EnvironmentProblem(f"ssh-keygen failed: {' '.join(result.stderr.split()) or result.returncode}")
        os.replace(tmp_key.with_name("id_ed25519.pub"), public)
        os.replace(tmp_key, private)
    return [private, public]
