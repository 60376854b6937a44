"""The MPI launcher's pure parts, no MPI needed: clock-offset math, timestamps moved onto rank 0's timeline,
launch maps, hostfiles, mpiexec/trampoline/rank argv, MPICH's environment, port ranges, job chunks, error
lines, and the CLI's launch options."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mpi_support import resolve_launch
from genie.cli.flags import RUN_FLAGS, flag_names
from genie.core.errors import InputError
from genie.core.placement import RankPlacement
from genie.core.protocol import CaseResult, Done
from genie.services.target import loopback_placements, placements_for
from genie.engine.mpi import plan
from genie.engine.mpi.clocksync import (ClockOffset, barrier_lead_ns, estimate_offset, sample_offset,
                                        to_reference)
from genie.engine.mpi.control import decode_job, encode_job
from genie.engine.mpi.netif import interface_of, local_ipv4_addresses
from genie.engine.mpi.rank import choose_address, failure_message
from genie.engine.mpi.trampoline import exec_argv, launcher_rank
from genie.inventory import inventory_to_testbed_info, load_inventory

# --- clock offsets ---------------------------------------------------------------------------------------


def _ping_pong(t0: int, offset: int, forward: int, back: int, hold: int = 1_000) -> tuple[int, int, int, int]:
    """Rank 0 sends at t0 (its clock); the peer's clock reads rank 0's + offset; one-way delays as given."""
    t1 = t0 + forward + offset
    t2 = t1 + hold
    t3 = t2 - offset + back
    return t0, t1, t2, t3


def test_symmetric_delays_give_the_exact_offset_and_rtt():
    offset, rtt = sample_offset(_ping_pong(1_000_000, offset=123_456_789, forward=40_000, back=40_000))
    assert offset == 123_456_789
    assert rtt == 80_000


def test_asymmetry_errs_by_half_of_it():
    offset, _ = sample_offset(_ping_pong(0, offset=-5_000_000, forward=70_000, back=30_000))
    assert offset == -5_000_000 + (70_000 - 30_000) // 2


def test_min_rtt_sample_wins_over_queued_ones():
    true = 987_654
    samples = [_ping_pong(0, true, 300_000, 20_000),       # queued on the way out
               _ping_pong(1_000_000, true, 20_000, 21_000),  # quiet: rtt 41 us, error 500 ns
               _ping_pong(2_000_000, true, 20_000, 900_000)]  # queued on the way back
    est = estimate_offset(3, samples)
    assert est.rtt_ns == 41_000 and est.samples == 3
    assert abs(est.offset_ns - true) <= 500 <= est.error_bound_ns
    assert est.applied_ns == est.offset_ns


def test_same_kernel_offsets_are_reported_not_applied():
    est = estimate_offset(1, [_ping_pong(0, 7_000, 10_000, 30_000)], same_clock=True)
    assert est.offset_ns == 7_000 - 10_000 and est.applied_ns == 0 and est.error_bound_ns == 0
    assert est.to_json()["same_clock"] is True


def test_negative_rtt_samples_are_ignored_and_none_usable_is_an_error():
    good = _ping_pong(0, 50, 10_000, 10_000)
    bad = (0, 10, 5_000_000, 5)  # the peer "held" it longer than the round trip: a clock jump
    assert estimate_offset(1, [bad, good]).offset_ns == 50
    with pytest.raises(ValueError, match="no usable clock sample"):
        estimate_offset(1, [bad])


def test_to_reference_moves_bench_and_replay_timestamps():
    bench = CaseResult(case=0, rank=2, iterations=((1000, 1500), (1500, 2100)),
                       steps=((0, 0, 1000, 1200, 64, 64, (1, 3)),))
    moved = to_reference(bench, 400)
    assert moved.iterations == ((600, 1100), (1100, 1700))
    assert moved.steps == ((0, 0, 600, 800, 64, 64, (1, 3)),)
    assert bench.iterations[0] == (1000, 1500)  # the original is untouched
    replay = CaseResult(case=1, rank=2, t0_ns=5000, records=((7, 5000, 5600),))
    assert to_reference(replay, -100) == CaseResult(case=1, rank=2, t0_ns=5100, records=((7, 5100, 5700),))
    assert to_reference(replay, 0) is replay
    assert to_reference(Done(rank=2), 400) == Done(rank=2)  # only case results carry timestamps


def test_barrier_lead_covers_the_broadcast():
    assert barrier_lead_ns(4, [0, 50_000]) == 2_000_000
    assert barrier_lead_ns(64, [10_000_000]) == 3 * 6 * 10_000_000
    assert isinstance(ClockOffset(0, 0, 0, 0, True).applied_ns, int)


# --- launch map, hostfile, argv, env ---------------------------------------------------------------------


def _ns_placements() -> list[RankPlacement]:
    return [RankPlacement(rank=r, host=f"h{r // 2}", netns=f"genie-t-h{r // 2}", address=f"198.18.0.{r // 2 + 1}")
            for r in range(4)]


def test_launch_map_round_trips_and_knows_local_ranks():
    lmap = plan.launch_map(list(reversed(_ns_placements())))
    assert lmap.world == 4 and lmap.namespaced
    assert [lmap.host_of(r).name for r in range(4)] == ["h0", "h0", "h1", "h1"]
    assert [lmap.local_rank(r) for r in range(4)] == [0, 1, 0, 1]
    doc = json.loads(lmap.dumps())
    assert doc["netns"] == ["genie-t-h0", "genie-t-h0", "genie-t-h1", "genie-t-h1"]
    assert plan.LaunchMap.from_json(doc) == lmap


def test_launch_map_of_an_inventory_carries_interface_and_subnet():
    inv = load_inventory("hosts:\n  - {name: a, address: 10.9.0.1, ranks: 2, interface: eth1}\n"
                         "  - {name: b, address: node-b.example.org, subnet: 10.2.0.0/16}\n")
    lmap = plan.launch_map(placements_for(inventory_to_testbed_info(inv), None), inv)
    assert not lmap.namespaced
    assert lmap.hosts[0].interface == "eth1" and lmap.hosts[1].subnet == "10.2.0.0/16"
    assert lmap.addresses == ("10.9.0.1", "10.9.0.1", "node-b.example.org")
    assert plan.mpi_hostfile(lmap).splitlines()[1:] == ["10.9.0.1:2", "node-b.example.org:1"]


def test_hostfile_of_the_first_ranks_only_and_refuses_interleaving():
    inv = load_inventory("hosts: [{name: a, address: 10.9.0.1, ranks: 2}, {name: b, address: 10.9.0.2, ranks: 2}]")
    lmap = plan.launch_map(placements_for(inventory_to_testbed_info(inv), 3), inv)
    assert plan.mpi_hostfile(lmap).splitlines()[1:] == ["10.9.0.1:2", "10.9.0.2:1"]
    mixed = plan.LaunchMap(hosts=lmap.hosts, rank_hosts=(0, 1, 0), addresses=("x", "y", "x"))
    with pytest.raises(ValueError, match="consecutive"):
        plan.mpi_hostfile(mixed)


def test_argv_lists_for_mpiexec_trampoline_and_rank():
    lmap = plan.launch_map(_ns_placements())
    rank = plan.rank_argv("/venv/bin/python", lmap, transport="mpi", port_range=range(40000, 40100))
    assert rank[:3] == ["/venv/bin/python", "-m", "genie.engine.mpi.rank"]
    assert rank[rank.index("--map-json") + 1] == lmap.dumps()
    assert rank[rank.index("--transport") + 1] == "mpi" and rank[rank.index("--port-range") + 1] == "40000-40099"
    tramp = plan.trampoline_argv("/venv/bin/python", "/tmp/x/map.json", rank)
    assert tramp[:6] == ["/venv/bin/python", "-m", "genie.engine.mpi.trampoline", "--map", "/tmp/x/map.json", "--"]
    assert tramp[6:] == rank
    full = plan.mpiexec_argv("/venv/bin/mpiexec", 4, tramp, hostfile_path="/tmp/x/hostfile", extra=["-iface", "eth1"])
    assert full[:7] == ["/venv/bin/mpiexec", "-f", "/tmp/x/hostfile", "-iface", "eth1", "-n", "4"]
    assert full[7:] == tramp


def test_trampoline_picks_the_rank_namespace():
    assert launcher_rank({"PMI_RANK": "3"}) == 3
    assert launcher_rank({"OMPI_COMM_WORLD_RANK": "1"}) == 1
    assert launcher_rank({"PMI_RANK": "x"}) is None and launcher_rank({}) is None
    netns = ["ns0", "ns0", None]
    assert exec_argv(netns, 1, ["python", "-m", "m"]) == ["ip", "netns", "exec", "ns0", "python", "-m", "m"]
    assert exec_argv(netns, 2, ["python"]) == ["python"]
    with pytest.raises(ValueError, match="not in the launch map"):
        exec_argv(netns, 3, ["python"])


def test_trampoline_without_a_launcher_rank_says_so(tmp_path, monkeypatch, capfd):
    from genie.engine.mpi import trampoline

    for name in trampoline.RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "map.json").write_text('{"netns": [null]}')
    assert trampoline.main(["--map", str(tmp_path / "map.json"), "--", "true"]) == 1
    assert "no rank from the MPI launcher" in capfd.readouterr().err


def test_environment_forces_tcp_and_keeps_user_settings():
    env = plan.launch_env({"PATH": "/bin"}, port_range=range(40000, 40100))
    assert env["MPIR_CVAR_NOLOCAL"] == "1" and env["MPIR_CVAR_CH4_NETMOD"] == "ofi" and env["FI_PROVIDER"] == "tcp"
    assert env["MPIR_CVAR_CH3_PORT_RANGE"] == "40000:40099"
    assert (env["FI_TCP_PORT_LOW_RANGE"], env["FI_TCP_PORT_HIGH_RANGE"]) == ("40000", "40099")
    ucx = plan.launch_env({"MPIR_CVAR_CH4_NETMOD": "ucx", "MPIR_CVAR_NOLOCAL": "0"})
    assert ucx["UCX_TLS"] == "tcp,self" and ucx["MPIR_CVAR_NOLOCAL"] == "0" and "FI_PROVIDER" not in ucx
    lab = {"GENIE_LAB_IFACE": "eth1", "HYDRA_HOST_FILE": "/etc/hosts.mpi"}
    assert plan.launch_env(lab, real_hosts=True)["HYDRA_IFACE"] == "eth1"
    assert "HYDRA_IFACE" not in plan.launch_env(lab) and "HYDRA_HOST_FILE" not in plan.launch_env(lab)
    assert plan.launch_env({**lab, "HYDRA_IFACE": "eth2"}, real_hosts=True)["HYDRA_IFACE"] == "eth2"


def test_port_ranges():
    assert plan.parse_port_range("40000-40099") == range(40000, 40100)
    assert plan.parse_port_range(" 40000:40001 ") == range(40000, 40002)
    for bad in ("40000", "x-y", "40099-40000", "80-90", "40000-40000", "40000-70000"):
        with pytest.raises(InputError, match="^--port-range: "):
            plan.parse_port_range(bad)
    assert plan.port_candidates(range(40000, 40006), 0) == [40001, 40002, 40003, 40004, 40005]
    assert plan.port_candidates(range(40000, 40006), 2) == [40003, 40004, 40005, 40001, 40002]
    assert plan.port_candidates(range(40000, 40003), 7) == [40001, 40002]


def test_job_chunks_round_trip():
    big = {"jobs": {str(r): {"kind": "replay", "nodes": list(range(r * 50_000))} for r in range(3)}}
    chunks = encode_job(big)
    assert len(chunks) > 1 and all(len(c) <= 32 * 1024 and "\n" not in c for c in chunks)
    assert decode_job(chunks) == big


# --- the rank's start-up -------------------------------------------------------------------------------


def test_rank_chooses_its_address_and_interface():
    local = [("lo", "127.0.0.1/8"), ("eth0", "10.0.2.15/24"), ("eth1", "198.18.0.11/24")]
    inv = load_inventory("hosts: [{name: a, address: 10.0.2.15, interface: eth1}, {name: b, address: 198.18.0.11}]")
    lmap = plan.launch_map(placements_for(inventory_to_testbed_info(inv), None), inv)
    assert choose_address(lmap, 0, local) == ("198.18.0.11", "eth1")
    assert choose_address(lmap, 1, local) == ("198.18.0.11", "eth1")
    gone = [("lo", "127.0.0.1/8")]
    with pytest.raises(Exception, match=r"address 198.18.0.11 is not on this machine \(it has: lo 127.0.0.1/8\)"):
        choose_address(lmap, 1, gone)


def test_this_machine_has_loopback():
    local = local_ipv4_addresses()
    assert interface_of("127.0.0.1", local) == "lo"


def test_listeners_walk_past_ports_in_use():
    from genie.core.errors import EnvironmentProblem
    from genie.engine.mpi.netif import listen_in_range

    taken = listen_in_range("127.0.0.1", None)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(EnvironmentProblem, match=rf"^no free port \(1 tried, from {port}\)$"):
            listen_in_range("127.0.0.1", [port])
        free = listen_in_range("127.0.0.1", [port, 0])
        assert free.getsockname()[1] not in (0, port)
        free.close()
    finally:
        taken.close()


def test_failure_lines_name_rank_and_host_once():
    from genie.core.errors import RunFailure

    assert failure_message(3, "h3", RunFailure("rank 3: op timed out after 1 s receiving from rank 2")) \
        == "rank 3 on host h3: op timed out after 1 s receiving from rank 2"
    assert failure_message(1, "a", RunFailure("host a: no IPv4 address\non eth9")) == \
        "rank 1 on host a: no IPv4 address on eth9"
    assert failure_message(None, None, KeyError("x")) == "a rank: KeyError: 'x'"


# --- CLI launch options ----------------------------------------------------------------------------------


def test_local_launch_is_the_default_and_mpi_options_need_the_mpi_launcher(tmp_path):
    choice = resolve_launch("local", "tcp", None, None)
    assert choice.placements is None and choice.sessions is None
    cases = [(("mpi",), "--transport"), ((None, tmp_path / "i.yaml"), "--inventory"),
             ((None, None, tmp_path / "mpiexec"), "--mpiexec")]
    for args, option in cases:
        transport = args[0] or "tcp"
        inventory = args[1] if len(args) > 1 else None
        mpiexec = args[2] if len(args) > 2 else None
        with pytest.raises(InputError, match=f"^{option}: [a-zA-Z -]+ needs? --launcher mpi or slurm$"):
            resolve_launch("local", transport, inventory, mpiexec)
    with pytest.raises(InputError, match="^--port-range: a port range needs --launcher mpi or slurm$"):
        resolve_launch("local", "tcp", None, None, port_range="40000-40099")
    with pytest.raises(InputError, match="^--launcher: expected one of local, mpi, slurm, got 'pbs'"):
        resolve_launch("pbs", "tcp", None, None)
    with pytest.raises(InputError, match="^--transport: expected one of tcp, mpi, got 'rdma'"):
        resolve_launch("local", "rdma", None, None)


def test_mpi_launch_option_errors(tmp_path):
    with pytest.raises(InputError, match="^--inventory: give either --inventory or --topology"):
        resolve_launch("mpi", "tcp", tmp_path / "i.yaml", None, other_target="--topology")
    with pytest.raises(InputError, match="^GENIE_PORT_RANGE: expected a port range"):
        resolve_launch("mpi", "tcp", None, None, environ={"GENIE_PORT_RANGE": "lots"})
    missing = tmp_path / "no-mpiexec"
    with pytest.raises(InputError, match=r"^--mpiexec: no such file .*no-mpiexec"):
        resolve_launch("mpi", "tcp", None, missing, environ={})
    fake = tmp_path / "mpirun"
    fake.write_text(f"#!{sys.executable}\nprint('mpirun (Open MPI) 5.0.5')\n")
    fake.chmod(0o755)
    with pytest.raises(InputError, match=r"^--mpiexec: .* is not MPICH's mpiexec \(hydra\) but says "
                                         r"'mpirun \(Open MPI\) 5.0.5'"):
        resolve_launch("mpi", "tcp", None, fake, environ={})


def test_no_mpiexec_anywhere_is_a_one_line_error(tmp_path, monkeypatch):
    from genie.engine.mpi.discover import find_mpiexec

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InputError, match=r"^--mpiexec: no mpiexec beside .* or on PATH; install MPICH"), \
            flag_names(RUN_FLAGS):
        find_mpiexec(python=str(tmp_path / "python"))


def test_inventory_ranks_are_checked_before_anything_starts(tmp_path):
    pytest.importorskip("mpi4py")
    from genie.engine.mpi.discover import find_mpiexec

    try:
        find_mpiexec()
    except InputError:
        pytest.skip("no MPICH mpiexec: pip install mpi4py mpich")
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts: [{name: a, address: 127.0.0.1, ranks: 2}]\n")
    with pytest.raises(InputError, match="^--ranks: testbed inventory has 2 ranks, asked for 3"):
        resolve_launch("mpi", "tcp", inv, None, ranks=3)
    placements, sessions, _ = resolve_launch("mpi", "mpi", inv, None, port_range="40000-40009")
    assert [p.address for p in placements] == ["127.0.0.1", "127.0.0.1"]
    assert sessions.launch.transport == "mpi" and sessions.launch.port_range == range(40000, 40010)
    assert loopback_placements(2) != placements  # host names come from the inventory
    assert Path(sessions.launch.mpiexec).name.startswith("mpiexec")


def test_a_death_after_a_rank_reported_its_failure_is_not_the_cause():
    """A rank that reports an error waits before MPI_Abort, so the ranks the abort kills die well after the
    report; a rank that dies before any report (killed) is named instead of the peer that saw it go."""
    from genie.engine.mpi import MpiLaunch
    from genie.engine.mpi.rank import boot_id
    from genie.engine.mpi.session import MpiSession, _Run
    from genie.engine.session import SessionOptions

    session = MpiSession(loopback_placements(2), SessionOptions(), MpiLaunch(mpiexec=Path("mpiexec")))
    session.ranks = [{"rank": 0, "host": "localhost", "pid": 10}, {"rank": 1, "host": "localhost", "pid": 11}]

    def state(error_ns: int, dead_ns: int, peer: int | None = None) -> _Run:
        run = _Run()
        line = plan.ERROR_MARKER + json.dumps({"rank": 1, "message": "rank 1: timed out", "t_ns": error_ns,
                                                "boot_id": boot_id(), "peer": peer})
        session._on_stderr(line, run)
        run.first_dead, run.first_dead_ns = 0, dead_ns
        return run

    assert session._silent_death(state(error_ns=1_000_000_000, dead_ns=1_260_000_000)) is None
    assert session._silent_death(state(error_ns=1_000_000_000, dead_ns=1_001_000_000)).startswith(
        "rank 0 on host localhost died during the run (")
    # rank 1 saw rank 0's connection close: that is rank 0's death, however late the loop noticed it
    assert session._silent_death(state(error_ns=1_000_000_000, dead_ns=1_900_000_000, peer=0)).startswith(
        "rank 0 on host localhost died during the run (")
    assert session._silent_death(state(error_ns=1_000_000_000, dead_ns=1_900_000_000, peer=1)) is None


def test_the_rank_a_closed_connection_blames_is_named_whichever_exit_was_noticed_first():
    """On a loaded machine the loop may get several exits at once, the killed rank's after the reporter's own
    (which followed its abort): the first report's blamed rank, seen exiting and silent, is still the one named;
    a blamed rank that reported its own error, or was not seen exiting, is not."""
    from genie.engine.mpi import MpiLaunch
    from genie.engine.mpi.rank import boot_id
    from genie.engine.mpi.session import MpiSession, _Run
    from genie.engine.session import SessionOptions

    session = MpiSession(loopback_placements(3), SessionOptions(), MpiLaunch(mpiexec=Path("mpiexec")))
    session.ranks = [{"rank": r, "host": "localhost", "pid": 10 + r} for r in range(3)]

    def state(dead: list[int], own_error: bool = False) -> _Run:
        run = _Run()
        for rank, peer in ((1, 2), *(((2, None),) if own_error else ())):
            session._on_stderr(plan.ERROR_MARKER + json.dumps({
                "rank": rank, "message": f"rank {rank}: rank {peer} closed the connection", "t_ns": 1_000_000_000,
                "boot_id": boot_id(), "peer": peer}), run)
        run.dead = set(dead)
        run.first_dead, run.first_dead_ns = dead[0], 1_400_000_000  # noticed after rank 1's abort
        return run

    assert session._silent_death(state([1, 2, 0])).startswith("rank 2 on host localhost died during the run (")
    assert session._silent_death(state([1, 0])) is None  # rank 2 not seen exiting: the report stands
    assert session._silent_death(state([1, 2, 0], own_error=True)) is None  # rank 2 said what went wrong


def test_a_closed_connection_names_the_peer_in_the_ranks_report(capfd):
    """The report a rank writes when a peer's connection closes carries that peer, which `_silent_death`
    reads; a timeout carries none (the silent rank may be alive)."""
    import socket

    from genie.engine.mpi.rank import report_failure
    from genie.engine.transport import PeerFailure, PeerLink, SocketTransport, Transfer

    a, b = socket.socketpair()
    transport = SocketTransport(0, {1: PeerLink.duplex(a)})
    b.close()
    with pytest.raises(PeerFailure) as failure:
        transport.exchange((), [Transfer(peer=1, size_bytes=10)], timeout_s=2.0)
    assert failure.value.peer == 1
    report_failure(str(failure.value), 0, failure.value.peer)
    doc = json.loads(capfd.readouterr().err.split(plan.ERROR_MARKER, 1)[1])
    assert doc["peer"] == 1 and doc["rank"] == 0
    assert PeerFailure("rank 0: op timed out").peer is None
