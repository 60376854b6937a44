"""Pure builders of the usual topologies. Hosts are named h0, h1, ... everywhere, so rank placement reads the
same whatever the fabric; every result is validated."""

from __future__ import annotations

from genie.core.errors import InputError, shown
from genie.core.topology import Host, Link, LinkShape, Switch, SwitchKind, Topology
from genie.topology.validation import validate_topology


def _at_least(value: int, minimum: int, builder: str, argument: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"expected an integer >= {minimum}, got {shown(value)}", source=builder, path=argument)


def _hosts(count: int, ranks_per_host: int, builder: str) -> tuple[Host, ...]:
    _at_least(ranks_per_host, 1, builder, "ranks_per_host")
    return tuple(Host(name=f"h{i}", ranks=ranks_per_host) for i in range(count))


def star(n: int, *, shape: LinkShape = LinkShape(), ranks_per_host: int = 1, name: str | None = None) -> Topology:
    """Hosts h0..h{n-1}, each linked (host first) to one bridge ``s0``."""
    _at_least(n, 1, "star", "n")
    hosts = _hosts(n, ranks_per_host, "star")
    links = tuple(Link(a=h.name, b="s0", shape=shape) for h in hosts)
    topology = Topology(name=name or f"star-{n}", hosts=hosts, switches=(Switch("s0", SwitchKind.BRIDGE),),
                        links=links)
    return validate_topology(topology, source="star")


def ring(n: int, *, shape: LinkShape = LinkShape(), ranks_per_host: int = 1, name: str | None = None) -> Topology:
    """Hosts h0..h{n-1} linked directly in a ring, h_i -- h_{(i+1) mod n}; no switches, hosts forward traffic.

    Two hosts get a single link.
    """
    _at_least(n, 2, "ring", "n")
    hosts = _hosts(n, ranks_per_host, "ring")
    pairs = [(0, 1)] if n == 2 else [(i, (i + 1) % n) for i in range(n)]
    links = tuple(Link(a=f"h{i}", b=f"h{j}", shape=shape) for i, j in pairs)
    return validate_topology(Topology(name=name or f"ring-{n}", hosts=hosts, links=links), source="ring")


def leaf_spine(leaves: int, hosts_per_leaf: int, spines: int, *, shape: LinkShape = LinkShape(),
               fabric_shape: LinkShape | None = None, ranks_per_host: int = 1,
               name: str | None = None) -> Topology:
    """Routers leaf0.. and spine0..; hosts h{l*hosts_per_leaf}.. attach to leaf l; every leaf links to every spine.

    Link order: host links (host first) leaf by leaf, then fabric links leaf by leaf, spine by spine (leaf
    first). `shape` applies to host links, `fabric_shape` (default: `shape`) to leaf-spine links.
    Routing (static routes, ECMP over the spines) is the testbed's job; see genie.topology.routing.
    """
    _at_least(leaves, 1, "leaf_spine", "leaves")
    _at_least(hosts_per_leaf, 1, "leaf_spine", "hosts_per_leaf")
    _at_least(spines, 1, "leaf_spine", "spines")
    fabric = shape if fabric_shape is None else fabric_shape
    hosts = _hosts(leaves * hosts_per_leaf, ranks_per_host, "leaf_spine")
    switches = tuple(Switch(f"leaf{i}", SwitchKind.ROUTER) for i in range(leaves)) + tuple(
        Switch(f"spine{i}", SwitchKind.ROUTER) for i in range(spines))
    host_links = tuple(Link(a=h.name, b=f"leaf{i // hosts_per_leaf}", shape=shape) for i, h in enumerate(hosts))
    fabric_links = tuple(
        Link(a=f"leaf{leaf}", b=f"spine{spine}", shape=fabric) for leaf in range(leaves) for spine in range(spines))
    topology = Topology(name=name or f"leaf-spine-{leaves}x{hosts_per_leaf}", hosts=hosts, switches=switches,
                        links=host_links + fabric_links)
    return validate_topology(topology, source="leaf_spine")
