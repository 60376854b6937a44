"""The peer of a point-to-point node written by Chakra's PyTorch converter, recovered from its callers (pure).

``chakra_converter PyTorch`` (mlcommons/chakra 1.0.0, ``PyTorchConverter.convert_json_to_protobuf_nodes``) makes
a COMM_SEND_NODE / COMM_RECV_NODE of each NCCL ``SendRecv`` kernel with ``comm_size`` and ``pg_name`` only: no
``comm_src``, ``comm_dst`` or ``comm_tag``. The information is still in the file: the kernel node's
``ctrl_deps`` names the CPU op that launched it, which the converter also writes (a COMP_NODE whose
``inputs.values`` is the op's input list as Python prints it):

- ``record_param_comms`` (PyTorch's ``RECORD_PARAM_COMMS_DATA``): ``[tensors, seq, (pg_name, pg_desc), rank,
  coll_name, ...]`` where, for a send or receive, ``rank`` is the *peer's* rank in the group (ProcessGroupNCCL
  passes ``dstRank`` / ``srcRank``); the element after the (pg_name, pg_desc) pair;
- its caller, ``c10d::send`` / ``c10d::recv_`` (``tensors, pg, peer, tag``): the peer's group rank and the tag.

The group rank becomes a global rank through the node's ``pg_name`` (the world without one). A node whose
callers say nothing is left as it is; validate then names it (no peer).
"""

from __future__ import annotations

import ast

from genie.core.errors import InputError
from genie.core.trace import AttrType, NodeKind, ProcessGroup, RankTrace, TraceNode

RECORD_PARAM_COMMS = "record_param_comms"
_P2P_OPS = {"c10d::send": NodeKind.SEND, "c10d::recv_": NodeKind.RECV}
_MAX_CALLERS = 4  # how far up ctrl_deps to look (kernel -> record_param_comms -> c10d op)


def _values(node: TraceNode) -> list | None:
    if node.inputs is None or not node.inputs.values:
        return None
    try:
        parsed = ast.literal_eval(node.inputs.values)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return parsed if isinstance(parsed, list) else None


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _from_callers(node: TraceNode, by_id: dict[int, TraceNode]) -> tuple[int | None, int | None]:
    """(the peer's rank in the op's group, the tag) as the node's callers record them."""
    peer = tag = None
    current = node
    for _ in range(_MAX_CALLERS):
        parent = next((by_id[d] for d in current.ctrl_deps if d in by_id), None)
        if parent is None:
            break
        values = _values(parent)
        if values is not None and _P2P_OPS.get(parent.name) is node.kind and len(values) >= 4:
            return _int(values[2]), _int(values[3])
        if values is not None and parent.name == RECORD_PARAM_COMMS and peer is None:
            pair = next((i for i, v in enumerate(values[:-1]) if isinstance(v, (list, tuple)) and len(v) == 2
                         and all(isinstance(x, str) for x in v)), None)
            if pair is not None:
                peer = _int(values[pair + 1])
        current = parent
    return peer, tag


def recover_peers(ranks: list[RankTrace], groups: tuple[ProcessGroup, ...], *,
                  sources: dict[int, str]) -> list[RankTrace]:
    """``ranks`` with each send/receive that lacks its peer given ``comm_dst``/``comm_src`` (and ``comm_tag``
    when the caller names one) from its callers. A recovered peer outside its group is an InputError."""
    by_name = {g.name: g for g in groups}
    out = []
    for rank_trace in ranks:
        by_id = {n.id: n for n in rank_trace.nodes}
        nodes, changed = [], False
        for node in rank_trace.nodes:
            if node.kind in (NodeKind.SEND, NodeKind.RECV) and node.peer is None:
                local, tag = _from_callers(node, by_id)
                if local is not None:
                    group = by_name.get(node.process_group or "")
                    members = group.ranks if group is not None else tuple(range(len(ranks)))
                    if not 0 <= local < len(members):
                        raise InputError(f"{node.kind.value} node {node.id} ({node.name}): its caller names peer "
                                         f"{local}, outside its group of {len(members)}",
                                         source=sources.get(rank_trace.rank), path=f"node {node.id}.ctrl_deps")
                    field = "comm_dst" if node.kind is NodeKind.SEND else "comm_src"
                    node = node.with_attr(field, members[local], AttrType.INT32)
                    if tag is not None and node.attr_value("comm_tag") is None:
                        node = node.with_attr("comm_tag", tag, AttrType.INT32)
                    changed = True
            nodes.append(node)
        out.append(rank_trace if not changed else RankTrace(rank_trace.rank, tuple(nodes), rank_trace.metadata))
    return out
