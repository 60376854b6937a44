"""Chakra ET as the real tools write it (issue #15 item 1): process groups from the `## process_group:init ##`
METADATA node, COMM_COLL nodes with pg_name, the converter's dangling `ctrl_deps: [0]`, and communication ops
written as compute nodes by a CPU capture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.core.trace import CommType, IOInfo, NodeKind, TraceNode, collective_node, compute_node
from genie.workloads.analysis import comm_ops_as_compute, errors, summarize, validate
from genie.workloads.chakra_et import COMM_GROUP_SUFFIX, write_et
from genie.workloads.loader import load_trace
from genie.workloads.pg_metadata import PG_INIT_NODE, parse_pg_records


def _pg_node(node_id: int, groups: list[dict]) -> TraceNode:
    # exactly what chakra_converter writes: inputs.values = str(["<json>"])
    return TraceNode(node_id, PG_INIT_NODE, NodeKind.METADATA, ctrl_deps=(1,),
                     inputs=IOInfo(str([json.dumps(groups)]), "[[]]", "['String']"))


def _write_set(tmp: Path, rank_nodes: list[list[TraceNode]]) -> Path:
    for r, nodes in enumerate(rank_nodes):
        (tmp / f"job.{r}.et").write_bytes(write_et(nodes))
    return tmp / "job"


def _gpu_rank(rank: int, pg_ranks: list[int]) -> list[TraceNode]:
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": 4},
              {"pg_name": "3", "pg_desc": "undefined", "ranks": pg_ranks, "group_size": 2}]
    root = compute_node(1, "[pytorch|profiler|execution_trace|thread]", ctrl_deps=(0,))
    ar = collective_node(5, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", comm_type=CommType.ALL_REDUCE,
                         size_bytes=4096, process_group="3", data_deps=(1,))
    world = collective_node(6, "ncclDevKernel_AllGather_RING_LL", comm_type=CommType.ALL_GATHER, size_bytes=512,
                            process_group="0", data_deps=(5,))
    return [root, _pg_node(2, groups), ar, world]


def test_groups_from_pg_metadata_as_astra_sim_reads_them(tmp_path: Path) -> None:
    prefix = _write_set(tmp_path, [_gpu_rank(r, [0, 1] if r < 2 else [2, 3]) for r in range(4)])
    with pytest.raises(InputError, match=r"job\.2\.et: ## process_group:init ##\.ranks: ranks disagree on "
                                         r"process group '3': rank 0 says \[0, 1\], rank 2 says \[2, 3\]"):
        load_trace(prefix)


def test_subgroups_from_metadata_and_comm_group_json_wins(tmp_path: Path) -> None:
    def rank(r: int) -> list[TraceNode]:  # two subgroups with different names, as new_group makes them
        nodes = _gpu_rank(r, [])
        groups = [{"pg_name": "0", "ranks": []}, {"pg_name": "3", "ranks": [0, 1]}, {"pg_name": "4", "ranks": [2, 3]}]
        ar = nodes[2] if r < 2 else nodes[2].with_attr("pg_name", "4")
        return [nodes[0], _pg_node(2, groups), ar, nodes[3]]
    prefix = _write_set(tmp_path, [rank(r) for r in range(4)])
    trace = load_trace(prefix)
    assert {g.name: g.ranks for g in trace.groups} == {"0": (0, 1, 2, 3), "3": (0, 1), "4": (2, 3)}
    problems = validate(trace)
    assert errors(problems) == () and len(problems) == 4  # the 4 dangling ctrl_deps [0]: warnings
    s = summarize(trace)
    assert s.count_by_collective == {"all_reduce": 4, "all_gather": 4}
    assert s.bytes_by_group == {"3": 8192, "4": 8192, "0": 2048}
    (tmp_path / ("job" + COMM_GROUP_SUFFIX)).write_text(json.dumps({"0": [0, 1, 2, 3], "3": [0, 2], "4": [1, 3]}))
    assert {g.name: g.ranks for g in load_trace(prefix).groups}["3"] == (0, 2)


def test_pg_metadata_raw_and_printed_forms() -> None:
    raw = json.dumps([{"pg_name": "0", "ranks": []}, {"pg_name": "1", "ranks": [1, 3]}])
    for text in (raw, str([raw])):
        recs = parse_pg_records(text, world_size=4, source="h.json")
        assert [(r.name, r.ranks) for r in recs] == [("0", (0, 1, 2, 3)), ("1", (1, 3))]
    with pytest.raises(InputError, match=r"^h\.json: ## process_group:init ##\[0\]\.ranks: "):
        parse_pg_records(json.dumps([{"pg_name": "0", "ranks": "all"}]), world_size=2, source="h.json")


def test_cpu_captured_comm_ops_are_counted() -> None:
    from genie.core.trace import make_trace
    cpu = [compute_node(1, "c10d::allreduce_", duration_ns=5), compute_node(2, "gloo:all_reduce", duration_ns=9),
           compute_node(3, "aten::mm", duration_ns=3)]
    assert comm_ops_as_compute(make_trace([cpu])) == {"c10d::allreduce_": 1, "gloo:all_reduce": 1}
    assert comm_ops_as_compute(make_trace([cpu[2:]])) == {}


def test_cpu_captured_comm_ops_are_a_validation_warning() -> None:
    """The rule `trace show` counts by is one validation warning, so validate, estimate, replay and the ASTRA-sim
    export say it too (the trace still runs, the op as the compute it was written as)."""
    from genie.core.trace import make_trace
    from genie.workloads.analysis import ProblemKind, Severity, check
    cpu = [compute_node(1, "c10d::allreduce_", duration_ns=5), compute_node(2, "gloo:all_reduce", duration_ns=9),
           compute_node(3, "aten::mm", duration_ns=3)]
    problems = validate(make_trace([cpu]))
    assert [(p.kind, p.severity, p.node_id) for p in problems] == [(ProblemKind.COMM_AS_COMPUTE, Severity.WARNING, 1),
                                                                  (ProblemKind.COMM_AS_COMPUTE, Severity.WARNING, 2)]
    (line,) = check(make_trace([cpu]), source="w")
    assert line.startswith("w: comm_as_compute: 2 warning(s), first: rank 0 node 1: c10d::allreduce_ is a compute node")
    assert validate(make_trace([cpu[2:]])) == ()


def test_a_gpu_captures_launching_cpu_ops_are_not_communication_as_compute() -> None:
    """A GPU capture keeps the CPU ops that launched each kernel (c10d op -> record_param_comms -> the COMM node,
    each naming its caller in ctrl_deps): their tree is the launch; a gloo op beside it with no kernel is not."""
    from genie.core.trace import make_trace
    from genie.workloads.analysis import comm_as_compute
    launch = [compute_node(1, "c10d::allreduce_"), compute_node(2, "record_param_comms", ctrl_deps=(1,)),
              compute_node(3, "nccl:all_reduce", ctrl_deps=(1,)),
              collective_node(4, "ncclDevKernel_AllReduce", comm_type=CommType.ALL_REDUCE, size_bytes=64,
                              ctrl_deps=(2,))]
    cpu_only = [compute_node(5, "c10d::allreduce_"), compute_node(6, "gloo:all_reduce")]
    assert comm_as_compute(tuple(launch)) == ()
    assert [n.id for n in comm_as_compute(tuple(launch + cpu_only))] == [5, 6]
    assert comm_ops_as_compute(make_trace([launch + cpu_only])) == {"c10d::allreduce_": 1, "gloo:all_reduce": 1}


