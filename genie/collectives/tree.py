"""NCCL's double binary tree all-reduce.

Tree 0 is NCCL's ``ncclGetBtree`` over group positions 0..n-1 (root 0 with a single child, in-order layout, so
odd positions are leaves); tree 1 mirrors it (``n-1-i``) for even n and shifts it by one position for odd n
(``ncclGetDtree``), which makes the leaves of one tree interior nodes of the other. Tree ``t`` owns half ``t``
of the buffer: it sums that half up to its root and broadcasts it back down. Both trees run concurrently.

Steps are scheduled by level: a node of height h (leaves 0) sends its partial sum to its parent at step h;
the root, of height H, holds the sum after step H-1; a node at depth d forwards to its children at step
H + d. One tree therefore takes 2H steps. With ``op.chunks = k`` each half is cut into k pieces pipelined one
step apart: 2H + k - 1 steps in all, where both trees have height H = ceil(log2 n).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from genie.core.collective import Algorithm, Collective
from genie.core.schedule import CollectiveOp, Schedule
from genie.collectives.plan import (Plan, Transfer, block_bounds, concurrent, element_count, pipelined, region,
                                    sub_bounds, to_schedule)


@dataclass(frozen=True)
class BinaryTree:
    """A tree over group positions 0..n-1: ``parent[i]`` (-1 for the root) and the derived children."""

    parent: tuple[int, ...]

    @property
    def root(self) -> int:
        return self.parent.index(-1)

    @property
    def children(self) -> tuple[tuple[int, ...], ...]:
        kids: list[list[int]] = [[] for _ in self.parent]
        for node, up in enumerate(self.parent):
            if up >= 0:
                kids[up].append(node)
        return tuple(tuple(k) for k in kids)

    def depths(self) -> tuple[int, ...]:
        depth = [-1] * len(self.parent)
        for node in range(len(self.parent)):
            chain = []
            while node >= 0 and depth[node] < 0:
                chain.append(node)
                node = self.parent[node]
            base = depth[node] if node >= 0 else -1
            for offset, member in enumerate(reversed(chain), start=1):
                depth[member] = base + offset
        return tuple(depth)

    def heights(self) -> tuple[int, ...]:
        height = [0] * len(self.parent)
        depth = self.depths()
        for node in sorted(range(len(self.parent)), key=lambda i: -depth[i]):
            up = self.parent[node]
            if up >= 0:
                height[up] = max(height[up], height[node] + 1)
        return tuple(height)


def nccl_btree_parent(n: int, position: int) -> int:
    """Parent of ``position`` in NCCL's binary tree over n ranks rooted at 0 (-1 for the root)."""
    if position == 0:
        return -1
    bit = position & -position
    up = (position ^ bit) | (bit << 1)
    return up if up < n else position ^ bit


def double_binary_tree(n: int) -> tuple[BinaryTree, BinaryTree]:
    """NCCL's two complementary trees over n positions (``ncclGetDtree``)."""
    first = tuple(nccl_btree_parent(n, i) for i in range(n))
    if n % 2:
        second = tuple(-1 if (up := first[(i - 1) % n]) < 0 else (up + 1) % n for i in range(n))
    else:
        second = tuple(-1 if (up := first[n - 1 - i]) < 0 else n - 1 - up for i in range(n))
    return BinaryTree(first), BinaryTree(second)


def tree_allreduce_plan(tree: BinaryTree, group: Sequence[int], lo: int, hi: int) -> Plan:
    """Reduce elements ``[lo, hi)`` up ``tree`` and broadcast the sum down again, level by level (2H steps)."""
    heights, depths, children = tree.heights(), tree.depths(), tree.children
    top = heights[tree.root]
    steps: list[list[Transfer]] = [[] for _ in range(2 * top)]
    for node, up in enumerate(tree.parent):
        if up >= 0:
            steps[heights[node]].append(region(group[node], group[up], lo, hi, reduce=True))
        for child in children[node]:
            steps[top + depths[node]].append(region(group[node], group[child], lo, hi))
    return tuple(tuple(s) for s in steps)


def double_binary_tree_allreduce(op: CollectiveOp) -> Schedule:
    count = element_count(op, Collective.ALL_REDUCE)
    halves = block_bounds(count, 2)
    plans = []
    for t, tree in enumerate(double_binary_tree(len(op.group))):
        pieces = sub_bounds(halves[t], halves[t + 1], op.chunks)
        plans.append(pipelined([tree_allreduce_plan(tree, op.group, pieces[c], pieces[c + 1])
                                for c in range(op.chunks)]))
    return to_schedule(op, Algorithm.DOUBLE_BINARY_TREE, concurrent(*plans))
