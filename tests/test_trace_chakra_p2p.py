"""Chakra converter output with COMM_SEND/COMM_RECV nodes (issue #15): the converter (mlcommons/chakra 1.0.0,
``convert_json_to_protobuf_nodes``) writes them with ``comm_size`` and ``pg_name`` only; genie recovers the
peer (and tag) from the CPU ops that launched the kernel, which the converter writes too. No GPU trace was at
hand: the nodes below have the converter's shape (a kernel node whose ctrl_deps names ``record_param_comms``,
whose ctrl_deps names ``c10d::send``/``c10d::recv_``; ``inputs.values`` as Python prints the input lists), with
c10d inputs copied from a real capture (tests/data/torch_jobs/groups_p2p.py) and record_param_comms inputs
laid out as torch 2.13's RECORD_PARAM_COMMS_DATA records them."""

from __future__ import annotations

from pathlib import Path

from genie.core.trace import Attribute, AttrType, IOInfo, NodeKind, TraceNode
from genie.workloads.analysis import validate
from genie.workloads.chakra_et import read_et_set, write_et

PG_INIT = ("['[{\"pg_name\": \"0\", \"pg_desc\": \"default_pg\", \"backend_config\": \"cuda:nccl\", \"ranks\": [], "
           "\"group_size\": 4}, {\"pg_name\": \"3\", \"pg_desc\": \"undefined\", \"backend_config\": \"cuda:nccl\", "
           "\"ranks\": [2, 3], \"group_size\": 2}]']")


def _cpu(id: int, name: str, values: str, parent: int | None) -> TraceNode:
    return TraceNode(id, name, NodeKind.COMPUTE, ctrl_deps=() if parent is None else (parent,),
                     attrs=(Attribute("is_cpu_op", AttrType.BOOL, True),), inputs=IOInfo(values=values))


def _kernel(id: int, kind: NodeKind, parent: int, size: int, pg: str) -> TraceNode:
    return TraceNode(id, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", kind, data_deps=(parent,),
                     ctrl_deps=(parent,), attrs=(Attribute("is_cpu_op", AttrType.BOOL, False),
                                                 Attribute("comm_size", AttrType.INT64, size),
                                                 Attribute("pg_name", AttrType.STRING, pg)))


def _p2p(kind: NodeKind, peer_local: int, tag: int, size: int, pg: str, desc: str, first: int, *,
         with_c10d: bool = True) -> list[TraceNode]:
    op, coll = ("c10d::send", "send") if kind is NodeKind.SEND else ("c10d::recv_", "recv")
    elements = size // 4
    nodes = []
    if with_c10d:
        nodes.append(_cpu(first, op, f"[[[75, 95, 0, {elements}, 4, 'cuda:0']], '<Object>', {peer_local}, {tag}]",
                          None))
    nodes.append(_cpu(first + 1, "record_param_comms",
                      f"[[[75, 95, 0, {elements}, 4, 'cuda:0']], [7, True], ['{pg}', '{desc}'], {peer_local}, "
                      f"'{coll}', [], [], 0, 1, 4, True]", first if with_c10d else None))
    nodes.append(_kernel(first + 2, kind, first + 1, size, pg))
    return nodes


def _write_set(tmp_path: Path, per_rank: list[list[TraceNode]]) -> Path:
    for rank, nodes in enumerate(per_rank):
        meta = TraceNode(1, "## process_group:init ##", NodeKind.METADATA, inputs=IOInfo(values=PG_INIT))
        (tmp_path / f"p2p.{rank}.et").write_bytes(write_et([meta, *nodes]))
    return tmp_path / "p2p"


def test_peers_and_tags_come_from_the_ops_that_launched_the_kernels(tmp_path: Path) -> None:
    prefix = _write_set(tmp_path, [
        _p2p(NodeKind.SEND, 1, 3, 28, "0", "default_pg", 10),  # world: rank 0 -> 1, tag 3
        _p2p(NodeKind.RECV, 0, 3, 28, "0", "default_pg", 10),
        _p2p(NodeKind.SEND, 1, 1, 40, "3", "undefined", 20),  # group [2, 3]: group rank 1 is rank 3
        _p2p(NodeKind.RECV, 0, 1, 40, "3", "undefined", 20),
    ])
    trace = read_et_set(prefix)
    p2p = [[(n.kind, n.peer, n.tag, n.size_bytes) for n in r.nodes if n.kind.is_comm] for r in trace.ranks]
    assert p2p == [[(NodeKind.SEND, 1, 3, 28)], [(NodeKind.RECV, 0, 3, 28)],
                   [(NodeKind.SEND, 3, 1, 40)], [(NodeKind.RECV, 2, 1, 40)]]
    assert validate(trace) == ()


def test_record_param_comms_alone_gives_the_peer(tmp_path: Path) -> None:
    """Without a c10d caller (a batched isend/irecv under another range) the peer is record_param_comms' rank
    argument; no tag is recorded there, so both sides keep Chakra's default 0."""
    prefix = _write_set(tmp_path, [
        [], [], _p2p(NodeKind.SEND, 1, 9, 40, "3", "undefined", 20, with_c10d=False),
        _p2p(NodeKind.RECV, 0, 9, 40, "3", "undefined", 20, with_c10d=False),
    ])
    trace = read_et_set(prefix)
    assert [(n.peer, n.tag) for r in trace.ranks for n in r.nodes if n.kind.is_comm] == [(3, 0), (2, 0)]
    assert validate(trace) == ()


def test_a_kernel_without_callers_is_named(tmp_path: Path) -> None:
    orphan = TraceNode(5, "ncclDevKernel_SendRecv", NodeKind.SEND,
                       attrs=(Attribute("comm_size", AttrType.INT64, 8), Attribute("pg_name", AttrType.STRING, "0")))
    prefix = _write_set(tmp_path, [[orphan], [], [], []])
    (problem,) = [p for p in validate(read_et_set(prefix)) if p.kind.value == "bad_peer"]
    assert (problem.rank, problem.node_id) == (0, 5)
    assert "send without comm_dst" in problem.message and "record_param_comms" in problem.message
