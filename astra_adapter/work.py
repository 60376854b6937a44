"""A :class:`~genie.core.trace.Trace` as the work ASTRA-sim's workload layer issues, rank by rank.

Each Chakra node becomes a :class:`WorkNode`: what it does (compute for a runtime, a collective, a send...),
which hardware slot it occupies while in flight (one CPU op, one GPU kernel and one GPU communication at a
time per NPU; receives take no slot), and which statistics bucket its interval lands in.

Compute runtimes follow ``Workload::issue_replay`` / ``issue_comp``: ``duration`` (0 -> 1 ns), or with
``roofline-enabled`` ``num_ops / min(peak-perf, local-mem-bw * num_ops / tensor_size)`` for GPU nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import NamedTuple

from genie.core.errors import InputError
from genie.core.trace import AttrType, CommType, NodeKind, RankTrace, Trace, TraceNode

from astra_adapter.collective_plan import CommKind
from astra_adapter.config import SystemConfig


class OpKind(StrEnum):
    COMPUTE = "compute"
    COLLECTIVE = "collective"
    BROADCAST = "broadcast"  # ASTRA-sim replays it as a fixed delay
    SEND = "send"
    RECV = "recv"
    REMOTE_MEM = "remote_mem"
    SKIP = "skip"  # invalid and metadata nodes (and roofline nodes of zero tensor size): finish on issue


class Slot(IntEnum):
    """The hardware slot a node holds while in flight (``HardwareResource``); FREE takes none."""

    CPU = 0
    GPU_COMP = 1
    GPU_COMM = 2
    FREE = 3


class StatType(StrEnum):
    """Statistics bucket; the value is the label ASTRA-sim prints before " time"."""

    CPU = "CPU"
    GPU = "GPU"
    COMM = "Comm"
    REMOTE_MEM = "Remote mem"
    INVALID = "Invalid"


@dataclass(frozen=True)
class Roofline:
    operational_intensity: float
    compute_utilization: float
    memory_utilization: float
    memory_bound: bool


class WorkNode(NamedTuple):
    """One node as the workload layer sees it, independent of which rank runs it.

    (A named tuple, not a dataclass: a 1024-rank trace has ~10^6 of them.) Who the partners are - a send's
    peer, a collective's process group - lives in :class:`RankWork`, so equal node tuples mean "the same work
    up to partners", which :mod:`astra_adapter.symmetry` refines with the partners' roles.
    """

    node_id: int
    op: OpKind
    slot: Slot
    stat: StatType
    deps: tuple[int, ...]  # indices into the rank's nodes
    runtime_ns: int = 0
    gpu_compute: bool = False  # counts into the GPU time subtracted for "exposed communication"
    comm: CommKind | None = None
    size_bytes: int = 0
    involved_dims: tuple[bool, ...] | None = None
    priority: int = 0
    tag: int = 0
    roofline: Roofline | None = None


@dataclass(frozen=True)
class RankWork:
    """A rank's nodes plus its partners: ``peers[i]`` (sends/receives, else -1), ``groups[i]`` ("" = world)."""

    rank: int
    nodes: tuple[WorkNode, ...]
    peers: tuple[int, ...]
    groups: tuple[str, ...]

    def children(self) -> list[list[int]]:
        """Per node, the indices of the nodes that depend on it."""
        children: list[list[int]] = [[] for _ in self.nodes]
        for i, node in enumerate(self.nodes):
            for j in node.deps:
                children[j].append(i)
        return children


_COMM_KINDS = {CommType.ALL_REDUCE: CommKind.ALL_REDUCE, CommType.ALL_GATHER: CommKind.ALL_GATHER,
               CommType.REDUCE_SCATTER: CommKind.REDUCE_SCATTER, CommType.ALL_TO_ALL: CommKind.ALL_TO_ALL}


def _where(rank: int, node: TraceNode) -> str:
    return f"rank {rank} node {node.id} ({node.name})"


def _int(attrs: dict, name: str) -> int | None:
    value = attrs.get(name)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _compute(node: TraceNode, attrs: dict, rank: int, deps: tuple[int, ...], system: SystemConfig) -> WorkNode:
    cpu = bool(attrs.get("is_cpu_op", False))
    slot, stat = (Slot.CPU, StatType.CPU) if cpu else (Slot.GPU_COMP, StatType.GPU)
    if cpu or not system.roofline_enabled:
        return WorkNode(node.id, OpKind.COMPUTE, slot, stat, deps, runtime_ns=max(1, node.duration_ns),
                        gpu_compute=not cpu)
    num_ops, tensor = _int(attrs, "num_ops"), _int(attrs, "tensor_size")
    if num_ops is None or tensor is None:
        missing = "num_ops" if num_ops is None else "tensor_size"
        raise InputError(f"roofline-enabled needs attribute {missing}", source=_where(rank, node), path=missing)
    if tensor == 0:
        return WorkNode(node.id, OpKind.SKIP, slot, stat, deps)
    peak = system.peak_perf_tflops * 1e12
    mem_bw = (system.local_mem_bw_gb_per_s or 0.0) * 1e9
    intensity = num_ops / tensor
    perf = min(peak, mem_bw * intensity)
    runtime = int(num_ops / perf * 1e9) if perf > 0 else 0
    info = Roofline(intensity, perf / peak, (perf / intensity) / mem_bw if intensity else 0.0, perf < peak)
    return WorkNode(node.id, OpKind.COMPUTE, slot, stat, deps, runtime_ns=runtime, gpu_compute=True, roofline=info)


def _comm_size(node: TraceNode, value, rank: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InputError("needs a non-negative integer comm_size", source=_where(rank, node), path="comm_size")
    return value


_COMM_CODES = {c.value: c for c in CommType}
_COMM_ATTRS = ("is_cpu_op", "comm_type", "comm_size", "pg_name", "involved_dim", "comm_priority", "comm_src",
               "comm_dst", "comm_tag")


def _comm_attrs(node: TraceNode) -> dict:
    """The attributes a communication node is read by (one pass; these nodes are a trace's bulk)."""
    found = {}
    for a in node.attrs:
        if a.name in _COMM_ATTRS and a.type is not AttrType.NONE:
            found[a.name] = a.value
    return found


def _collective(node: TraceNode, attrs: dict, rank: int, deps: tuple[int, ...]) -> tuple[WorkNode, str]:
    comm_type = _COMM_CODES.get(attrs.get("comm_type"))
    if comm_type is CommType.BROADCAST:
        return WorkNode(node.id, OpKind.BROADCAST, Slot.GPU_COMM, StatType.COMM, deps,
                        runtime_ns=max(1, node.duration_ns)), ""
    kind = _COMM_KINDS.get(comm_type)
    if kind is None:
        shown = comm_type.name if comm_type is not None else repr(attrs.get("comm_type"))
        raise InputError(f"collective type {shown} is not supported by ASTRA-sim", source=_where(rank, node),
                         path="comm_type")
    group = str(attrs.get("pg_name") or "")
    involved = attrs.get("involved_dim")
    dims = tuple(bool(v) for v in involved) if isinstance(involved, tuple) else None
    priority = attrs.get("comm_priority", 0)
    return WorkNode(node.id, OpKind.COLLECTIVE, Slot.GPU_COMM, StatType.COMM, deps, 0, False, kind,
                    _comm_size(node, attrs.get("comm_size"), rank), dims,
                    priority if isinstance(priority, int) else 0), "" if group == "0" else group


def work_node(node: TraceNode, rank: int, deps: tuple[int, ...],
              system: SystemConfig) -> tuple[WorkNode, int, str]:
    """The node's work, its peer rank (-1) and its process group ("")."""
    kind = node.kind
    if kind is NodeKind.COMPUTE and not system.roofline_enabled:  # the common case, kept cheap
        cpu = False
        for a in node.attrs:
            if a.name == "is_cpu_op":
                cpu = bool(a.value)
        if cpu:
            return WorkNode(node.id, OpKind.COMPUTE, Slot.CPU, StatType.CPU, deps, max(1, node.duration_ns)), -1, ""
        return WorkNode(node.id, OpKind.COMPUTE, Slot.GPU_COMP, StatType.GPU, deps, max(1, node.duration_ns),
                        True), -1, ""
    if kind is NodeKind.COLLECTIVE or kind is NodeKind.SEND or kind is NodeKind.RECV:
        attrs = _comm_attrs(node)
        if attrs.get("is_cpu_op"):
            raise InputError("communication node marked is_cpu_op (ASTRA-sim rejects it)",
                             source=_where(rank, node), path="is_cpu_op")
        if kind is NodeKind.COLLECTIVE:
            work, group = _collective(node, attrs, rank, deps)
            return work, -1, group
        send = kind is NodeKind.SEND
        peer_attr = "comm_dst" if send else "comm_src"
        peer = attrs.get(peer_attr)
        if not isinstance(peer, int) or isinstance(peer, bool):
            raise InputError("missing peer rank", source=_where(rank, node), path=peer_attr)
        tag = attrs.get("comm_tag", 0)
        return WorkNode(node.id, OpKind.SEND if send else OpKind.RECV, Slot.GPU_COMM if send else Slot.FREE,
                        StatType.COMM, deps, size_bytes=_comm_size(node, attrs.get("comm_size"), rank),
                        tag=tag if isinstance(tag, int) else 0), peer, ""
    attrs = {a.name: a.value for a in node.attrs if a.type is not AttrType.NONE}
    if kind is NodeKind.COMPUTE:
        return _compute(node, attrs, rank, deps, system), -1, ""
    cpu = bool(attrs.get("is_cpu_op", False))
    if kind in (NodeKind.INVALID, NodeKind.METADATA):
        return WorkNode(node.id, OpKind.SKIP, Slot.CPU if cpu else Slot.GPU_COMM, StatType.INVALID, deps), -1, ""
    if kind in (NodeKind.MEM_LOAD, NodeKind.MEM_STORE):
        return WorkNode(node.id, OpKind.REMOTE_MEM, Slot.CPU if cpu else Slot.GPU_COMM, StatType.REMOTE_MEM, deps,
                        size_bytes=_int(attrs, "tensor_size") or 0), -1, ""
    raise InputError(f"node type {kind.value} is not supported by ASTRA-sim", source=_where(rank, node))


def rank_work(rank_trace: RankTrace, system: SystemConfig) -> RankWork:
    rank, nodes = rank_trace.rank, rank_trace.nodes
    index = {node.id: i for i, node in enumerate(nodes)}
    if len(index) != len(nodes):
        seen: set[int] = set()
        duplicate = next(n.id for n in nodes if n.id in seen or seen.add(n.id))
        raise InputError(f"duplicate node id {duplicate}", source=f"rank {rank}")
    work, peers, groups = [], [], []
    for node in nodes:
        # a dependency on a node the rank does not have counts as met (`genie trace validate` warns about it):
        # Chakra's converter leaves `ctrl_deps: [0]` on each thread root after removing node 0
        deps = tuple(index[d] for d in node.deps if d in index)
        w, peer, group = work_node(node, rank, deps, system)
        work.append(w)
        peers.append(peer)
        groups.append(group)
    return RankWork(rank, tuple(work), tuple(peers), tuple(groups))


def trace_work(trace: Trace, system: SystemConfig) -> tuple[RankWork, ...]:
    for i, r in enumerate(trace.ranks):
        if r.rank != i:
            raise InputError(f"rank {r.rank} is listed at position {i}; ranks must be 0..N-1 in order",
                             source="trace")
    # Replicas share their (immutable) node objects: a rank whose nodes are the very objects of an earlier
    # rank's gets the same work (nothing in it depends on the rank number but error messages).
    done: dict[tuple[int, ...], RankWork] = {}
    works = []
    for r in trace.ranks:
        key = tuple(map(id, r.nodes))
        same = done.get(key)
        if same is None:
            works.append(done.setdefault(key, rank_work(r, system)))
        else:
            works.append(RankWork(r.rank, same.nodes, same.peers, same.groups))
    return tuple(works)
