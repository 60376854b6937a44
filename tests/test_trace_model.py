"""The trace model and its analysis: typed view, topological order, validation, critical paths, summary."""

from __future__ import annotations

from dataclasses import replace

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.trace import (AttrType, CommType, CycleError, NodeKind, ProcessGroup, RankTrace, Trace,
                              collective_node, compute_node, make_trace, recv_node, send_node, topological_order)
from genie.workloads.analysis import (ProblemKind, Severity, check, critical_path, errors, rank_critical_path, summarize,
                                     validate)


def _ar(i: int, deps=(), size=1024, group=None):
    return collective_node(i, f"ar{i}", comm_type=CommType.ALL_REDUCE, size_bytes=size, process_group=group,
                           data_deps=tuple(deps))


def _kinds(trace: Trace) -> set[ProblemKind]:
    return {p.kind for p in validate(trace)}


def test_builders_and_typed_view() -> None:
    c = compute_node(0, "mm", duration_ns=5000, num_ops=10**9, tensor_size_bytes=4096)
    assert (c.kind, c.duration_ns, c.num_ops, c.tensor_size_bytes, c.is_cpu_op) == (NodeKind.COMPUTE, 5000, 10**9,
                                                                                    4096, False)
    a = collective_node(1, "ag", comm_type=CommType.ALL_GATHER, size_bytes=64, process_group="tp",
                        algorithm=Algorithm.RING, data_deps=(0,))
    assert (a.comm_type, a.size_bytes, a.process_group, a.algorithm) == (CommType.ALL_GATHER, 64, "tp",
                                                                        Algorithm.RING)
    assert [x.name for x in a.attrs][:3] == ["is_cpu_op", "comm_type", "comm_size"]
    s = send_node(2, "s", rank=0, peer=3, size_bytes=8, tag=9)
    r = recv_node(3, "r", rank=3, peer=0, size_bytes=8, tag=9)
    assert (s.peer, s.tag, r.peer, r.tag) == (3, 9, 0, 9)
    assert a.with_attr("comm_size", 128).size_bytes == 128
    assert a.with_attr("comm_size", 128).attrs[2].type is AttrType.INT64
    assert c.with_attr("note", "x").attr("note").type is AttrType.STRING
    assert replace(a, attrs=a.with_attr("comm_type", 42).attrs).comm_type is None


def test_comm_type_maps_to_genie_collectives() -> None:
    assert CommType.ALL_REDUCE.collective is Collective.ALL_REDUCE
    assert CommType.BARRIER.collective is Collective.BARRIER and CommType.GATHER.collective is Collective.GATHER
    assert all(c.collective is not None for c in CommType)  # every Chakra type replays
    assert CommType.from_collective(Collective.ALL_TO_ALL) is CommType.ALL_TO_ALL
    assert CommType.parse("allreduce") is CommType.ALL_REDUCE
    assert CommType.parse("all_to_allv") is CommType.ALL_TO_ALL
    with pytest.raises(ValueError, match="unknown collective type"):
        CommType.parse("allsum")


def test_topological_order_is_deterministic_and_detects_cycles() -> None:
    nodes = (compute_node(5, "b", data_deps=(7,)), compute_node(7, "a"), compute_node(1, "c", ctrl_deps=(5,)))
    assert [n.id for n in topological_order(nodes)] == [7, 5, 1]
    loop = (compute_node(0, "x", data_deps=(1,)), compute_node(1, "y", data_deps=(0,)), compute_node(2, "z"))
    with pytest.raises(CycleError) as err:
        topological_order(loop)
    assert err.value.node_ids == (0, 1)


def test_valid_trace_has_no_problems() -> None:
    trace = make_trace([[compute_node(0, "c", duration_ns=10), _ar(1, (0,))], [_ar(0)]])
    assert validate(trace) == ()
    check(trace)


@pytest.mark.parametrize("rank0, expected", [
    ([compute_node(0, "a", data_deps=(1,)), compute_node(1, "b", data_deps=(0,))], ProblemKind.CYCLE),
    ([compute_node(0, "a"), compute_node(0, "b")], ProblemKind.DUPLICATE_NODE_ID),
    ([_ar(0).with_attr("comm_type", 42)], ProblemKind.UNKNOWN_COMM_TYPE),
    ([_ar(0, group="nope")], ProblemKind.UNKNOWN_GROUP),
    ([send_node(0, "s", rank=0, peer=5, size_bytes=1)], ProblemKind.BAD_PEER),
])
def test_single_rank_problems(rank0, expected) -> None:
    problems = validate(make_trace([rank0]))
    assert expected in {p.kind for p in problems}
    with pytest.raises(InputError, match=r"^t\.json: rank 0"):
        check(make_trace([rank0]), source="t.json")


def test_dangling_dependency_is_a_warning() -> None:
    # issue #15: Chakra's converter leaves `ctrl_deps: [0]` on each thread root after removing node 0; that is
    # a warning (the dependency counts as met), no longer a refusal
    trace = make_trace([[compute_node(1, "root", ctrl_deps=(0,)), compute_node(2, "a", data_deps=(1,))]],
                       info=(("format", "chakra_et"),))
    problems = validate(trace)
    assert [(p.kind, p.severity) for p in problems] == [(ProblemKind.DANGLING_DEPENDENCY, Severity.WARNING)]
    assert errors(problems) == ()
    assert check(trace, source="w") == ("w: dangling_dependency: 1 warning(s), first: rank 0 node 1: depends on "
                                        "missing node 0 (ignored: treated as met)",)


@pytest.mark.parametrize("info", [(), (("format", "param_basic"),), (("format", "pytorch_et"),)])
def test_a_missing_dependency_in_genies_own_formats_is_refused_naming_the_node(info) -> None:
    # issue #35 item 6: outside Chakra converter output a dependency on a node that does not exist is a typo
    trace = make_trace([[compute_node(1, "a"), compute_node(2, "b", data_deps=(7,))]], info=info)
    problems = validate(trace)
    assert [(p.kind, p.severity) for p in problems] == [(ProblemKind.MISSING_DEPENDENCY, Severity.ERROR)]
    with pytest.raises(InputError, match=r"^t\.yaml: rank 0 node 2: depends on missing node 7"):
        check(trace, source="t.yaml")


def test_missing_rank_and_group_outside_world() -> None:
    trace = Trace((RankTrace(0, ()), RankTrace(2, ())), (ProcessGroup("g", (0, 5)),))
    assert {ProblemKind.RANK_NUMBERING, ProblemKind.BAD_GROUP} <= _kinds(trace)
    assert "missing [1]" in str(validate(trace)[0])


def test_mismatched_collective_sequences_deadlock() -> None:
    ag = collective_node(1, "ag", comm_type=CommType.ALL_GATHER, size_bytes=1024)
    assert ProblemKind.COLLECTIVE_MISMATCH in _kinds(make_trace([[_ar(0), _ar(1)], [_ar(0), ag]]))
    assert ProblemKind.COLLECTIVE_MISMATCH in _kinds(make_trace([[_ar(0), _ar(1)], [_ar(0)]]))
    assert ProblemKind.COLLECTIVE_MISMATCH in _kinds(make_trace([[_ar(0, size=8)], [_ar(0, size=16)]]))
    # groups: only members are compared; a non-member issuing on a group is flagged
    groups = (ProcessGroup("a", (0, 1)), ProcessGroup("b", (2, 3)))
    ok = make_trace([[_ar(0, group="a")], [_ar(0, group="a")], [_ar(0, group="b"), _ar(1, group="b")],
                     [_ar(0, group="b"), _ar(1, group="b")]], groups=groups)
    assert validate(ok) == ()
    bad = make_trace([[_ar(0, group="a")], [_ar(0, group="a")], [_ar(0, group="b")], [_ar(0, group="a")]],
                     groups=groups)
    assert {ProblemKind.NOT_IN_GROUP, ProblemKind.COLLECTIVE_MISMATCH} <= _kinds(bad)


def test_point_to_point_matching() -> None:
    good = make_trace([[send_node(0, "s", rank=0, peer=1, size_bytes=8)], [recv_node(0, "r", rank=1, peer=0,
                                                                                       size_bytes=8)]])
    assert validate(good) == ()
    lonely = make_trace([[send_node(0, "s", rank=0, peer=1, size_bytes=8)], []])
    assert ProblemKind.P2P_MISMATCH in _kinds(lonely)
    sizes = make_trace([[send_node(0, "s", rank=0, peer=1, size_bytes=8)], [recv_node(0, "r", rank=1, peer=0,
                                                                                        size_bytes=4)]])
    assert ProblemKind.P2P_MISMATCH in _kinds(sizes)


def test_critical_paths() -> None:
    # rank 0: 10 us compute then all-reduce then 5 us; rank 1: 30 us compute then the all-reduce then 1 us
    r0 = [compute_node(0, "a", duration_ns=10_000), _ar(1, (0,)), compute_node(2, "b", duration_ns=5_000,
                                                                              data_deps=(1,))]
    r1 = [compute_node(0, "a", duration_ns=30_000), _ar(1, (0,)), compute_node(2, "b", duration_ns=1_000,
                                                                              data_deps=(1,))]
    trace = make_trace([r0, r1])
    assert rank_critical_path(tuple(r0)).length_ns == 15_000
    cp = critical_path(trace)
    assert cp.length_ns == 35_000  # rank 0 waits for rank 1 at the all-reduce
    assert cp.nodes[0] == (1, 0) and cp.nodes[-1] == (0, 2)
    # a recv waits for its send
    p2p = make_trace([[compute_node(0, "c", duration_ns=7_000), send_node(1, "s", rank=0, peer=1, size_bytes=1,
                                                                          data_deps=(0,))],
                      [recv_node(0, "r", rank=1, peer=0, size_bytes=1),
                       compute_node(1, "d", duration_ns=2_000, data_deps=(0,))]])
    assert critical_path(p2p).length_ns == 9_000
    # ranks waiting on each other in opposite orders deadlock
    ag = collective_node(5, "ag", comm_type=CommType.ALL_GATHER, size_bytes=8, process_group="x")
    groups = (ProcessGroup("x", (0, 1)),)
    dead = make_trace([[_ar(0), replace(ag, data_deps=(0,))], [replace(ag, id=0), _ar(1, (0,))]], groups=groups)
    with pytest.raises(CycleError):
        critical_path(dead)


def test_summary() -> None:
    trace = make_trace([[compute_node(0, "c", duration_ns=2_000), _ar(1, (0,), size=100, group="g"),
                         send_node(2, "s", rank=0, peer=1, size_bytes=7)],
                        [compute_node(0, "c", duration_ns=3_000), _ar(1, (0,), size=100, group="g"),
                         recv_node(2, "r", rank=1, peer=0, size_bytes=7)]], groups=(ProcessGroup("g", (0, 1)),))
    s = summarize(trace)
    assert s.num_ranks == 2 and s.num_nodes == 6
    assert s.nodes_by_kind == {"compute": 2, "collective": 2, "send": 1, "recv": 1}
    assert s.bytes_by_collective == {"all_reduce": 200, "send_recv": 7}
    assert s.bytes_by_group == {"g": 200}
    assert (s.compute_total_ns, s.compute_max_rank_ns, s.critical_path_compute_ns, s.critical_path_ns) == \
        (5_000, 3_000, 3_000, 3_000)
