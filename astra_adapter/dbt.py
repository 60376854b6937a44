"""ASTRA-sim's double-binary-tree all-reduce (``DoubleBinaryTreeAllReduce`` over ``BinaryTree``).

The tree over n = 2^k members (positions 0..n-1 in the dimension) is a perfect binary tree of n-1 positions
under a one-child "sentinel" root, numbered in order: ``ROOT_MAX`` puts the sentinel last (root n-1, its child
the subtree root), ``ROOT_MIN`` first (root 0). Chunks alternate MAX, MIN, MAX... per rank and dimension.

Leaves send their chunk to the parent and wait for the result; intermediates reduce both children's data,
send up, wait for the parent and send down; the root reduces its child's data and sends it back. Every step
crosses the memory bus (``endpoint-delay``) and reductions add the local-memory cost of the whole chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.errors import GenieError


class TreeType(Enum):
    ROOT_MAX = "root_max"
    ROOT_MIN = "root_min"


class NodeRole(Enum):
    ROOT = "root"
    INTERMEDIATE = "intermediate"
    LEAF = "leaf"


@dataclass(frozen=True)
class TreeShape:
    """Per position: parent, left and right child positions (-1 = none)."""

    parent: tuple[int, ...]
    left: tuple[int, ...]
    right: tuple[int, ...]

    def role(self, pos: int) -> NodeRole:
        if self.parent[pos] < 0:
            return NodeRole.ROOT
        if self.left[pos] < 0 and self.right[pos] < 0:
            return NodeRole.LEAF
        return NodeRole.INTERMEDIATE


def binary_tree(n: int, tree: TreeType) -> TreeShape:
    if n < 2 or n & (n - 1):
        raise GenieError(f"doubleBinaryTree needs a power-of-two dimension, got {n} NPUs")
    parent, left, right = [-1] * n, [-1] * n, [-1] * n
    counter = [0 if tree is TreeType.ROOT_MAX else 1]

    def build(levels: int) -> int:  # in-order numbering of a perfect subtree; returns its root position
        lchild = build(levels - 1) if levels > 1 else -1
        me = counter[0]
        counter[0] += 1
        rchild = build(levels - 1) if levels > 1 else -1
        left[me], right[me] = lchild, rchild
        for child in (lchild, rchild):
            if child >= 0:
                parent[child] = me
        return me

    sub_root = build(n.bit_length() - 1)
    sentinel = n - 1 if tree is TreeType.ROOT_MAX else 0
    parent[sub_root] = sentinel
    if tree is TreeType.ROOT_MAX:
        left[sentinel] = sub_root
    else:
        right[sentinel] = sub_root
    return TreeShape(tuple(parent), tuple(left), tuple(right))


class _State(Enum):
    BEGIN = 0
    SENDING_TO_PARENT = 1
    WAITING_FROM_PARENT = 2
    END = 3
    WAITING_TWO_CHILDREN = 4
    WAITING_ONE_CHILD = 5
    SENDING_TO_CHILDREN = 6


_GENERAL, _RECEIVED, _INIT = "general", "received", "init"


class DbtMember:
    """One member's state machine (the branch order matters and follows ASTRA-sim's ``run``)."""

    __slots__ = ("rank", "slot", "done", "role", "parent", "left", "right", "size", "state", "reductions")

    def __init__(self, members: tuple[int, ...], pos: int, shape: TreeShape, size_bytes: int, slot: int) -> None:
        def rank_of(p: int) -> int:
            return members[p] if p >= 0 else -1

        self.rank, self.slot, self.done = members[pos], slot, False
        self.role = shape.role(pos)
        self.parent, self.left, self.right = (rank_of(shape.parent[pos]), rank_of(shape.left[pos]),
                                              rank_of(shape.right[pos]))
        self.size = size_bytes
        self.state = _State.BEGIN
        self.reductions = 0

    def start(self, sim, t: int) -> None:
        self._run(sim, t, _INIT)

    def on_general(self, sim, t: int) -> None:
        self._run(sim, t, _GENERAL)

    def on_received(self, sim, t: int) -> None:
        self._run(sim, t, _RECEIVED)

    def _run(self, sim, t: int, event: str) -> None:  # noqa: C901 - a literal state machine
        st, role, size, S = self.state, self.role, self.size, _State
        leaf, inter, root = role is NodeRole.LEAF, role is NodeRole.INTERMEDIATE, role is NodeRole.ROOT
        only_child = self.left if self.left >= 0 else self.right
        if st is S.BEGIN and leaf:
            sim.bundle(self, t, size, False)
            self.state = S.SENDING_TO_PARENT
        elif st is S.SENDING_TO_PARENT and leaf:
            sim.send(self, t, self.parent, size)
            sim.post_recv(t, self, self.parent, size)
            self.state = S.WAITING_FROM_PARENT
        elif st is S.WAITING_FROM_PARENT and leaf:
            sim.bundle(self, t, size, False)
            self.state = S.END
        elif st is S.END and leaf:
            sim.finish(self, t)
        elif st is S.BEGIN and inter:
            self.state = S.WAITING_TWO_CHILDREN
            sim.post_recv(t, self, self.left, size)
            sim.post_recv(t, self, self.right, size)
        elif st is S.WAITING_TWO_CHILDREN and inter and event == _RECEIVED:
            sim.bundle(self, t, size, True)
            self.state = S.WAITING_ONE_CHILD
        elif st is S.WAITING_ONE_CHILD and inter and event == _RECEIVED:
            sim.bundle(self, t, size, True)
            self.state = S.SENDING_TO_PARENT
        elif self.reductions < 1 and inter and event == _GENERAL:
            self.reductions += 1
        elif st is S.SENDING_TO_PARENT and inter:
            self.state = S.WAITING_FROM_PARENT
            sim.send(self, t, self.parent, size)
            sim.post_recv(t, self, self.parent, size)
        elif st is S.WAITING_FROM_PARENT and inter and event == _RECEIVED:
            sim.bundle(self, t, size, True)
            self.state = S.SENDING_TO_CHILDREN
        elif st is S.SENDING_TO_CHILDREN and inter:
            sim.send(self, t, self.left, size)
            sim.send(self, t, self.right, size)
            sim.finish(self, t)
        elif st is S.BEGIN and root:
            self.state = S.WAITING_ONE_CHILD
            sim.post_recv(t, self, only_child, size)
        elif st is S.WAITING_ONE_CHILD and root:
            sim.bundle(self, t, size, True)
            self.state = S.SENDING_TO_CHILDREN
        elif st is S.SENDING_TO_CHILDREN and root:
            sim.send(self, t, only_child, size)
            sim.finish(self, t)
