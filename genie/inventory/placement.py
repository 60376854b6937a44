"""Inventory -> what the bench/replay engine places ranks on. Pure.

* `inventory_to_testbed_info`: a `TestbedInfo` whose hosts run in the current namespace of their machine
  (``netns=None``) at their inventory ``address``; its topology lists the hosts and their ranks and no links
  (genie does not know, and does not shape, the network between real machines).
* `traffic_address`: on a host, the address its ranks listen on, chosen among the machine's own IPv4 addresses
  by the inventory's ``interface`` and ``subnet``. Reading the machine's addresses is the caller's job (the rank
  program, at start-up); this function only chooses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from genie.core.errors import EnvironmentProblem
from genie.core.testbed import HostEndpoint, Shaping, TestbedInfo
from genie.core.topology import Host, Topology
from genie.inventory.model import Inventory, InventoryHost
from genie.inventory.validation import normalized_address

REAL_HOSTS_SHAPER = Shaping.NONE  # genie shapes nothing on real hosts


def inventory_to_testbed_info(inventory: Inventory) -> TestbedInfo:
    """The inventory as a testbed: one endpoint per host (no namespace, its inventory address), no link ends.

    ``prefix`` is empty: genie creates no namespaces, links or qdiscs on real hosts, so it owns nothing there
    that a cleanup could match by prefix.
    """
    topology = Topology(name=inventory.name, hosts=tuple(Host(h.name, h.ranks) for h in inventory.hosts))
    hosts = tuple(HostEndpoint(host=h.name, netns=None, address=h.address) for h in inventory.hosts)
    return TestbedInfo(name=inventory.name, prefix="", topology=topology, hosts=hosts, shaper=REAL_HOSTS_SHAPER)


def traffic_address(host: InventoryHost, local_addresses: Iterable[tuple[str, str]]) -> str:
    """The address `host`'s ranks listen on, given the machine's IPv4 addresses as ``(ifname, "ip/prefix")``.

    Without ``interface`` and ``subnet`` it is the inventory ``address``. Otherwise the candidates are the
    addresses on ``interface`` and/or inside ``subnet``; the inventory ``address`` wins when it is one of them,
    else the first candidate in the order given. No candidate -> EnvironmentProblem naming what was found.
    """
    if host.interface is None and host.subnet is None:
        return host.address
    found = [(ifname, ipaddress.IPv4Interface(cidr)) for ifname, cidr in local_addresses]
    network = ipaddress.IPv4Network(host.subnet) if host.subnet else None
    candidates = [str(iface.ip) for ifname, iface in found
                  if (host.interface is None or ifname == host.interface)
                  and (network is None or iface.ip in network)]
    if not candidates:
        wanted = " ".join(filter(None, [f"on interface {host.interface}" if host.interface else "",
                                        f"inside {host.subnet}" if host.subnet else ""]))
        seen = ", ".join(f"{ifname} {iface.with_prefixlen}" for ifname, iface in found) or "none"
        raise EnvironmentProblem(f"host {host.name}: no IPv4 address {wanted} for genie traffic "
                                 f"(this machine has: {seen}); fix 'interface'/'subnet' in the inventory")
    own = normalized_address(host.address)
    return own if own in candidates else candidates[0]
