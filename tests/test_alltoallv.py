"""Uneven all-to-all (all-to-allv, MoE routing): per-peer sizes in the trace, kept by the readers and writers,
checked pairwise by validation, and sent pair by pair by the replay's schedule."""

from __future__ import annotations

import pytest

from astra_adapter.export import even_all_to_alls, export_astra
from astra_adapter.fabric.estimate import estimate_fabric
from astra_adapter.fabric.flows import WIRE_BYTES_PER_PAYLOAD_BYTE, StepSends
from astra_adapter.mapping import map_topology
from astra_adapter.measurements import trace_comm_ops
from genie.collectives.plan import InvalidCollectiveOp
from genie.collectives.registry import build_schedule
from genie.core.alltoallv import busiest_even_size, split_matrices
from genie.core.collective import Algorithm, Collective
from genie.core.protocol import op_from_json, op_to_json
from genie.core.schedule import Buffer, CollectiveOp
from genie.core.topology import LinkShape
from genie.core.trace import CommType, collective_node, make_trace
from genie.engine.inprocess import thread_sessions
from genie.engine.program import build_programs
from genie.services.replay import ReplayRequest, run_replay
from genie.services.target import loopback_placements
from genie.topology import star
from genie.workloads.analysis import ProblemKind, check, validate
from genie.workloads.chakra_et import read_et_set, write_et_set
from genie.workloads.native import read_native, write_native_json, write_native_yaml

# bytes rank i sends rank j: skewed, a zero pair, a rank that keeps nothing
SPLITS = ((0, 4096, 0, 1024),
          (8192, 512, 256, 0),
          (4, 64, 0, 32768),
          (1024, 1024, 1024, 12))


def _uneven_trace(splits=SPLITS, *, recv: bool = True):
    n = len(splits)
    ranks = []
    for r in range(n):
        send = splits[r]
        received = tuple(splits[i][r] for i in range(n)) if recv else None
        ranks.append([collective_node(1, "moe_dispatch", comm_type=CommType.ALL_TO_ALL, size_bytes=sum(send),
                                      send_split_bytes=send, recv_split_bytes=received),
                      collective_node(2, "grad_sync", comm_type=CommType.ALL_REDUCE, size_bytes=4096,
                                      data_deps=(1,))])
    return make_trace(ranks)


def test_schedule_sends_each_pair_its_split_and_keeps_the_own_one():
    op = CollectiveOp(Collective.ALL_TO_ALL, 40000, (0, 1, 2, 3), Algorithm.DIRECT, dtype_bytes=4, split_bytes=SPLITS)
    schedule = build_schedule(op)
    sent = {(rs.rank, s.peer): s.size_bytes for rs in schedule.ranks for st in rs.steps for s in st.sends}
    got = {(r.peer, rs.rank): r.size_bytes for rs in schedule.ranks for st in rs.steps for r in st.recvs}
    expected = {(i, j): SPLITS[i][j] for i in range(4) for j in range(4) if i != j and SPLITS[i][j]}
    assert sent == got == expected
    kept = {rs.rank: sum(c.size_bytes for st in rs.steps for c in st.copies) for rs in schedule.ranks}
    assert kept == {i: SPLITS[i][i] for i in range(4)}
    # rank 1's receives land packed in sender order in its OUTPUT: 4096 from 0 at 0, its own 512 at 4096, ...
    r1 = {r.peer: (r.offset_bytes, r.buffer) for st in schedule.for_rank(1).steps for r in st.recvs}
    assert r1 == {0: (0, Buffer.OUTPUT), 2: (4096 + 512, Buffer.OUTPUT), 3: (4096 + 512 + 64, Buffer.OUTPUT)}
    # rank 2 sends from its DATA in destination order: 4 B to 0 at 0, 64 B to 1 at 4, 32768 B to 3 at 68
    s2 = {s.peer: s.offset_bytes for st in schedule.for_rank(2).steps for s in st.sends}
    assert s2 == {0: 0, 1: 4, 3: 68}


def test_the_schedule_delivers_every_block_where_it_belongs():
    """The schedule's data, moved step by step: each rank's OUTPUT is every sender's block for it, in sender
    order, and the schedule follows the model's rules (no deadlock, regions in bounds)."""
    from genie.collectives.check import schedule_problems, simulate_data, verify_buffers

    op = CollectiveOp(Collective.ALL_TO_ALL, 40000, (3, 0, 2, 1), Algorithm.DIRECT, dtype_bytes=4, split_bytes=SPLITS)
    schedule = build_schedule(op)
    assert schedule_problems(schedule) == []
    buffers = simulate_data(schedule)
    assert all(verify_buffers(op, rank, buffers[rank]) is None for rank in op.group)
    # and a schedule that put one block in the wrong place would be caught
    swapped = CollectiveOp(Collective.ALL_TO_ALL, 40000, (3, 0, 2, 1), Algorithm.DIRECT, dtype_bytes=4,
                           split_bytes=(SPLITS[1], SPLITS[0], *SPLITS[2:]))
    wrong = simulate_data(build_schedule(swapped))
    assert any(verify_buffers(op, rank, wrong[rank]) is not None for rank in op.group)


def test_a_split_matrix_that_does_not_fit_the_op_is_refused():
    with pytest.raises(InvalidCollectiveOp, match="more than size_bytes"):
        build_schedule(CollectiveOp(Collective.ALL_TO_ALL, 1024, (0, 1, 2, 3), Algorithm.DIRECT, dtype_bytes=4,
                                    split_bytes=SPLITS))
    with pytest.raises(InvalidCollectiveOp, match="4 rows of 4"):
        build_schedule(CollectiveOp(Collective.ALL_TO_ALL, 1 << 20, (0, 1, 2, 3), Algorithm.DIRECT,
                                    split_bytes=SPLITS[:3]))


def test_the_op_with_splits_survives_the_rank_protocol():
    op = CollectiveOp(Collective.ALL_TO_ALL, 40000, (0, 1, 2, 3), Algorithm.DIRECT, dtype_bytes=4, split_bytes=SPLITS)
    assert op_from_json(op_to_json(op)) == op


def test_programs_carry_the_whole_matrix_and_each_rank_its_own_input():
    programs = build_programs(_uneven_trace())
    ops = [next(n for n in p.nodes if n.id == 1) for p in programs]
    assert all(n.op.split_bytes == SPLITS for n in ops)
    assert len({n.op for n in ops}) == 1  # one op for the whole group: one schedule
    assert [n.size_bytes for n in ops] == [sum(row) for row in SPLITS]
    assert ops[0].op.size_bytes == max(max(map(sum, SPLITS)), max(sum(c) for c in zip(*SPLITS)))


def test_an_even_trace_is_unchanged():
    even = make_trace([[collective_node(1, "a2a", comm_type=CommType.ALL_TO_ALL, size_bytes=4096)]] * 4)
    assert split_matrices(even) == {}
    assert build_programs(even)[0].nodes[0].op.split_bytes == ()
    # splits that are the even ones give the even op too
    same = make_trace([[collective_node(1, "a2a", comm_type=CommType.ALL_TO_ALL, size_bytes=4096,
                                        send_split_bytes=(1024,) * 4)]] * 4)
    assert build_programs(same)[0].nodes[0].op == build_programs(even)[0].nodes[0].op


def test_members_of_different_sizes_without_splits_each_send_their_even_split():
    """DLRM-like: rank 3's tables are larger; it sends 4x as much to everyone (before: every member split its own
    size and waited for the wrong byte counts)."""
    sizes = (1024, 1024, 1024, 4096)
    trace = make_trace([[collective_node(1, "emb", comm_type=CommType.ALL_TO_ALL, size_bytes=s)] for s in sizes])
    assert validate(trace) == ()
    op = build_programs(trace)[0].nodes[0].op
    assert op.split_bytes == ((256,) * 4, (256,) * 4, (256,) * 4, (1024,) * 4)
    run_replay(trace, loopback_placements(4), ReplayRequest(iterations=1, timeout_s=20.0), sessions=thread_sessions())


def test_validation_checks_pairwise_what_i_sends_j_is_what_j_receives_from_i():
    assert validate(_uneven_trace()) == ()
    bad = list(map(list, SPLITS))
    trace = _uneven_trace()
    # rank 3 says it receives 1024 B from rank 2, which sends it 32768 B
    node = trace.ranks[3].nodes[0]
    wrong = node.with_attr("recv_split_bytes", (1024, 0, 1024, 12))
    trace = make_trace([list(r.nodes) if i != 3 else [wrong, r.nodes[1]] for i, r in enumerate(trace.ranks)])
    problems = validate(trace)
    assert [p.kind for p in problems] == [ProblemKind.SPLIT_MISMATCH]
    assert str(problems[0]) == ("rank 3 node 1: all-to-all ('moe_dispatch') receives 1024 B from rank 2, which "
                                "sends it 32768 B (node 1) (deadlock)")
    with pytest.raises(Exception, match="rank 3 node 1: all-to-all"):
        check(trace, source="t.json")
    assert bad  # the fixture itself is untouched


def test_validation_compares_against_the_even_split_of_a_member_without_splits():
    # rank 0 records nothing: it sends an even 1024 B to each; rank 1 says it receives 1000 B from rank 0
    nodes = [[collective_node(1, "a2a", comm_type=CommType.ALL_TO_ALL, size_bytes=2048)],
             [collective_node(1, "a2a", comm_type=CommType.ALL_TO_ALL, size_bytes=2048,
                              send_split_bytes=(1024, 1024), recv_split_bytes=(1000, 1024))]]
    problems = validate(make_trace(nodes))
    assert [(p.kind, p.rank) for p in problems] == [(ProblemKind.SPLIT_MISMATCH, 1)]
    assert "receives 1000 B from rank 0, which sends it 1024 B" in problems[0].message


@pytest.mark.parametrize("attrs, message", [
    ({"send_split_bytes": (1, 2, 3)}, "must list the non-negative bytes of each of the 4 members"),
    ({"send_split_bytes": (8, 8, 8, 8)}, "add up to 32 B but comm_size is 40 B"),
    ({"recv_split_bytes": (-1, 2, 3, 4)}, "recv_split_bytes must list"),
])
def test_malformed_splits_are_named(attrs, message):
    trace = _uneven_trace()
    node = collective_node(1, "moe_dispatch", comm_type=CommType.ALL_TO_ALL, size_bytes=40)
    for name, value in attrs.items():
        node = node.with_attr(name, value)
    trace = make_trace([list(r.nodes) if i != 2 else [node, r.nodes[1]] for i, r in enumerate(trace.ranks)])
    problems = [p for p in validate(trace) if p.kind is ProblemKind.SPLIT_MISMATCH]
    assert problems and problems[0].rank == 2 and message in problems[0].message


def test_splits_on_another_collective_are_refused():
    node = collective_node(1, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=8).with_attr(
        "send_split_bytes", (4, 4))
    problems = validate(make_trace([[node], [node]]))
    assert [p.kind for p in problems] == [ProblemKind.SPLIT_MISMATCH, ProblemKind.SPLIT_MISMATCH]
    assert "not an all-to-all" in problems[0].message


def test_native_short_form_reads_and_writes_splits():
    text = """
format: genie-trace
ranks: 2
program:
  - {id: 0, type: all_to_all, send_splits: ["{a}", 1KiB]}
"""
    with pytest.raises(Exception, match=r"program\[0\]\.send_splits"):
        read_native(text)
    trace = read_native("""
format: genie-trace
ranks:
  - {rank: 0, nodes: [{id: 0, type: all_to_all, send_splits: [2KiB, 1KiB], recv_splits: [2KiB, 512]}]}
  - {rank: 1, nodes: [{id: 0, type: all_to_all, send_splits: [512, 0], recv_splits: [1KiB, 0]}]}
""")
    n0 = trace.ranks[0].nodes[0]
    assert (n0.size_bytes, n0.send_split_bytes, n0.recv_split_bytes) == (3072, (2048, 1024), (2048, 512))
    assert validate(trace) == ()
    for write in (write_native_json, write_native_yaml):
        data = write(trace)
        assert b"send_splits" in data and b"int64_list" not in data  # the short form
        assert read_native(data) == trace


def test_chakra_et_keeps_the_splits_as_node_attributes(tmp_path):
    trace = _uneven_trace()
    write_et_set(trace, tmp_path / "moe")
    back = read_et_set(tmp_path / "moe")
    for a, b in zip(trace.ranks, back.ranks):
        assert b.nodes[0].send_split_bytes == a.nodes[0].send_split_bytes
        assert b.nodes[0].recv_split_bytes == a.nodes[0].recv_split_bytes
    assert split_matrices(back) == split_matrices(trace)


def test_replay_of_an_uneven_all_to_all_runs_every_pair_its_own_size():
    """Before, every member split its own comm_size evenly, so sizes disagreed and the replay timed out."""
    trace = _uneven_trace()
    outcome = run_replay(trace, loopback_placements(4), ReplayRequest(iterations=2, warmup=0, timeout_s=20.0),
                         sessions=thread_sessions())
    assert len(outcome.iterations) == 2
    for it in outcome.iterations:
        assert sorted(rr.rank for rr in it.ranks) == [0, 1, 2, 3]
        assert all(sorted(nid for nid, _, _ in rr.records) == [1, 2] for rr in it.ranks)


# ---- estimators and the ASTRA-sim export -----------------------------------------------------------------
def _a2a_only(splits=SPLITS):
    n = len(splits)
    return make_trace([[collective_node(1, "moe_dispatch", comm_type=CommType.ALL_TO_ALL, size_bytes=sum(splits[r]),
                                        send_split_bytes=splits[r])] for r in range(n)])


def test_busiest_even_size_covers_the_busiest_sender_and_receiver():
    # off-diagonal: rank 2 sends 4 + 64 + 32768 = 32836 B, the most anyone sends or receives (rank 3 gets 33792)
    received_by_3 = 1024 + 0 + 32768
    assert busiest_even_size(SPLITS) == 4 * -(-received_by_3 // 3)
    assert busiest_even_size(((5, 5), (5, 5))) == 10


def test_estimators_see_the_uneven_exchange():
    trace = _a2a_only()
    ops = trace_comm_ops(trace)
    assert len(ops) == 1 and ops[0].split_bytes == SPLITS and ops[0].size_bytes == busiest_even_size(SPLITS)
    # the fabric model runs the replay's own per-pair flows
    sends = StepSends().of(ops[0], (0, 1, 2, 3))
    pairs = sorted(t for s in sends for t in s.as_tuples())
    assert pairs == sorted((i, j, SPLITS[i][j]) for i in range(4) for j in range(4) if i != j and SPLITS[i][j])
    # on a 1 Gbit/s star the busiest host link bounds it: rank 3 receives 33792 B, rank 2 sends 32836 B
    topo = star(4, shape=LinkShape(rate_bps=10**9))
    uneven = [r.comm_ns for r in estimate_fabric(trace, topo, ecmp_samples=0).ranks]
    wire_ns = 33792 * WIRE_BYTES_PER_PAYLOAD_BYTE * 8
    assert max(uneven) == pytest.approx(wire_ns, rel=1e-3)
    # ranks 0 and 1 (9-13 KiB each way) leave long before ranks 2 and 3
    assert uneven[0] == uneven[1] < 0.3 * uneven[2] and uneven[2] == uneven[3]
    # its even equivalent (what ASTRA-sim is given) moves the busiest member's share on every pair: the busiest
    # member's time for everyone
    even = make_trace([[collective_node(1, "a2a", comm_type=CommType.ALL_TO_ALL,
                                        size_bytes=busiest_even_size(SPLITS))]] * 4)
    assert [r.comm_ns for r in estimate_fabric(even, topo, ecmp_samples=0).ranks] == [max(uneven)] * 4


def test_astra_export_says_what_it_cannot_express_and_writes_one_size_per_instance(tmp_path):
    trace = _a2a_only()
    result = export_astra(trace, map_topology(star(4, shape=LinkShape(rate_bps=10**9))), tmp_path / "out")
    note = [n for n in result.notes if "uneven all-to-all" in n]
    assert len(note) == 1 and "ASTRA-sim cannot express per-peer sizes" in note[0]
    assert f"{busiest_even_size(SPLITS)} B" in note[0]
    written = read_et_set(result.workload_prefix)
    nodes = [next(n for n in r.nodes if n.comm_type is CommType.ALL_TO_ALL) for r in written.ranks]
    assert {n.size_bytes for n in nodes} == {busiest_even_size(SPLITS)}  # every member agrees: ASTRA-sim runs it
    assert all(n.send_split_bytes is None for n in nodes)
    # ASTRA-sim's semantics (the built-in estimator, and calibrated mode) read the same: one size, no hang
    even, notes = even_all_to_alls(trace)
    assert notes == tuple(note) and {r.nodes[0].size_bytes for r in even.ranks} == {busiest_even_size(SPLITS)}
    # an even trace is exported as before, without the note
    plain = export_astra(make_trace([[collective_node(1, "a2a", comm_type=CommType.ALL_TO_ALL, size_bytes=4096)]] * 4),
                         map_topology(star(4, shape=LinkShape(rate_bps=10**9))), tmp_path / "plain")
    assert not [n for n in plain.notes if "uneven" in n]


def test_measured_mode_reads_the_curve_at_the_busiest_members_even_size_and_says_so():
    from astra_adapter.measurements import Measurement, MeasurementTable
    from astra_adapter.workload_estimate import estimate_measured

    rows = [Measurement(Collective.ALL_TO_ALL, Algorithm.DIRECT, 4, size, size / 100.0) for size in (4096, 1 << 20)]
    est = estimate_measured(_a2a_only(), MeasurementTable(rows))
    # the curve is size / 100 us (linear: its log-log interpolation is exact)
    assert max(r.comm_ns for r in est.ranks) == pytest.approx(busiest_even_size(SPLITS) / 100.0 * 1000, abs=2)
    assert any("1 uneven all-to-all(s) timed as the even all-to-all of their busiest member" in n for n in est.notes)
