"""Topology -> YAML text in the format of docs/topology.md; `load_topology(dump_topology(t)) == t`.

The most common link shape becomes `defaults`; each link lists only what differs from it. Runs of hosts or
switches named ``<prefix><n>``, ``<prefix><n+1>``, ... with equal attributes are written in the compact
``{prefix, count}`` form.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from genie.core.topology import Host, LinkRole, LinkShape, Switch, Topology
from genie.topology.link_properties import shape_to_yaml

_NUMBERED = re.compile(r"(?P<prefix>.*?)(?P<number>0|[1-9][0-9]*)")


class _Flow(dict):  # type: ignore[type-arg]
    """A mapping written on one line: ``{endpoints: [h0, s0], bandwidth: 1gbit}``."""


class _Dumper(yaml.SafeDumper):
    """Indents list items under their key, writes `_Flow` mappings in flow style."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


_Dumper.add_representer(
    _Flow, lambda dumper, data: dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True))


def dump_topology(topology: Topology) -> str:
    """YAML text for `topology`; loading it gives back an equal Topology."""
    document: dict[str, Any] = {"name": topology.name, "subnet": topology.subnet}
    defaults = _most_common_shape(topology)
    if defaults_yaml := shape_to_yaml(defaults):
        document["defaults"] = defaults_yaml
    document["hosts"] = _node_entries(topology.hosts, lambda h: {"ranks": h.ranks} if h.ranks != 1 else {})
    if topology.switches:
        document["switches"] = _node_entries(topology.switches, lambda s: {"kind": s.kind.value})
    if topology.links:
        document["links"] = [
            _Flow(endpoints=[link.a, link.b], **shape_to_yaml(link.shape, relative_to=defaults),
                  **({"role": link.role.value} if link.role is not LinkRole.NETWORK else {}))
            for link in topology.links
        ]
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120,
                     allow_unicode=True)


def _most_common_shape(topology: Topology) -> LinkShape:
    counts = Counter(link.shape for link in topology.links)
    return counts.most_common(1)[0][0] if counts else LinkShape()


def _node_entries(nodes: Sequence[Host | Switch],
                  attributes: Callable[[Any], dict[str, object]]) -> list[_Flow]:
    """One entry per node, or one ``{prefix, count}`` entry per run of consecutively numbered equal nodes."""
    entries: list[_Flow] = []
    index = 0
    while index < len(nodes):
        first = nodes[index]
        match = _NUMBERED.fullmatch(first.name)
        run = 1
        if match:
            prefix, number = match.group("prefix"), int(match.group("number"))
            while (index + run < len(nodes)
                   and nodes[index + run].name == f"{prefix}{number + run}"
                   and attributes(nodes[index + run]) == attributes(first)):
                run += 1
        if run > 1 and match:
            entry = _Flow(prefix=match.group("prefix"), count=run)
            if int(match.group("number")) != 0:
                entry["start"] = int(match.group("number"))
        else:
            entry = _Flow(name=first.name)
        entry.update(attributes(first))
        entries.append(entry)
        index += run
    return entries
