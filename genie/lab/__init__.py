"""Vagrant labs: a topology as VMs (one per host, one per router) on private networks that follow its links.

`plan_lab` is pure (VMs, networks, addresses, routes); `render_lab` writes the Vagrantfile, provisioning
scripts, inventory and hostfiles. Walkthrough: vagrant/README.md.
"""

from genie.lab.plan import (DEFAULT_BOX, DEFAULT_CPUS, DEFAULT_MEMORY_MB, DEFAULT_ROUTER_MEMORY_MB, Lab, LabMachine,
                            LabNetwork, LabRoute, MachineRole, NetworkKind, plan_lab)
from genie.lab.render import lab_files, lab_inventory, render_lab, write_lab

__all__ = [
    "DEFAULT_BOX",
    "DEFAULT_CPUS",
    "DEFAULT_MEMORY_MB",
    "DEFAULT_ROUTER_MEMORY_MB",
    "Lab",
    "LabMachine",
    "LabNetwork",
    "LabRoute",
    "MachineRole",
    "NetworkKind",
    "lab_files",
    "lab_inventory",
    "plan_lab",
    "render_lab",
    "write_lab",
]
