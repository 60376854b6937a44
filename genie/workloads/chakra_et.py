"""Chakra execution traces (``.et``): one file per rank, as ASTRA-sim reads them.

A file is a sequence of frames, each a protobuf varint length then a serialized message: frame 0 is
``GlobalMetadata``, every later frame a ``Node``. gzip-compressed files are detected by their magic bytes.
Reading then writing reproduces the original bytes of any file protobuf itself wrote: attribute order and value
types, explicitly set defaults (``bool_val: false``), inputs/outputs presence and unknown fields are all kept.

A set of files ``<prefix>.<rank>.et`` (rank 0..N-1) is a :class:`~genie.core.trace.Trace`. Process groups
come from ``<prefix>.comm_group.json`` when it exists (ASTRA-sim's ``--comm-group-configuration`` format:
``{"<pg_name>": [global ranks...]}``), else, as ASTRA-sim builds them, from the ``## process_group:init ##``
METADATA nodes PyTorch traces carry (see genie.workloads.pg_metadata). genie writes the JSON whenever a
trace has groups.

Chakra durations are whole microseconds. A node whose ``duration_ns`` is not is written with
``duration_micros`` rounded to the nearest microsecond plus a trailing ``duration_ns`` attribute (uint64) that
the reader folds back into ``duration_ns``; ASTRA-sim ignores it and sees the rounded value, and so does
``genie astra simulate`` (:func:`as_astra_reads`): it reads ASTRA-sim's inputs as ASTRA-sim does. genie's own
paths (replay, ``genie estimate``) keep the nanoseconds.

A node whose ``pg_name`` is "0" runs on ASTRA-sim's default communicator group (every rank); the comm-group
file never lists "0" (ASTRA-sim asserts group ids > 0), so :func:`read_et_set` adds that group when nodes use it.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

from google.protobuf.message import DecodeError

from genie.core.collector import collector_paused
from genie.core.errors import InputError
from genie.core.files import InputKind, gunzip_input, read_input, write_atomic
from genie.workloads.et_files import rank_files
from genie.core.jsondoc import decode_json
from genie.core.trace import (Attribute, AttrType, IOInfo, NodeKind, ProcessGroup, RankTrace, Trace, TraceMetadata,
                              TraceNode)
from genie.workloads.chakra_p2p import recover_peers
from genie.workloads.et_schema import messages
from genie.workloads.pg_metadata import PG_INIT_NODE, merge_groups, parse_pg_records

_KINDS = tuple(NodeKind)  # index = Chakra NodeType number
_KIND_CODE = {kind: i for i, kind in enumerate(_KINDS)}
_GZIP_MAGIC = b"\x1f\x8b"
COMM_GROUP_SUFFIX = ".comm_group.json"
DURATION_NS_ATTR = "duration_ns"  # exact duration when it is not a whole number of microseconds
DEFAULT_GROUP_ID = "0"  # ASTRA-sim's pg_name for the default communicator group (all ranks)


# ---- framing -------------------------------------------------------------------------------------------
def _read_varint(buf: bytes, pos: int, source: str) -> tuple[int, int]:
    result = shift = 0
    start = pos
    while True:
        if pos >= len(buf):
            raise InputError(f"truncated frame length at byte offset {start}", source=source)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise InputError(f"corrupt frame length (varint longer than 10 bytes) at byte offset {start}",
                             source=source)


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _load_bytes(data: bytes | BinaryIO, source: str) -> tuple[bytes, str]:
    raw = data if isinstance(data, (bytes, bytearray, memoryview)) else data.read()
    raw = bytes(raw)
    if raw[:2] == _GZIP_MAGIC:
        return gunzip_input(raw, InputKind.TRACE, source), " (offset in the gunzipped data)"
    return raw, ""


def iter_frames(buf: bytes, source: str = "<bytes>", note: str = "") -> list[tuple[int, bytes]]:
    """(byte offset of the frame's length prefix, payload) of every frame."""
    frames, pos = [], 0
    while pos < len(buf):
        start = pos
        length, pos = _read_varint(buf, pos, source)
        if pos + length > len(buf):
            raise InputError(f"truncated frame at byte offset {start}{note}: length says {length} bytes, "
                             f"{len(buf) - pos} left", source=source)
        frames.append((start, buf[pos:pos + length]))
        pos += length
    return frames


# ---- protobuf <-> model --------------------------------------------------------------------------------
def _unknown_wire(msg: Any, cls: type | None) -> bytes:
    """The serialized unknown fields of ``msg`` (b"" if none, or when ``cls`` is None: known to have none)."""
    if cls is None:
        return b""
    probe = cls()
    probe.CopyFrom(msg)
    for f in probe.DESCRIPTOR.fields:
        probe.ClearField(f.name)
    return probe.SerializeToString()


_ATTR_TYPES = {t.value: (t, t.is_list) for t in AttrType}  # oneof field -> (type, is a list)
_ATTR_FIELDS = {t: (t.value, t.is_list) for t in AttrType}


def _attr_from_pb(pb: Any, cls: type | None) -> Attribute:
    which = pb.WhichOneof("value")
    if which is None:
        kind, value = AttrType.NONE, None
    else:
        kind, is_list = _ATTR_TYPES[which]
        value = tuple(getattr(pb, which).values) if is_list else getattr(pb, which)
    return Attribute(pb.name, kind, value, pb.doc_string, _unknown_wire(pb, cls))


def _attr_to_pb(attr: Attribute, pb: Any) -> None:
    pb.name = attr.name
    if attr.doc_string:
        pb.doc_string = attr.doc_string
    if attr.type is not AttrType.NONE:
        field, is_list = _ATTR_FIELDS[attr.type]
        if is_list:
            lst = getattr(pb, field)
            lst.SetInParent()
            lst.values.extend(attr.value or ())
        else:
            setattr(pb, field, attr.value)
    if attr.extra_wire:
        pb.MergeFromString(attr.extra_wire)


def _io_from_pb(node_pb: Any, name: str, cls: type | None) -> IOInfo | None:
    if not node_pb.HasField(name):
        return None
    pb = getattr(node_pb, name)
    return IOInfo(pb.values, pb.shapes, pb.types, _unknown_wire(pb, cls))


def _io_to_pb(info: IOInfo | None, pb: Any) -> None:
    if info is None:
        return
    pb.SetInParent()
    pb.values, pb.shapes, pb.types = info.values, info.shapes, info.types
    if info.extra_wire:
        pb.MergeFromString(info.extra_wire)


def node_from_pb(pb: Any, *, unknown_fields: bool = True,
                 attributes: dict[bytes, Attribute] | None = None) -> TraceNode:
    """The model of a parsed Node; ``unknown_fields=False`` skips collecting them (the caller knows of none).
    ``attributes`` (with ``unknown_fields=False``) memoises attributes by their encoded bytes: the same bytes
    are the same name, type, value and doc string, and an Attribute is immutable, so they are shared (a
    1024-rank MoE set: 1.03 M attributes, 165 k distinct)."""
    m = messages()
    if pb.type >= len(_KINDS):
        raise ValueError(f"unknown node type {pb.type}")
    attr_cls, io_cls, node_cls = (m.AttributeProto, m.IOInfo, m.Node) if unknown_fields else (None, None, None)
    if attributes is None or unknown_fields:
        attrs = tuple(_attr_from_pb(a, attr_cls) for a in pb.attr)
    else:
        shared = []
        for a in pb.attr:
            encoded = a.SerializeToString()
            attr = attributes.get(encoded)
            if attr is None:
                attr = attributes[encoded] = _attr_from_pb(a, None)
            shared.append(attr)
        attrs = tuple(shared)
    duration_ns = pb.duration_micros * 1000
    if attrs and _is_ns_attr(attrs[-1], pb.duration_micros):
        duration_ns = attrs[-1].value
        attrs = attrs[:-1]
    return TraceNode(
        id=pb.id, name=pb.name, kind=_KINDS[pb.type], data_deps=tuple(pb.data_deps), ctrl_deps=tuple(pb.ctrl_deps),
        duration_ns=duration_ns, start_time_ns=pb.start_time_micros * 1000, attrs=attrs,
        inputs=_io_from_pb(pb, "inputs", io_cls), outputs=_io_from_pb(pb, "outputs", io_cls),
        extra_wire=_unknown_wire(pb, node_cls))


def _parse_node(payload: bytes, attributes: dict[bytes, Attribute] | None = None) -> TraceNode:
    pb = messages().Node()
    pb.ParseFromString(payload)
    pb.DiscardUnknownFields()
    if pb.ByteSize() == len(payload):  # nothing unknown (the common case): skip the per-message probing
        return node_from_pb(pb, unknown_fields=False, attributes=attributes)
    pb = messages().Node()
    pb.ParseFromString(payload)
    return node_from_pb(pb)


def _is_ns_attr(attr: Attribute, micros: int) -> bool:
    """Is this the trailing ``duration_ns`` attribute write_et adds for sub-microsecond durations?"""
    return (attr.name == DURATION_NS_ATTR and attr.type is AttrType.UINT64 and not attr.doc_string
            and not attr.extra_wire and attr.value % 1000 != 0 and _micros(attr.value) == micros)


def whole_micros(ns: int) -> int:
    """A duration as an ET file keeps it (``duration_micros``): nanoseconds rounded to the nearest microsecond."""
    return (ns + 500) // 1000


_micros = whole_micros


def node_to_pb(node: TraceNode) -> Any:
    pb = messages().Node()
    pb.id = node.id
    pb.name = node.name
    pb.type = _KIND_CODE[node.kind]
    pb.ctrl_deps.extend(node.ctrl_deps)
    pb.data_deps.extend(node.data_deps)
    pb.start_time_micros = _micros(node.start_time_ns)
    pb.duration_micros = _micros(node.duration_ns)
    _io_to_pb(node.inputs, pb.inputs)
    _io_to_pb(node.outputs, pb.outputs)
    for attr in node.attrs:
        _attr_to_pb(attr, pb.attr.add())
    if node.duration_ns % 1000:
        _attr_to_pb(Attribute(DURATION_NS_ATTR, AttrType.UINT64, node.duration_ns), pb.attr.add())
    if node.extra_wire:
        pb.MergeFromString(node.extra_wire)
    return pb


def _metadata_from_pb(pb: Any) -> TraceMetadata:
    m = messages()
    return TraceMetadata(pb.version, tuple(_attr_from_pb(a, m.AttributeProto) for a in pb.attr),
                         _unknown_wire(pb, m.GlobalMetadata))


def _metadata_to_pb(meta: TraceMetadata) -> Any:
    pb = messages().GlobalMetadata()
    pb.version = meta.version
    for attr in meta.attrs:
        _attr_to_pb(attr, pb.attr.add())
    if meta.extra_wire:
        pb.MergeFromString(meta.extra_wire)
    return pb


# ---- one rank ------------------------------------------------------------------------------------------
def read_et(data: bytes | BinaryIO, *, source: str = "<bytes>", parsed: dict[bytes, TraceNode] | None = None,
            attributes: dict[bytes, Attribute] | None = None) -> tuple[TraceMetadata, list[TraceNode]]:
    """Metadata and nodes (file order) of one rank's ET file. Bad input -> InputError with the byte offset.
    `parsed` memoises nodes by their encoded bytes across calls: the ranks of a set repeat each other's records
    (every data-parallel replica of a pipeline stage has the same compute nodes), and a TraceNode is immutable,
    so identical records are parsed once and shared; `attributes` likewise memoises the attributes of the nodes
    parsed (:func:`node_from_pb`)."""
    buf, note = _load_bytes(data, source)
    frames = iter_frames(buf, source, note)
    if not frames:
        raise InputError("empty file: no GlobalMetadata frame", source=source)
    m = messages()
    offset, payload = frames[0]
    meta_pb = m.GlobalMetadata()
    try:
        meta_pb.ParseFromString(payload)
    except (DecodeError, ValueError) as exc:
        raise InputError(f"corrupt GlobalMetadata at byte offset {offset}{note}: {exc}", source=source) from None
    nodes = []
    memo: dict[bytes, TraceNode] = {} if parsed is None else parsed
    shared: dict[bytes, Attribute] = {} if attributes is None else attributes
    for index, (offset, payload) in enumerate(frames[1:], start=1):
        try:
            node = memo.get(payload)
            if node is None:
                node = memo[payload] = _parse_node(payload, shared)
            nodes.append(node)
        except (DecodeError, ValueError) as exc:
            raise InputError(f"corrupt Node (frame {index}) at byte offset {offset}{note}: {exc}",
                             source=source) from None
    return _metadata_from_pb(meta_pb), nodes


def write_et(nodes: list[TraceNode] | tuple[TraceNode, ...], metadata: TraceMetadata | None = None, *,
             encoded: dict[TraceNode, bytes] | None = None) -> bytes:
    """One rank's ET file (uncompressed). Metadata defaults to version "0.0.4" without attributes. `encoded`
    memoises framed records by node across calls (the ranks of a set repeat each other's nodes)."""
    memo: dict[TraceNode, bytes] = {} if encoded is None else encoded
    out = io.BytesIO()
    out.write(_framed(_metadata_to_pb(metadata or TraceMetadata())))
    for node in nodes:
        frame = memo.get(node)
        if frame is None:
            frame = memo[node] = _framed(node_to_pb(node))
        out.write(frame)
    return out.getvalue()


def _framed(pb: Any) -> bytes:
    payload = pb.SerializeToString()
    return encode_varint(len(payload)) + payload


# ---- a set of ranks ------------------------------------------------------------------------------------


def read_comm_groups(data: bytes | str, *, source: str) -> tuple[ProcessGroup, ...]:
    doc = decode_json(data, source=source)
    if not isinstance(doc, dict):
        raise InputError("expected an object {pg_name: [ranks...]}", source=source)
    groups = []
    for name, ranks in doc.items():
        if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise InputError("expected a list of integer ranks", source=source, path=str(name))
        groups.append(ProcessGroup(str(name), tuple(ranks)))
    return tuple(groups)


def write_comm_groups(groups: tuple[ProcessGroup, ...]) -> bytes:
    return (json.dumps({g.name: list(g.ranks) for g in groups}, indent=1) + "\n").encode()


def read_et_set(prefix_path: str | Path) -> Trace:
    """The Trace of ``<prefix>.0.et`` .. ``<prefix>.<N-1>.et`` (plus ``<prefix>.comm_group.json`` if present)."""
    prefix = Path(prefix_path)
    found = rank_files(prefix)
    if not found:
        raise InputError(f"no files {prefix.name}.<rank>.et", source=str(prefix.parent))
    missing = sorted(set(range(max(found) + 1)) - set(found))
    if missing:
        names = ", ".join(f"{prefix.name}.{r}.et" for r in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise InputError(f"missing rank file(s) {names} (found ranks up to {max(found)})", source=str(prefix.parent))
    ranks = []
    parsed: dict[bytes, TraceNode] = {}
    attributes: dict[bytes, Attribute] = {}
    with collector_paused():  # the records are acyclic: the collector would only rescan them
        for rank in range(len(found)):
            path = found[rank]
            meta, nodes = read_et(read_input(path, InputKind.TRACE), source=str(path), parsed=parsed,
                                  attributes=attributes)
            ranks.append(RankTrace(rank, tuple(nodes), meta))
    group_path = prefix.with_name(prefix.name + COMM_GROUP_SUFFIX)
    if group_path.is_file():
        groups = read_comm_groups(read_input(group_path, InputKind.TRACE), source=str(group_path))
    else:
        groups = groups_from_metadata(ranks, sources={r: str(found[r]) for r in found})
    if all(g.name != DEFAULT_GROUP_ID for g in groups) and any(
            node.process_group == DEFAULT_GROUP_ID for node in {id(n): n for r in ranks for n in r.nodes}.values()):
        groups = (ProcessGroup(DEFAULT_GROUP_ID, tuple(range(len(ranks)))), *groups)
    ranks = recover_peers(ranks, groups, sources={r: str(found[r]) for r in found})
    return Trace(tuple(ranks), groups, (("format", "chakra_et"), ("prefix", prefix.name)))


def groups_from_metadata(ranks: list[RankTrace] | tuple[RankTrace, ...], *,
                         sources: dict[int, str] | None = None) -> tuple[ProcessGroup, ...]:
    """The process groups the ranks' ``## process_group:init ##`` METADATA nodes describe (none: ())."""
    per_rank = {}
    for r in ranks:
        per_rank[r.rank] = tuple(rec for n in r.nodes if n.kind is NodeKind.METADATA and n.name == PG_INIT_NODE
                                 and n.inputs is not None
                                 for rec in parse_pg_records(n.inputs.values, world_size=len(ranks),
                                                             source=(sources or {}).get(r.rank, f"rank {r.rank}")))
    return merge_groups(per_rank, sources=sources or {})


def as_astra_reads(trace: Trace) -> Trace:
    """The trace with every duration in whole microseconds, as ASTRA-sim reads ``duration_micros``."""
    changed: dict[int, TraceNode] = {}
    ranks = []
    for rank in trace.ranks:
        nodes = []
        for node in rank.nodes:
            if node.duration_ns % 1000:
                new = changed.get(id(node))
                if new is None:
                    new = changed[id(node)] = replace(node, duration_ns=_micros(node.duration_ns) * 1000)
                node = new
            nodes.append(node)
        ranks.append(replace(rank, nodes=tuple(nodes)) if changed else rank)
    return replace(trace, ranks=tuple(ranks)) if changed else trace


def write_et_set(trace: Trace, prefix_path: str | Path) -> list[Path]:
    """Write ``<prefix>.<rank>.et`` per rank (and the comm-group JSON if the trace has groups)."""
    prefix = Path(prefix_path)
    frames: dict[TraceNode, bytes] = {}
    encoded = [(prefix.with_name(f"{prefix.name}.{i}.et"), write_et(r.nodes, r.metadata, encoded=frames))
               for i, r in enumerate(trace.ranks)]
    if trace.groups:
        encoded.append((prefix.with_name(prefix.name + COMM_GROUP_SUFFIX), write_comm_groups(trace.groups)))
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for path, data in encoded:
        write_atomic(path, data)
    return [path for path, _ in encoded]
