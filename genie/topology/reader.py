"""Topology YAML -> Topology, with one-line errors naming the file and the field (``links[3].bandwidth``).

The format is described in docs/topology.md. Reading happens in two passes: this module checks the shape of
the document (keys, types, units) and builds a `Topology`; `validate_topology` then checks the network it
describes (names, links, connectivity, bridge loops, address space) with paths back into the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO, Any

from genie.core.limits import MAX_RANKS
from genie.core.errors import InputError, shown
from genie.core.files import InputKind, read_input
from genie.input_yaml import as_text, describe, parse_yaml
from genie.core.topology import Host, Link, LinkRole, Switch, SwitchKind, Topology
from genie.topology.link_properties import LINK_PROPERTY_KEYS, make_shape, property_for_key, shape_problems
from genie.topology.nodes import NODE_KEYS, read_nodes
from genie.topology.validation import (
    DEFAULT_SUBNET,
    TopologyPaths,
    did_you_mean,
    node_name_problem,
    parse_subnet,
    topology_name_problem,
    validate_topology,
)

TOP_LEVEL_KEYS = ("name", "subnet", "defaults", "hosts", "nodes", "switches", "links")
REQUIRED_TOP_LEVEL_KEYS = ("name",)
HOST_KEYS = ("name", "ranks", "prefix", "count", "start")
SWITCH_KEYS = ("name", "kind", "prefix", "count", "start")
LINK_KEYS = ("endpoints", *LINK_PROPERTY_KEYS, "role")
MAX_GROUP_COUNT = 100_000

_Fail = Callable[[str, str], InputError]


def load_topology(data: str | bytes | IO[str] | IO[bytes], *, source: str = "<string>") -> Topology:
    """Read a topology from YAML text, bytes or a stream; `source` names it in error messages."""
    document = parse_yaml(as_text(data, source, reader="load_topology"), source)

    def fail(path: str, message: str) -> InputError:
        return InputError(message, source=source, path=path)

    topology, paths = _topology_from_document(document, source, fail)
    return validate_topology(topology, source=source, paths=paths)


def load_topology_file(path: str | os.PathLike[str]) -> Topology:
    """Read a topology YAML file; errors name the file."""
    return load_topology(read_input(path, InputKind.TOPOLOGY), source=os.fspath(path))


# --- YAML ------------------------------------------------------------------------------------------------


# --- document -> Topology -----------------------------------------------------------------------------------


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _check_keys(mapping: dict[Any, Any], allowed: tuple[str, ...], path: str, fail: _Fail) -> None:
    for key in mapping:
        if not isinstance(key, str):
            raise fail(_join(path, key), f"expected a key among {', '.join(allowed)}, got {describe(key)}")
        if key not in allowed:
            raise fail(_join(path, key), f"unknown key {shown(key)}{did_you_mean(key, allowed)}; "
                                         f"expected one of: {', '.join(allowed)}")


def _list_at(document: dict[str, Any], key: str, fail: _Fail, *, required: bool) -> list[Any]:
    value = document.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        raise fail(key, f"expected a {'non-empty ' if required else ''}list of {key}, got {describe(value)}")
    return value


def _topology_from_document(document: object, source: str, fail: _Fail) -> tuple[Topology, TopologyPaths]:
    if not isinstance(document, dict):
        raise InputError(f"expected a mapping with keys {', '.join(TOP_LEVEL_KEYS)} at the top level, "
                         f"got {describe(document)}", source=source)
    _check_keys(document, TOP_LEVEL_KEYS, "", fail)
    for key in REQUIRED_TOP_LEVEL_KEYS:
        if key not in document:
            raise fail(key, f"missing required key {shown(key)}")
    if "hosts" not in document and "nodes" not in document:
        raise fail("hosts", "missing required key 'hosts' (or 'nodes' for multi-GPU nodes)")
    name = document["name"]
    if problem := topology_name_problem(name):
        raise fail("name", problem)
    try:
        subnet = str(parse_subnet(document.get("subnet", DEFAULT_SUBNET)))
    except ValueError as error:
        raise fail("subnet", str(error)) from None
    defaults = _read_defaults(document.get("defaults"), fail)
    hosts, host_paths = _read_hosts(_list_at(document, "hosts", fail, required="nodes" not in document), fail)
    switches, switch_paths = _read_switches(_list_at(document, "switches", fail, required=False), fail)
    links, link_paths = _read_links(_list_at(document, "links", fail, required=False), defaults, fail)
    nodes = read_nodes(_list_at(document, "nodes", fail, required=False), defaults, fail,
                       lambda entry, path: _node_names(entry, path, NODE_KEYS, "node", fail))
    hosts += tuple(h for h, _ in nodes.hosts)
    host_paths += tuple(p for _, p in nodes.hosts)
    if (world := sum(h.ranks for h in hosts)) > MAX_RANKS:
        raise fail("nodes", f"the hosts and nodes have {world} ranks; genie runs at most {MAX_RANKS} ranks")
    switches += tuple(s for s, _ in nodes.switches)
    switch_paths += tuple(p for _, p in nodes.switches)
    links += tuple(link for link, _ in nodes.links)
    link_paths += tuple(p for _, p in nodes.links)
    topology = Topology(name=name, hosts=hosts, switches=switches, links=links, subnet=subnet)
    return topology, TopologyPaths(hosts=host_paths, switches=switch_paths, links=link_paths)


def _read_shape_fields(mapping: dict[str, Any], path: str, fail: _Fail) -> dict[str, object]:
    """The LinkShape fields set by the property keys of `mapping` (other keys are the caller's)."""
    values: dict[str, object] = {}
    for key in LINK_PROPERTY_KEYS:
        if key in mapping:
            prop = property_for_key(key)
            try:
                values[prop.field] = prop.read(mapping[key])
            except ValueError as error:
                raise fail(_join(path, key), str(error)) from None
    return values


def _read_defaults(value: object, fail: _Fail) -> dict[str, object]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail("defaults", f"expected a mapping of link properties ({', '.join(LINK_PROPERTY_KEYS)}), "
                               f"got {describe(value)}")
    _check_keys(value, LINK_PROPERTY_KEYS, "defaults", fail)
    fields = _read_shape_fields(value, "defaults", fail)
    if problems := shape_problems(make_shape(**fields)):
        key, message = problems[0]
        raise fail(f"defaults.{key}", message)
    return fields


def _read_int(value: object, path: str, what: str, minimum: int, fail: _Fail, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum else f">= {minimum}"
        raise fail(path, f"expected {what} (an integer {bound}), got {describe(value)}")
    return value


def _node_names(entry: object, path: str, allowed: tuple[str, ...], what: str,
                fail: _Fail) -> list[tuple[str, str]]:
    """Names (with their paths) that one entry of `hosts` or `switches` defines."""
    if isinstance(entry, str):
        if problem := node_name_problem(entry):
            raise fail(path, problem)
        return [(entry, path)]
    if not isinstance(entry, dict):
        raise fail(path, f"expected a {what} name, or a mapping with 'name' (or 'prefix' and 'count'), "
                         f"got {describe(entry)}")
    _check_keys(entry, allowed, path, fail)
    group_keys = [k for k in ("prefix", "count", "start") if k in entry]
    if "name" in entry:
        if group_keys:
            raise fail(_join(path, group_keys[0]), f"expected either 'name' or 'prefix' and 'count' in one {what} "
                                                   "entry, not both")
        if problem := node_name_problem(entry["name"]):
            raise fail(_join(path, "name"), problem)
        return [(entry["name"], _join(path, "name"))]
    if "prefix" not in entry or "count" not in entry:
        missing = "prefix" if "prefix" not in entry else "count"
        raise fail(_join(path, missing), f"missing {shown(missing)}; expected 'name', or 'prefix' and 'count'")
    prefix = entry["prefix"]
    count = _read_int(entry["count"], _join(path, "count"), f"the number of {what}s", 1, fail, MAX_GROUP_COUNT)
    start = _read_int(entry.get("start", 0), _join(path, "start"), "the first number", 0, fail)
    if not isinstance(prefix, str):
        raise fail(_join(path, "prefix"), f"expected a name prefix (a string), got {describe(prefix)}")
    names = [f"{prefix}{start + i}" for i in range(count)]
    if problem := node_name_problem(names[-1]) or node_name_problem(names[0]):
        raise fail(_join(path, "prefix"), f"{problem} (from prefix {shown(prefix)})")
    return [(n, path) for n in names]


def _read_hosts(entries: list[Any], fail: _Fail) -> tuple[tuple[Host, ...], tuple[str, ...]]:
    hosts: list[Host] = []
    paths: list[str] = []
    for index, entry in enumerate(entries):
        path = f"hosts[{index}]"
        named = _node_names(entry, path, HOST_KEYS, "host", fail)
        ranks = 1
        if isinstance(entry, dict) and "ranks" in entry:
            ranks = _read_int(entry["ranks"], f"{path}.ranks", "the number of ranks on the host", 1, fail)
            if ranks > MAX_RANKS:
                raise fail(f"{path}.ranks", f"expected at most {MAX_RANKS} ranks (genie runs at most {MAX_RANKS} "
                                            f"ranks), got {ranks}")
        hosts.extend(Host(name=name, ranks=ranks) for name, _ in named)
        paths.extend(p for _, p in named)
        world = sum(h.ranks for h in hosts)
        if world > MAX_RANKS:
            raise fail(path, f"the hosts so far have {world} ranks; genie runs at most {MAX_RANKS} ranks")
    return tuple(hosts), tuple(paths)


def _read_switches(entries: list[Any], fail: _Fail) -> tuple[tuple[Switch, ...], tuple[str, ...]]:
    switches: list[Switch] = []
    paths: list[str] = []
    kinds = tuple(k.value for k in SwitchKind)
    for index, entry in enumerate(entries):
        path = f"switches[{index}]"
        named = _node_names(entry, path, SWITCH_KEYS, "switch", fail)
        kind = SwitchKind.BRIDGE
        if isinstance(entry, dict) and "kind" in entry:
            value = entry["kind"]
            if value not in kinds:
                raise fail(f"{path}.kind", f"expected one of {', '.join(kinds)}, got {describe(value)}"
                                           f"{did_you_mean(value, kinds)}")
            kind = SwitchKind(value)
        switches.extend(Switch(name=name, kind=kind) for name, _ in named)
        paths.extend(p for _, p in named)
    return tuple(switches), tuple(paths)


def _read_links(entries: list[Any], defaults: dict[str, object],
                fail: _Fail) -> tuple[tuple[Link, ...], tuple[str, ...]]:
    links: list[Link] = []
    paths: list[str] = []
    for index, entry in enumerate(entries):
        path = f"links[{index}]"
        if not isinstance(entry, dict):
            raise fail(path, f"expected a mapping such as {{endpoints: [h0, s0], bandwidth: 1gbit}}, "
                             f"got {describe(entry)}")
        _check_keys(entry, LINK_KEYS, path, fail)
        if "endpoints" not in entry:
            raise fail(f"{path}.endpoints", "missing 'endpoints'; expected two node names such as [h0, s0]")
        ends = entry["endpoints"]
        if not isinstance(ends, list) or len(ends) != 2:
            raise fail(f"{path}.endpoints", f"expected two node names such as [h0, s0], got {describe(ends)}"
                                            + (f" of {len(ends)}" if isinstance(ends, list) else ""))
        for end_index, end in enumerate(ends):
            if not isinstance(end, str):
                raise fail(f"{path}.endpoints[{end_index}]", f"expected a node name, got {describe(end)}")
        own = _read_shape_fields(entry, path, fail)
        shape = make_shape(**{**defaults, **own})
        if problems := shape_problems(shape):
            key, message = problems[0]
            if key == "jitter" and "jitter" not in entry and "delay" in entry:
                key = "delay"
            raise fail(f"{path}.{key}", message)
        role = entry.get("role", LinkRole.NETWORK.value)
        if role not in {r.value for r in LinkRole}:
            raise fail(f"{path}.role", f"expected one of {', '.join(r.value for r in LinkRole)}, got {describe(role)}")
        links.append(Link(a=ends[0], b=ends[1], shape=shape, role=LinkRole(role)))
        paths.append(path)
    return tuple(links), tuple(paths)
