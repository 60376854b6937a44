"""bench and replay on a live 4-host star (root only): real bytes cross the emulated links, --verify checks the
data, and nothing of the run is left afterwards."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli_support import run_genie
from genie.collectives.registry import build_schedule
from genie.core.collective import Collective
from genie.services.bench import BenchRequest, run_bench
from genie.services.target import placements_for
from genie.services.replay import ReplayRequest, run_replay
from genie.testbed.layout import NETNS_DIR
from genie.testbed.netlink import link_counters
from genie.testbed.state import STATE_DIR_ENV
from genie.workloads.native import read_native
from netns_checks import clean_star_testbed

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_ADMIN) to build namespaces")]

ROOT = Path(__file__).resolve().parent.parent
RUN = f"b{os.getpid()}"


def _ours() -> list[str]:
    names = os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else []
    return [n for n in names if n.startswith(f"genie-{RUN}")]


@pytest.fixture(scope="module")
def testbed(tmp_path_factory):
    pids: list[int] = []
    with clean_star_testbed(tmp_path_factory.mktemp("state"), f"{RUN}-s4", left=_ours) as info:
        yield info, pids
    for pid in pids:  # every rank process is gone (reaped, not a zombie of ours)
        assert not os.path.exists(f"/proc/{pid}")


def _host_tx(info) -> dict[str, int]:
    return {c.end.node: c.tx_bytes for c in link_counters(info) if c.end.node.startswith("h")}


def test_collectives_verify_and_bytes_cross_the_links(testbed):
    info, pids = testbed
    request = BenchRequest(collectives=(Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.ALL_TO_ALL),
                           min_bytes=1024, max_bytes=1 << 20, factor=32, iterations=3, warmup=1, verify=True)
    placements = placements_for(info, None)
    before = _host_tx(info)
    outcome = run_bench(request, placements, on_pids=pids.extend)
    after = _host_tx(info)
    assert len(outcome.stats) == 9 and all(s.busbw_GBps > 0 for s in outcome.stats)
    expected = {p.host: 0 for p in placements}
    for case in outcome.job.cases:
        schedule = build_schedule(case.op)
        for p in placements:
            expected[p.host] += schedule.for_rank(p.rank).sent_bytes * (case.warmup + case.iterations)
    for host, payload in expected.items():
        sent = after[host] - before[host]
        assert sent >= payload, f"{host}: {sent} bytes on the wire < {payload} bytes of schedule payload"
        assert sent < payload * 1.2 + 2_000_000  # headers and setup only, no traffic from elsewhere


def test_replay_of_a_trace_on_the_testbed(testbed):
    info, pids = testbed
    trace = read_native((ROOT / "traces" / "tp2_dp2_step.yaml").read_bytes())
    outcome = run_replay(trace, placements_for(info, None), ReplayRequest(iterations=1), on_pids=pids.extend)
    (it,) = outcome.iterations
    assert {rr.rank for rr in it.ranks} == {0, 1, 2, 3}
    assert all(len(rr.records) == len(trace.ranks[rr.rank].nodes) for rr in it.ranks)


def _temporary_namespaces() -> set[str]:
    return {n for n in (os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else []) if n.startswith("genie-tmp")}


def test_cli_bench_with_topology_brings_up_and_tears_down(tmp_path):
    before = _temporary_namespaces()
    out = tmp_path / "run"
    proc = run_genie("bench", "--topology", str(ROOT / "topologies" / "star-4.yaml"), "-c", "all_reduce,all_to_all",
                     "-b", "4K", "-e", "64K", "-f", "16", "-n", "3", "-w", "1", "--verify", "--out", str(out),
                     env={STATE_DIR_ENV: str(tmp_path / "state")})
    assert proc.returncode == 0, proc.stderr
    # nccl-tests' layout (issue #17): a table per collective, as two nccl-tests binaries would print
    assert "# Collective test starting: alltoall_perf" in proc.stdout
    assert proc.stdout.count("# Avg bus bandwidth") == 2
    assert (out / "sweep.csv").read_text().count("\n") == 1 + 2 * 2
    assert not (out / "paths.json").exists()  # a star has one path per pair: nothing to record
    assert _temporary_namespaces() <= before  # the --topology testbed is gone


def test_bench_on_equal_cost_paths_records_them_and_estimate_fits_on_them(tmp_path):
    """On a leaf-spine (ECMP over two spines) `genie bench` writes the path every connection of its sweep took,
    read from the kernels while the testbed is up (paths.json); `genie estimate --measurements` calibrates the
    fabric model on those paths instead of hash draws. `genie replay` writes its session's the same way."""
    import json

    from astra_adapter.fabric.network import FabricNetwork
    from genie.core.flowpath import RunPaths
    from genie.topology import load_topology_file

    topology_file = ROOT / "topologies" / "leaf-spine-2x4.yaml"
    out = tmp_path / "run"
    proc = run_genie("bench", "--topology", str(topology_file), "-c", "all_reduce", "-b", "64K", "-e", "1M",
                     "-f", "16", "-n", "3", "-w", "1", "--out", str(out), env={STATE_DIR_ENV: str(tmp_path / "state")})
    assert proc.returncode == 0, proc.stderr
    paths = RunPaths.parse((out / "paths.json").read_bytes(), source="paths.json")
    (session,) = paths.sweep
    assert paths.replay == () and session.unresolved == 0
    network = FabricNetwork(load_topology_file(topology_file))
    assert network.took(session)
    # a ring all-reduce of 8 ranks: each rank sends to its ring neighbour, h3 -> h4 and h7 -> h0 over a spine
    pairs = {(p.src_rank, p.dst_rank): p.nodes for p in session.paths}
    assert set(pairs) >= {(r, (r + 1) % 8) for r in range(8)}
    assert pairs[(3, 4)][1:4] in (("leaf0", "spine0", "leaf1"), ("leaf0", "spine1", "leaf1"))
    assert "paths.json" in [f["name"] for f in json.loads((out / "manifest.json").read_text())["files"]]
    done = run_genie("estimate", str(ROOT / "traces" / "gen_tp2_dp4_gpt3"), "--measurements", str(out),
                     "--topology", str(topology_file), "--out", str(tmp_path / "est"))
    assert done.returncode == 0, done.stderr
    assert "ECMP as the sweep's connections took it (1 session(s)" in done.stdout
    replayed = tmp_path / "replay"
    proc = run_genie("replay", str(ROOT / "traces" / "gen_tp2_dp4_gpt3_small"), "--topology", str(topology_file),
                     "-n", "1", "-w", "0", "--out", str(replayed), env={STATE_DIR_ENV: str(tmp_path / "state")})
    assert proc.returncode == 0, proc.stderr
    paths = RunPaths.parse((replayed / "paths.json").read_bytes(), source="paths.json")
    assert paths.sweep == () and len(paths.replay) == 1 and network.took(paths.replay[0])
    assert paths.replay[0].paths and paths.replay[0].unresolved == 0
