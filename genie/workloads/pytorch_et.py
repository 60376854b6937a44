"""PyTorch execution traces (``ExecutionTraceObserver`` JSON, the Chakra "host" trace) and Kineto traces
(``torch.profiler`` Chrome-trace JSON, the "device" trace): pure readers, bytes in, typed records out.

An execution trace (schema ``1.0.x``/``1.1.x-chakra.0.0.4``) is ``{"schema", "pid", "nodes": [...]}``; each
node has ``id``, ``name``, ``ctrl_deps`` (its caller's id: the nodes form a call tree), ``inputs``
(``values``/``types``: a tensor is ``[tensor id, storage id, offset, elements, bytes per element, device]``)
and ``attrs`` (``rf_id``, the record-function id Kineto events carry as ``Record function id``; ``tid``).
No durations: those are in the Kineto trace.

Communication is the ``c10d::*`` ops (:data:`C10D_OPS`); each becomes a :class:`CommOp` with its size in
ASTRA-sim's ``comm_size`` meaning, as Chakra's converter computes it from the input tensors (all_reduce,
reduce_scatter: the whole buffer; all_gather: one rank's input; all_to_all: one rank's buffer; broadcast, reduce:
the buffer; gather, scatter: one rank's piece; send/recv: the message; barrier: 0). The root of a rooted op is
read as c10d records it, a rank of the op's group. An uneven all-to-all (all-to-allv) also gets its per-peer
sizes in bytes: ``alltoall_base_``'s input and output split lists (inputs 4 and 3, rows of dim 0), or the sizes
of ``alltoall_``'s input and output tensor lists; an even one (empty or equal splits) gets none.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass
from enum import Enum

from genie.core.errors import InputError
from genie.core.jsondoc import decode_json
from genie.core.trace import CommType
from genie.workloads.pg_metadata import PG_INIT_NODE, GroupRecord, parse_pg_records

SUPPORTED_SCHEMA = re.compile(r"^1\.(0|1)\.\d+-chakra\.0\.0\.4$")
THREAD_ROOT = "[pytorch|profiler|execution_trace|thread]"
PROCESS_ROOT = "[pytorch|profiler|execution_trace|process]"
PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
_TENSOR_TYPE = re.compile(r"Tensor\(([^)]*)\)")


class P2P(Enum):
    SEND = "send"
    RECV = "recv"


@dataclass(frozen=True)
class _OpShape:
    """Which inputs of a c10d op carry what: size from input `size_from`, peer/tag input indices."""

    comm: CommType | P2P
    size_from: int | None  # None: no payload (barrier)
    peer_at: int | None = None
    tag_at: int | None = None
    root_at: int | None = None  # the root's rank in the op's group
    group_size_from_output_list: bool = False  # allgather_: len(outputs[0][0]) is the group's size
    group_size_from_ratio: tuple[int, int] | None = None  # bytes of input a / bytes of input b is the group's size
    splits: "_Splits | None" = None  # an all-to-all's per-peer sizes


class _Splits(Enum):
    """Where an all-to-all's per-peer sizes are: ``alltoall_base_`` (``all_to_all_single``) has the output and
    input split lists as inputs 3 and 4 (rows of dim 0; empty: even); ``alltoall_`` (``all_to_all``) has one
    tensor per peer in its output (input 0) and input (input 1) lists."""

    SPLIT_LISTS = "split_lists"
    TENSOR_LISTS = "tensor_lists"


# the ops c10d records (torch/csrc/distributed/c10d/Ops.cpp); input 0.. as in their schemas
C10D_OPS: dict[str, _OpShape] = {
    "c10d::allreduce_": _OpShape(CommType.ALL_REDUCE, 0),
    "c10d::allreduce_coalesced_": _OpShape(CommType.ALL_REDUCE, 0),
    "c10d::allgather_": _OpShape(CommType.ALL_GATHER, 1, group_size_from_output_list=True),
    "c10d::_allgather_base_": _OpShape(CommType.ALL_GATHER, 1, group_size_from_ratio=(0, 1)),
    "c10d::allgather_into_tensor_coalesced_": _OpShape(CommType.ALL_GATHER, 1, group_size_from_ratio=(0, 1)),
    "c10d::reduce_scatter_": _OpShape(CommType.REDUCE_SCATTER, 1),
    "c10d::_reduce_scatter_base_": _OpShape(CommType.REDUCE_SCATTER, 1, group_size_from_ratio=(1, 0)),
    "c10d::reduce_scatter_tensor_coalesced_": _OpShape(CommType.REDUCE_SCATTER, 1, group_size_from_ratio=(1, 0)),
    "c10d::alltoall_base_": _OpShape(CommType.ALL_TO_ALL, 1, splits=_Splits.SPLIT_LISTS),
    "c10d::alltoall_": _OpShape(CommType.ALL_TO_ALL, 1, splits=_Splits.TENSOR_LISTS),
    "c10d::broadcast_": _OpShape(CommType.BROADCAST, 0, root_at=2),
    "c10d::reduce_": _OpShape(CommType.REDUCE, 0, root_at=3),
    "c10d::gather_": _OpShape(CommType.GATHER, 1, root_at=3),  # size: this rank's input
    "c10d::scatter_": _OpShape(CommType.SCATTER, 0, root_at=3),  # size: this rank's output (the root's input
    # list is empty on the other ranks)
    "c10d::barrier": _OpShape(CommType.BARRIER, None),
    "c10d::send": _OpShape(P2P.SEND, 0, peer_at=2, tag_at=3),
    "c10d::recv_": _OpShape(P2P.RECV, 0, peer_at=2, tag_at=3),
    "c10d::recv_any_source_": _OpShape(P2P.RECV, 0, tag_at=2),
}
RECORD_PARAM_COMMS = "record_param_comms"
PG_HINT = "genie::pg="  # a record_function `genie trace capture` puts around each torch.distributed call
WAIT_HINT = "genie::wait"  # and around each Work.wait
DEFAULT_GROUP_NAME = "0"  # the name PyTorch gives the world group (init_process_group)
WORK_PREFIXES = ("gloo:", "nccl:")  # the backend's own record of the work (gloo: on its worker threads)


@dataclass(frozen=True)
class HostNode:
    id: int
    name: str
    parent: int
    rf_id: int | None
    tid: int
    values: tuple
    types: tuple[str, ...]


@dataclass(frozen=True)
class HostTrace:
    """One rank's execution trace."""

    source: str
    schema: str
    pid: int | None
    nodes: tuple[HostNode, ...]
    groups: tuple[GroupRecord, ...]
    linked: bool = False  # chakra_trace_link's output (Kineto's times merged into the nodes: not read)

    def children(self) -> dict[int, list[HostNode]]:
        out: dict[int, list[HostNode]] = {}
        for n in self.nodes:
            if n.parent != n.id:
                out.setdefault(n.parent, []).append(n)
        return out


@dataclass(frozen=True)
class CommOp:
    """One c10d op as the trace describes it (the group not yet resolved: `group_hint` if the trace says)."""

    node: HostNode
    comm: CommType | P2P
    size_bytes: int
    dtype: str
    peer_group_rank: int | None
    root_group_rank: int | None  # broadcast, reduce, gather, scatter
    tag: int
    group_hint: str | None  # pg_name from a record_param_comms child, when there is one
    group_size: int | None  # what the op itself says of its group's size (allgather_'s output list)
    send_split_bytes: tuple[int, ...] | None = None  # an uneven all-to-all: bytes to / from each group member
    recv_split_bytes: tuple[int, ...] | None = None
    group_marker: str | None = None  # the group `genie trace capture`'s genie::pg= range around the op names
    # (known to the trace's process-group records or not)


def load_json(data: bytes, *, source: str) -> object:
    """JSON from bytes, gunzipped first when they are gzip."""
    raw = data
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"corrupt gzip data: {exc}", source=source) from None
    return decode_json(raw, source=source)


def is_execution_trace(doc: object) -> bool:
    return isinstance(doc, dict) and "nodes" in doc and "schema" in doc


def is_kineto_trace(doc: object) -> bool:
    return isinstance(doc, dict) and "traceEvents" in doc


def _attr(node: dict, name: str) -> object:
    for a in node.get("attrs") or ():
        if isinstance(a, dict) and a.get("name") == name:
            return a.get("value")
    return None


def read_execution_trace(doc: object, *, source: str, world_size: int) -> HostTrace:
    if not is_execution_trace(doc):
        raise InputError("not a PyTorch execution trace (no schema/nodes)", source=source)
    schema = doc["schema"]
    if not isinstance(schema, str) or not SUPPORTED_SCHEMA.match(schema):
        raise InputError(f"unsupported execution-trace schema {schema!r} (genie reads 1.0.x and "
                         "1.1.x-chakra.0.0.4: torch 2.1 .. 2.13)", source=source, path="schema")
    if not isinstance(doc["nodes"], list):
        raise InputError("nodes must be a list", source=source, path="nodes")
    nodes, groups = [], {}
    for i, n in enumerate(doc["nodes"]):
        where = f"nodes[{i}]"
        if not isinstance(n, dict):
            raise InputError("node must be an object", source=source, path=where)
        for field in ("id", "name", "ctrl_deps", "inputs"):
            if field not in n:
                raise InputError(f"missing field {field!r}", source=source, path=f"{where}.{field}")
        if not isinstance(n["id"], int) or not isinstance(n["ctrl_deps"], int) or not isinstance(n["name"], str):
            raise InputError("id and ctrl_deps must be integers, name a string", source=source, path=where)
        inputs = n["inputs"]
        if not isinstance(inputs, dict) or not isinstance(inputs.get("values"), list) \
                or not isinstance(inputs.get("types"), list):
            raise InputError("inputs must have values and types lists", source=source, path=f"{where}.inputs")
        rf_id, tid = _attr(n, "rf_id"), _attr(n, "tid")
        node = HostNode(n["id"], n["name"], n["ctrl_deps"], rf_id if isinstance(rf_id, int) else None,
                        tid if isinstance(tid, int) else 0, tuple(inputs["values"]),
                        tuple(str(t) for t in inputs["types"]))
        nodes.append(node)
        if node.name == PG_INIT_NODE and node.values and isinstance(node.values[0], str):
            # every record: PyTorch writes one when tracing starts; `genie trace capture` another at the step's
            # end (groups made after the start: a trace begun before new_group has only that one)
            for rec in parse_pg_records(node.values[0], world_size=world_size, source=source):
                groups.setdefault(rec.name, rec)
    pid = doc.get("pid")
    linked = any(isinstance(n, dict) and "inclusive_dur" in n for n in doc["nodes"])
    return HostTrace(source, schema, pid if isinstance(pid, int) else None, tuple(nodes), tuple(groups.values()),
                     linked)


# ---- communication ops ---------------------------------------------------------------------------------
def _is_tensor(v: object) -> bool:
    return (isinstance(v, list) and len(v) == 6 and all(isinstance(x, int) for x in v[:5])
            and isinstance(v[5], str))


def _tensor_bytes(v: object) -> int:
    """Bytes of a tensor, or of every tensor in a (nested) list of them."""
    if _is_tensor(v):
        return v[3] * v[4]
    if isinstance(v, list):
        return sum(_tensor_bytes(x) for x in v)
    return 0


def _dtype(types: tuple[str, ...], index: int | None) -> str:
    if index is None or index >= len(types):
        return ""
    m = _TENSOR_TYPE.search(types[index])
    return m.group(1) if m else ""


def _int_input(node: HostNode, index: int | None, field: str) -> int | None:
    if index is None:
        return None
    v = node.values[index] if index < len(node.values) else None
    if not isinstance(v, int) or isinstance(v, bool):
        raise InputError(f"{node.name}: input {index} ({field}) is not an integer: {v!r}",
                         path=f"node {node.id}.inputs.values[{index}]")
    return v


def _row_splits(tensor: object, splits: object, where: str) -> tuple[int, ...] | None:
    """Bytes per peer of an ``all_to_all_single`` side: its split list (rows of dim 0) times a row's bytes."""
    if not isinstance(splits, list) or not splits:
        return None  # even
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in splits) or not _is_tensor(tensor):
        raise InputError(f"split sizes must be a list of non-negative integers beside a tensor, got {splits!r}",
                         path=where)
    rows, total = sum(splits), _tensor_bytes(tensor)
    if rows == 0:
        return tuple(0 for _ in splits)
    if total % rows:
        raise InputError(f"split sizes {splits} do not divide the tensor's {total} bytes into rows", path=where)
    return tuple(x * (total // rows) for x in splits)


def _all_to_all_splits(node: HostNode, how: "_Splits") -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(send, recv) per-peer bytes of an all-to-all, both None when it is even."""
    values = node.values
    where = f"node {node.id}.inputs.values"
    if how is _Splits.SPLIT_LISTS:
        if len(values) < 5:
            return None, None
        recv = _row_splits(values[0], values[3], f"{where}[3]")
        send = _row_splits(values[1], values[4], f"{where}[4]")
    else:
        lists = values[:2]
        if len(lists) < 2 or not all(isinstance(v, list) and all(_is_tensor(t) for t in v) for v in lists):
            return None, None
        recv, send = (tuple(_tensor_bytes(t) for t in v) for v in lists)
    n = len(send or recv or ())
    if send is None and recv is not None:
        send = (_tensor_bytes(values[1]) // n,) * n if n else None
    if recv is None and send is not None:
        recv = (_tensor_bytes(values[0]) // n,) * n if n else None
    if send is None or recv is None or (len(set(send)) <= 1 and len(set(recv)) <= 1 and send == recv):
        return None, None
    return send, recv


def _group_marker(node: HostNode, parents: dict[int, HostNode]) -> str | None:
    """The group named by the ``genie::pg=<name>`` range around the op (`genie trace capture`), if any."""
    parent = parents.get(node.parent)
    return parent.name[len(PG_HINT):] if parent is not None and parent.name.startswith(PG_HINT) else None


def _group_hint(node: HostNode, children: dict[int, list[HostNode]], known: set[str],
                parents: dict[int, HostNode]) -> str | None:
    """The pg_name a record_param_comms child names (NCCL traces: its inputs hold (pg_name, pg_desc)), or the
    ``genie::pg=<name>`` range around the op (`genie trace capture`)."""
    marker = _group_marker(node, parents)
    if marker in known:
        return marker
    for child in children.get(node.id, ()):
        if child.name != RECORD_PARAM_COMMS:
            continue
        for v in child.values:
            if isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v) and v[0] in known:
                return v[0]
    return None


def comm_ops(trace: HostTrace) -> tuple[CommOp, ...]:
    """Every c10d op of the trace in node-id (issue) order; bad inputs -> InputError naming file and node."""
    children = trace.children()
    parents = {n.id: n for n in trace.nodes}
    known = {g.name for g in trace.groups}
    out = []
    for node in sorted(trace.nodes, key=lambda n: n.id):
        shape = C10D_OPS.get(node.name)
        if shape is None:
            continue
        try:
            if shape.size_from is not None and shape.size_from >= len(node.values):
                raise InputError(f"{node.name}: {len(node.values)} inputs, expected a tensor at input "
                                 f"{shape.size_from}", path=f"node {node.id}.inputs.values")
            size = 0 if shape.size_from is None else _tensor_bytes(node.values[shape.size_from])
            peer = _int_input(node, shape.peer_at, "peer rank")
            root = _int_input(node, shape.root_at, "root rank")
            tag = _int_input(node, shape.tag_at, "tag") or 0
            send, recv = _all_to_all_splits(node, shape.splits) if shape.splits is not None else (None, None)
        except InputError as exc:
            raise InputError(exc.detail, source=trace.source, path=exc.path) from None
        group_size = None
        if shape.group_size_from_output_list and node.values and isinstance(node.values[0], list) \
                and node.values[0] and isinstance(node.values[0][0], list):
            group_size = len(node.values[0][0])
        if shape.group_size_from_ratio is not None and len(node.values) > max(shape.group_size_from_ratio):
            whole, piece = (_tensor_bytes(node.values[i]) for i in shape.group_size_from_ratio)
            if piece and whole % piece == 0:  # all_gather_into_tensor: output = size x input (reduce-scatter: the
                group_size = whole // piece   # other way round)
        if send is not None:
            group_size = len(send)
        out.append(CommOp(node, shape.comm, size, _dtype(node.types, shape.size_from), peer, root, tag,
                          _group_hint(node, children, known, parents), group_size, send, recv,
                          group_marker=_group_marker(node, parents)))
    return tuple(out)


# ---- Kineto --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KinetoEvent:
    name: str
    tid: int | str
    start_us: float
    dur_us: float
    rf_id: int | None
    input_dims: str  # JSON of args["Input Dims"], to match work events to their op
    category: str
    stream: int | None

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass(frozen=True)
class KinetoTrace:
    source: str
    rank: int | None
    pid: int | None
    events: tuple[KinetoEvent, ...]


def read_kineto(doc: object, *, source: str) -> KinetoTrace:
    if not is_kineto_trace(doc) or not isinstance(doc["traceEvents"], list):
        raise InputError("not a Kineto trace (no traceEvents list)", source=source, path="traceEvents")
    dist = doc.get("distributedInfo")
    rank = dist.get("rank") if isinstance(dist, dict) and isinstance(dist.get("rank"), int) else None
    events, pids = [], set()
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        ts, dur = e.get("ts"), e.get("dur")
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
            raise InputError("complete event without numeric ts/dur", source=source, path=f"traceEvents[{i}]")
        rf = args.get("Record function id")
        stream = args.get("stream")
        category = str(e.get("cat", ""))
        if category in ("cpu_op", "user_annotation") and isinstance(e.get("pid"), int):
            pids.add(e["pid"])
        events.append(KinetoEvent(str(e.get("name", "")), e.get("tid", 0), float(ts), float(dur),
                                  rf if isinstance(rf, int) else None, json.dumps(args.get("Input Dims")),
                                  category, stream if isinstance(stream, int) else None))
    return KinetoTrace(source, rank, min(pids) if len(pids) == 1 else None, tuple(events))
