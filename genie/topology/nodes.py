"""Multi-GPU nodes in a topology file (``nodes:``): a DGX-like machine in a few lines, expanded into the plain
hosts, switches and links every other part of genie reads (testbed, fabric model, lab). Pure.

A node entry ``{name: n0, gpus: 8, nvlink: {bandwidth: 7200gbit, delay: 1us}, rails: leaf}`` becomes
* one host per GPU, ``n0g0`` .. ``n0g7`` (one rank each, its own namespace and address: its own endpoint);
* the node's NVSwitch ``n0nvs`` (a router: every model of genie routes through it alike, one hop each way)
  with an ``intra_node`` link to every GPU, shaped by ``nvlink``;
* its NICs: ``nics: per-gpu`` (the default) gives GPU i its own NIC, linked to rail switch i (``rails: leaf``
  means ``leaf0`` .. ``leaf7``, or a list of switch names): rail-optimized, as DGX clusters are cabled.
  ``nics: N`` shares N NICs among the node's GPUs: NIC r links the NVSwitch to rail switch r, so a GPU's
  traffic leaves through the NVSwitch and whichever NIC the route (ECMP) takes. NIC links are shaped by
  ``nic`` (default: the file's ``defaults``).
Ranks are numbered node by node, GPU by GPU, after the ``hosts`` of the file. Routes are the testbed's own
(shortest paths, ECMP): within a node over NVLink; between nodes on the same rail through the rail switch;
across rails through a peer GPU's NVLink and its rail (as NCCL's PXN does) or the spines, whichever is shorter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from genie.core.errors import InputError, shown
from genie.core.topology import Host, Link, LinkRole, Switch, SwitchKind
from genie.input_yaml import describe
from genie.topology.link_properties import LINK_PROPERTY_KEYS, make_shape, property_for_key, shape_problems

NODE_KEYS = ("name", "prefix", "count", "start", "gpus", "nvlink", "nics", "nic", "rails")
MAX_GPUS_PER_NODE = 64
PER_GPU = "per-gpu"

_Fail = Callable[[str, str], InputError]


@dataclass(frozen=True)
class ExpandedNodes:
    """What the ``nodes`` entries become, each item with the path of the entry that made it."""

    hosts: tuple[tuple[Host, str], ...]
    switches: tuple[tuple[Switch, str], ...]
    links: tuple[tuple[Link, str], ...]


def gpu_host(node: str, gpu: int) -> str:
    return f"{node}g{gpu}"


def nvswitch(node: str) -> str:
    return f"{node}nvs"


def read_nodes(entries: list[Any], defaults: dict[str, object], fail: _Fail,
               node_names: Callable[[object, str], list[tuple[str, str]]]) -> ExpandedNodes:
    """Expand every ``nodes`` entry (see the module docstring). `node_names(entry, path)` reads an entry's
    ``name`` or ``prefix``/``count``/``start`` as hosts and switches are read."""
    hosts: list[tuple[Host, str]] = []
    switches: list[tuple[Switch, str]] = []
    links: list[tuple[Link, str]] = []
    for index, entry in enumerate(entries):
        path = f"nodes[{index}]"
        if not isinstance(entry, dict):
            raise fail(path, f"expected a mapping such as {{name: n0, gpus: 8, rails: leaf}}, got {describe(entry)}")
        names = node_names(entry, path)
        if "gpus" not in entry:
            raise fail(f"{path}.gpus", "missing 'gpus'; expected the number of GPUs of the node, such as 8")
        gpus = entry["gpus"]
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS_PER_NODE:
            raise fail(f"{path}.gpus", f"expected the number of GPUs (an integer between 1 and "
                                       f"{MAX_GPUS_PER_NODE}), got {describe(gpus)}")
        nvlink = _shape(entry.get("nvlink"), defaults, f"{path}.nvlink", fail)
        nic = _shape(entry.get("nic"), defaults, f"{path}.nic", fail)
        nics = _nics(entry.get("nics", PER_GPU), gpus, f"{path}.nics", fail)
        per_gpu = entry.get("nics", PER_GPU) == PER_GPU
        rails = _rails(entry.get("rails"), nics, f"{path}.rails", fail)
        for node, node_path in names:
            for name in (gpu_host(node, gpus - 1), nvswitch(node)):
                if len(name) > 15:
                    raise fail(node_path, f"node {shown(node)} makes the name {shown(name)}, longer than 15 "
                                          "characters (interface names are built from node names): shorten it")
            switches.append((Switch(nvswitch(node), SwitchKind.ROUTER), node_path))
            for gpu in range(gpus):
                host = gpu_host(node, gpu)
                hosts.append((Host(host), node_path))
                links.append((Link(host, nvswitch(node), nvlink, LinkRole.INTRA_NODE), f"{path}.nvlink"))
            for r, rail in enumerate(rails):
                end = gpu_host(node, r) if per_gpu else nvswitch(node)
                links.append((Link(end, rail, nic), f"{path}.rails"))
    return ExpandedNodes(tuple(hosts), tuple(switches), tuple(links))


def _shape(value: object, defaults: dict[str, object], path: str, fail: _Fail):
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise fail(path, f"expected a mapping of link properties ({', '.join(LINK_PROPERTY_KEYS)}), "
                         f"got {describe(value)}")
    fields: dict[str, object] = {}
    for key, raw in value.items():
        if key not in LINK_PROPERTY_KEYS:
            raise fail(f"{path}.{key}", f"unknown key {shown(key)}; expected one of: {', '.join(LINK_PROPERTY_KEYS)}")
        prop = property_for_key(key)
        try:
            fields[prop.field] = prop.read(raw)
        except ValueError as error:
            raise fail(f"{path}.{key}", str(error)) from None
    shape = make_shape(**{**defaults, **fields})
    if problems := shape_problems(shape):
        key, message = problems[0]
        raise fail(f"{path}.{key}", message)
    return shape


def _nics(value: object, gpus: int, path: str, fail: _Fail) -> int:
    if value == PER_GPU:
        return gpus
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= gpus:
        raise fail(path, f"expected {PER_GPU!r} (a NIC per GPU, rail-optimized) or the number of NICs the GPUs "
                         f"share (1..{gpus}), got {describe(value)}")
    return value


def _rails(value: object, nics: int, path: str, fail: _Fail) -> tuple[str, ...]:
    """The switch each NIC links to: ``leaf`` -> leaf0..leaf{nics-1}, or a list of ``nics`` switch names."""
    if value is None:
        raise fail(path, "missing 'rails'; expected the switches the NICs link to: a name prefix such as leaf "
                         "(NIC i to leaf<i>) or a list of switch names")
    if isinstance(value, str):
        return tuple(f"{value}{i}" for i in range(nics))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        if len(value) != nics:
            raise fail(path, f"expected one switch per NIC ({nics}), got {len(value)}")
        return tuple(value)
    raise fail(path, f"expected a switch name prefix or a list of switch names, got {describe(value)}")
