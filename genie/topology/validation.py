"""Whole-topology checks: names, subnet, links, connectivity, bridge loops, address space.

`validate_topology` works on any `Topology` (from YAML or from a builder); the YAML reader passes
`TopologyPaths` so that errors point at the entries of the file (``hosts[2]``, ``links[3].endpoints``).
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from genie.core.errors import InputError, shown
from genie.core.topology import Host, Switch, SwitchKind, Topology
from genie.topology.graph import adjacency, bridged_segments, bridges, hop_distances
from genie.topology.link_properties import shape_problems

DEFAULT_SUBNET = "198.18.0.0/15"
NODE_NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,14}")
TOPOLOGY_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_NOT_SUBNET = ipaddress.IPv4Network("0.0.0.0/8")
_Fail = Callable[[str, str], InputError]


@dataclass(frozen=True)
class TopologyPaths:
    """Where each host, switch and link of a Topology was written, one path per element, in model order."""

    hosts: tuple[str, ...]
    switches: tuple[str, ...]
    links: tuple[str, ...]
    name: str = "name"
    subnet: str = "subnet"

    @staticmethod
    def of(topology: Topology) -> TopologyPaths:
        """Paths by position in the model: ``hosts[0]``, ``switches[0]``, ``links[0]``."""
        return TopologyPaths(
            hosts=tuple(f"hosts[{i}]" for i in range(len(topology.hosts))),
            switches=tuple(f"switches[{i}]" for i in range(len(topology.switches))),
            links=tuple(f"links[{i}]" for i in range(len(topology.links))),
        )


def node_name_problem(name: object) -> str | None:
    """Why `name` cannot name a host or switch, or None. Short names let a backend build interface names."""
    if not isinstance(name, str):
        return f"expected a node name (a string), got {shown(name)}; quote it"
    if not NODE_NAME_PATTERN.fullmatch(name):
        return (f"expected a node name of 1-15 letters, digits, '-' or '_' starting with a letter, "
                f"got {shown(name)}")
    return None


def topology_name_problem(name: object) -> str | None:
    if not isinstance(name, str) or not TOPOLOGY_NAME_PATTERN.fullmatch(name):
        return (f"expected a topology name of 1-64 letters, digits, '.', '-' or '_' starting with a letter "
                f"or digit, got {shown(name)}")
    return None


def parse_subnet(text: object) -> ipaddress.IPv4Network:
    """A private IPv4 network written with its prefix length and no host bits; ValueError("expected ...")."""
    expected = f"expected a private IPv4 network such as {DEFAULT_SUBNET} or 10.0.0.0/8"
    if not isinstance(text, str) or "/" not in text:
        raise ValueError(f"{expected}, got {shown(text)}")
    try:
        network = ipaddress.IPv4Network(text.strip(), strict=True)
    except ValueError as error:
        raise ValueError(f"{expected}, got {shown(text)} ({error})") from None
    unusable = (network.is_loopback or network.is_link_local or network.is_multicast or network.is_reserved
                or network.is_unspecified or network.overlaps(_NOT_SUBNET))
    if unusable or not network.is_private:
        raise ValueError(f"{expected}, got {shown(text)} (not a private, unicast range)")
    return network


def address_demand(topology: Topology) -> int:
    """A lower bound on the addresses a testbed needs: one per host or router interface (a link end that is
    not a bridge port), one per unlinked host, plus the network and broadcast addresses."""
    bridge_names = bridges(topology)
    interfaces = sum(end not in bridge_names for link in topology.links for end in link.endpoints)
    linked = {end for link in topology.links for end in link.endpoints}
    unlinked_hosts = sum(h.name not in linked for h in topology.hosts)
    return interfaces + unlinked_hosts + 2


def validate_topology(topology: Topology, *, source: str = "<topology>",
                      paths: TopologyPaths | None = None) -> Topology:
    """Return `topology` unchanged when it can be built; otherwise raise InputError naming source and path."""
    where = paths or TopologyPaths.of(topology)

    def fail(path: str, message: str) -> InputError:
        return InputError(message, source=source, path=path)

    if problem := topology_name_problem(topology.name):
        raise fail(where.name, problem)
    try:
        network = parse_subnet(topology.subnet)
    except ValueError as error:
        raise fail(where.subnet, str(error)) from None
    if not topology.hosts:
        raise fail("hosts", "expected at least one host")
    node_paths = _check_nodes(topology, where, fail)
    _check_links(topology, where, fail)
    _check_connected(topology, node_paths, fail)
    _check_bridges(topology, where, fail)
    demand = address_demand(topology)
    if demand > network.num_addresses:
        raise fail(where.subnet, f"subnet {network} has {network.num_addresses} addresses but the topology needs "
                                 f"at least {demand} (one per host or router interface, plus network and "
                                 f"broadcast); use a larger subnet such as {DEFAULT_SUBNET}")
    return topology


def _check_nodes(topology: Topology, where: TopologyPaths, fail: _Fail) -> dict[str, str]:
    """Names valid and unique, ranks and kinds sane. Returns node name -> path."""
    seen: dict[str, str] = {}
    nodes: list[tuple[Host | Switch, str]] = [*zip(topology.hosts, where.hosts), *zip(topology.switches,
                                                                                      where.switches)]
    for node, path in nodes:
        if problem := node_name_problem(node.name):
            raise fail(path, problem)
        if node.name in seen:
            raise fail(path, f"duplicate node name {shown(node.name)} (first defined at {seen[node.name]}); "
                             "expected every host and switch name to be unique")
        seen[node.name] = path
        if isinstance(node, Host) and (isinstance(node.ranks, bool) or not isinstance(node.ranks, int)
                                       or node.ranks < 1):
            raise fail(path, f"host {shown(node.name)}: expected ranks to be an integer >= 1, got {shown(node.ranks)}")
        if isinstance(node, Switch) and not isinstance(node.kind, SwitchKind):
            raise fail(path, f"switch {shown(node.name)}: expected a SwitchKind, got {shown(node.kind)}")
    return seen


def _check_links(topology: Topology, where: TopologyPaths, fail: _Fail) -> None:
    names = set(topology.node_names())
    first_at: dict[frozenset[str], str] = {}
    for link, path in zip(topology.links, where.links):
        for end in link.endpoints:
            if end not in names:
                raise fail(f"{path}.endpoints", f"unknown node {shown(end)}{did_you_mean(end, names, cutoff=0.5)}; "
                                                "expected one of the hosts or switches")
        if link.a == link.b:
            raise fail(f"{path}.endpoints", f"self-loop on {shown(link.a)}; expected two different nodes")
        pair = frozenset(link.endpoints)
        if pair in first_at:
            raise fail(f"{path}.endpoints", f"duplicate link between {shown(link.a)} and {shown(link.b)} (first at "
                                            f"{first_at[pair]}); expected at most one link per pair of nodes")
        first_at[pair] = path
        if problems := shape_problems(link.shape):
            key, message = problems[0]
            raise fail(f"{path}.{key}", message)


def _check_connected(topology: Topology, node_paths: dict[str, str], fail: _Fail) -> None:
    neighbours = adjacency(topology)
    if len(neighbours) == 1:
        return
    for node, peers in neighbours.items():
        if not peers:
            kind = "host" if node in {h.name for h in topology.hosts} else "switch"
            raise fail(node_paths[node], f"{kind} {shown(node)} has no link; expected every node to be linked")
    reached = hop_distances(neighbours, topology.hosts[0].name)
    unreached = [name for name in neighbours if name not in reached]
    if unreached:
        unreached_names = ", ".join(repr(n) for n in unreached[:5]) + (", ..." if len(unreached) > 5 else "")
        raise fail("links", f"the topology is not connected: {unreached_names} cannot reach {shown(topology.hosts[0].name)}; "
                            "expected one connected network")


def _check_bridges(topology: Topology, where: TopologyPaths, fail: _Fail) -> None:
    """No loop of bridges (it would need spanning tree), and no node with two links into one bridged segment."""
    bridge_names = bridges(topology)
    segment = bridged_segments(topology)
    parent = {name: name for name in bridge_names}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    attached: dict[tuple[str, int], str] = {}
    for link, path in zip(topology.links, where.links):
        a_bridge, b_bridge = link.a in bridge_names, link.b in bridge_names
        if a_bridge and b_bridge:
            ra, rb = root(link.a), root(link.b)
            if ra == rb:
                raise fail(path, f"bridges {shown(link.a)} and {shown(link.b)} are already connected through other bridges, "
                                 "so this link makes a bridge loop (it would need spanning tree); expected "
                                 "multi-switch fabrics with loops to use kind: router")
            parent[ra] = rb
        elif a_bridge or b_bridge:
            bridge, node = (link.a, link.b) if a_bridge else (link.b, link.a)
            key = (node, segment[bridge])
            if key in attached:
                raise fail(path, f"{shown(node)} has a second link into the bridged segment of {shown(bridge)} (first at "
                                 f"{attached[key]}); expected one link per node and bridged segment")
            attached[key] = path


def did_you_mean(word: object, choices: Iterable[str], *, cutoff: float = 0.6) -> str:
    """" (did you mean 'bandwidth'?)" when a choice is close to `word` (difflib ratio >= cutoff), else ''."""
    close = difflib.get_close_matches(str(word), sorted(choices), n=1, cutoff=cutoff)
    return f" (did you mean {shown(close[0])}?)" if close else ""
