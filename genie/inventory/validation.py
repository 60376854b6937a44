"""Checks of inventory fields (one function per kind of value) and of the whole inventory.

Field checks return a problem text ("expected ..., got ...") or None; `validate_inventory` raises an
InputError naming the source and the path of the entry (``hosts[2].address``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

from genie.core.errors import InputError, shown
from genie.core.limits import MAX_RANKS
from genie.input_yaml import describe
from genie.inventory.model import Inventory, InventoryHost
from genie.topology.validation import node_name_problem, topology_name_problem

MAX_IFNAME_CHARS = 15  # IFNAMSIZ - 1
MAX_HOSTNAME_CHARS = 253
_HOSTNAME_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_NUMERIC = re.compile(r"[0-9.]+")
_IFNAME_FORBIDDEN = re.compile(r"[/:\s]")
_SSH_USER = re.compile(r"[A-Za-z_][A-Za-z0-9._-]{0,31}")
_IPV6_UNSUPPORTED = "IPv6 is not supported yet (the rank transport is IPv4)"


@dataclass(frozen=True)
class InventoryPaths:
    """Where each host's name and address were written (``hosts[1].name``; a bare entry is ``hosts[1]``)."""

    names: tuple[str, ...]
    addresses: tuple[str, ...]

    @staticmethod
    def of(inventory: Inventory) -> InventoryPaths:
        return InventoryPaths(tuple(f"hosts[{i}].name" for i in range(len(inventory.hosts))),
                              tuple(f"hosts[{i}].address" for i in range(len(inventory.hosts))))


def inventory_name_problem(name: object) -> str | None:
    if problem := topology_name_problem(name):
        return problem.replace("a topology name", "an inventory name")
    return None


def host_name_problem(name: object) -> str | None:
    """Host labels follow topology node names (1-15 characters), so an inventory can stand in for a topology;
    a long DNS name belongs in ``address``."""
    if problem := node_name_problem(name):
        problem = problem.replace("node name", "host name")
        if isinstance(name, str) and (len(name) > 15 or "." in name):
            problem += f"; for a machine known by a DNS name or IP write {{name: <label>, address: {name}}}"
        return problem
    return None


def ranks_problem(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"expected the number of ranks on the host (an integer >= 1), got {describe(value)}"
    if value > MAX_RANKS:
        return f"expected at most {MAX_RANKS} ranks on the host (genie runs at most {MAX_RANKS} ranks), got {value}"
    return None


def ssh_port_problem(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        return f"expected an ssh port (an integer between 1 and 65535), got {describe(value)}"
    return None


def ssh_user_problem(value: object) -> str | None:
    if not isinstance(value, str) or not _SSH_USER.fullmatch(value):
        return (f"expected a user name of 1-32 letters, digits, '.', '_' or '-' not starting with a digit, "
                f"'.' or '-', got {describe(value)}")
    return None


def interface_problem(value: object) -> str | None:
    """Linux interface names: 1-15 bytes, not '.' or '..', no '/', ':' or whitespace (dev_valid_name)."""
    expected = "expected a network interface name such as eth1 or enp65s0f0 (1-15 characters, no '/', ':' or spaces)"
    if not isinstance(value, str):
        return f"{expected}, got {describe(value)}"
    if (not value or len(value.encode()) > MAX_IFNAME_CHARS or value in (".", "..")
            or _IFNAME_FORBIDDEN.search(value)):
        return f"{expected}, got {shown(value)}"
    return None


def subnet_problem(value: object) -> str | None:
    """An IPv4 network written with its prefix length and no host bits (the network of the traffic NIC)."""
    expected = "expected an IPv4 network such as 10.0.0.0/24"
    if not isinstance(value, str) or "/" not in value:
        return f"{expected}, got {describe(value)}"
    if ":" in value:
        return f"{_IPV6_UNSUPPORTED}; {expected}, got {shown(value)}"
    try:
        network = ipaddress.IPv4Network(value.strip(), strict=True)
    except ValueError as error:
        return f"{expected}, got {shown(value)} ({error})"
    if network.is_multicast or network.is_reserved or network.overlaps(ipaddress.IPv4Network("0.0.0.0/8")):
        return f"{expected}, got {shown(value)} (multicast, reserved or 'this network' range)"
    return None


def address_problem(value: object) -> str | None:
    """A hostname (RFC 1123) or a unicast IPv4 address."""
    expected = "expected a hostname or an IPv4 address such as node1.example.org or 10.0.0.11"
    if not isinstance(value, str) or not value:
        return f"{expected}, got {describe(value)}"
    if ":" in value:
        return f"{_IPV6_UNSUPPORTED}; {expected}, got {shown(value)}"
    if _NUMERIC.fullmatch(value):
        try:
            ip = ipaddress.IPv4Address(value)
        except ValueError as error:
            return f"{expected}, got {shown(value)} (not a valid IPv4 address: {error})"
        if ip.is_unspecified or ip.is_multicast or ip.is_reserved or ip == ipaddress.IPv4Address("255.255.255.255"):
            return f"{expected}, got {shown(value)} (not a unicast host address)"
        return None
    name = value[:-1] if value.endswith(".") else value
    if len(name) > MAX_HOSTNAME_CHARS or not all(_HOSTNAME_LABEL.fullmatch(label) for label in name.split(".")):
        return (f"{expected}, got {shown(value)} (a hostname is dot-separated labels of 1-63 letters, digits and "
                "'-', not starting or ending with '-')")
    return None


def normalized_address(address: str) -> str:
    """The form two addresses are compared in: IPv4 canonical, hostnames lower case without the final dot."""
    try:
        return str(ipaddress.IPv4Address(address))
    except ValueError:
        return address.lower().rstrip(".")


def is_loopback(address: str) -> bool:
    name = normalized_address(address)
    try:
        return ipaddress.IPv4Address(name).is_loopback
    except ValueError:
        return name == "localhost" or name.endswith(".localhost")


# field -> check, in the order a host's fields are checked
HOST_FIELD_CHECKS: dict[str, Callable[[object], str | None]] = {
    "name": host_name_problem,
    "address": address_problem,
    "ranks": ranks_problem,
    "interface": interface_problem,
    "subnet": subnet_problem,
    "ssh_user": ssh_user_problem,
    "ssh_port": ssh_port_problem,
}
OPTIONAL_FIELDS = ("interface", "subnet", "ssh_user", "ssh_port")  # None means "not set"


def host_problems(host: InventoryHost) -> list[tuple[str, str]]:
    """(field, problem) for every field of `host` that does not pass its check."""
    problems = []
    for field, check in HOST_FIELD_CHECKS.items():
        value = getattr(host, field)
        if value is None and field in OPTIONAL_FIELDS:
            continue
        if problem := check(value):
            problems.append((field, problem))
    return problems


def validate_inventory(inventory: Inventory, *, source: str = "<inventory>",
                       paths: InventoryPaths | None = None) -> Inventory:
    """Return `inventory` unchanged when it is usable; otherwise raise InputError naming source and path."""
    where = paths or InventoryPaths.of(inventory)

    def fail(path: str, message: str) -> InputError:
        return InputError(message, source=source, path=path)

    if problem := inventory_name_problem(inventory.name):
        raise fail("name", problem)
    if not inventory.hosts:
        raise fail("hosts", "expected at least one host")
    first_name: dict[str, int] = {}
    first_address: dict[str, int] = {}
    for index, host in enumerate(inventory.hosts):
        for field, problem in host_problems(host):
            located = {"name": where.names[index], "address": where.addresses[index]}
            raise fail(located.get(field, f"hosts[{index}].{field}"), problem)
        if host.name in first_name:
            first = first_name[host.name]
            raise fail(where.names[index], f"duplicate host name {shown(host.name)} (first defined at "
                                           f"{_entry(where.names[first])}); expected every host name to be unique")
        first_name[host.name] = index
        key = normalized_address(host.address)
        if key in first_address:
            first = first_address[key]
            raise fail(where.addresses[index], f"duplicate address {shown(host.address)} (also host "
                                               f"{shown(inventory.hosts[first].name)} at {_entry(where.names[first])}); "
                                               "expected one entry per machine: give it more ranks with 'ranks: N'")
        first_address[key] = index
    world = sum(h.ranks for h in inventory.hosts)
    if world > MAX_RANKS:
        raise fail("hosts", f"the hosts have {world} ranks; genie runs at most {MAX_RANKS} ranks")
    _check_loopback(inventory, where, fail)
    return inventory


def _entry(path: str) -> str:
    """``hosts[3].name`` -> ``hosts[3]``."""
    return path.split("].", 1)[0] + "]" if "]." in path else path


def _check_loopback(inventory: Inventory, where: InventoryPaths,
                    fail: Callable[[str, str], InputError]) -> None:
    """Loopback addresses work only when every host is this machine: remote ranks cannot reach 127.0.0.1."""
    loopback = [is_loopback(h.address) for h in inventory.hosts]
    if any(loopback) and not all(loopback):
        index = loopback.index(True)
        other = loopback.index(False)
        raise fail(where.addresses[index],
                   f"loopback address {shown(inventory.hosts[index].address)} mixed with hosts on other addresses "
                   f"(such as {shown(inventory.hosts[other].name)} at {_entry(where.names[other])}): ranks on other "
                   "machines cannot reach a loopback address; expected every host's address on the network that "
                   "joins them, or all hosts on loopback")
