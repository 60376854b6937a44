"""Workload traces: per rank a DAG of compute, collective and point-to-point nodes (Chakra ET semantics).

A :class:`TraceNode` is shaped like a Chakra ``Node`` so that nothing is lost in either direction: id, name,
kind, data and control dependencies, start time and duration, optional inputs/outputs, and the ordered
attribute list with each attribute's protobuf value type. The typed view (``comm_type``, ``size_bytes``,
``peer``, ``process_group``...) reads the Chakra attributes (``comm_type``, ``comm_size``, ``comm_src``,
``comm_dst``, ``comm_tag``, ``pg_name``, ``num_ops``, ``tensor_size``); the builders (:func:`compute_node`,
:func:`collective_node`, :func:`send_node`, :func:`recv_node`) write them the way ASTRA-sim expects.

Times are nanoseconds (Chakra stores microseconds; see genie.workloads.chakra_et for how ns survive).
Collectives without ``pg_name`` run on the world (all ranks); ``pg_name`` names a :class:`ProcessGroup`.
Topological order is here; validation, critical paths and summaries live in :mod:`genie.workloads.analysis`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property

from genie.core.collective import Algorithm, Collective

CHAKRA_VERSION = "0.0.4"

#: an all-to-all's per-peer sizes (all-to-allv, MoE token routing): bytes this rank sends to / receives from each
#: member of the op's group, in group-rank order (its own entry: what it keeps); absent for an even all-to-all
SEND_SPLITS_ATTR = "send_split_bytes"
RECV_SPLITS_ATTR = "recv_split_bytes"


class NodeKind(Enum):
    """Chakra ``NodeType`` (value order mirrors its numbers 0..10)."""

    INVALID = "invalid"
    METADATA = "metadata"
    MEM_LOAD = "mem_load"
    MEM_STORE = "mem_store"
    COMPUTE = "compute"
    SEND = "send"
    RECV = "recv"
    COLLECTIVE = "collective"
    STORAGE = "storage"
    BATCH = "batch"
    CHECKPOINT = "checkpoint"

    @property
    def is_comm(self) -> bool:
        return self in (NodeKind.SEND, NodeKind.RECV, NodeKind.COLLECTIVE)


class CommType(Enum):
    """Chakra ``CollectiveCommType``; values are the protobuf enum numbers."""

    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9

    @property
    def collective(self) -> Collective | None:
        """genie's schedulable collective for this type (every Chakra type has one: REDUCE_SCATTER_BLOCK is a
        reduce-scatter); None for a type genie could not schedule."""
        return _TO_COLLECTIVE.get(self)

    @classmethod
    def from_collective(cls, collective: Collective) -> "CommType":
        for comm, coll in _TO_COLLECTIVE.items():
            if coll is collective:
                return comm
        raise ValueError(f"{collective.value} has no Chakra collective type")

    @classmethod
    def parse(cls, text: str) -> "CommType":
        key = text.strip().upper().replace("-", "_")
        aliases = {"ALLREDUCE": "ALL_REDUCE", "ALLGATHER": "ALL_GATHER", "REDUCESCATTER": "REDUCE_SCATTER",
                   "ALLTOALL": "ALL_TO_ALL", "ALL_TO_ALLV": "ALL_TO_ALL", "ALLTOALLV": "ALL_TO_ALL",
                   "A2A": "ALL_TO_ALL", "BCAST": "BROADCAST", "ALL_GATHER_BASE": "ALL_GATHER",
                   "REDUCE_SCATTER_BASE": "REDUCE_SCATTER", "_ALLGATHER_BASE": "ALL_GATHER",
                   "_REDUCE_SCATTER_BASE": "REDUCE_SCATTER", "ALL_GATHER_INTO_TENSOR": "ALL_GATHER",
                   "REDUCE_SCATTER_TENSOR": "REDUCE_SCATTER"}
        key = aliases.get(key, key)
        try:
            return cls[key]
        except KeyError:
            names = ", ".join(c.name.lower() for c in cls)
            raise ValueError(f"unknown collective type {text!r} (expected one of: {names})") from None


_TO_COLLECTIVE = {CommType.ALL_REDUCE: Collective.ALL_REDUCE, CommType.ALL_GATHER: Collective.ALL_GATHER,
                  CommType.REDUCE_SCATTER: Collective.REDUCE_SCATTER, CommType.ALL_TO_ALL: Collective.ALL_TO_ALL,
                  CommType.BROADCAST: Collective.BROADCAST, CommType.REDUCE_SCATTER_BLOCK: Collective.REDUCE_SCATTER,
                  CommType.REDUCE: Collective.REDUCE, CommType.GATHER: Collective.GATHER,
                  CommType.SCATTER: Collective.SCATTER, CommType.BARRIER: Collective.BARRIER}


class AttrType(Enum):
    """The protobuf value type of an attribute; values are Chakra ``AttributeProto`` oneof field names."""

    NONE = "none"  # no value set
    DOUBLE = "double_val"
    DOUBLE_LIST = "double_list"
    FLOAT = "float_val"
    FLOAT_LIST = "float_list"
    INT32 = "int32_val"
    INT32_LIST = "int32_list"
    INT64 = "int64_val"
    INT64_LIST = "int64_list"
    UINT32 = "uint32_val"
    UINT32_LIST = "uint32_list"
    UINT64 = "uint64_val"
    UINT64_LIST = "uint64_list"
    SINT32 = "sint32_val"
    SINT32_LIST = "sint32_list"
    SINT64 = "sint64_val"
    SINT64_LIST = "sint64_list"
    FIXED32 = "fixed32_val"
    FIXED32_LIST = "fixed32_list"
    FIXED64 = "fixed64_val"
    FIXED64_LIST = "fixed64_list"
    SFIXED32 = "sfixed32_val"
    SFIXED32_LIST = "sfixed32_list"
    SFIXED64 = "sfixed64_val"
    SFIXED64_LIST = "sfixed64_list"
    BOOL = "bool_val"
    BOOL_LIST = "bool_list"
    STRING = "string_val"
    STRING_LIST = "string_list"
    BYTES = "bytes_val"
    BYTES_LIST = "bytes_list"

    @property
    def is_list(self) -> bool:
        return self.value.endswith("_list")

    @property
    def is_integer(self) -> bool:
        return any(self.value.startswith(p) for p in ("int", "uint", "sint", "fixed", "sfixed"))


AttrValue = bool | int | float | str | bytes | tuple | None


@dataclass(frozen=True)
class Attribute:
    """One Chakra attribute: name, protobuf value type, value (a tuple for list types).

    ``extra_wire`` holds protobuf fields this genie does not know, re-emitted verbatim on write.
    """

    name: str
    type: AttrType
    value: AttrValue
    doc_string: str = ""
    extra_wire: bytes = b""


@dataclass(frozen=True)
class IOInfo:
    values: str = ""
    shapes: str = ""
    types: str = ""
    extra_wire: bytes = b""


@dataclass(frozen=True)
class TraceMetadata:
    """Chakra ``GlobalMetadata`` of one rank's file."""

    version: str = CHAKRA_VERSION
    attrs: tuple[Attribute, ...] = ()
    extra_wire: bytes = b""


@dataclass(frozen=True)
class TraceNode:
    id: int
    name: str
    kind: NodeKind
    data_deps: tuple[int, ...] = ()
    ctrl_deps: tuple[int, ...] = ()
    duration_ns: int = 0
    start_time_ns: int = 0
    attrs: tuple[Attribute, ...] = ()
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None
    extra_wire: bytes = b""

    # ---- attribute access -------------------------------------------------------------------------------
    def attr(self, name: str) -> Attribute | None:
        for a in self.attrs:
            if a.name == name:
                return a
        return None

    def attr_value(self, name: str, default: AttrValue = None) -> AttrValue:
        a = self.attr(name)
        return default if a is None or a.type is AttrType.NONE else a.value

    def _int_attr(self, name: str) -> int | None:
        v = self.attr_value(name)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def with_attr(self, name: str, value: AttrValue, type: AttrType | None = None) -> "TraceNode":
        """A copy with attribute ``name`` set; an existing one keeps its position (and type unless given)."""
        attrs = list(self.attrs)
        for i, a in enumerate(attrs):
            if a.name == name:
                attrs[i] = replace(a, value=value, type=type or a.type)
                return replace(self, attrs=tuple(attrs))
        if type is None:
            type = _infer_type(value)
        return replace(self, attrs=(*self.attrs, Attribute(name, type, value)))

    # ---- typed view -------------------------------------------------------------------------------------
    # (each computed once per node: a node is frozen, and validation, the splits and the model's compile read
    # them for every node, several times over - 7 M attribute lookups for a 1024-rank MoE trace)
    @cached_property
    def deps(self) -> tuple[int, ...]:
        """Data then control dependencies, without repeats."""
        if not self.ctrl_deps:
            return self.data_deps
        return tuple(dict.fromkeys((*self.data_deps, *self.ctrl_deps)))

    @cached_property
    def comm_type_code(self) -> int | None:
        return self._int_attr("comm_type")

    @cached_property
    def comm_type(self) -> CommType | None:
        code = self.comm_type_code
        return CommType(code) if code in _COMM_CODES else None

    @cached_property
    def size_bytes(self) -> int | None:
        """``comm_size``: bytes of a collective (meaning per type as in ASTRA-sim) or of a send/recv."""
        return self._int_attr("comm_size")

    @property
    def peer(self) -> int | None:
        """The other rank of a send (``comm_dst``) or receive (``comm_src``)."""
        if self.kind is NodeKind.SEND:
            return self._int_attr("comm_dst")
        if self.kind is NodeKind.RECV:
            return self._int_attr("comm_src")
        return None

    @property
    def tag(self) -> int:
        return self._int_attr("comm_tag") or 0

    @cached_property
    def process_group(self) -> str | None:
        v = self.attr_value("pg_name")
        return v if isinstance(v, str) and v else None

    @property
    def algorithm(self) -> Algorithm | None:
        v = self.attr_value("algorithm")
        try:
            return Algorithm.parse(v) if isinstance(v, str) and v else None
        except ValueError:
            return None  # a hint genie does not know: ignored

    def _split_attr(self, name: str) -> tuple[int, ...] | None:
        v = self.attr_value(name)
        if isinstance(v, tuple) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
            return v
        return None

    @cached_property
    def send_split_bytes(self) -> tuple[int, ...] | None:
        """An uneven all-to-all's bytes sent to each group member (``send_split_bytes``); None when not recorded
        (or malformed: validation names it)."""
        return self._split_attr(SEND_SPLITS_ATTR)

    @cached_property
    def recv_split_bytes(self) -> tuple[int, ...] | None:
        """An uneven all-to-all's bytes received from each group member (``recv_split_bytes``), when recorded."""
        return self._split_attr(RECV_SPLITS_ATTR)

    @property
    def num_ops(self) -> int | None:
        """Floating-point operations of a compute node (Chakra ``num_ops``)."""
        return self._int_attr("num_ops")

    @property
    def tensor_size_bytes(self) -> int | None:
        """Bytes a compute node touches (Chakra ``tensor_size``)."""
        return self._int_attr("tensor_size")

    @property
    def is_cpu_op(self) -> bool:
        return bool(self.attr_value("is_cpu_op", False))


_COMM_CODES = frozenset(c.value for c in CommType)


def _infer_type(value: AttrValue) -> AttrType:
    if isinstance(value, bool):
        return AttrType.BOOL
    if isinstance(value, int):
        return AttrType.INT64
    if isinstance(value, float):
        return AttrType.DOUBLE
    if isinstance(value, str):
        return AttrType.STRING
    if isinstance(value, bytes):
        return AttrType.BYTES
    if isinstance(value, tuple):
        if all(isinstance(v, bool) for v in value) and value:
            return AttrType.BOOL_LIST
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return AttrType.INT64_LIST
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return AttrType.DOUBLE_LIST
        if all(isinstance(v, str) for v in value):
            return AttrType.STRING_LIST
        if all(isinstance(v, bytes) for v in value):
            return AttrType.BYTES_LIST
    if value is None:
        return AttrType.NONE
    raise ValueError(f"cannot infer an attribute type for {value!r}")


# ---- builders (ASTRA-sim's attribute layout) -----------------------------------------------------------
def _base_attrs(extra: tuple[Attribute, ...]) -> tuple[Attribute, ...]:
    return (Attribute("is_cpu_op", AttrType.BOOL, False), *extra)


def compute_node(id: int, name: str, *, duration_ns: int = 0, num_ops: int | None = None,
                 tensor_size_bytes: int | None = None, data_deps: tuple[int, ...] = (),
                 ctrl_deps: tuple[int, ...] = (), extra_attrs: tuple[Attribute, ...] = ()) -> TraceNode:
    attrs = []
    if num_ops is not None:
        attrs.append(Attribute("num_ops", AttrType.INT64, int(num_ops)))
    if tensor_size_bytes is not None:
        attrs.append(Attribute("tensor_size", AttrType.UINT64, int(tensor_size_bytes)))
    return TraceNode(id, name, NodeKind.COMPUTE, tuple(data_deps), tuple(ctrl_deps), duration_ns=int(duration_ns),
                     attrs=_base_attrs((*attrs, *extra_attrs)))


def collective_node(id: int, name: str, *, comm_type: CommType, size_bytes: int, process_group: str | None = None,
                    algorithm: Algorithm | None = None, data_deps: tuple[int, ...] = (),
                    ctrl_deps: tuple[int, ...] = (), extra_attrs: tuple[Attribute, ...] = (),
                    send_split_bytes: tuple[int, ...] | None = None,
                    recv_split_bytes: tuple[int, ...] | None = None) -> TraceNode:
    """A collective; an uneven all-to-all also gets its per-peer sizes (``send_split_bytes``, whose sum is
    ``size_bytes``, and optionally ``recv_split_bytes``) as INT64 list attributes."""
    attrs = [Attribute("comm_type", AttrType.INT64, comm_type.value),
             Attribute("comm_size", AttrType.INT64, int(size_bytes))]
    if process_group:
        attrs.append(Attribute("pg_name", AttrType.STRING, process_group))
    if algorithm is not None:
        attrs.append(Attribute("algorithm", AttrType.STRING, algorithm.value))
    if send_split_bytes is not None:
        attrs.append(Attribute(SEND_SPLITS_ATTR, AttrType.INT64_LIST, tuple(int(b) for b in send_split_bytes)))
    if recv_split_bytes is not None:
        attrs.append(Attribute(RECV_SPLITS_ATTR, AttrType.INT64_LIST, tuple(int(b) for b in recv_split_bytes)))
    return TraceNode(id, name, NodeKind.COLLECTIVE, tuple(data_deps), tuple(ctrl_deps),
                     attrs=_base_attrs((*attrs, *extra_attrs)))


def _p2p_node(kind: NodeKind, id: int, name: str, src: int, dst: int, size_bytes: int, tag: int,
              process_group: str | None, data_deps: tuple[int, ...], ctrl_deps: tuple[int, ...],
              extra_attrs: tuple[Attribute, ...]) -> TraceNode:
    attrs = [Attribute("comm_src", AttrType.INT32, int(src)), Attribute("comm_dst", AttrType.INT32, int(dst)),
             Attribute("comm_size", AttrType.INT64, int(size_bytes)), Attribute("comm_tag", AttrType.INT32, int(tag))]
    if process_group:
        attrs.append(Attribute("pg_name", AttrType.STRING, process_group))
    return TraceNode(id, name, kind, tuple(data_deps), tuple(ctrl_deps), attrs=_base_attrs((*attrs, *extra_attrs)))


def send_node(id: int, name: str, *, rank: int, peer: int, size_bytes: int, tag: int = 0,
              process_group: str | None = None, data_deps: tuple[int, ...] = (), ctrl_deps: tuple[int, ...] = (),
              extra_attrs: tuple[Attribute, ...] = ()) -> TraceNode:
    """A send from ``rank`` (written as ``comm_src``) to ``peer`` (``comm_dst``)."""
    return _p2p_node(NodeKind.SEND, id, name, rank, peer, size_bytes, tag, process_group, data_deps, ctrl_deps,
                     extra_attrs)


def recv_node(id: int, name: str, *, rank: int, peer: int, size_bytes: int, tag: int = 0,
              process_group: str | None = None, data_deps: tuple[int, ...] = (), ctrl_deps: tuple[int, ...] = (),
              extra_attrs: tuple[Attribute, ...] = ()) -> TraceNode:
    """A receive on ``rank`` (``comm_dst``) from ``peer`` (``comm_src``)."""
    return _p2p_node(NodeKind.RECV, id, name, peer, rank, size_bytes, tag, process_group, data_deps, ctrl_deps,
                     extra_attrs)


# ---- the whole trace -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProcessGroup:
    """A named communicator: its global ranks, in group-rank order."""

    name: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class RankTrace:
    rank: int
    nodes: tuple[TraceNode, ...]
    metadata: TraceMetadata = field(default_factory=TraceMetadata)

    def node(self, node_id: int) -> TraceNode | None:
        for n in self.nodes:
            if n.id == node_id:
                return n
        return None


@dataclass(frozen=True)
class Trace:
    """All ranks' DAGs (``ranks[i].rank`` is normally ``i``), process groups and free-form metadata."""

    ranks: tuple[RankTrace, ...]
    groups: tuple[ProcessGroup, ...] = ()
    info: tuple[tuple[str, str], ...] = ()  # (key, value): source format, workload name...

    @property
    def num_ranks(self) -> int:
        return len(self.ranks)

    def group(self, name: str | None) -> ProcessGroup | None:
        """The named group; None (or "") is the world."""
        if not name:
            return ProcessGroup("", tuple(range(self.num_ranks)))
        for g in self.groups:
            if g.name == name:
                return g
        return None

    def channels(self) -> tuple[dict[str, int], int]:
        """The channel (communicator: its own connections) of each process group's collectives - the world
        (``""``) 0, then the groups in order - and the channel of point-to-point messages: how the replay numbers
        them, and what the fabric model routes a traced run's ops by."""
        numbers = {"": 0}
        for g in self.groups:
            numbers.setdefault(g.name, len(numbers))
        return numbers, len(numbers)

    def info_value(self, key: str, default: str | None = None) -> str | None:
        for k, v in self.info:
            if k == key:
                return v
        return default


def make_trace(rank_nodes: list[list[TraceNode]] | tuple, *, groups: tuple[ProcessGroup, ...] = (),
               info: tuple[tuple[str, str], ...] = ()) -> Trace:
    """A Trace from one node list per rank (rank i = index i)."""
    return Trace(tuple(RankTrace(i, tuple(nodes)) for i, nodes in enumerate(rank_nodes)), tuple(groups), tuple(info))


class CycleError(ValueError):
    """The dependencies of a rank's nodes form a cycle (``node_ids``: nodes left on or behind it)."""

    def __init__(self, node_ids: tuple[int, ...]) -> None:
        self.node_ids = node_ids
        shown = ", ".join(str(i) for i in node_ids[:8]) + (" ..." if len(node_ids) > 8 else "")
        super().__init__(f"dependency cycle among nodes {shown}")


def topological_order(nodes: tuple[TraceNode, ...] | list[TraceNode]) -> tuple[TraceNode, ...]:
    """Nodes ordered so that every node follows its dependencies; ties keep file order (deterministic).

    Dependencies on ids that are not in ``nodes`` are ignored (validation reports them). Raises CycleError.
    """
    position = {n.id: i for i, n in enumerate(nodes)}
    waiting = [0] * len(nodes)
    children: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for dep in n.deps:
            j = position.get(dep)
            if j is not None:
                waiting[i] += 1
                children[j].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for c in children[i]:
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, c)
    if len(order) != len(nodes):
        raise CycleError(tuple(nodes[i].id for i, w in enumerate(waiting) if w > 0))
    return tuple(order)
