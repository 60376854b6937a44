"""The fabric model's trace compile (``CompiledTrace``) builds each collective's CommOp once per op, not once per
member rank, and compiles exactly what the per-member build compiles: every table equal, the plays' timelines
bit for bit, on an uneven MoE trace and on one whose members name an op differently."""

from __future__ import annotations

from dataclasses import replace

import pytest

import astra_adapter.timeline as timeline
from genie.core.trace import NodeKind
from genie.workloads.generators import TrainingConfig, expert_parallel
from genie.workloads.presets import device_preset, model_preset

from astra_adapter.fabric.flat_flows import FlatFlowEngine
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.fabric.player import play_on_fabric
from astra_adapter.measurements import comm_op
from astra_adapter.timeline import CompiledTrace
from benchmarks.fabric_accuracy import three_tier

FIELDS = ("nodes", "children", "waiting", "node_lane", "node_key", "queues", "ops")


class PerMemberCompile(CompiledTrace):
    """The compile as it was: every member builds its node's CommOp itself."""

    def _collective_op(self, node, rank, trace, key):
        return comm_op(node, trace, self._splits.get((rank, node.id), ()))


def _moe():
    model = model_preset("mixtral-8x7b").with_overrides(num_layers=2)
    return expert_parallel(model, device_preset("a100"), ep=8, dp=16,
                           config=TrainingConfig(routing_skew=1.0, routing_seed=1))


def _assert_same_compile(trace) -> tuple[CompiledTrace, CompiledTrace]:
    got, want = CompiledTrace(trace), PerMemberCompile(trace)
    for field in FIELDS:
        assert getattr(got, field) == getattr(want, field), field
    return got, want


def test_an_uneven_moe_compiles_as_per_member_and_builds_each_op_once(monkeypatch):
    trace = _moe()
    calls = []

    def counted(node, trace_, split_bytes=()):
        calls.append(node.id)
        return comm_op(node, trace_, split_bytes)

    monkeypatch.setattr(timeline, "comm_op", counted)
    got = CompiledTrace(trace)
    monkeypatch.undo()
    collective_ops = [k for k in got.ops if k[0] == "coll"]
    members = sum(len(got.ops[k][0]) for k in collective_ops)
    assert any(op.split_bytes for _, _, op in got.ops.values())  # uneven all-to-alls are among them
    assert len(calls) == len(collective_ops) < members  # once per op, where it was once per member
    _, want = _assert_same_compile(trace)

    topology = three_tier(hosts_per_leaf=4, leaves_per_pod=2, pods=2, aggs_per_pod=2, cores=2, ranks_per_host=1)
    network = FabricNetwork(topology)
    a = play_on_fabric(trace, FlatFlowEngine(network), compiled=got)
    b = play_on_fabric(trace, FlatFlowEngine(network), compiled=want)
    assert a.ranks == b.ranks
    assert a.spans == b.spans


def _edit_collective(trace, rank: int, group: str, name: str, value):
    """``trace`` with rank ``rank``'s first collective node in a group named ``group``... given attribute
    ``name`` = ``value``."""
    rt = trace.ranks[rank]
    first = next(n.id for n in rt.nodes
                 if n.kind is NodeKind.COLLECTIVE and (n.process_group or "").startswith(group))
    nodes = tuple(n.with_attr(name, value) if n.id == first else n for n in rt.nodes)
    ranks = list(trace.ranks)
    ranks[rank] = replace(rt, nodes=nodes)
    return replace(trace, ranks=tuple(ranks))


@pytest.mark.parametrize("rank", [0, 5])  # the op's first member, and a later one
@pytest.mark.parametrize("group", ["dp", "ep"])  # a data-parallel all-reduce, an uneven expert all-to-all
@pytest.mark.parametrize("name, value", [("comm_size", 0), ("comm_size", 4096), ("algorithm", "tree")])
def test_a_member_that_names_an_op_differently_compiles_as_per_member(rank, group, name, value):
    trace = _edit_collective(_moe(), rank, group, name, value)
    got, _ = _assert_same_compile(trace)
    if group == "dp" and name == "comm_size" and value == 0:
        assert None in got.node_key[rank]  # that member's node moves nothing
