"""A lab VM's link shaping: the emulated testbed's own shaping steps for the node the VM stands for. Pure.

One source of truth: `genie.testbed.plan.node_shaping_steps` plans what the namespace testbed would shape in
that node's namespace — HTB classes on every link end's egress, netem (KERNEL shaper) or the userspace link
emulator with its NFQUEUE rules (USERSPACE), larger TCP buffers where links have delays — and this module only
renames the testbed's interfaces (``eth0, eth1, ...`` in link order) to the VM's, found by the address Vagrant
gave each of its lab NICs (box images name NICs differently) — a bridge VM's ports, which have no address, by
the fixed MAC the Vagrantfile gave them (the testbed's veth MAC of that link end). Both ends of every link are
shaped, each by its own VM: a bridge VM shapes the egress of each of its ports as the testbed's bridge
namespace does, so many senders into one host are limited at the switch. With the userspace emulator the
receiver of a bridged segment runs each packet through the stages of the links it crossed, telling senders
apart by their source MAC — the same fixed MACs, set by Vagrant on every NIC of a bridge's port network.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from genie.core.errors import EnvironmentProblem, InputError
from genie.lab.plan import Lab
from genie.linkemu.config import EmulatorConfig
from genie.testbed.layout import plan_layout
from genie.testbed.plan import node_shaping_steps
from genie.testbed.steps import AddHtb, AddNetem, AddPfifo, AddQueueRule, PlanStep, SetSysctl, Shaper, StartEmulator

LAYOUT_NAME = "lab"  # the testbed layout the lab's steps are planned in (its namespace names are not used)


@dataclass(frozen=True)
class LabInterface:
    """One lab NIC of a VM: topology link ``link_index``, the address Vagrant gave it (a bridge's port: its MAC),
    its name in the VM and its name in the emulated testbed."""

    link_index: int
    address: str
    ifname: str
    testbed_ifname: str


@dataclass(frozen=True)
class MachineShaping:
    machine: str
    shaper: Shaper
    interfaces: tuple[LabInterface, ...]
    steps: tuple[PlanStep, ...]  # named by the machine, with the VM's interface names

    def describe(self) -> list[str]:
        lines = [f"{self.machine}: shaper {self.shaper.value}; "
                 + ", ".join(f"links[{i.link_index}] {i.address} on {i.ifname} (testbed {i.testbed_ifname})"
                             for i in self.interfaces)]
        return lines + [f"  {k}. {step.describe()}" for k, step in enumerate(self.steps, 1)]


def lab_interfaces(lab: Lab, machine: str, addresses: Mapping[str, str]) -> tuple[LabInterface, ...]:
    """The machine's lab NICs in testbed order; `addresses` maps every address of the VM (IPv4 addresses and
    MACs, lower case) to its interface. EnvironmentProblem when one of the lab's addresses is on no interface
    (not the right VM, or not up)."""
    layout = plan_layout(lab.topology, LAYOUT_NAME)
    found = []
    for end in layout.ends:
        if end.node != machine:
            continue
        address = lab.end_address(end.link_index, machine) or lab.end_mac(end.link_index, machine)
        if address is None:
            continue
        if address not in addresses:
            what = "the lab address" if end.bridge is None else "the MAC address of bridge port"
            raise EnvironmentProblem(f"{machine}: no interface has {what} {address} (links[{end.link_index}] "
                                     f"{end.node} - {end.peer}); is this the lab's VM {machine}, with its "
                                     "private networks up?")
        found.append(LabInterface(end.link_index, address, addresses[address], end.ifname))
    return tuple(found)


def _check_machine(lab: Lab, machine: str) -> None:
    if machine not in {m.name for m in lab.machines}:
        raise InputError(f"expected one of the lab's VMs ({', '.join(m.name for m in lab.machines)}), "
                         f"got {machine!r}", path="machine")


def check_lab_machine(lab: Lab, machine: str, hostname: str) -> None:
    """Refuse to shape the network of a machine that is not lab VM `machine`: `genie lab shape` changes the
    real network of the machine it runs on (qdiscs on its NICs, iptables rules, an emulator), so it acts only
    where this machine's `hostname` (short name, case-insensitive) is the one Vagrant gave that VM
    (``node.vm.hostname`` in the Vagrantfile; `LabMachine.hostname`). The workstation that rendered the lab, or
    any other machine, carries no lab VM's hostname; a wrong ``--machine`` inside the lab is refused too."""
    _check_machine(lab, machine)
    expected = lab.machine(machine).hostname
    if hostname.split(".")[0].lower() != expected.lower():
        raise EnvironmentProblem(f"refusing to shape this machine's network: its hostname is {hostname!r}, not "
                                 f"{expected!r} (lab {lab.name}'s VM {machine}); `genie lab shape` runs inside "
                                 "that VM (provisioner \"shape\"); --dry-run only prints the steps")


def plan_machine_shaping(lab: Lab, machine: str, shaper: Shaper, addresses: Mapping[str, str]) -> MachineShaping:
    """The testbed's shaping steps for `machine`, renamed to the VM's interfaces."""
    _check_machine(lab, machine)
    interfaces = lab_interfaces(lab, machine, addresses)
    rename = {i.testbed_ifname: i.ifname for i in interfaces}
    layout = plan_layout(lab.topology, LAYOUT_NAME)
    steps = tuple(_renamed(step, machine, rename) for step in node_shaping_steps(layout, machine, shaper))
    return MachineShaping(machine, shaper, interfaces, steps)


def _renamed(step: PlanStep, label: str, rename: Mapping[str, str]) -> PlanStep:
    match step:
        case AddHtb() | AddNetem() | AddPfifo() | AddQueueRule():
            return replace(step, netns=label, ifname=rename[step.ifname])
        case SetSysctl():
            return replace(step, netns=label)
        case StartEmulator(config=config):
            return StartEmulator(label, _renamed_config(config, label, rename))
    raise TypeError(f"not a shaping step: {step!r}")


def _renamed_config(config: EmulatorConfig, label: str, rename: Mapping[str, str]) -> EmulatorConfig:
    return replace(config, netns=label, queues=tuple(replace(q, ifname=rename[q.ifname]) for q in config.queues))
