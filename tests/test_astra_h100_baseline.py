"""benchmarks/astra_h100_baseline.py (issue 33's ASTRA-sim baseline): the input sets it writes are ASTRA-sim's
validated HGX-H100 configuration, its simulated times grow with the size, and they are what the drop-in
executables print for the same files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from astra_adapter.config import NetworkBackend, TopologyKind, load_network, load_system
from astra_adapter.output import parse_astra_output
from benchmarks.astra_h100_baseline import (BACKENDS, REFERENCE, Point, geomean_abs_pct, run_sweep, summary_table,
                                            write_inputs)

ROOT = Path(__file__).resolve().parents[1]
SWEEP = "dudeperf3ct-h100x4-nvlink-lambda-1node/all_reduce-4r.txt"
SIZES = (1 << 10, 1 << 20, 64 << 20)  # all three in the 4-GPU sweep


def test_three_sizes_simulate_positive_times_that_grow_with_size(tmp_path: Path) -> None:
    points = run_sweep(SWEEP, tmp_path, configs=("validated",), sizes=SIZES)
    for backend in BACKENDS:
        mine = [p for p in points if p.backend is backend]
        assert [p.size_bytes for p in mine] == list(SIZES)
        cycles = [p.simulated_cycles for p in mine]
        assert all(c is not None and c > 0 for c in cycles), cycles
        assert cycles == sorted(set(cycles)), cycles  # strictly increasing
        assert all(p.npus == 4 and p.measured_us > 0 for p in mine)
    assert "| 4 | validated | congestion_aware | 3 (1 KiB..64 MiB) |" in summary_table(points)


def test_inputs_are_the_validated_configuration(tmp_path: Path) -> None:
    inputs = write_inputs(tmp_path, "validated", 4, 1 << 20)
    assert inputs.system.read_bytes() == (REFERENCE / "astrasim-HGX-H100-validated.json").read_bytes()
    (dim,) = load_network(inputs.network).dims
    assert (dim.topology, dim.npus_count, dim.bandwidth_gb_per_s, dim.latency_ns) == \
        (TopologyKind.SWITCH, 4, 741.34, 936.25)
    system = load_system(write_inputs(tmp_path / "pc", "per-count", 8, 1 << 20).system)
    assert (system.endpoint_delay_ns, system.active_chunks_per_dimension, system.preferred_dataset_splits,
            system.local_mem_bw_gb_per_s) == (1, 2, 4, 3350.0)


def test_results_equal_a_drop_in_run(tmp_path: Path) -> None:
    size = 1 << 20
    points = run_sweep(SWEEP, tmp_path / "sweep", configs=("validated",), sizes=(size,))
    inputs = write_inputs(tmp_path / "set", "validated", 4, size)
    for point in points:
        done = subprocess.run([sys.executable, "-m", "genie.cli.astra_dropin", point.backend.value, *inputs.argv()],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr
        result = parse_astra_output(done.stdout)
        assert len(result.ranks) == 4
        assert {r.finish_cycles for r in result.ranks} == {point.simulated_cycles}, point.backend


def test_geomean_skips_refused_points() -> None:
    def point(measured: float, cycles: int | None) -> Point:
        return Point("x", 8, "validated", NetworkBackend.CONGESTION_AWARE, 8, measured, cycles)

    assert abs(geomean_abs_pct([point(10, 11_000), point(10, 14_000), point(10, None)]) - 20.0) < 1e-9
    assert geomean_abs_pct([point(10, None)]) is None
