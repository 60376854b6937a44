"""Live faults on a 4-host star (root only): a degraded link slows the later iterations, a link taken down
mid-collective ends the run within its timeout naming rank and peer (records kept, nothing leaked), a flap
recovers, a straggler stretches its rank's compute, cross-traffic runs during the run and is gone after."""

from __future__ import annotations

import csv
import json
import shutil
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_support import run_genie
from genie.core.topology import LinkShape
from genie.testbed import service
from genie.testbed.namespaces import namespace_pids
from genie.testbed.netlink import inspect_namespace
from genie.testbed.state import STATE_DIR_ENV
from genie.topology import star
from netns_checks import namespaces_of_run, root_namespace_snapshot

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_ADMIN) to build namespaces")]

RUN = f"f{os.getpid()}"
RATE_BPS = 200_000_000
TRACE = """format: genie-trace
version: 1
name: straggle
ranks: 4
program:
  - {id: 0, name: fwd, type: compute, duration: 60ms}
  - {id: 1, name: ar, type: all_reduce, size: 256KiB, deps: [0]}
"""


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    old = os.environ.get(STATE_DIR_ENV)
    os.environ[STATE_DIR_ENV] = str(state)
    before = root_namespace_snapshot()
    try:
        yield state
    finally:
        if old is None:
            os.environ.pop(STATE_DIR_ENV, None)
        else:
            os.environ[STATE_DIR_ENV] = old
    assert namespaces_of_run(RUN) == []
    assert root_namespace_snapshot() == before


@pytest.fixture(scope="module")
def testbed(state_dir):
    # 200 Mbit/s: a 256 KiB ring all-reduce is network-bound (~16 ms) even when the machine is busy
    with service.temporary_testbed(star(4, shape=LinkShape(rate_bps=RATE_BPS)), name=f"{RUN}-s4") as info:
        yield info


def _faults(run: Path) -> list[dict]:
    return list(csv.DictReader((run / "faults.csv").open()))


def _host_processes(info) -> list[int]:
    return [pid for h in info.hosts for pid in namespace_pids(h.netns)]


def _links_healthy(info) -> None:
    """Every link end is up again and its HTB back at the configured rate."""
    for ns in {e.netns for e in info.link_ends}:
        for iface in inspect_namespace(ns).interfaces:
            if iface.ifname.startswith("eth"):
                assert iface.up, f"{ns}:{iface.ifname} left down"
                rates = [q.rate_bps for q in iface.qdiscs if q.kind == "htb"]
                assert rates == [RATE_BPS], f"{ns}:{iface.ifname} rates {rates}"


# the bench runs below use --no-in-place: `at=opN` counts the sweep's timed ops, and the in-place pass (on by
# default, as nccl-tests) would double them; the op numbers these tests name are out-of-place ops
def test_degrade_at_op_slows_the_later_iterations(testbed, tmp_path):
    run = tmp_path / "run"
    proc = run_genie("bench", "--no-in-place", "--testbed", testbed.name, "-b", "256K", "-e", "256K", "-n", "10", "-w", "2",
                     "--fault", "degrade h3-s0 rate=20mbit at=op5", "--sample-ms", "0", "--out", run)
    assert proc.returncode == 0, proc.stderr
    times = json.loads((run / "sweep.json").read_text())["results"][0]["iteration_us"]
    before, after = statistics.median(times[:5]), statistics.median(times[5:])
    assert after / before > 2.5, (before, after)  # 1/10 of the rate on one ring link: ~10x when idle
    (row,) = _faults(run)
    assert (row["kind"], row["target"], row["params"], row["trigger"], row["outcome"]) == \
        ("degrade", "h3-s0", "rate=20mbit", "op 5", "applied")
    assert float(row["restored_at_s"]) >= float(row["applied_at_s"])
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["params"]["faults"] == ["degrade h3-s0 rate=20mbit at=op5"]
    assert "faults.csv" in {f["name"] for f in manifest["files"]}
    _links_healthy(testbed)


def test_link_down_mid_collective_ends_within_the_timeout(testbed, tmp_path):
    run = tmp_path / "run"
    started = time.monotonic()
    # case 0 (256K) completes; the link goes down before the 3rd timed op of case 1 (512K)
    proc = run_genie("bench", "--no-in-place", "--testbed", testbed.name, "-b", "256K", "-e", "512K", "-n", "4", "-w", "1",
                     "--timeout", "2", "--fault", "down h2-s0 at=op6", "--sample-ms", "0", "--out", run)
    elapsed = time.monotonic() - started
    assert proc.returncode != 0
    error = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(error) == 1 and "timed out" in error[0] and "rank" in error[0], proc.stderr
    assert any(f"rank {r}" in error[0].split(":", 2)[-1] for r in range(4)), error  # the peer is named too
    assert elapsed < 30
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "timed out" in manifest["error"]
    rows = list(csv.DictReader((run / "sweep.csv").open()))  # what was measured is kept: size 0 whole, and
    assert [int(r["size_bytes"]) for r in rows] == [256 * 1024, 512 * 1024]  # size 1's ops before the fault
    iterations = [r["iterations"] for r in json.loads((run / "sweep.json").read_text())["results"]]
    assert iterations == [4, 2], iterations
    (fault,) = _faults(run)
    assert fault["outcome"] == "applied" and fault["restored_at_s"]
    time.sleep(0.5)
    assert _host_processes(testbed) == []  # no rank or helper left in the testbed
    _links_healthy(testbed)


def test_flap_recovers_and_the_run_completes(testbed, tmp_path):
    run = tmp_path / "run"
    proc = run_genie("bench", "--no-in-place", "--testbed", testbed.name, "-b", "64K", "-e", "64K", "-n", "8", "-w", "1",
                     "--timeout", "10", "--fault", "flap h1-s0 for=300ms at=op3", "--sample-ms", "0", "--out", run)
    assert proc.returncode == 0, proc.stderr
    (row,) = _faults(run)
    assert row["outcome"] == "applied"
    assert float(row["restored_at_s"]) - float(row["applied_at_s"]) >= 0.29
    times = json.loads((run / "sweep.json").read_text())["results"][0]["iteration_us"]
    assert len(times) == 8 and times[3] >= 250_000  # the flapped op waited for the link
    _links_healthy(testbed)


def test_straggler_and_cross_traffic_in_replay(testbed, tmp_path):
    trace = tmp_path / "trace.yaml"
    trace.write_text(TRACE)
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "genie.cli.main", "replay", str(trace), "--testbed",
                             testbed.name, "-n", "4", "--sample-ms", "0", "--out", str(run),
                             "--fault", "straggler rank=2 factor=3 at=op2",
                             "--fault", "cross_traffic h0 h1 at=0s"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[str] = set()
    while proc.poll() is None:
        for pid in _host_processes(testbed):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"genie.faults.bulk" in cmdline:
                seen.add(cmdline[cmdline.index(b"genie.faults.bulk") + 1].decode())
        time.sleep(0.05)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert seen == {"recv", "send"}  # the flow ran during the run
    time.sleep(0.3)
    assert _host_processes(testbed) == []  # ... and is gone after it
    rows = list(csv.DictReader((run / "ops.csv").open()))
    fwd = {(int(r["iteration"]), int(r["rank"])): (int(r["end_ns"]) - int(r["start_ns"])) / 1e6
           for r in rows if r["name"] == "fwd"}
    assert fwd[(2, 2)] >= 170 and fwd[(3, 2)] >= 170  # 3 x 60 ms from op 2 on
    assert fwd[(1, 2)] < 120 and fwd[(2, 0)] < 120  # not before, not other ranks
    kinds = {r["kind"]: r for r in _faults(run)}
    assert kinds["straggler"]["outcome"] == "applied" and kinds["cross_traffic"]["outcome"] == "applied"
    assert kinds["cross_traffic"]["restored_at_s"]


@pytest.mark.skipif(shutil.which("iptables") is None, reason="the userspace link emulator needs iptables")
def test_delay_degrade_on_a_userspace_shaped_testbed(state_dir, tmp_path):
    """Delay changes live in the link emulators' stages (no sch_netem needed) and go back afterwards."""
    from genie.testbed.steps import ShaperChoice

    topology = star(4, shape=LinkShape(rate_bps=1_000_000_000, delay_us=1000.0))
    run = tmp_path / "run"
    with service.temporary_testbed(topology, name=f"{RUN}-d4", shaper=ShaperChoice.USERSPACE) as info:
        proc = run_genie("bench", "--no-in-place", "--testbed", info.name, "-b", "4K", "-e", "4K", "-n", "10", "-w", "1",
                         "--fault", "degrade h3-s0 delay=50ms at=op5", "--sample-ms", "0", "--out", run)
        assert proc.returncode == 0, proc.stderr
        stats = [json.loads(p.read_text()) for p in (state_dir / "emulators" / info.name).glob("*.stats.json")]
    times = json.loads((run / "sweep.json").read_text())["results"][0]["iteration_us"]
    before, after = statistics.median(times[:5]), statistics.median(times[5:])
    assert after > before + 35_000 and after > 1.5 * before, times  # every op crosses h3's link: +49 ms each way
    (row,) = _faults(run)
    assert row["outcome"] == "applied" and row["restored_at_s"]
    assert stats and all(s["overrides_generation"] == 2 for s in stats if "links[3] h3>s0" in s["stages"])
