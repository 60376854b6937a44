"""PARAM comms "basic" traces (facebookresearch/param, commsTraceReplay ``--trace-type basic``) -> Trace.

One JSON file per rank, a list of entries. A comms entry: ``comms`` (all_reduce, all_to_all, all_to_allv,
all_gather, all_gather_base, reduce_scatter, reduce_scatter_base, broadcast, reduce, gather, scatter, barrier,
send/isend, recv/irecv, wait, init, batch_isend_irecv; spelling as PARAM's ``paramToCommName`` normalizes it),
``in_msg_size`` / ``out_msg_size`` in *elements* of ``dtype``, ``pg_id`` + ``global_ranks`` (+ ``world_size``),
``req``, ``root``, ``markers``, ``startTime_ns``; all_to_allv adds ``in_split`` / ``out_split`` (elements per
peer: uneven ones become the node's ``send_split_bytes`` / ``recv_split_bytes``, genie.core.alltoallv), point-to-point ``src_rank`` / ``dst_rank`` (global) and ``use_batch``. A compute entry has ``compute``
(gemm, emb_lookup) with ``count`` and sizes but no duration.

Mapping: sizes become bytes with Chakra's ``comm_size`` meaning (all_gather: the per-rank input; the others:
the input buffer). Groups come from ``pg_id``/``global_ranks`` (and ``init`` entries); a group holding every
rank is the world. Ops run in file order; a blocking op must finish before the next starts; isend/irecv and
entries whose ``req`` a later ``wait`` names run asynchronously until that wait. With ``startTime_ns`` on the
entries, a chain of compute "gap" nodes makes entry *i* start no earlier than ``startTime_ns[i] -
startTime_ns[0]`` (PARAM's ``--use-timestamp``), which reproduces the compute time between comms.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, BinaryIO

from genie.core.errors import InputError, shown
from genie.core.files import InputKind, read_input
from genie.core.jsondoc import decode_json
from genie.core.trace import (Attribute, AttrType, CommType, ProcessGroup, RankTrace, Trace, TraceNode,
                              collective_node, compute_node, recv_node, send_node)

DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
               "bf16": 2, "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "byte": 1,
               "uint8": 1, "char": 1, "int8": 1, "bool": 1, "float8": 1, "fp8": 1}
_COLLECTIVES = {"allreduce": CommType.ALL_REDUCE, "alltoall": CommType.ALL_TO_ALL, "alltoallv": CommType.ALL_TO_ALL,
                "alltoallbase": CommType.ALL_TO_ALL, "allgather": CommType.ALL_GATHER,
                "allgatherbase": CommType.ALL_GATHER, "reducescatter": CommType.REDUCE_SCATTER,
                "reducescatterbase": CommType.REDUCE_SCATTER, "broadcast": CommType.BROADCAST,
                "reduce": CommType.REDUCE, "gather": CommType.GATHER, "scatter": CommType.SCATTER,
                "barrier": CommType.BARRIER}
_SENDS = {"send", "isend"}
_RECVS = {"recv", "irecv", "recvanysource"}
_IGNORED = {"init", "batchisendirecv", "wait"}  # wait is handled, the others only carry group info
RANK_FILE = re.compile(r"rank[-_]?(\d+)\.json$")


def comm_name(text: str) -> str:
    """PARAM's normalization: lower case, letters only."""
    return "".join(c for c in text.lower() if c.isalpha())


def _as_int(entry: dict, key: str, where: str, source: str, default: Any = ...) -> int:
    value = entry.get(key, default)
    if value is ...:
        raise InputError(f"missing {shown(key)}", source=source, path=where)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InputError(f"{shown(key)} must be a non-negative integer, got {shown(value)}", source=source, path=where)
    return value


def _uneven(comm: CommType, splits: dict[str, tuple[int, ...]]) -> tuple[tuple[int, ...] | None, ...]:
    """An all_to_allv's per-peer bytes (``send_split_bytes``, ``recv_split_bytes``) from its ``in_split`` /
    ``out_split``; none when it is even (equal splits, or none given)."""
    send, recv = splits.get("in_split"), splits.get("out_split")
    if comm is not CommType.ALL_TO_ALL or all(s is None or len(set(s)) <= 1 for s in (send, recv)):
        return None, None
    return send, recv


def _dtype_bytes(entry: dict, where: str, source: str) -> int:
    dtype = str(entry.get("dtype", "float")).lower().removeprefix("torch.")
    if dtype not in DTYPE_BYTES:
        raise InputError(f"unknown dtype {shown(dtype)} (known: {', '.join(sorted(DTYPE_BYTES))})", source=source,
                         path=f"{where}.dtype")
    return DTYPE_BYTES[dtype]


def _load(data: bytes | str | BinaryIO | list, source: str) -> list:
    if isinstance(data, list):
        return data
    raw = data if isinstance(data, (bytes, str)) else data.read()
    doc = decode_json(raw, source=source)
    if not isinstance(doc, list):
        raise InputError("a PARAM basic trace is a JSON list of entries", source=source)
    return doc


def _group_of(entry: dict, world: int, where: str, source: str, groups: dict[str, tuple[int, ...]]) -> str | None:
    ranks = entry.get("global_ranks")
    pg = entry.get("pg_id")
    if ranks is not None:
        if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise InputError("'global_ranks' must be a list of integers", source=source, path=f"{where}.global_ranks")
        ranks = tuple(ranks)
    elif pg is not None and str(pg) in groups:
        ranks = groups[str(pg)]
    if not ranks or sorted(ranks) == list(range(world)):
        return None
    name = str(pg) if pg is not None else "ranks_" + "_".join(map(str, ranks))
    if groups.setdefault(name, ranks) != ranks:
        raise InputError(f"process group {shown(name)} has ranks {list(ranks)} here but {list(groups[name])} before",
                         source=source, path=f"{where}.global_ranks")
    return name


def read_param_rank(data: bytes | str | BinaryIO | list, *, rank: int, world_size: int, source: str = "<param>",
                    groups: dict[str, tuple[int, ...]] | None = None, use_timestamps: bool = True) -> list[TraceNode]:
    """One rank's nodes. ``groups`` ({name: ranks}) collects the process groups met (shared across ranks)."""
    entries = _load(data, source)
    groups = {} if groups is None else groups
    nodes: list[TraceNode] = []
    tail: list[int] = []  # what the next op waits for
    pending: dict[Any, int] = {}  # req -> async node id
    waited = {e.get("req") for e in entries if isinstance(e, dict) and comm_name(str(e.get("comms", ""))) == "wait"}
    stamps = [e["startTime_ns"] for e in entries if isinstance(e, dict) and e.get("startTime_ns") is not None]
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in stamps):
        raise InputError("startTime_ns must be numbers", source=source)
    timed = use_timestamps and bool(stamps)
    gap_tail: int | None = None
    t_prev = stamps[0] if timed else 0
    for index, entry in enumerate(entries):
        where = f"[{index}]"
        if not isinstance(entry, dict):
            raise InputError("entry must be an object", source=source, path=where)
        markers = entry.get("markers")
        extra = (Attribute("markers", AttrType.STRING_LIST, tuple(map(str, markers))),) if isinstance(markers, list) \
            else ()
        if "compute" in entry:
            count = _as_int(entry, "count", where, source, 1)
            kind = str(entry["compute"]).lower()
            flops = None
            if kind == "gemm":
                dims = [entry.get(k, entry.get("mm_dim")) for k in ("mm0_dim0", "mm0_dim1", "mm1_dim1")]
                if all(isinstance(d, int) for d in dims):
                    flops = 2 * dims[0] * dims[1] * dims[2] * count
            nid = len(nodes)
            nodes.append(compute_node(nid, f"{kind}#{index}", num_ops=flops, data_deps=tuple(tail),
                                      extra_attrs=(Attribute("param_compute", AttrType.STRING, kind), *extra)))
            tail = [nid]
            continue
        if "comms" not in entry:
            raise InputError("entry has neither 'comms' nor 'compute'", source=source, path=where)
        name = comm_name(str(entry["comms"]))
        deps = list(tail)
        if timed and entry.get("startTime_ns") is not None:
            t = entry["startTime_ns"]
            if t < t_prev:
                raise InputError(f"startTime_ns goes backwards ({t} < {t_prev})", source=source,
                                 path=f"{where}.startTime_ns")
            if t > t_prev:
                gid = len(nodes)
                nodes.append(compute_node(gid, f"gap#{index}", duration_ns=round(t - t_prev),
                                          data_deps=() if gap_tail is None else (gap_tail,),
                                          extra_attrs=(Attribute("param_gap", AttrType.BOOL, True),)))
                gap_tail, t_prev = gid, t
            if gap_tail is not None:
                deps.append(gap_tail)
        if name == "wait":
            req = entry.get("req")
            if req in pending:
                done = [pending.pop(req)]
            else:  # a wait without a known request waits for everything outstanding
                done = list(pending.values())
                pending.clear()
            tail = list(dict.fromkeys(tail + done))
            continue
        group = _group_of(entry, world_size, where, source, groups)
        if name in _IGNORED:
            continue
        nid = len(nodes)
        label = f"{entry['comms']}#{index}"
        if name in _COLLECTIVES:
            comm = _COLLECTIVES[name]
            if comm is CommType.BARRIER:
                size = 0
            else:
                size = _as_int(entry, "in_msg_size", where, source) * _dtype_bytes(entry, where, source)
            attrs = list(extra)
            if "dtype" in entry:
                attrs.append(Attribute("dtype", AttrType.STRING, str(entry["dtype"]).lower()))
            if "out_msg_size" in entry:
                attrs.append(Attribute("out_msg_size", AttrType.INT64, _as_int(entry, "out_msg_size", where, source)))
            if entry.get("root") is not None:
                attrs.append(Attribute("root", AttrType.INT64, _as_int(entry, "root", where, source)))
            splits = {}
            for key in ("in_split", "out_split"):
                if entry.get(key):
                    split = entry[key]
                    if not isinstance(split, list) or not all(isinstance(v, int) for v in split):
                        raise InputError(f"{shown(key)} must be a list of integers", source=source, path=f"{where}.{key}")
                    attrs.append(Attribute(key, AttrType.INT64_LIST, tuple(split)))
                    splits[key] = tuple(v * _dtype_bytes(entry, where, source) for v in split)
            send, recv = _uneven(comm, splits)
            node = collective_node(nid, label, comm_type=comm, size_bytes=size, process_group=group,
                                   data_deps=tuple(deps), extra_attrs=tuple(attrs), send_split_bytes=send,
                                   recv_split_bytes=recv)
        elif name in _SENDS or name in _RECVS:
            size = _as_int(entry, "in_msg_size", where, source) * _dtype_bytes(entry, where, source)
            peer_key = "dst_rank" if name in _SENDS else "src_rank"
            peer = _as_int(entry, peer_key, where, source)
            build = send_node if name in _SENDS else recv_node
            node = build(nid, label, rank=rank, peer=peer, size_bytes=size, process_group=group,
                         data_deps=tuple(deps), extra_attrs=extra)
        else:
            raise InputError(f"unknown comms {entry['comms']!r}", source=source, path=f"{where}.comms")
        nodes.append(node)
        is_async = name in ("isend", "irecv") or (entry.get("req") is not None and entry.get("req") in waited)
        if is_async:
            pending[entry.get("req", f"#{index}")] = nid
        else:
            tail = [nid]
    return nodes


def read_param_traces(docs: list, *, sources: list[str] | None = None, use_timestamps: bool = True) -> Trace:
    """The Trace of one document (bytes, str, stream or parsed list) per rank, rank i = docs[i]."""
    sources = sources or [f"<rank {i}>" for i in range(len(docs))]
    groups: dict[str, tuple[int, ...]] = {}
    ranks = []
    for rank, (doc, source) in enumerate(zip(docs, sources)):
        nodes = read_param_rank(doc, rank=rank, world_size=len(docs), source=source, groups=groups,
                                use_timestamps=use_timestamps)
        ranks.append(RankTrace(rank, tuple(nodes)))
    return Trace(tuple(ranks), tuple(ProcessGroup(k, v) for k, v in groups.items()), (("format", "param_basic"),))


def param_rank_files(directory: str | Path) -> dict[int, Path]:
    """``{rank: path}`` of ``rank<N>.json`` / ``rank-<N>.json`` / ``rank_<N>.json`` in a directory."""
    found = {}
    for path in sorted(Path(directory).iterdir()):
        m = RANK_FILE.search(path.name)
        if m and path.is_file():
            found.setdefault(int(m.group(1)), path)
    return found


def read_param_set(directory: str | Path, *, use_timestamps: bool = True) -> Trace:
    found = param_rank_files(directory)
    if not found:
        raise InputError("no PARAM trace files rank<N>.json", source=str(directory))
    missing = sorted(set(range(max(found) + 1)) - set(found))
    if missing:
        raise InputError(f"missing PARAM trace file(s) for rank(s) {missing[:8]}", source=str(directory))
    paths = [found[r] for r in range(len(found))]
    return read_param_traces([read_input(p, InputKind.TRACE) for p in paths], sources=[str(p) for p in paths],
                             use_timestamps=use_timestamps)
