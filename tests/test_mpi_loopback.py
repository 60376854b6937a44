"""MPI-launched runs without root: mpiexec starts 4 ranks on 127.0.0.1 (MPICH forced onto TCP over lo), the job
moves real data over genie's TCP engine and over MPI point-to-point (verified), replay runs, and every bad
start ends in one line naming the rank and host, with nothing left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from genie.core.collective import Collective
from genie.core.errors import RunFailure
from genie.services.bench import BenchRequest, run_bench
from genie.services.target import loopback_placements, placements_for
from genie.engine.mpi import MpiLaunch, MpiSessions, plan
from genie.services.replay import ReplayRequest, run_replay
from genie.inventory import inventory_to_testbed_info, load_inventory
from genie.workloads.native import read_native
from mpi_support import mpiexec_or_skip, our_descendants

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def mpiexec() -> Path:
    return mpiexec_or_skip()


REQUEST = BenchRequest(collectives=(Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.ALL_TO_ALL),
                       min_bytes=1024, max_bytes=256 * 1024, factor=16, iterations=3, warmup=1, verify=True,
                       record_steps=True)


@pytest.mark.parametrize("transport", ["tcp", "mpi"])
def test_four_ranks_verify_over_both_transports(mpiexec, transport):
    sessions = MpiSessions(MpiLaunch(mpiexec=mpiexec, transport=transport))
    pids: list[int] = []
    outcome = run_bench(REQUEST, loopback_placements(4), sessions=sessions, on_pids=pids.extend)
    assert len(outcome.stats) == len(outcome.job.cases) == 9
    assert all(s.iterations == 3 and s.busbw_GBps > 0 for s in outcome.stats)
    assert set(outcome.steps) == set(range(9)) and all(len(v) == 4 for v in outcome.steps.values())
    session = sessions.sessions[-1]
    assert [o["rank"] for o in sessions.clock_offsets] == [0, 1, 2, 3]
    assert all(o["same_clock"] and o["applied_ns"] == 0 and o["rtt_ns"] >= 0 for o in sessions.clock_offsets)
    assert [r["iface"] for r in session.ranks] == ["lo"] * 4
    if transport == "mpi":
        assert all(r["port"] is None for r in session.ranks)  # no genie listener: data goes over MPI
    else:
        assert all(r["port"] for r in session.ranks)
    assert session.mpiexec_pid in pids and {r["pid"] for r in session.ranks} <= set(pids)
    assert our_descendants() == []
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or _zombie_free(pid)


def _zombie_free(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("transport", ["tcp", "mpi"])
def test_replay_of_a_trace_under_mpi(mpiexec, transport):
    trace = read_native((ROOT / "traces" / "tp2_dp2_step.yaml").read_bytes())
    sessions = MpiSessions(MpiLaunch(mpiexec=mpiexec, transport=transport))
    outcome = run_replay(trace, loopback_placements(4), ReplayRequest(iterations=2), sessions=sessions)
    assert len(outcome.iterations) == 2
    if transport == "mpi":
        assert all(r["port"] is None for r in sessions.sessions[-1].ranks)  # no genie listener: data over MPI
    for it in outcome.iterations:
        assert {rr.rank for rr in it.ranks} == {0, 1, 2, 3}
        assert all(len(rr.records) == len(trace.ranks[rr.rank].nodes) for rr in it.ranks)
    assert our_descendants() == []


def test_replay_over_mpi_times_out_naming_the_rank_and_the_peer(mpiexec):
    """Rank 1 waits for a message rank 0 never sends: the op timeout names both, the run ends, nothing is left."""
    trace = read_native(b"""format: genie-trace
version: 1
name: lost-message
ranks:
  - {rank: 0, nodes: [{id: 0, type: compute, duration: 10us}]}
  - {rank: 1, nodes: [{id: 0, name: wait_for_0, type: recv, size: 4KiB, peer: 0, tag: 1}]}
""")
    sessions = MpiSessions(MpiLaunch(mpiexec=mpiexec, transport="mpi"))
    with pytest.raises(RunFailure, match=r"^rank 1 on host \S+: wait_for_0 \(node 0\) timed out after 1 s "
                                         r"receiving from rank 0 \(0/4096 bytes\)$"):
        run_replay(trace, loopback_placements(2), ReplayRequest(iterations=1, timeout_s=1.0), sessions=sessions)
    assert our_descendants() == []


def test_inventory_on_loopback_with_a_port_range(mpiexec):
    inv = load_inventory("hosts: [{name: a, address: 127.0.0.1, ranks: 3}]")
    ports = range(45100, 45120)
    sessions = MpiSessions(MpiLaunch(mpiexec=mpiexec, inventory=inv, port_range=ports))
    run_bench(BenchRequest(min_bytes=4096, max_bytes=4096, iterations=2, warmup=0, verify=True),
              placements_for(inventory_to_testbed_info(inv), None), sessions=sessions)
    ranks = sessions.sessions[-1].ranks
    assert [r["host"] for r in ranks] == ["a"] * 3
    assert all(r["port"] in ports for r in ranks) and len({r["port"] for r in ranks}) == 3
    # LOW + 1 + the rank's index on its host, unless another program holds one of them


def test_an_interface_missing_on_the_host_names_rank_and_host(mpiexec):
    inv = load_inventory("hosts: [{name: gpu0, address: 127.0.0.1, ranks: 2, interface: nosuch9}]")
    sessions = MpiSessions(MpiLaunch(mpiexec=mpiexec, inventory=inv, startup_timeout_s=30))
    with pytest.raises(RunFailure, match=r"^rank [01] on host gpu0: no IPv4 address on interface nosuch9 for "
                                         r"genie traffic \(this machine has: lo 127.0.0.1/8.*\)"):
        run_bench(BenchRequest(min_bytes=1024, max_bytes=1024, iterations=1, warmup=0),
                  placements_for(inventory_to_testbed_info(inv), None), sessions=sessions)
    assert our_descendants() == []


def test_world_size_other_than_the_map_is_refused(mpiexec, tmp_path):
    lmap = plan.launch_map(loopback_placements(3))
    argv = plan.mpiexec_argv(mpiexec, 2, plan.rank_argv(sys.executable, lmap, transport="mpi"))
    proc = subprocess.run(argv, env=plan.launch_env(os.environ), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    errors = [json.loads(line.split(plan.ERROR_MARKER, 1)[1]) for line in proc.stderr.splitlines()
              if plan.ERROR_MARKER in line]
    assert errors and errors[0]["message"].startswith("rank ")
    assert "mpiexec started 2 ranks but the run needs 3" in errors[0]["message"]
    assert our_descendants() == []


def test_trampoline_execs_the_command_of_its_rank(mpiexec, tmp_path):
    (tmp_path / "map.json").write_text(json.dumps({"netns": [None, None]}))
    # each rank writes its own file (hydra forwards both ranks' stdout as it comes, interleaved even mid-word)
    probe = [sys.executable, "-c", "import os, sys; open(os.path.join(sys.argv[1], 'rank-' + os.environ['PMI_RANK']),"
             " 'w').write(str(os.getpid()))", str(tmp_path)]
    argv = plan.mpiexec_argv(mpiexec, 2, plan.trampoline_argv(sys.executable, tmp_path / "map.json", probe))
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    pids = {p.name: int(p.read_text()) for p in tmp_path.glob("rank-*")}
    assert sorted(pids) == ["rank-0", "rank-1"] and len(set(pids.values())) == 2, out.stdout


def test_ctrl_c_during_a_run_leaves_nothing(mpiexec, tmp_path):
    """The orchestrator killed mid-run (SIGINT to the CLI-like driver): mpiexec and every rank go with it."""
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import sys\n"
        "from genie.services.bench import BenchRequest, run_bench\nfrom genie.services.target import loopback_placements\n"
        "from genie.engine.mpi import MpiLaunch, MpiSessions\n"
        "from pathlib import Path\n"
        "def pids(p):\n"
        "    print('pids', *p, flush=True)\n"
        f"s = MpiSessions(MpiLaunch(mpiexec=Path({str(mpiexec)!r})))\n"
        "run_bench(BenchRequest(min_bytes=1 << 20, max_bytes=1 << 20, iterations=100000, warmup=0), "
        "loopback_placements(3), sessions=s, on_pids=pids)\n")
    # as at a terminal: SIGINT handled, even when the suite itself runs as a background job (which ignores it)
    proc = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE, text=True, cwd=str(ROOT),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen: list[int] = []
    try:
        while len(seen) < 4:  # mpiexec, then the 3 ranks once they are up
            line = proc.stdout.readline()
            assert line, "driver ended early"
            seen += [int(p) for p in line.split()[1:]]
        proc.send_signal(2)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    import time

    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") and _zombie_free(pid) for pid in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in seen if os.path.exists(f"/proc/{pid}") and _zombie_free(pid)]


@pytest.mark.serial  # which exit is seen first decides the name: under the parallel pass's load, the exits of the
# ranks hydra kills after the SIGKILLed one arrive in one batch with it (failed in clean-clone CI, 2026-12-03, -04)
@pytest.mark.parametrize("transport", ["tcp", "mpi"])
def test_a_rank_killed_mid_run_is_named(mpiexec, transport):
    """A rank that dies without a word (SIGKILL by PID): the error names it, not a peer that saw it go."""
    import signal
    import threading

    seen: list[int] = []

    def on_pids(pids: list[int]) -> None:
        seen.extend(pids)
        if len(seen) == 4:  # mpiexec, then ranks 0..2 in rank order
            threading.Timer(0.5, lambda: os.kill(seen[-1], signal.SIGKILL)).start()

    sessions = MpiSessions(MpiLaunch(mpiexec=mpiexec, transport=transport))
    with pytest.raises(RunFailure, match=r"^rank 2 on host localhost died during the run \("):
        run_bench(BenchRequest(min_bytes=1 << 16, max_bytes=1 << 16, iterations=1_000_000, warmup=0),
                  loopback_placements(3), sessions=sessions, on_pids=on_pids)
    assert our_descendants() == []
