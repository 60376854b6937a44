"""ASTRA-sim configuration files: values, units, and one-line errors naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_adapter.config import (CollectiveImpl, CollectiveOptimization, ImplKind, MemoryType, SchedulingPolicy,
                                  TopologyKind, load_network, load_remote_memory, load_system, parse_impl,
                                  parse_network, parse_remote_memory, parse_system)
from genie.core.errors import InputError

REFERENCE = Path(__file__).resolve().parent / "data" / "astra-reference"
needs_reference = pytest.mark.skipif(not REFERENCE.is_dir(), reason="ASTRA-sim reference data not found")

SYSTEM = b"""{"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 2,
 "preferred-dataset-splits": 4, "all-reduce-implementation": ["ring", "direct4"],
 "all-gather-implementation": ["ring", "ring"], "reduce-scatter-implementation": ["ring", "halvingDoubling"],
 "all-to-all-implementation": ["direct", "direct"], "collective-optimization": "localBWAware",
 "local-mem-bw": 1600, "boost-mode": 0, "roofline-enabled": 0, "peak-perf": 900}"""


def test_system_values() -> None:
    s = parse_system(SYSTEM)
    assert s.scheduling_policy is SchedulingPolicy.LIFO and s.endpoint_delay_ns == 10
    assert s.active_chunks_per_dimension == 2 and s.preferred_dataset_splits == 4
    assert s.all_reduce_impl == (CollectiveImpl(ImplKind.RING), CollectiveImpl(ImplKind.DIRECT, 4))
    assert s.reduce_scatter_impl[1].kind is ImplKind.HALVING_DOUBLING
    assert s.collective_optimization is CollectiveOptimization.LOCAL_BW_AWARE
    assert s.local_mem_bw_gb_per_s == 1600.0 and not s.roofline_enabled and s.peak_perf_tflops == 900.0


def test_network_units() -> None:
    n = parse_network("topology: [ Ring, Switch ]\nnpus_count: [ 2, 8 ]\nbandwidth: [ 200.0, 50.0 ]  # GB/s\n"
                      "latency: [ 50.0, 500.0 ]  # ns\n")
    assert [d.topology for d in n.dims] == [TopologyKind.RING, TopologyKind.SWITCH]
    assert n.npus_count == 16 and n.npus_per_dim == (2, 8)
    assert n.dims[1].bw_bytes_per_ns == pytest.approx(50 * 2**30 / 1e9)  # "GB/s" counted in GiB
    assert n.dims[0].latency_ns == 50.0


def test_remote_memory() -> None:
    assert parse_remote_memory(b'{"memory-type": "NO_MEMORY_EXPANSION"}').memory_type is \
        MemoryType.NO_MEMORY_EXPANSION
    pool = parse_remote_memory(b'{"memory-type": "MEMORY_POOL", "remote-mem-latency": 100, "remote-mem-bw": 64}')
    assert pool.latency_ns == 100 and pool.bw_gb_per_s == 64


@pytest.mark.parametrize("text, path", [
    (b'{"preferred-dataset-splits": 4, "all-reduce-implementation": ["rign"]}', "all-reduce-implementation[0]"),
    (b'{"preferred-dataset-splits": 4, "all-reduce-implementation": ["direct0"]}', "all-reduce-implementation[0]"),
    (b'{"preferred-dataset-splits": 0}', "preferred-dataset-splits"),
    (b'{"all-reduce-implementation": ["ring"]}', "preferred-dataset-splits"),
    (b'{"preferred-dataset-splits": 4, "endpoint-delay": 0}', "endpoint-delay"),
    (b'{"preferred-dataset-splits": 4, "scheduling-policy": "RANDOM"}', "scheduling-policy"),
    (b'{"preferred-dataset-splits": 4, "local-mem-bw": "fast"}', "local-mem-bw"),
    (b'{"preferred-dataset-splits": 4, "roofline-enabled": 1}', "roofline-enabled"),
])
def test_system_errors_name_the_key(text: bytes, path: str) -> None:
    with pytest.raises(InputError) as err:
        parse_system(text, source="sys.json")
    assert err.value.source == "sys.json" and err.value.path == path
    assert str(err.value).startswith(f"sys.json: {path}: ")


@pytest.mark.parametrize("text, path", [
    ("topology: [ Ring ]\nnpus_count: [ 8, 2 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n", "npus_count"),
    ("topology: [ Torus ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n", "topology[0]"),
    ("topology: [ Ring ]\nnpus_count: [ 1 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n", "npus_count[0]"),
    ("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 0 ]\nlatency: [ 500 ]\n", "bandwidth[0]"),
    ("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ -1 ]\n", "latency[0]"),
    ("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\n", "latency"),
])
def test_network_errors_name_the_key(text: str, path: str) -> None:
    with pytest.raises(InputError) as err:
        parse_network(text, source="net.yml")
    assert err.value.path == path and err.value.source == "net.yml"


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_system(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not JSON"):
        load_system(bad)
    with pytest.raises(InputError, match="missing"):
        parse_remote_memory(b"{}")
    with pytest.raises(InputError):
        parse_network("[1, 2]")
    assert parse_impl("oneDirect8", source="s", path="p") == CollectiveImpl(ImplKind.ONE_DIRECT, 8)


@needs_reference
def test_every_reference_configuration_parses() -> None:
    cases = [p for p in REFERENCE.iterdir() if (p / "system.json").is_file()]
    assert len(cases) == 47
    for case in cases:
        system = load_system(case / "system.json")
        network = load_network(case / "network.yml")
        assert load_remote_memory(case / "remote_memory.json").memory_type is MemoryType.NO_MEMORY_EXPANSION
        assert system.preferred_dataset_splits >= 1 and network.npus_count in (4, 8, 16)
        assert len(system.all_reduce_impl) == len(network.dims)
    hgx = load_system(REFERENCE / "example_HGX-H100-validated_all_reduce_8npus_1MB" / "system.json")
    assert hgx.active_chunks_per_dimension == 2 and hgx.local_mem_bw_gb_per_s == 3350 and not hgx.roofline_enabled
