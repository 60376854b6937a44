"""genie's own readable trace format (JSON or YAML), for hand-written traces and lossless dumps.

    format: genie-trace          # required marker
    version: 1
    name: two-layer-dp           # optional
    ranks: 4                     # world size (with `program`), or a list of {rank, nodes}
    groups: {tp0: [0, 1], tp1: [2, 3]}
    program:                     # the same nodes on every rank (SPMD); or per-rank lists under `ranks`
      - {id: 0, type: compute, duration: 50us}
      - {id: 1, type: all_reduce, size: 4MiB, deps: [0]}
      - {id: 2, type: all_gather, size: 1MiB, group: "tp{rank//2}", deps: [1]}
      - {id: 3, type: send, size: 64KiB, peer: "+1", tag: 7, deps: [2]}
      - {id: 4, type: recv, size: 64KiB, peer: "-1", tag: 7, deps: [2]}

Node keys: ``id`` (required), ``name``, ``type`` (compute, a collective type such as all_reduce /
reduce_scatter / all_to_all / barrier, send, recv, or another Chakra node kind), ``deps`` (data) and
``ctrl_deps``, ``duration`` ("50us") or ``duration_ns``, ``size`` ("4MiB") or ``size_bytes``, ``group``,
``algorithm``, ``peer`` (a rank, or "+k"/"-k" relative modulo the world), ``tag``, ``num_ops``,
``tensor_size``, ``start_time_ns``, ``send_splits``/``recv_splits`` (an uneven all-to-all: the sizes sent to /
received from each group member, in group-rank order, e.g. ``[1KiB, 0, 3KiB, 512]``; ``size`` may then be left
out: it is their sum), and ``attrs`` (extra attributes: ``{name, type, value}`` with a Chakra
value type such as int64_val). In ``program``, ``group`` may use ``{rank}`` arithmetic (``tp{rank//2}``).

The writer uses that short form whenever it reads back to the identical node, and otherwise an exact form
(``kind`` + the complete ``attrs`` list + ``inputs``/``outputs``/``extra_wire`` in base64) -- so
ET -> JSON -> ET reproduces every byte.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace
from typing import Any, BinaryIO

import yaml

from genie.core.errors import InputError, shown
from genie.core.jsondoc import decode_json
from genie.core.trace import (RECV_SPLITS_ATTR, SEND_SPLITS_ATTR, Attribute, AttrType, CommType, IOInfo, NodeKind, ProcessGroup, RankTrace, Trace,
                              TraceMetadata, TraceNode, collective_node, compute_node, recv_node, send_node)
from genie.core.units import parse_size_bytes, parse_time_ns
from genie.core.limits import MAX_TRACE_NODES, MAX_TRACE_RANKS
from genie.input_yaml import parse_yaml
from genie.core.collective import Algorithm

FORMAT_MARKER = "genie-trace"
_SHORT_KEYS = {"id", "name", "type", "deps", "ctrl_deps", "duration", "duration_ns", "size", "size_bytes", "group",
               "algorithm", "peer", "tag", "num_ops", "tensor_size", "start_time_ns", "attrs", "send_splits",
               "recv_splits"}
_EXACT_KEYS = {"id", "name", "kind", "deps", "ctrl_deps", "duration_ns", "start_time_ns", "attrs", "inputs",
               "outputs", "extra_wire"}
_GROUP_EXPR = re.compile(r"\{rank\s*(?:(//|%|\+|-|\*)\s*(\d+))?\}")


class _Ctx:
    def __init__(self, source: str, path: str, rank: int, world: int) -> None:
        self.source, self.path, self.rank, self.world = source, path, rank, world

    def err(self, key: str, message: str) -> InputError:
        return InputError(message, source=self.source, path=f"{self.path}.{key}" if key else self.path)


def _int(d: dict, key: str, c: _Ctx, default: Any = None) -> Any:
    v = d.get(key, default)
    if v is not default and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
        raise c.err(key, f"expected a non-negative integer, got {shown(v)}")
    return v


def _ids(d: dict, key: str, c: _Ctx) -> tuple[int, ...]:
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v):
        raise c.err(key, f"expected a list of node ids, got {shown(v)}")
    return tuple(v)


def _any(v: Any) -> bool:
    return True


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_FLOATS = frozenset({AttrType.DOUBLE, AttrType.DOUBLE_LIST, AttrType.FLOAT, AttrType.FLOAT_LIST})
_VALUE_CHECKS = {}
for _t in AttrType:
    _base = _t.value.removesuffix("_list").removesuffix("_val")
    if _t.is_integer:
        _VALUE_CHECKS[_t] = _is_int
    elif _base in ("double", "float"):
        _VALUE_CHECKS[_t] = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    elif _base == "bool":
        _VALUE_CHECKS[_t] = lambda v: isinstance(v, bool)
    elif _base in ("string", "bytes"):
        _VALUE_CHECKS[_t] = lambda v: isinstance(v, str)


def _attr_from_doc(doc: Any, c: _Ctx, key: str) -> Attribute:
    if not isinstance(doc, dict) or "name" not in doc:
        raise c.err(key, "an attribute is {name, type, value}")
    try:
        kind = AttrType(doc.get("type", "none"))
    except ValueError:
        raise c.err(f"{key}.type", f"unknown attribute type {doc.get('type')!r}") from None
    value = doc.get("value")
    items = value if kind.is_list else [value]
    if kind.is_list and not isinstance(value, list) or not all(map(_VALUE_CHECKS.get(kind, _any), items)):
        raise c.err(f"{key}.value", f"{shown(value)} is not a valid {kind.value}")
    if kind in (AttrType.BYTES, AttrType.BYTES_LIST):
        value = base64.b64decode(value) if kind is AttrType.BYTES else tuple(base64.b64decode(v) for v in value)
    elif kind in _FLOATS:
        value = tuple(float(v) for v in value) if kind.is_list else float(value)
    elif kind.is_list:
        value = tuple(value or ())
    elif kind is AttrType.NONE:
        value = None
    return Attribute(str(doc["name"]), kind, value, str(doc.get("doc_string", "")),
                     base64.b64decode(doc.get("extra_wire", "")))


def _attr_to_doc(a: Attribute) -> dict:
    value: Any = a.value
    if a.type is AttrType.BYTES:
        value = base64.b64encode(value).decode()
    elif a.type is AttrType.BYTES_LIST:
        value = [base64.b64encode(v).decode() for v in value]
    elif a.type.is_list:
        value = list(value)
    doc: dict = {"name": a.name, "type": a.type.value, "value": value}
    if a.doc_string:
        doc["doc_string"] = a.doc_string
    if a.extra_wire:
        doc["extra_wire"] = base64.b64encode(a.extra_wire).decode()
    return doc


def _group_name(text: Any, c: _Ctx) -> str | None:
    if text is None or text == "":
        return None
    def sub(m: re.Match) -> str:
        op, k = m.group(1), int(m.group(2) or 0)
        r = c.rank
        return str({None: r, "//": r // k if k else r, "%": r % k if k else r, "+": r + k, "-": r - k,
                    "*": r * k}[op])
    return _GROUP_EXPR.sub(sub, str(text))


def _peer(v: Any, c: _Ctx) -> int:
    if isinstance(v, str) and re.fullmatch(r"[+-]\d+", v.strip()):
        return (c.rank + int(v)) % c.world
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise c.err("peer", f"expected a rank or '+k'/'-k', got {shown(v)}")


def _splits(d: dict, key: str, c: _Ctx) -> tuple[int, ...] | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, list):
        raise c.err(key, f"expected a list of sizes, one per group member, got {shown(v)}")
    try:
        return tuple(_split_size(x) for x in v)
    except ValueError as exc:
        raise c.err(key, str(exc)) from None


def _split_size(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"expected a size such as 4096 or '4KiB', got {shown(v)}")
    size = parse_size_bytes(v) if isinstance(v, str) else v
    if size < 0:
        raise ValueError(f"a size cannot be negative, got {v}")
    return size


def _short_node(d: dict, c: _Ctx) -> TraceNode:
    unknown = set(d) - _SHORT_KEYS
    if unknown:
        raise c.err(sorted(unknown)[0], f"unknown key (known: {', '.join(sorted(_SHORT_KEYS))})")
    node_id = _int(d, "id", c)
    if node_id is None:
        raise c.err("id", "every node needs an id")
    name = str(d.get("name", f"n{node_id}"))
    deps, ctrl = _ids(d, "deps", c), _ids(d, "ctrl_deps", c)
    extra = tuple(_attr_from_doc(a, c, f"attrs[{i}]") for i, a in enumerate(d.get("attrs") or []))
    type_text = str(d.get("type", "compute")).strip().lower()
    try:
        duration = parse_time_ns(d["duration"]) if "duration" in d else (_int(d, "duration_ns", c) or 0)
        size = parse_size_bytes(d["size"]) if "size" in d else _int(d, "size_bytes", c)
        algorithm = Algorithm.parse(d["algorithm"]) if d.get("algorithm") else None
    except ValueError as exc:
        bad = next(k for k in ("duration", "size", "algorithm") if k in d)
        raise c.err(bad, str(exc)) from None
    group = _group_name(d.get("group"), c)
    if type_text == "compute":
        node = compute_node(node_id, name, duration_ns=duration, num_ops=_int(d, "num_ops", c),
                            tensor_size_bytes=_int(d, "tensor_size", c), data_deps=deps, ctrl_deps=ctrl,
                            extra_attrs=extra)
    elif type_text in ("send", "recv"):
        if size is None:
            raise c.err("size", f"a {type_text} needs a size")
        build = send_node if type_text == "send" else recv_node
        node = build(node_id, name, rank=c.rank, peer=_peer(d.get("peer"), c), size_bytes=size,
                     tag=_int(d, "tag", c, 0), process_group=group, data_deps=deps, ctrl_deps=ctrl, extra_attrs=extra)
    elif type_text in {k.value for k in NodeKind} - {"compute", "send", "recv", "collective"}:
        node = TraceNode(node_id, name, NodeKind(type_text), deps, ctrl, duration, attrs=extra)
    else:
        try:
            comm = CommType.parse(type_text)
        except ValueError as exc:
            raise c.err("type", f"{exc}; or compute, send, recv") from None
        send, recv = _splits(d, "send_splits", c), _splits(d, "recv_splits", c)
        if (send is not None or recv is not None) and comm is not CommType.ALL_TO_ALL:
            raise c.err("send_splits" if send is not None else "recv_splits", "per-peer sizes are for an all_to_all")
        if size is None and send is not None:
            size = sum(send)
        if size is None and comm is not CommType.BARRIER:
            raise c.err("size", f"a {comm.name.lower()} needs a size")
        node = collective_node(node_id, name, comm_type=comm, size_bytes=size or 0, process_group=group,
                               algorithm=algorithm, data_deps=deps, ctrl_deps=ctrl, extra_attrs=extra,
                               send_split_bytes=send, recv_split_bytes=recv)
    if "duration" in d or "duration_ns" in d:
        node = replace(node, duration_ns=duration)
    return replace(node, start_time_ns=_int(d, "start_time_ns", c, 0))


def _exact_node(d: dict, c: _Ctx) -> TraceNode:
    unknown = set(d) - _EXACT_KEYS
    if unknown:
        raise c.err(sorted(unknown)[0], f"unknown key in an exact node (known: {', '.join(sorted(_EXACT_KEYS))})")
    try:
        kind = NodeKind(d["kind"])
    except ValueError:
        raise c.err("kind", f"unknown node kind {d['kind']!r}") from None
    io = {}
    for key in ("inputs", "outputs"):
        if d.get(key) is not None:
            v = d[key]
            io[key] = IOInfo(v.get("values", ""), v.get("shapes", ""), v.get("types", ""),
                             base64.b64decode(v.get("extra_wire", "")))
    if _int(d, "id", c) is None:
        raise c.err("id", "every node needs an id")
    return TraceNode(_int(d, "id", c), str(d.get("name", "")), kind, _ids(d, "deps", c), _ids(d, "ctrl_deps", c),
                     _int(d, "duration_ns", c, 0), _int(d, "start_time_ns", c, 0),
                     tuple(_attr_from_doc(a, c, f"attrs[{i}]") for i, a in enumerate(d.get("attrs") or [])),
                     io.get("inputs"), io.get("outputs"), base64.b64decode(d.get("extra_wire", "")))


def _node(d: Any, c: _Ctx) -> TraceNode:
    if not isinstance(d, dict):
        raise c.err("", "a node is a mapping")
    return _exact_node(d, c) if "kind" in d else _short_node(d, c)


def _metadata(doc: Any, c: _Ctx) -> TraceMetadata:
    if doc is None:
        return TraceMetadata()
    attrs = tuple(_attr_from_doc(a, c, f"metadata.attrs[{i}]") for i, a in enumerate(doc.get("attrs") or []))
    return TraceMetadata(str(doc.get("version", "0.0.4")), attrs, base64.b64decode(doc.get("extra_wire", "")))


TOP_KEYS = ("format", "version", "name", "info", "groups", "ranks", "program")


def trace_from_doc(doc: Any, *, source: str = "<native>") -> Trace:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_MARKER:
        raise InputError(f"not a genie trace: expected a mapping with format: {FORMAT_MARKER}", source=source)
    if doc.get("version", 1) != 1:
        raise InputError(f"unsupported version {shown(doc.get('version'))} (this genie reads 1)", source=source,
                         path="version")
    for key in doc:
        if key not in TOP_KEYS:
            raise InputError(f"unknown key {shown(key)}; expected one of: {', '.join(TOP_KEYS)}", source=source,
                             path=str(key)[:60])
    groups_doc = doc.get("groups") or {}
    if not isinstance(groups_doc, dict):
        raise InputError("groups must map a name to a list of ranks", source=source, path="groups")
    groups = []
    for name, ranks in groups_doc.items():
        if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise InputError("expected a list of ranks", source=source, path=f"groups.{name}")
        groups.append(ProcessGroup(str(name), tuple(ranks)))
    ranks_doc = doc.get("ranks")
    rank_traces = []
    if "program" in doc:
        if not isinstance(ranks_doc, int) or isinstance(ranks_doc, bool) or not 1 <= ranks_doc <= MAX_TRACE_RANKS:
            raise InputError(f"with `program`, `ranks` is the number of ranks (1 to {MAX_TRACE_RANKS}), "
                             f"got {shown(ranks_doc)}", source=source, path="ranks")
        program = doc["program"]
        if not isinstance(program, list):
            raise InputError("program must be a list of nodes", source=source, path="program")
        if ranks_doc * len(program) > MAX_TRACE_NODES:
            raise InputError(f"{ranks_doc} ranks of {len(program)} nodes are more than the {MAX_TRACE_NODES} nodes "
                             "genie reads of a trace", source=source, path="ranks")
        for rank in range(ranks_doc):
            nodes = tuple(_node(d, _Ctx(source, f"program[{i}]", rank, ranks_doc)) for i, d in enumerate(program))
            rank_traces.append(RankTrace(rank, nodes))
    elif isinstance(ranks_doc, list):
        world = len(ranks_doc)
        for i, r in enumerate(ranks_doc):
            if not isinstance(r, dict) or not isinstance(r.get("nodes"), list):
                raise InputError("each rank is {rank, nodes: [...]}", source=source, path=f"ranks[{i}]")
            rank = r.get("rank", i)
            ctx = _Ctx(source, f"ranks[{i}]", rank, world)
            nodes = tuple(_node(d, _Ctx(source, f"ranks[{i}].nodes[{j}]", rank, world))
                          for j, d in enumerate(r["nodes"]))
            rank_traces.append(RankTrace(rank, nodes, _metadata(r.get("metadata"), ctx)))
    else:
        raise InputError("expected `program` with `ranks: N`, or `ranks` as a list of {rank, nodes}", source=source)
    info = tuple((str(k), str(v)) for k, v in (doc.get("info") or {}).items())
    if doc.get("name"):
        info = (("name", str(doc["name"])), *info)
    return Trace(tuple(rank_traces), tuple(groups), info)


def read_native(data: bytes | str | BinaryIO, *, source: str = "<native>") -> Trace:
    """A genie trace from JSON or YAML text (YAML is a superset, so one parser reads both)."""
    raw = data if isinstance(data, (bytes, str)) else data.read()
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    try:
        doc = decode_json(text, source=source) if text.lstrip().startswith("{") else parse_yaml(text, source)
    except InputError as exc:  # the one YAML loader: duplicate keys and alias bombs refused
        raise InputError(f"not JSON/YAML: {exc.detail}", source=source, path=exc.path) from None
    return trace_from_doc(doc, source=source)


# ---- writing -------------------------------------------------------------------------------------------
def _short_doc(n: TraceNode, rank: int) -> dict | None:
    """The short form of ``n``, or None if it would not read back identically."""
    d: dict[str, Any] = {"id": n.id, "name": n.name}
    known = {"is_cpu_op"}
    if n.kind is NodeKind.COMPUTE:
        d["type"] = "compute"
        if n.num_ops is not None:
            d["num_ops"] = n.num_ops
        if n.tensor_size_bytes is not None:
            d["tensor_size"] = n.tensor_size_bytes
        known |= {"num_ops", "tensor_size"}
    elif n.kind is NodeKind.COLLECTIVE and n.comm_type is not None:
        d["type"] = n.comm_type.name.lower()
        d["size_bytes"] = n.size_bytes or 0
        known |= {"comm_type", "comm_size", "pg_name", "algorithm", SEND_SPLITS_ATTR, RECV_SPLITS_ATTR}
        if n.process_group:
            d["group"] = n.process_group
        if n.algorithm:
            d["algorithm"] = n.algorithm.value
        for key, splits in (("send_splits", n.send_split_bytes), ("recv_splits", n.recv_split_bytes)):
            if splits is not None:
                d[key] = list(splits)
    elif n.kind in (NodeKind.SEND, NodeKind.RECV) and n.peer is not None and n.size_bytes is not None:
        d.update(type=n.kind.value, size_bytes=n.size_bytes, peer=n.peer, tag=n.tag)
        known |= {"comm_src", "comm_dst", "comm_size", "comm_tag", "pg_name"}
        if n.process_group:
            d["group"] = n.process_group
    else:
        return None
    if n.data_deps:
        d["deps"] = list(n.data_deps)
    if n.ctrl_deps:
        d["ctrl_deps"] = list(n.ctrl_deps)
    if n.duration_ns:
        d["duration_ns"] = n.duration_ns
    if n.start_time_ns:
        d["start_time_ns"] = n.start_time_ns
    extras = [a for a in n.attrs if a.name not in known]
    if extras:
        d["attrs"] = [_attr_to_doc(a) for a in extras]
    try:
        back = _short_node(d, _Ctx("<check>", "", rank, max(rank, n.peer or 0) + 1))
    except InputError:
        return None
    return d if back == n else None


def _exact_doc(n: TraceNode) -> dict:
    d: dict[str, Any] = {"id": n.id, "name": n.name, "kind": n.kind.value, "deps": list(n.data_deps),
                         "ctrl_deps": list(n.ctrl_deps), "duration_ns": n.duration_ns,
                         "start_time_ns": n.start_time_ns, "attrs": [_attr_to_doc(a) for a in n.attrs]}
    for key in ("inputs", "outputs"):
        io = getattr(n, key)
        if io is not None:
            d[key] = {"values": io.values, "shapes": io.shapes, "types": io.types}
            if io.extra_wire:
                d[key]["extra_wire"] = base64.b64encode(io.extra_wire).decode()
    if n.extra_wire:
        d["extra_wire"] = base64.b64encode(n.extra_wire).decode()
    return d


def trace_to_doc(trace: Trace) -> dict:
    doc: dict[str, Any] = {"format": FORMAT_MARKER, "version": 1}
    info = dict(trace.info)
    if "name" in info:
        doc["name"] = info.pop("name")
    if info:
        doc["info"] = info
    if trace.groups:
        doc["groups"] = {g.name: list(g.ranks) for g in trace.groups}
    ranks = []
    for r in trace.ranks:
        entry: dict[str, Any] = {"rank": r.rank}
        if r.metadata != TraceMetadata():
            entry["metadata"] = {"version": r.metadata.version, "attrs": [_attr_to_doc(a) for a in r.metadata.attrs]}
            if r.metadata.extra_wire:
                entry["metadata"]["extra_wire"] = base64.b64encode(r.metadata.extra_wire).decode()
        entry["nodes"] = [_short_doc(n, r.rank) or _exact_doc(n) for n in r.nodes]
        ranks.append(entry)
    doc["ranks"] = ranks
    return doc


def write_native_json(trace: Trace) -> bytes:
    """JSON, one node per line."""
    doc = trace_to_doc(trace)
    ranks = doc.pop("ranks")
    head = json.dumps(doc, indent=1)[:-2]
    parts = []
    for r in ranks:
        nodes = ",\n   ".join(json.dumps(n, separators=(", ", ": ")) for n in r.pop("nodes"))
        rank_head = json.dumps(r)[:-1]
        parts.append(f"  {rank_head}, \"nodes\": [\n   {nodes}\n  ]}}")
    return (head + ",\n \"ranks\": [\n" + ",\n".join(parts) + "\n ]\n}\n").encode()


def write_native_yaml(trace: Trace) -> bytes:
    return yaml.safe_dump(trace_to_doc(trace), sort_keys=False, default_flow_style=None, width=120).encode()
