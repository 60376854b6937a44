"""Multi-GPU nodes (``nodes:`` topologies) as ASTRA-sim dimensions, and `genie astra export --network DIR` with a
real cluster's NCCL calibration (docs/astra.md, docs/nccl-model.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_adapter.config import TopologyKind, load_network
from astra_adapter.fabric.estimate import needs_fabric
from astra_adapter.mapping import DimRole, TopologyShape, map_topology
from astra_adapter.nccl.calibration_io import load_calibration
from astra_adapter.nccl.tuning import BASE_LAT_US, HW_LAT_US, HwKind
from cli_support import run_genie
from genie.core.errors import InputError
from genie.topology import load_topology, load_topology_file

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "real-nccl"
H100_2NODE = DATA / "nccltests309-h100-ndr-2node-4node"
GIB = 1 << 30


def _nodes(body: str):
    return load_topology("name: t\ndefaults: {bandwidth: 400gbit, delay: 1us}\n" + body, source="t.yaml")


def test_dgx_nodes_map_to_an_nvswitch_dimension_then_the_nodes():
    m = map_topology(load_topology_file(ROOT / "topologies" / "dgx-2node.yaml"))
    assert m.shape is TopologyShape.GPU_NODES and m.ranks_per_host == 1
    assert [(d.role, d.topology, d.npus_count) for d in m.dims] == [
        (DimRole.NODE_GPUS, TopologyKind.SWITCH, 8), (DimRole.HOSTS, TopologyKind.SWITCH, 2)]
    nvlink, nic = m.dims
    assert nvlink.bandwidth_gb_per_s == pytest.approx(7200e9 / 8 / GIB) and nvlink.latency_ns == 500.0
    assert nic.bandwidth_gb_per_s == pytest.approx(400e9 / 8 / GIB) and nic.latency_ns == 1000.0
    # GPU 3 of both nodes: one rail, the nodes' dimension; a node's GPUs: the NVSwitch; TP x DP: both
    assert m.dim_of_group((3, 11)) == (1,) and m.dim_of_group(tuple(range(8))) == (0,)
    assert m.dim_of_group((0, 1, 8, 9)) == (0, 1)
    assert any("rails" in n for n in m.notes)
    # mapped, but approximately: the fabric model stays the default estimator there
    assert needs_fabric(load_topology_file(ROOT / "topologies" / "dgx-2node.yaml"))
    sixteen = map_topology(load_topology_file(ROOT / "topologies" / "dgx-16node.yaml"))
    assert [d.npus_count for d in sixteen.dims] == [8, 16]


def test_one_node_is_one_dimension():
    m = map_topology(_nodes("nodes:\n  - {prefix: n, count: 1, gpus: 4, nvlink: {bandwidth: 2400gbit}, "
                            "rails: leaf}\nswitches:\n  - {prefix: leaf, count: 4, kind: router}\n"))
    assert [(d.role, d.npus_count) for d in m.dims] == [(DimRole.NODE_GPUS, 4)] and not m.notes


@pytest.mark.parametrize("body, where, message", [
    ("nodes:\n  - {prefix: n, count: 2, gpus: 4, nvlink: {bandwidth: 2400gbit}, nics: 2, rails: leaf}\n"
     "switches:\n  - {prefix: leaf, count: 2, kind: router}\n", "nodes.nics", "has 0 NIC links"),
    ("nodes:\n  - {name: n0, gpus: 2, nvlink: {bandwidth: 2400gbit}, rails: [leaf0, leaf1]}\n"
     "  - {name: n1, gpus: 2, nvlink: {bandwidth: 2400gbit}, rails: [leaf1, leaf0]}\n"
     "switches:\n  - {prefix: leaf, count: 2, kind: router}\n", "nodes.rails", "the NICs of GPU 0 are on leaf0, leaf1"),
    ("nodes:\n  - {name: n0, gpus: 2, nvlink: {bandwidth: 2400gbit}, rails: [leaf0, leaf1]}\n"
     "  - {name: n1, gpus: 4, nvlink: {bandwidth: 2400gbit}, rails: [leaf0, leaf1, leaf0, leaf1]}\n"
     "switches:\n  - {prefix: leaf, count: 2, kind: router}\n", "nodes", "different GPU counts"),
])
def test_nodes_astra_sim_cannot_express_are_refused_naming_why(body, where, message):
    with pytest.raises(InputError) as e:
        map_topology(_nodes(body), source="t.yaml")
    assert e.value.path == where and message in str(e.value)


@pytest.fixture(scope="module")
def h100_calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("h100") / "cal"
    done = run_genie("calibrate", str(H100_2NODE / "all_reduce-16r.txt"), "--topology",
                     str(H100_2NODE / "topology.yaml"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_export_with_an_nccl_calibration_writes_its_fitted_rates_and_says_what_astra_cannot(
        tmp_path: Path, h100_calibration: Path):
    trace = tmp_path / "tp8dp2"
    assert run_genie("trace", "gen", "--model", "gpt3-1.3b", "--layers", "1", "--tp", "8", "--dp", "2",
                     "--out", str(trace), "--to", "json").returncode == 0
    out = tmp_path / "astra"
    done = run_genie("astra", "export", str(trace), str(out), "--topology", str(H100_2NODE / "topology.yaml"),
                     "--network", str(h100_calibration))
    assert done.returncode == 0, done.stderr
    _, params, _ = load_calibration(h100_calibration)
    net = load_network(out / "network.yml")
    nvswitch, nodes = net.dims
    assert (nvswitch.npus_count, nodes.npus_count) == (8, 2)
    # the calibrated topology itself: nothing scaled; Ring/Simple step latency, two hops a step
    assert nvswitch.bandwidth_gb_per_s == pytest.approx(params.intra_busbw_gb_s * 1e9 / GIB)
    assert nodes.bandwidth_gb_per_s == pytest.approx(params.nic_gb_s * 1e9 / GIB)
    assert nvswitch.latency_ns == pytest.approx(params.latency_scale * HW_LAT_US[HwKind.NVLINK][1][2] * 500)
    assert nodes.latency_ns == pytest.approx(params.latency_scale * HW_LAT_US[HwKind.NET][1][2] * 500)
    assert "cannot express NCCL's per-size choice" in done.stdout and "scaled" not in done.stdout
    base = params.latency_scale * BASE_LAT_US[1][2] + params.launch_us
    assert f"base latency ({base:.1f} us" in done.stdout
    # on dgx-2node (900 GB/s NVLink stated) the NVLink class is scaled, and the note says so
    again = run_genie("astra", "export", str(trace), str(tmp_path / "dgx"), "--topology",
                      str(ROOT / "topologies" / "dgx-2node.yaml"), "--network", str(h100_calibration))
    assert again.returncode == 0 and "intra-node bandwidth scaled" in again.stdout
    scaled = load_network(tmp_path / "dgx" / "network.yml")
    assert scaled.dims[0].bandwidth_gb_per_s > nvswitch.bandwidth_gb_per_s * 2


def test_an_nccl_calibration_of_other_nodes_is_refused(tmp_path: Path, h100_calibration: Path):
    trace = tmp_path / "dp4"
    assert run_genie("trace", "gen", "--model", "gpt3-125m", "--layers", "1", "--dp", "4",
                     "--out", str(trace), "--to", "json").returncode == 0
    done = run_genie("astra", "export", str(trace), str(tmp_path / "o"), "--topology",
                     str(ROOT / "topologies" / "star-4.yaml"), "--network", str(h100_calibration))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "8 GPUs; star-4 has 1 per node" in done.stderr
    assert not (tmp_path / "o").exists()
