"""The fabric model with NCCL's choices (astra_adapter.fabric.nccl_flows): the algorithm NCCL's tuner picks decides
the flows, the channels the rails they take, the protocol the latency and bandwidth; alone on an uncongested
topology an op takes the NCCL model's time; `genie estimate --mode fabric` with an NCCL calibration explains the
same choices as the NCCL mode."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from genie.core.collective import Algorithm, Collective
from genie.topology import load_topology_file

from astra_adapter.fabric.flows import WIRE_BYTES_PER_PAYLOAD_BYTE, run_concurrently
from astra_adapter.fabric.nccl_flows import NcclFlowEngine, channel_orders, op_plan
from astra_adapter.fabric.network import FabricNetwork
from astra_adapter.measurements import CommOp
from astra_adapter.nccl.hardware import Interconnect, cluster_from_topology, node_of_hosts
from astra_adapter.nccl.model import Call, nominal_params, predict
from astra_adapter.nccl.tuning import NcclAlgorithm, NcclProtocol
from tests.cli_support import run_genie

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "real-nccl"
DGX2 = ROOT / "topologies" / "dgx-2node.yaml"


def _engine(topology_path: Path, cluster, params) -> NcclFlowEngine:
    topology = load_topology_file(topology_path)
    network = FabricNetwork(topology)
    node_of = node_of_hosts(topology)
    return NcclFlowEngine(network, cluster, params, [node_of.get(h, h) for h in network.rank_hosts])


def _alone_us(engine: NcclFlowEngine, call: Call, gpus_per_node: int) -> float:
    members = tuple(n * gpus_per_node + g for n in range(call.nodes) for g in range(call.ranks_per_node))
    op = CommOp(call.collective, Algorithm.AUTO, call.ranks, call.size_bytes)
    return run_concurrently(engine, [(op, members)])[0] / 1e3


def _a100_dgx2():
    cluster = cluster_from_topology(load_topology_file(DGX2), gpu="A100", interconnect=Interconnect.NVSWITCH,
                                    source=str(DGX2))
    return cluster, nominal_params(cluster)


@pytest.mark.parametrize("case", ["nvidia-dgxc-dgxh100-8gpu-1node",  # one node: NVSwitch, LL/LL128/Simple, NVLS
                                  "aws-p4de-a100-efa-2node",  # two nodes, 4 NICs on the node's switch: tree
                                  "gcp-a3mega-h100-2node-tcpxo"])  # two nodes, 8 rails: tree and ring
def test_alone_on_an_uncongested_topology_an_op_takes_the_nccl_models_time(case):
    from benchmarks.real_clusters import CASES, load_case
    from astra_adapter.nccl.fit import fit

    cluster, runs = load_case(next(c for c in CASES if c.name == case))
    observations = [o for r in runs for o in r.fit_observations]
    params = fit(cluster, observations).params
    engine = _engine(DATA / case / "topology.yaml", cluster, params)
    errors, algorithms = [], set()
    for o in observations[::2]:
        expected = predict(cluster, params, o.call)
        got = _alone_us(engine, o.call, cluster.gpus_per_node)
        errors.append(abs(got - expected.time_us) / expected.time_us * 100)
        algorithms.add((expected.choice.algorithm, expected.choice.protocol) if expected.choice else None)
    geomean = math.exp(sum(math.log(max(e, 1e-6)) for e in errors) / len(errors))
    # measured over the clean corpus: 0.002 % geomean, at most 6.7 % (docs/astra.md: genie's tree against NCCL's
    # tree formula, alltoall over PCIe, ECMP over NICs on a node's switch); since the tree's raised intra-node speed
    # on 2 nodes (astra_adapter.nccl.hardware.tree_intra_speed) NCCL runs the tree at large sizes on aws-p4de, whose
    # 4 NICs sit on the node's switch: there the tree's flows run 4-7 % faster than NCCL's tree formula, 0.73 %
    # geomean over its points (gcp-a3mega 0.002 %, one point at 1.4 %)
    assert geomean < 1.0 and max(errors) < 8.0, (geomean, max(errors))
    # more than one of NCCL's choices was checked (p4de runs the tree at every size, in LL, LL128 and Simple)
    assert len(algorithms) >= 2


def test_the_algorithm_decides_the_flows():
    cluster, params = _a100_dgx2()
    engine = _engine(DGX2, cluster, params)
    small, large = Call(Collective.ALL_REDUCE, 16, 2, 1 << 20), Call(Collective.ALL_REDUCE, 16, 2, 1 << 28)
    tree, ring = op_plan(cluster, params, small), op_plan(cluster, params, large)
    assert tree.prediction.choice.algorithm is NcclAlgorithm.TREE and tree.pattern is Algorithm.DOUBLE_BINARY_TREE
    assert ring.prediction.choice.algorithm is NcclAlgorithm.RING and ring.pattern is Algorithm.RING

    def peers(call: Call) -> Counter:
        steps = engine.plan(CommOp(call.collective, Algorithm.AUTO, call.ranks, call.size_bytes), tuple(range(16)))
        pairs = {(s, d) for step in steps for s, d in zip(step.src.tolist(), step.dst.tolist())}
        return Counter(s for s, _ in pairs), pairs

    ring_out, ring_pairs = peers(large)
    tree_out, tree_pairs = peers(small)
    assert ring_pairs != tree_pairs
    # a ring rank sends to its successor in each of the 8 channel rings; a tree rank to its parent and children
    # in two trees (the leaves of one tree are interior in the other)
    assert max(ring_out.values()) <= 8 and all(n >= 1 for n in ring_out.values())
    tree_degree = Counter()
    for s, d in tree_pairs:
        tree_degree[s] += 1
        tree_degree[d] += 1
    assert max(tree_degree.values()) > 2 * 1  # some tree rank talks to more than a ring's two neighbours
    assert not all(abs(s - d) in (1, 15) or (s // 8 != d // 8) for s, d in tree_pairs)  # not ring neighbours


def test_the_channels_take_the_rails_and_small_calls_fewer():
    cluster, params = _a100_dgx2()
    engine = _engine(DGX2, cluster, params)
    network = engine.network

    def nic_links_out_of_node0(call: Call) -> set[str]:
        steps = engine.plan(CommOp(call.collective, Algorithm.AUTO, call.ranks, call.size_bytes), tuple(range(16)))
        used = set()
        for step in steps:
            for rid in step.routes.tolist():
                for res, _ in network.routes[rid].loads:
                    r = network.resources[res]
                    if r.a.startswith("n0g") and r.b.startswith("leaf"):
                        used.add(r.b)
                    assert not r.b.startswith("spine"), "a channel ring between nodes stays on its rail"
        return used

    large = Call(Collective.ALL_REDUCE, 16, 2, 1 << 28)
    assert op_plan(cluster, params, large).channel_rings == 8
    assert nic_links_out_of_node0(large) == {f"leaf{k}" for k in range(8)}  # channel c on NIC c mod 8
    small = Call(Collective.ALL_GATHER, 16, 2, 256 << 10)  # NCCL cuts its channels: Ring/LL on 4
    few = op_plan(cluster, params, small)
    assert few.pattern is Algorithm.RING and 1 < few.channel_rings < 8
    assert len(nic_links_out_of_node0(small)) == few.channel_rings
    # ring k enters and leaves every node on one rail: consecutive nodes meet GPU to same-rail GPU
    for order in channel_orders(tuple(range(16)), [h // 8 for h in range(16)], 8):
        assert order[7] % 8 == order[8] % 8 and order[15] % 8 == order[0] % 8


def test_the_protocol_sets_the_bandwidth_share_and_the_latency():
    cluster, params = _a100_dgx2()
    one_node = cluster.scaled(1)
    engine = _engine(DGX2, cluster, params)
    ll = op_plan(one_node, params, Call(Collective.ALL_REDUCE, 8, 1, 4096))
    assert ll.prediction.choice.protocol is NcclProtocol.LL
    # LL carries half its bytes as flags: at least twice the bytes of Simple on the same links
    assert ll.bytes_factor * params.ll_efficiency * WIRE_BYTES_PER_PAYLOAD_BYTE >= 2.0 - 1e-9
    simple = op_plan(cluster, params, Call(Collective.ALL_REDUCE, 16, 2, 1 << 28))
    assert simple.prediction.choice.protocol is NcclProtocol.SIMPLE
    assert simple.bytes_factor * WIRE_BYTES_PER_PAYLOAD_BYTE < ll.bytes_factor * WIRE_BYTES_PER_PAYLOAD_BYTE / 1.5
    # a tiny call is its latency: the launch and NCCL's per-step latencies, spread over the steps
    tiny = Call(Collective.ALL_REDUCE, 16, 2, 64)
    plan = op_plan(cluster, params, tiny)
    assert _alone_us(engine, tiny, 8) == pytest.approx(predict(cluster, params, tiny).time_us, rel=1e-3)
    assert (plan.latency_ns + plan.launch_ns) / 1e3 == pytest.approx(predict(cluster, params, tiny).time_us,
                                                                      rel=0.05)


def test_genie_estimate_fabric_with_an_nccl_calibration_explains_the_same_choices(tmp_path):
    case = DATA / "nccltests309-h100-ndr-2node-4node"
    cal = tmp_path / "cal"
    assert run_genie("calibrate", str(case / "all_reduce-16r.txt"), "--topology", str(case / "topology.yaml"),
                     "--out", str(cal)).returncode == 0
    trace = tmp_path / "tp8dp2.json"
    assert run_genie("trace", "gen", "--model", "gpt3-1.3b", "--layers", "1", "--tp", "8", "--dp", "2", "--device",
                     "h100", "--out", str(trace), "--to", "json").returncode == 0
    outs = {}
    for mode in ("nccl", "fabric"):
        out = tmp_path / mode
        r = run_genie("estimate", str(trace), "--topology", str(case / "topology.yaml"), "--calibration", str(cal),
                      "--mode", mode, "--explain", "--out", str(out))
        assert r.returncode == 0, r.stderr
        assert json.loads((out / "manifest.json").read_text())["params"]["mode"] == mode
        outs[mode] = (r.stdout, (out / "nccl_choices.csv").read_text(),
                      float((out / "estimate.csv").read_text().splitlines()[1].split(",")[2]))
    assert outs["fabric"][1] == outs["nccl"][1]  # the same algorithm/protocol/channels per op kind
    explained = [line for line in outs["nccl"][0].splitlines() if "x" in line and " ranks on " in line]
    assert explained and all(line in outs["fabric"][0] for line in explained)
    assert "fabric model with NCCL's choices" in outs["fabric"][0]
    # no two ops contend here: the two estimates differ only by the players' rules (ranks leave an op at their
    # last receive on the fabric): within 5 %
    assert outs["fabric"][2] == pytest.approx(outs["nccl"][2], rel=0.05)


def test_with_an_nccl_calibration_the_fabric_is_the_default_where_groups_share_links(tmp_path):
    case = DATA / "aws-batch-g5-a10g-2node-eth-socket"  # plain hosts, one GPU each: retargeted to an 8-host ring
    cal = tmp_path / "cal"
    assert run_genie("calibrate", str(case / "all_reduce-2r.txt"), "--topology", str(case / "topology.yaml"),
                     "--out", str(cal)).returncode == 0
    trace = tmp_path / "tp2dp4.json"
    assert run_genie("trace", "gen", "--model", "gpt3-125m", "--layers", "1", "--tp", "2", "--dp", "4", "--out",
                     str(trace), "--to", "json").returncode == 0
    iteration = {}
    for mode in (None, "nccl"):
        out = tmp_path / f"est-{mode}"
        r = run_genie("estimate", str(trace), "--topology", str(ROOT / "topologies" / "ring-8.yaml"),
                      "--calibration", str(cal), *(("--mode", mode) if mode else ()), "--out", str(out))
        assert r.returncode == 0, r.stderr
        iteration[json.loads((out / "manifest.json").read_text())["params"]["mode"]] = float(
            (out / "estimate.csv").read_text().splitlines()[1].split(",")[2])
    # both DP rings cross every other link of the 8-host ring: the fabric (the default here) has them share it,
    # the NCCL model times each op alone
    assert set(iteration) == {"fabric", "nccl"} and iteration["fabric"] > 1.5 * iteration["nccl"]


def test_a_collective_the_nccl_model_does_not_time_is_refused_in_one_line():
    from genie.core.errors import InputError

    cluster, params = _a100_dgx2()
    engine = _engine(DGX2, cluster, params)
    with pytest.raises(InputError, match="does not time barrier"):
        engine.plan(CommOp(Collective.BARRIER, Algorithm.AUTO, 16, 0), tuple(range(16)))
