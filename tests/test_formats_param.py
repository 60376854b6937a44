"""PARAM comms basic traces: the sample set in traces/param_tp2_dp2 and hand-made entries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.core.trace import AttrType, CommType, NodeKind
from genie.workloads.analysis import validate
from genie.workloads.param_comms import read_param_rank, read_param_set, read_param_traces

SAMPLE = Path(__file__).resolve().parents[1] / "traces" / "param_tp2_dp2"


def _comm(nodes):
    return [n for n in nodes if n.kind is not NodeKind.COMPUTE]


def test_sample_set() -> None:
    trace = read_param_set(SAMPLE)
    assert trace.num_ranks == 4 and validate(trace) == ()
    assert {g.name: g.ranks for g in trace.groups} == {"1": (0, 1), "2": (2, 3), "3": (0, 2), "4": (1, 3)}
    r1 = _comm(trace.ranks[1].nodes)
    assert [n.comm_type or n.kind for n in r1] == [CommType.ALL_GATHER, CommType.ALL_REDUCE, CommType.ALL_TO_ALL,
                                                  NodeKind.RECV, CommType.REDUCE_SCATTER, CommType.BROADCAST,
                                                  CommType.BARRIER]
    ag, ar, a2a, recv, rs, bc, _ = r1
    assert (ag.size_bytes, ag.process_group) == (262144 * 2, "1")  # bfloat16 elements -> bytes
    assert ar.size_bytes == 1048576 * 2
    assert a2a.process_group is None and a2a.size_bytes == 4096 * 2 * 4  # rank 1's input, float
    assert a2a.attr("in_split").value == (2048,) * 4 and a2a.attr("in_split").type is AttrType.INT64_LIST
    assert (recv.peer, recv.size_bytes) == (0, 65536 * 4)
    assert bc.attr("root").value == 0 and bc.size_bytes == 1024 * 8
    assert a2a.attr("markers").value == ("forward", "moe")
    # the broadcast waits for the async irecv (req 4) and reduce-scatter (req 5)
    assert {recv.id, rs.id} <= set(bc.data_deps)
    assert recv.id not in rs.data_deps  # async ops do not block the next op


def test_timestamps_become_gap_chain() -> None:
    trace = read_param_set(SAMPLE)
    gaps = [n for n in trace.ranks[0].nodes if n.attr("param_gap")]
    assert sum(g.duration_ns for g in gaps) == 999_000  # last start - first start
    untimed = read_param_set(SAMPLE, use_timestamps=False)
    assert not any(n.kind is NodeKind.COMPUTE for n in untimed.ranks[0].nodes)


def test_compute_entries_and_blocking_order() -> None:
    entries = [{"compute": "gemm", "count": 2, "mm_dim": 64, "dtype": "float"},
               {"comms": "all_reduce", "in_msg_size": 10, "out_msg_size": 10, "dtype": "half"},
               {"comms": "all_reduce", "in_msg_size": 10, "out_msg_size": 10, "dtype": "half"}]
    nodes = read_param_rank(json.dumps(entries).encode(), rank=0, world_size=2)
    assert nodes[0].num_ops == 2 * 64 ** 3 * 2
    assert nodes[1].data_deps == (0,) and nodes[2].data_deps == (1,) and nodes[1].size_bytes == 20
    trace = read_param_traces([entries, entries])
    assert validate(trace) == ()


@pytest.mark.parametrize("entries, message", [
    ({"comms": "all_reduce"}, "list of entries"),
    ([{"comms": "all_reduce", "dtype": "float"}], r"\[0\]: missing 'in_msg_size'"),
    ([{"comms": "all_reduce", "in_msg_size": 4, "dtype": "complex"}], r"\[0\].dtype: unknown dtype"),
    ([{"comms": "allsum", "in_msg_size": 4}], r"\[0\].comms: unknown comms"),
    ([{"foo": 1}], "neither 'comms' nor 'compute'"),
    ([{"comms": "send", "in_msg_size": 4, "dtype": "float"}], "missing 'dst_rank'"),
])
def test_bad_entries(entries, message) -> None:
    with pytest.raises(InputError, match=message):
        read_param_rank(json.dumps(entries), rank=0, world_size=2, source="rank0.json")


def test_missing_rank_file(tmp_path: Path) -> None:
    (tmp_path / "rank0.json").write_text("[]")
    (tmp_path / "rank2.json").write_text("[]")
    with pytest.raises(InputError, match=r"rank\(s\) \[1\]"):
        read_param_set(tmp_path)


def test_uneven_all_to_allv_splits_become_per_peer_bytes() -> None:
    """in_split / out_split (elements per peer) of an uneven all_to_allv are the node's per-peer sizes: each pair
    agrees, so validation passes; a rank that expects other sizes is a deadlock."""
    sends = [[0, 3, 1], [2, 2, 0], [5, 0, 1]]  # elements rank i sends rank j

    def rank(r: int, expect=None) -> list:
        recv = expect or [sends[i][r] for i in range(3)]
        return [{"comms": "all_to_allv", "in_msg_size": sum(sends[r]), "out_msg_size": sum(recv), "dtype": "Float",
                 "in_split": sends[r], "out_split": recv, "world_size": 3}]

    trace = read_param_traces([rank(r) for r in range(3)])
    a2a = [r.nodes[0] for r in trace.ranks]
    assert [n.send_split_bytes for n in a2a] == [(0, 12, 4), (8, 8, 0), (20, 0, 4)]
    assert a2a[1].recv_split_bytes == (12, 8, 0) and validate(trace) == ()
    bad = read_param_traces([rank(0), rank(1, expect=[3, 2, 1]), rank(2)])
    assert [p.kind.value for p in validate(bad)] == ["split_mismatch"]
    assert "receives 4 B from rank 2, which sends it 0 B" in validate(bad)[0].message
