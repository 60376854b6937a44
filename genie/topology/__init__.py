"""Topology YAML <-> Topology, validation with paths, builders and equal-cost routing. Pure: imports core only.

See docs/topology.md for the file format.
"""

from genie.topology.builders import leaf_spine, ring, star
from genie.topology.reader import load_topology, load_topology_file
from genie.topology.routing import hop_count, shortest_paths_next_hops
from genie.topology.validation import DEFAULT_SUBNET, TopologyPaths, address_demand, validate_topology
from genie.topology.writer import dump_topology

__all__ = [
    "DEFAULT_SUBNET",
    "TopologyPaths",
    "address_demand",
    "dump_topology",
    "hop_count",
    "leaf_spine",
    "load_topology",
    "load_topology_file",
    "ring",
    "shortest_paths_next_hops",
    "star",
    "validate_topology",
]
