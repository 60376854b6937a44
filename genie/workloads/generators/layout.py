"""Rank layout of a DP x TP x PP (x EP) job and its process groups.

Coordinates: ``tp`` (tensor-parallel rank), ``pp`` (pipeline stage), ``dp`` (data-parallel replica). The
default order ``tp-pp-dp`` puts TP innermost (consecutive ranks, one NVLink island), then PP, then DP outermost:

    rank = tp_rank + TP * (pp_rank + PP * dp_rank)

``tp-dp-pp`` is Megatron-LM's order (``rank = tp_rank + TP * (dp_rank + DP * pp_rank)``).

Expert parallelism is carved out of data parallelism: EP divides DP; the expert-parallel group of a rank is the
block of ``EP`` consecutive DP replicas it sits in (same tp and pp), and its expert-data-parallel group the
ranks holding the same experts (same tp, pp and ``dp_rank % EP``).

Groups are named ``<kind><index>`` (``tp0``, ``dp3``, ``pp1``, ``ep0``, ``edp1``, ``emb0``); the groups of a
kind are numbered in order of their lowest rank, and each lists its ranks in group-rank order. Groups of one
rank carry no traffic and are left out. ``pp`` groups hold one pipeline (every stage, same tp and dp);
``emb`` groups pair the first and last stage for the tied-embedding gradient all-reduce.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.errors import InputError
from genie.core.trace import ProcessGroup


class RankOrder(Enum):
    """Which coordinate varies fastest, then next, then slowest."""

    TP_PP_DP = "tp-pp-dp"
    TP_DP_PP = "tp-dp-pp"

    @classmethod
    def parse(cls, text: str) -> "RankOrder":
        for order in cls:
            if order.value == text.strip().lower():
                return order
        raise InputError(f"unknown rank order {text!r} (expected one of: {', '.join(o.value for o in cls)})",
                         path="order")


class GroupKind(Enum):
    TP = "tp"
    DP = "dp"
    PP = "pp"
    EP = "ep"
    EDP = "edp"  # expert data parallel: replicas of the same experts
    EMB = "emb"  # first and last pipeline stage (tied embeddings)


@dataclass(frozen=True)
class Parallelism:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    order: RankOrder = RankOrder.TP_PP_DP

    def __post_init__(self) -> None:
        for key in ("dp", "tp", "pp", "ep"):
            if getattr(self, key) < 1:
                raise InputError(f"must be at least 1, got {getattr(self, key)}", path=key)
        if self.dp % self.ep:
            raise InputError(f"expert parallelism {self.ep} must divide data parallelism {self.dp} (experts are "
                             f"spread over data-parallel replicas)", path="ep")

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def edp(self) -> int:
        return self.dp // self.ep

    def label(self) -> str:
        return f"dp{self.dp}-tp{self.tp}-pp{self.pp}-ep{self.ep}"


@dataclass(frozen=True)
class Coords:
    dp: int
    pp: int
    tp: int


def rank_of(c: Coords, par: Parallelism) -> int:
    if par.order is RankOrder.TP_PP_DP:
        return c.tp + par.tp * (c.pp + par.pp * c.dp)
    return c.tp + par.tp * (c.dp + par.dp * c.pp)


def coords_of(rank: int, par: Parallelism) -> Coords:
    tp, rest = rank % par.tp, rank // par.tp
    if par.order is RankOrder.TP_PP_DP:
        return Coords(dp=rest // par.pp, pp=rest % par.pp, tp=tp)
    return Coords(dp=rest % par.dp, pp=rest // par.dp, tp=tp)


def _members(kind: GroupKind, c: Coords, par: Parallelism) -> tuple[int, ...]:
    """The ranks of the group of ``kind`` that the rank at ``c`` belongs to, in group-rank order."""
    if kind is GroupKind.TP:
        return tuple(rank_of(Coords(c.dp, c.pp, t), par) for t in range(par.tp))
    if kind is GroupKind.PP:
        return tuple(rank_of(Coords(c.dp, p, c.tp), par) for p in range(par.pp))
    if kind is GroupKind.DP:
        return tuple(rank_of(Coords(d, c.pp, c.tp), par) for d in range(par.dp))
    if kind is GroupKind.EP:
        first = c.dp - c.dp % par.ep
        return tuple(rank_of(Coords(first + e, c.pp, c.tp), par) for e in range(par.ep))
    if kind is GroupKind.EDP:
        return tuple(rank_of(Coords(d, c.pp, c.tp), par) for d in range(c.dp % par.ep, par.dp, par.ep))
    if par.pp < 2 or c.pp not in (0, par.pp - 1):
        return ()
    return (rank_of(Coords(c.dp, 0, c.tp), par), rank_of(Coords(c.dp, par.pp - 1, c.tp), par))


@dataclass(frozen=True)
class Layout:
    """Every rank's coordinates and the names of the groups it belongs to (None: no such group)."""

    parallelism: Parallelism
    groups: tuple[ProcessGroup, ...]
    rank_groups: tuple[dict[GroupKind, str], ...]  # per rank

    def group_of(self, rank: int, kind: GroupKind) -> str | None:
        return self.rank_groups[rank].get(kind)

    def coords(self, rank: int) -> Coords:
        return coords_of(rank, self.parallelism)

    def rank(self, c: Coords) -> int:
        return rank_of(c, self.parallelism)


def make_layout(par: Parallelism, *, kinds: tuple[GroupKind, ...] = tuple(GroupKind)) -> Layout:
    """Process groups of ``kinds`` (singletons dropped) and, per rank, the name of each of its groups."""
    groups: list[ProcessGroup] = []
    rank_groups: list[dict[GroupKind, str]] = [{} for _ in range(par.world_size)]
    for kind in kinds:
        by_members: dict[tuple[int, ...], str] = {}
        for rank in range(par.world_size):
            members = _members(kind, coords_of(rank, par), par)
            if len(members) < 2:
                continue
            if members not in by_members:
                by_members[members] = f"{kind.value}{len(by_members)}"
                groups.append(ProcessGroup(by_members[members], members))
            rank_groups[rank][kind] = by_members[members]
    return Layout(par, tuple(groups), tuple(rank_groups))
