"""--launcher slurm for real (root, Slurm installed): a private single-node Slurm cluster (tests/slurm_support.py),
a live 4-host star, and genie run by `salloc` exactly as a user would — `salloc -n 4 genie bench|replay
--testbed T --launcher slurm` — so srun starts the ranks, they bootstrap MPI through Slurm's PMI (pmi2) and
the trampoline puts each in its host's namespace. The bytes must cross the emulated links; a rank count
the allocation cannot hold is one line and exit code 2 before anything starts; nothing is left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from genie.testbed.layout import NETNS_DIR
from genie.testbed.netlink import link_counters
from genie.testbed.state import STATE_DIR_ENV
from mpi_support import mpiexec_or_skip, our_descendants
from netns_checks import clean_star_testbed
from slurm_support import allocate, release, start_cluster

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_ADMIN, slurmd) for namespaces")]

RUN = f"sl{os.getpid()}"
TRACE = b"""format: genie-trace
version: 1
name: dp4
ranks: 4
groups: {pair0: [0, 1], pair1: [2, 3], all: [0, 1, 2, 3]}
program:
  - {id: 0, name: fwd, type: compute, duration: 200us}
  - {id: 1, name: pair_ar, type: all_reduce, size: 256KiB, group: "pair{rank//2}", deps: [0]}
  - {id: 2, name: grad_ar, type: all_reduce, size: 1MiB, group: all, deps: [1]}
"""


def _ours() -> list[str]:
    """The testbed's namespaces (the cluster's own, genie-<run>-slurm, outlives the testbed)."""
    names = os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else []
    return [n for n in names if n.startswith(f"genie-{RUN}") and n != f"genie-{RUN}-slurm"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    mpiexec_or_skip()  # mpi4py and the MPICH wheel (the ranks' MPI)
    netns = f"genie-{RUN}-slurm"
    yield from start_cluster(tmp_path_factory.mktemp("slurm"), netns)
    assert netns not in (os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else [])


@pytest.fixture(scope="module")
def testbed(tmp_path_factory, cluster):
    with clean_star_testbed(tmp_path_factory.mktemp("state"), f"{RUN}-s4", left=_ours) as info:
        yield info


def _host_tx(info) -> dict[str, int]:
    return {c.end.node: c.tx_bytes for c in link_counters(info) if c.end.node.startswith("h")}


def _left(cluster) -> list[tuple[int, int]]:
    """Processes of ours still running, besides the cluster's daemons (and whatever runs under them)."""
    from genie.engine.mpi.processes import descendants

    daemons = {pid for pid in cluster.daemon_pids}
    for pid in cluster.daemon_pids:
        daemons |= {p for p, _ in descendants(pid)}
    return [p for p in our_descendants() if p[0] not in daemons]


def _genie_in_allocation(cluster, ntasks: int, args: list[str]) -> subprocess.CompletedProcess:
    env = {**cluster.env, STATE_DIR_ENV: os.environ[STATE_DIR_ENV]}
    argv = cluster.argv(cluster.tools["salloc"], f"--ntasks={ntasks}", "--job-name=genie-test", "--immediate=20",
                        sys.executable, "-m", "genie.cli.main", *args)
    started = time.monotonic()
    try:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    finally:
        print(f"salloc -n {ntasks} genie {args[0]}: {time.monotonic() - started:.1f} s")


def test_bench_and_replay_inside_an_allocation(testbed, cluster, tmp_path):
    info = testbed
    before = _host_tx(info)
    out = _genie_in_allocation(cluster, 4, [
        "bench", "--testbed", info.name, "--launcher", "slurm", "-c", "all_reduce", "-b", "1M", "-e", "1M",
        "-n", "3", "-w", "1", "--verify", "--json", "--out", str(tmp_path / "bench")])
    assert out.returncode == 0, out.stderr[-2000:]
    sent = {h: b - before[h] for h, b in _host_tx(info).items()}
    assert json.loads((tmp_path / "bench" / "manifest.json").read_text())["status"] == "complete"
    sweep = json.loads(out.stdout)
    launch = json.loads((tmp_path / "bench" / "launch.json").read_text())
    assert launch["launcher"] == "slurm" and [o["rank"] for o in launch["clock_offsets"]] == [0, 1, 2, 3]
    # ring all-reduce of 1 MiB on 4 ranks: each rank sends 2 x 3/4 MiB per iteration, 4 iterations
    assert all(v >= 4 * 1.5 * (1 << 20) for v in sent.values()), sent
    assert sweep["status"] == "complete" and sweep["run_dir"] == str(tmp_path / "bench")

    before = _host_tx(info)
    trace = tmp_path / "dp4.yaml"
    trace.write_bytes(TRACE)
    out = _genie_in_allocation(cluster, 4, [
        "replay", str(trace), "--testbed", info.name, "--launcher", "slurm", "--transport", "mpi", "-n", "1",
        "--json", "--out", str(tmp_path / "replay")])
    assert out.returncode == 0, out.stderr[-2000:]
    sent = {h: b - before[h] for h, b in _host_tx(info).items()}
    ops = (tmp_path / "replay" / "ops.csv").read_text().splitlines()[1:]
    assert len(ops) == 4 * 3  # ranks x nodes, one iteration
    # all-reduce 1 MiB over 4 (ring): 1.5 MiB sent per rank, pairs: 256 KiB; over MPI
    assert all(v >= 1.5 * (1 << 20) + (1 << 18) for v in sent.values()), sent
    assert json.loads((tmp_path / "replay" / "launch.json").read_text())["transport"] == "mpi"
    assert _left(cluster) == []


def test_more_ranks_than_the_allocation_holds_is_one_line(testbed, cluster, tmp_path):
    out = _genie_in_allocation(cluster, 2, ["bench", "--testbed", testbed.name, "--launcher", "slurm",
                                            "-b", "1K", "-e", "1K", "--out", str(tmp_path / "run")])
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("genie:")]
    assert out.returncode == 2, out.stderr
    assert len(lines) == 1 and lines[0].startswith("genie: error: --launcher: the run needs 4 ranks but Slurm "
                                                   "allocation "), out.stderr
    assert lines[0].endswith(f"({cluster.node}) has 2 tasks (SLURM_NTASKS); ask salloc for more tasks or run "
                             "fewer ranks")
    assert not (tmp_path / "run").exists()  # checked before the run directory
    assert _left(cluster) == []


def test_an_allocation_without_genie_in_it(cluster):
    """The allocation helper itself: salloc --no-shell grants and scancel releases (the fixture can fail)."""
    job = allocate(cluster, 1)
    release(cluster, job)
    assert job.isdigit()
