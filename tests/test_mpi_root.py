"""MPI launch on a live 4-host star (root only): mpiexec in the root namespace starts every rank in its host's
namespace (the trampoline), and the sweep's bytes really cross the emulated links — the same op counts and
per-link bytes as genie's own launch, for both transports; a trace replayed over MPI point-to-point gives the
same ops and bytes as over genie's TCP engine. Then the real-host path, emulated: an inventory
of the testbed's addresses, mpiexec inside h0's namespace, hydra reaching the other "hosts" through a fake
ssh that enters their namespaces. Nothing is left afterwards: namespaces, processes, root-namespace state."""

from __future__ import annotations

import json
import os

import pytest

from genie.collectives.registry import build_schedule
from genie.core.collective import Collective
from genie.core.errors import RunFailure
from genie.services.bench import BenchRequest, run_bench
from genie.services.target import placements_for
from genie.engine.mpi import MpiLaunch, MpiSessions
from genie.services.replay import ReplayRequest, run_replay
from genie.measure.replay import iteration_time_ns, rank_summaries
from genie.report.replay import ops_csv
from genie.workloads.native import read_native
from genie.inventory import inventory_to_testbed_info, load_inventory
from genie.testbed.layout import NETNS_DIR
from genie.testbed.netlink import link_counters
from mpi_support import fake_ssh, mpiexec_or_skip, our_descendants
from netns_checks import clean_star_testbed

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_ADMIN) to build namespaces")]

RUN = f"m{os.getpid()}"
REQUEST = BenchRequest(collectives=(Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.ALL_TO_ALL),
                       min_bytes=1024, max_bytes=1 << 20, factor=32, iterations=3, warmup=1, verify=True)


def _ours() -> list[str]:
    names = os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else []
    return [n for n in names if n.startswith(f"genie-{RUN}")]


@pytest.fixture(scope="module")
def mpiexec():
    return mpiexec_or_skip()


@pytest.fixture(scope="module")
def testbed(tmp_path_factory, mpiexec):
    pids: list[int] = []
    with clean_star_testbed(tmp_path_factory.mktemp("state"), f"{RUN}-s4", left=_ours) as info:
        yield info, pids
    for pid in pids:  # mpiexec and every rank are gone
        assert not os.path.exists(f"/proc/{pid}")


def _host_tx(info) -> dict[str, int]:
    return {c.end.node: c.tx_bytes for c in link_counters(info) if c.end.node.startswith("h")}


def _payload(outcome) -> dict[str, int]:
    expected = {p.host: 0 for p in outcome.placements}
    for case in outcome.job.cases:
        schedule = build_schedule(case.op)
        for p in outcome.placements:
            expected[p.host] += schedule.for_rank(p.rank).sent_bytes * (case.warmup + case.iterations)
    return expected


def _sweep(info, pids, sessions=None):
    before = _host_tx(info)
    outcome = run_bench(REQUEST, placements_for(info, None), sessions=sessions, on_pids=pids.extend)
    after = _host_tx(info)
    return outcome, {h: after[h] - before[h] for h in before}


def test_mpi_launch_matches_the_native_launch_on_the_links(testbed, mpiexec):
    info, pids = testbed
    native, native_bytes = _sweep(info, pids)
    payload = _payload(native)
    for transport in ("tcp", "mpi"):
        sessions = MpiSessions(MpiLaunch(mpiexec=mpiexec, transport=transport))
        outcome, sent = _sweep(info, pids, sessions)
        assert outcome.job.cases == native.job.cases  # the same ops, sizes, algorithms and iteration counts
        assert [(s.collective, s.size_bytes, s.iterations) for s in outcome.stats] == \
               [(s.collective, s.size_bytes, s.iterations) for s in native.stats]
        ranks = sessions.sessions[-1].ranks
        assert [(r["host"], r["address"], r["iface"]) for r in ranks] == \
               [(p.host, p.address, "eth0") for p in placements_for(info, None)]
        for host, want in payload.items():
            # every byte of the schedule crossed the host's link; MPI's control traffic (clock ping-pongs,
            # barriers, gathered records) and TCP/IP headers on top, within a few percent of the native run
            assert sent[host] >= want, f"{transport}: {host} sent {sent[host]} < payload {want}"
            assert abs(sent[host] - native_bytes[host]) <= 0.05 * native_bytes[host] + 300_000, \
                f"{transport}: {host} sent {sent[host]} bytes, native launch {native_bytes[host]}"


def _emulated_hosts(info, tmp_path, mpiexec, monkeypatch, inventory_text: str, **launch):
    """An inventory of the testbed's hosts run as real hosts: mpiexec in h0's namespace, fake ssh to the others."""
    inv = load_inventory(inventory_text)
    ssh_map = {ep.address: ep.netns for ep in info.hosts}
    monkeypatch.setenv("GENIE_TEST_SSH_MAP", json.dumps(ssh_map))
    h0 = info.endpoint("h0")
    sessions = MpiSessions(MpiLaunch(
        mpiexec=mpiexec, inventory=inv, startup_timeout_s=30,
        extra_args=("-launcher", "ssh", "-launcher-exec", str(fake_ssh(tmp_path)), "-iface", "eth0"),
        command_prefix=("ip", "netns", "exec", h0.netns), **launch))
    return inv, sessions


def _inventory(info, overrides: dict[str, str] | None = None) -> str:
    overrides = overrides or {}
    rows = [f"  - {{name: {ep.host}, address: {ep.address}{overrides.get(ep.host, '')}}}" for ep in info.hosts]
    return "hosts:\n" + "\n".join(rows) + "\n"


@pytest.mark.parametrize("transport", ["tcp", "mpi"])
def test_real_host_path_emulated_in_namespaces(testbed, tmp_path, mpiexec, monkeypatch, transport):
    info, pids = testbed
    text = _inventory(info, {"h2": ", interface: eth0", "h3": ", subnet: 198.18.0.0/15"})
    inv, sessions = _emulated_hosts(info, tmp_path, mpiexec, monkeypatch, text, transport=transport,
                                    port_range=range(40000, 40010))
    placements = placements_for(inventory_to_testbed_info(inv), None)
    before = _host_tx(info)
    outcome = run_bench(REQUEST, placements, sessions=sessions, on_pids=pids.extend)
    after = _host_tx(info)
    assert len(outcome.stats) == 9 and all(s.busbw_GBps > 0 for s in outcome.stats)
    ranks = sessions.sessions[-1].ranks
    assert [(r["host"], r["address"], r["iface"]) for r in ranks] == \
           [(ep.host, ep.address, "eth0") for ep in info.hosts]
    if transport == "tcp":
        assert all(r["port"] == 40001 for r in ranks)  # LOW + 1 + local rank, on every host
    for host, want in _payload(outcome).items():
        assert after[host] - before[host] >= want
    assert our_descendants() == []


def test_unreachable_host_is_named_and_nothing_starts(testbed, tmp_path, mpiexec, monkeypatch):
    info, pids = testbed
    text = _inventory(info).replace(info.endpoint("h2").address, "198.18.99.99")
    inv, sessions = _emulated_hosts(info, tmp_path, mpiexec, monkeypatch, text)
    with pytest.raises(RunFailure, match=r"^mpiexec exited with code \d+ before the ranks started "
                                         r"\(host h2 \(198.18.99.99\)\): ssh: connect to host 198.18.99.99"):
        run_bench(REQUEST, placements_for(inventory_to_testbed_info(inv), None), sessions=sessions,
                  on_pids=pids.extend)
    assert our_descendants() == []


def test_interface_missing_on_one_host_names_its_rank(testbed, tmp_path, mpiexec, monkeypatch):
    info, pids = testbed
    text = _inventory(info, {"h3": ", interface: eth7"})
    inv, sessions = _emulated_hosts(info, tmp_path, mpiexec, monkeypatch, text, transport="mpi")
    with pytest.raises(RunFailure, match=r"^rank 3 on host h3: no IPv4 address on interface eth7 for genie "
                                         r"traffic \(this machine has: lo 127.0.0.1/8, eth0 198.18.0.4/\d+\)"):
        run_bench(REQUEST, placements_for(inventory_to_testbed_info(inv), None), sessions=sessions,
                  on_pids=pids.extend)
    assert our_descendants() == []


# tensor parallel in pairs, data parallel across them, a p2p ring: groups whose collectives overlap in time
REPLAY_TRACE = b"""format: genie-trace
version: 1
name: tp2-dp2-small
ranks: 4
groups: {tp0: [0, 1], tp1: [2, 3], dp0: [0, 2], dp1: [1, 3]}
program:
  - {id: 0, name: fwd, type: compute, duration: 200us}
  - {id: 1, name: fwd_ar, type: all_reduce, size: 512KiB, group: "tp{rank//2}", deps: [0]}
  - {id: 2, name: act_send, type: send, size: 256KiB, peer: "+1", tag: 1, deps: [1]}
  - {id: 3, name: act_recv, type: recv, size: 256KiB, peer: "-1", tag: 1, deps: [1]}
  - {id: 4, name: bwd, type: compute, duration: 400us, deps: [2, 3]}
  - {id: 5, name: grad_rs, type: reduce_scatter, size: 2MiB, group: "dp{rank%2}", algorithm: ring, deps: [4]}
  - {id: 6, name: tp_ag, type: all_gather, size: 128KiB, group: "tp{rank//2}", deps: [4]}
  - {id: 7, name: grad_ag, type: all_gather, size: 1MiB, group: "dp{rank%2}", deps: [5]}
  - {id: 8, name: optimizer, type: compute, duration: 100us, deps: [6, 7]}
"""


def _ops(outcome) -> list[tuple]:
    """(iteration, rank, node, name, type, bytes, group, algorithm) of every op: everything but the times."""
    rows = [tuple(line.split(",")[:8]) for line in ops_csv(outcome).splitlines()[1:]]
    return sorted(rows)


def _replay_payload(outcome, runs: int) -> dict[str, int]:
    from genie.engine.walker import node_steps

    hosts = {p.rank: p.host for p in outcome.placements}
    sent = {h: 0 for h in hosts.values()}
    for program in outcome.programs:
        for node in program.nodes:
            if node.op is not None or node.peer is not None:
                steps = node_steps(node, program.rank)
                sent[hosts[program.rank]] += runs * sum(s.size_bytes for st in steps for s in st.sends)
    return sent


def test_replay_over_mpi_moves_the_same_ops_and_bytes_as_tcp(testbed, mpiexec):
    info, pids = testbed
    trace = read_native(REPLAY_TRACE)
    request = ReplayRequest(iterations=3, warmup=1, timeout_s=30)
    results = {}
    for transport in ("tcp", "mpi"):
        sessions = MpiSessions(MpiLaunch(mpiexec=mpiexec, transport=transport))
        before = _host_tx(info)
        outcome = run_replay(trace, placements_for(info, None), request, sessions=sessions, on_pids=pids.extend)
        after = _host_tx(info)
        sent = {h: after[h] - before[h] for h in before}
        ports = [r["port"] for r in sessions.sessions[-1].ranks]
        assert all(p is None for p in ports) if transport == "mpi" else all(ports)
        payload = _replay_payload(outcome, request.iterations + request.warmup)
        for host, want in payload.items():
            assert want > 0 and sent[host] >= want, f"{transport}: {host} sent {sent[host]} < payload {want}"
        times = [iteration_time_ns(rank_summaries(outcome.programs, it)) for it in outcome.iterations]
        results[transport] = (_ops(outcome), sent, sorted(times)[len(times) // 2])
    tcp_ops, tcp_sent, tcp_ns = results["tcp"]
    mpi_ops, mpi_sent, mpi_ns = results["mpi"]
    assert len(tcp_ops) == 3 * 4 * 9 and mpi_ops == tcp_ops  # same ops, per-op bytes, groups, algorithms
    for host in tcp_sent:
        # MPI adds its headers and rendezvous messages; genie's control traffic differs a little
        assert abs(mpi_sent[host] - tcp_sent[host]) <= 0.05 * tcp_sent[host] + 300_000, (host, mpi_sent, tcp_sent)
    print(f"replay iteration median: tcp {tcp_ns / 1e6:.2f} ms, mpi {mpi_ns / 1e6:.2f} ms")
    assert our_descendants() == []
