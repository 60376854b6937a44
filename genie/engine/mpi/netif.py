"""This machine's IPv4 addresses and listeners inside a port range (the rank program's start-up; stdlib only).

Addresses come from `socket.if_nameindex()` and the SIOCGIFADDR / SIOCGIFNETMASK ioctls: the primary IPv4
address of every interface (secondary addresses are not seen; give the inventory an `interface` whose
primary address is the traffic address).
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import socket
import struct

from genie.core.errors import EnvironmentProblem

SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B


def local_ipv4_addresses() -> list[tuple[str, str]]:
    """[(ifname, "ip/prefix")] of the interfaces of the current network namespace that have IPv4."""
    out: list[tuple[str, str]] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                addr = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)[20:24])
                mask = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), SIOCGIFNETMASK, request)[20:24])
            except OSError:
                continue  # no IPv4 address on this interface
            prefix = ipaddress.IPv4Network(f"0.0.0.0/{mask}").prefixlen
            out.append((name, f"{addr}/{prefix}"))
    return out


def interface_of(address: str, local: list[tuple[str, str]]) -> str | None:
    """The interface holding `address` (None if this machine has no such address)."""
    for ifname, cidr in local:
        if cidr.split("/")[0] == address:
            return ifname
    return None


def listen_in_range(address: str, candidates: list[int] | None) -> socket.socket:
    """A TCP listener on `address`: on an ephemeral port (candidates None), or on the first free candidate; its
    backlog is the system's largest, as `genie.engine.links.listen_socket`'s."""
    ports = [0] if candidates is None else candidates
    for port in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE and candidates is not None:
                continue
            raise EnvironmentProblem(f"port {port}: {exc.strerror or exc}") from None
        sock.listen(socket.SOMAXCONN)
        return sock
    raise EnvironmentProblem(f"no free port ({len(ports)} tried, from {ports[0]})")
