"""ASTRA-sim interop: the executables named like ASTRA-sim's binaries (its option parsing and exit codes),
`genie astra simulate --backend`, the exported cmd.sh without the venv on PATH, durations read as ASTRA-sim reads
them, and the options genie refuses."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from astra_adapter.config import NetworkConfig, NetworkDim, TopologyKind
from astra_adapter.estimate import estimate, estimate_files
from astra_adapter.export import export_astra
from astra_adapter.mapping import map_topology
from astra_reference import REFERENCE
from genie.cli.astra_dropin import parse_argv
from genie.core.topology import LinkShape
from genie.core.trace import compute_node, make_trace
from genie.topology import star

ROOT = Path(__file__).resolve().parents[1]
SWITCH_CASE = REFERENCE / "all_gather_8npus_1MB_sw_Ring_4chunks"
TWO_DIM_CASE = REFERENCE / "all_reduce_16npus_1MB_2D-ring2-sw8_Ring2D_4chunks"
ENV = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}


def _case_argv(case: Path) -> list[str]:
    return (case / "cmd.sh").read_text().splitlines()[2].split(">")[0].split()[1:]


def dropin(backend: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "genie.cli.astra_dropin", backend, *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=60, env=ENV)


def genie(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "genie.cli.main", "astra", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=60, env=ENV)


def _lines(text: str) -> list[str]:
    return [re.sub(r"^\[[^\]]*\] ", "", line) for line in text.splitlines()]


def test_argv_is_parsed_like_cxxopts() -> None:
    values, unknown = parse_argv(["--workload-configuration", "w", "--num-queues-per-dim=1", "--bogus=3",
                                  "--rendezvous-protocol", "stray", "--injection-scale=2"])
    assert values == {"workload-configuration": "w", "num-queues-per-dim": 1, "rendezvous-protocol": True,
                      "injection-scale": 2.0}
    assert unknown == ["--bogus=3"]


def test_aware_dropin_prints_astra_sims_lines_and_ignores_unknown_options() -> None:
    done = dropin("congestion_aware", *_case_argv(SWITCH_CASE), "--made-up-option=7", cwd=SWITCH_CASE)
    assert done.returncode == 0, done.stderr
    assert "ignoring unknown option --made-up-option=7" in done.stderr
    assert _lines(done.stdout) == _lines((SWITCH_CASE / "stdout_congestion_aware.txt").read_text())
    unaware = dropin("congestion_unaware", *_case_argv(SWITCH_CASE), cwd=SWITCH_CASE)
    assert _lines(unaware.stdout) == _lines((SWITCH_CASE / "stdout_congestion_unaware.txt").read_text())
    assert not (SWITCH_CASE / "log").exists()


def test_simulate_backend_option() -> None:
    done = genie("simulate", "--backend", "congestion_aware", *_case_argv(SWITCH_CASE), cwd=SWITCH_CASE)
    assert done.returncode == 0, done.stderr
    assert "sys[0] finished, 301712 cycles" in done.stdout
    bad = genie("simulate", "--backend", "congestion_maybe", *_case_argv(SWITCH_CASE), cwd=SWITCH_CASE)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--backend" in bad.stderr
    queues = genie("simulate", "--num-queues-per-dim", "2", *_case_argv(SWITCH_CASE), cwd=SWITCH_CASE)
    assert queues.returncode == 0 and "sys[0] finished, 82508 cycles" in queues.stdout  # the binary's, 2 queues
    aware = genie("simulate", "--backend", "congestion_aware", "--num-queues-per-dim", "2", *_case_argv(SWITCH_CASE),
                  cwd=SWITCH_CASE)
    assert aware.returncode == 0 and "sys[0] finished, 155738 cycles" in aware.stdout  # the aware binary's, 2 queues


def test_dropin_exit_codes(tmp_path: Path) -> None:
    argv = _case_argv(SWITCH_CASE)
    missing = dropin("congestion_aware", *[a for a in argv if not a.startswith("--workload")], cwd=SWITCH_CASE)
    assert missing.returncode == 255 and "workload-configuration" in missing.stderr  # as the real binary
    not_a_number = dropin("congestion_unaware", *argv, "--num-queues-per-dim=x", cwd=SWITCH_CASE)
    assert not_a_number.returncode == 255
    two_dims = dropin("congestion_aware", *_case_argv(TWO_DIM_CASE), cwd=TWO_DIM_CASE)
    assert two_dims.returncode == 255 and "only support 1-dim topology" in two_dims.stderr
    net = tmp_path / "net.yml"
    net.write_text("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ -5 ]\n")
    bad_net = dropin("congestion_unaware", *[a for a in argv if not a.startswith("--network")],
                     f"--network-configuration={net}", cwd=SWITCH_CASE)
    assert bad_net.returncode == 255 and "latency" in bad_net.stderr
    no_system = dropin("congestion_unaware", *[a for a in argv if not a.startswith("--system")],
                       f"--system-configuration={tmp_path / 'none.json'}", cwd=SWITCH_CASE)
    assert no_system.returncode == 1 and no_system.stdout == ""


def test_exported_cmd_sh_runs_without_the_venv_on_path(tmp_path: Path) -> None:
    out = tmp_path / "astra"
    done = subprocess.run([sys.executable, "-m", "genie.cli.main", "astra", "export", "traces/gen_tp2_dp4_gpt3",
                           str(out), "--topology", "topologies/star-8.yaml"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=ENV)
    assert done.returncode == 0, done.stderr
    assert '"0"' not in (out / "workload" / "workload.comm_group.json").read_text()
    run = subprocess.run(["/bin/sh", str(out / "cmd.sh")], capture_output=True, text=True, timeout=60, env={})
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("finished,") == 8


def test_simulate_reads_whole_microseconds_like_astra_sim(tmp_path: Path) -> None:
    """A 1.4 us compute node: ASTRA-sim reads duration_micros (1 us); genie's in-memory estimate keeps 1400 ns."""
    trace = make_trace([[compute_node(0, "fwd", duration_ns=1_400)], [compute_node(0, "fwd", duration_ns=2_600)]])
    done = export_astra(trace, map_topology(star(2, shape=LinkShape(rate_bps=10**9, delay_us=1.0))), tmp_path)
    assert any("not whole microseconds" in note for note in done.notes)
    files = estimate_files(tmp_path / "workload" / "workload", tmp_path / "system.json", tmp_path / "network.yml",
                           tmp_path / "remote_memory.json")
    assert [r.finish_cycles for r in files.result.by_rank()] == [1_000, 3_000]
    in_memory = estimate(trace, done.system, done.network)
    assert [r.finish_cycles for r in in_memory.result.by_rank()] == [1_400, 2_600]


def test_aware_in_memory_matches_the_reference() -> None:
    from genie.workloads.chakra_et import read_et_set
    from astra_adapter.config import NetworkBackend, load_system

    trace = read_et_set(SWITCH_CASE / "workload" / "all_gather")
    net = NetworkConfig((NetworkDim(TopologyKind.SWITCH, 8, 50.0, 500.0),))
    est = estimate(trace, load_system(SWITCH_CASE / "system.json"), net, backend=NetworkBackend.CONGESTION_AWARE)
    assert est.result.max_finish_cycles == 301712
