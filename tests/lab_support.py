"""Shared by the lab tests: what a rendered lab's VMs look like from inside."""

from __future__ import annotations

from genie.lab import Lab


def vm_addresses(lab: Lab, machine: str) -> dict[str, str]:
    """A VM's addresses as Vagrant would give them: the NAT NIC eth0, then lab NICs ens5, ens6... in network order
    (each found by its address and its MAC; a bridge's ports have only their MAC)."""
    addresses = {"10.0.2.15": "eth0", "52:54:00:12:34:56": "eth0"}
    for k, name in enumerate(lab.machine(machine).networks):
        network = lab.network(name)
        for address in (network.address_of(machine), network.mac_of(machine)):
            if address:
                addresses[address] = f"ens{5 + k}"
    return addresses
