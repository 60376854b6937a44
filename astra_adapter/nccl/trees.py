"""The inter-node tree NCCL builds (pure), for the time of a tree call: the double binary tree over the nodes
(``src/graph/trees.cc``) and how its search hangs each node's GPU chain on it (``src/graph/search.cc``,
``src/graph/connect.cc``, ``src/init.cc``, per release). Facts carried over from NCCL's source; the code is
genie's. NCCL's tuner decides with its own formula (:mod:`astra_adapter.nccl.tuning`); a call then takes the
slowest way up the tree as built and back down.
"""

from __future__ import annotations

from enum import Enum
from functools import lru_cache

from astra_adapter.nccl.versions import NcclVersion


def _btree_parent(rank: int, nodes: int) -> tuple[int, int]:
    """A node's parent in NCCL's binary tree over ``nodes`` nodes and which child it is (src/graph/trees.cc,
    ncclGetBtree): with ``b`` the rank's lowest set bit the parent is (rank ^ b) | (b << 1), or rank ^ b where
    that is out of range; a rank below its parent is its child 0, above it its child 1."""
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    if up >= nodes:
        up = rank ^ bit
    return up, 0 if rank < up else 1


@lru_cache(maxsize=256)
def btree_paths(nodes: int) -> tuple[tuple[int, int], ...]:
    """Every node's way to the root of NCCL's binary tree as (network hops, of which into a child 0), those no
    other node's way outdoes in both. The double binary tree's second tree is the first mirrored or shifted
    (ncclGetDtree), with the same ways."""
    ways = set()
    for rank in range(1, nodes):
        hops = zeros = 0
        r = rank
        while r != 0:
            r, kind = _btree_parent(r, nodes)
            hops, zeros = hops + 1, zeros + (kind == 0)
        ways.add((hops, zeros))
    return tuple(sorted(w for w in ways if not any(o != w and o[0] >= w[0] and o[1] >= w[1] for o in ways)))


class TreePattern(Enum):
    """How NCCL's tree graph hangs a node's GPU chain on the inter-node tree (src/include/graph.h,
    src/graph/connect.cc): the parent always on the chain's first GPU; the children on the first GPU too
    (``TREE``), child 0 on the second GPU (``BALANCED``), or both children on the second GPU (``SPLIT``)."""

    TREE = "tree"
    BALANCED = "balanced"
    SPLIT = "split"


def tree_pattern(version: NcclVersion, compute_capability: int, ranks_per_node: int, nodes: int) -> TreePattern:
    """The pattern NCCL's search builds the tree with (src/init.cc, src/graph/search.cc per release): the
    balanced one it starts from (2.8 and 2.9: the plain one on 2 nodes, and the split one before Ampere, "SPLIT_TREE
    works better on older archs"). From 2.18.3 a Hopper node also tries the plain pattern, but only where the
    balanced search fell short of the node's bandwidth; the tree graphs NCCL prints on H100 nodes across the
    network read "Pattern 1", the balanced one. One GPU a node: the plain pattern (search.cc)."""
    if ranks_per_node <= 1:
        return TreePattern.TREE
    if version < (2, 10):
        if nodes <= 2:
            return TreePattern.TREE
        return TreePattern.SPLIT if compute_capability < 80 else TreePattern.BALANCED
    return TreePattern.BALANCED


def tree_way_us(nodes: int, intra_lat_us: float, inter_lat_us: float, pattern: TreePattern) -> float:
    """The latency of the slowest way from a node to the root of the tree NCCL built: a network hop per level,
    and a hop inside the node for each level entered on the chain's second GPU (one hop below the first, which
    talks to the parent): a child 0 in the balanced pattern, every child in the split one."""
    if nodes <= 1:
        return 0.0
    entered_second = {TreePattern.TREE: lambda hops, zeros: 0, TreePattern.BALANCED: lambda hops, zeros: zeros,
                      TreePattern.SPLIT: lambda hops, zeros: hops}[pattern]
    return max(hops * inter_lat_us + entered_second(hops, zeros) * intra_lat_us for hops, zeros in btree_paths(nodes))
