"""Vagrant labs: a topology as VMs (one per host, router and bridge) on private networks, one per link.

`plan_lab` is pure (VMs, networks, addresses, routes); `render_lab` writes the Vagrantfile, provisioning
scripts, inventory and hostfiles; `genie.lab.shape` plans a VM's link shaping from the testbed's own steps
(applied and verified by `genie.services.lab`). Walkthrough: vagrant/README.md.
"""

from genie.lab.plan import (DEFAULT_BOX, DEFAULT_CPUS, DEFAULT_MEMORY_MB, DEFAULT_ROUTER_MEMORY_MB, Lab, LabMachine,
                            LabNetwork, LabRoute, LabSizing, MachineRole, NetworkKind, default_sizing, plan_lab,
                            sizing_warnings)
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
    "LabSizing",
    "MachineRole",
    "NetworkKind",
    "default_sizing",
    "lab_files",
    "lab_inventory",
    "plan_lab",
    "render_lab",
    "sizing_warnings",
    "write_lab",
]
