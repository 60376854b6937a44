"""Live testbeds (root only): connectivity, shaping on both ends, ECMP, teardown, signals, leftovers.

Every testbed here is named ``t<pid>-...`` and recorded in a temporary state directory; whatever a test leaves
behind, the fixtures tear down (only names of this run). The root namespace must look the same afterwards.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_support import run_genie
from genie.core.errors import GenieError
from genie.core import testbed as core_testbed
from genie.core.topology import LinkShape
from genie.testbed import service
from genie.testbed.backend import FakeBackend, apply_plan
from genie.testbed.kernel_model import KernelModel
from genie.testbed.observed import NamespaceStatus
from genie.testbed.state import STATE_DIR_ENV, load_record, record_path
from genie.topology import load_topology_file, ring, star
from netns_checks import namespace_names, namespaces_of_run, run_fixtures

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_ADMIN) to build namespaces")]

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = ROOT / "topologies"
RUN = f"t{os.getpid()}"
PORT = 47001

MESH = r"""
import json, socket, sys, time
cfg = json.loads(sys.argv[1])
me, peers, port = cfg["me"], cfg["peers"], cfg["port"]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((me, port)); srv.listen(64); srv.settimeout(20)
deadline = time.monotonic() + 20
sources = []
for peer in peers:
    while True:
        try:
            c = socket.create_connection((peer, port), timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    c.sendall(me.encode()); sources.append(c.getsockname()[0]); c.close()
got = {}
for _ in peers:
    conn, (addr, _) = srv.accept()
    conn.settimeout(5)
    data = b""
    while chunk := conn.recv(64):
        data += chunk
    got[data.decode()] = addr
    conn.close()
print(json.dumps({"sources": sources, "got": got}))
"""


def _ours() -> list[str]:
    return namespaces_of_run(RUN)


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, **kwargs)  # type: ignore


root_namespace_untouched, state_dir = run_fixtures(RUN)


def _env(state_dir: Path) -> dict[str, str]:
    return {**os.environ, STATE_DIR_ENV: str(state_dir)}


def _tcp_mesh(info: core_testbed.TestbedInfo) -> None:
    """Every host connects to every other over TCP; sources must be the hosts' rank addresses."""
    procs = {}
    for host in info.hosts:
        peers = [h.address for h in info.hosts if h.host != host.host]
        cfg = json.dumps({"me": host.address, "peers": peers, "port": PORT})
        procs[host.address] = subprocess.Popen(
            ["ip", "netns", "exec", host.netns, sys.executable, "-c", MESH, cfg],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for address, proc in procs.items():
        out, err = proc.communicate(timeout=40)
        assert proc.returncode == 0, err
        result = json.loads(out)
        others = {a for a in procs if a != address}
        assert set(result["sources"]) == {address}
        assert result["got"] == {a: a for a in others}


def _tc_json(netns: str, *argv: str) -> list[dict[str, object]]:
    return json.loads(_run(["ip", "netns", "exec", netns, "tc", "-j", *argv]).stdout)


def _up(topology_file: str | None = None, *, suffix: str, topology: object = None) -> core_testbed.TestbedInfo:
    topo = load_topology_file(TOPOLOGIES / topology_file) if topology_file else topology
    info = service.up(topo, name=f"{RUN}-{suffix}",  # type: ignore[arg-type]
                      source=TOPOLOGIES / topology_file if topology_file else None)
    assert isinstance(info, core_testbed.TestbedInfo)
    return info


def test_star_4_full_mesh_htb_on_both_ends_counters_and_down(state_dir: Path) -> None:
    idle_restart = Path("/proc/sys/net/ipv4/tcp_slow_start_after_idle")  # per namespace
    root_value = idle_restart.read_text()
    info = _up("star-4.yaml", suffix="star")
    assert set(_ours()) == {f"genie-{RUN}-star-{n}" for n in ("h0", "h1", "h2", "h3", "s0")}
    _tcp_mesh(info)
    assert [_run(["ip", "netns", "exec", f"genie-{RUN}-star-{n}", "cat", str(idle_restart)]).stdout.strip()
            for n in ("h0", "h3", "s0")] == ["0", "0", "1"]  # hosts keep their cwnd across idle; a switch: default
    assert idle_restart.read_text() == root_value  # never the root namespace's
    bridged_iptables = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")  # only with br_netfilter loaded
    if bridged_iptables.exists():
        root_bridged = bridged_iptables.read_text()
        assert [_run(["ip", "netns", "exec", f"genie-{RUN}-star-{n}", "cat", str(bridged_iptables)]).stdout.strip()
                for n in ("h0", "s0")] == ["1", "0"]  # the bridge's namespace only: bridged frames skip iptables
        assert bridged_iptables.read_text() == root_bridged
    for netns in (f"genie-{RUN}-star-h0", f"genie-{RUN}-star-s0"):  # both ends of link 0
        classes = sorted(_run(["ip", "netns", "exec", netns, "tc", "class", "show", "dev", "eth0"]).stdout.splitlines())
        assert [line.split(" prio")[0] for line in classes] == ["class htb 1:1 root", "class htb 1:2 root"]
        assert " rate 1Gbit ceil 1020Mbit burst " in classes[0] and " rate 1020Mbit ceil 1020Mbit " in classes[1]
        assert " prio 1 " in classes[0] and " prio 0 " in classes[1]  # the ACK lane is served first
        buckets = dict(re.findall(r" (c?burst) (\d+)b", classes[0]))  # the kernel rounds to its clock ticks
        assert abs(int(buckets["burst"]) - 1_000_000) < 20_000 and abs(int(buckets["cburst"]) - 131_072) < 3000
        assert [q["kind"] for q in _tc_json(netns, "qdisc", "show", "dev", "eth0")] == ["htb"]
    from genie.testbed.netlink import link_counters

    counters = link_counters(info)
    assert len(counters) == 8 and all(c.tx_packets > 0 and c.rx_packets > 0 for c in counters)
    h0, s0_port = counters[0], counters[1]
    assert (h0.end.node, s0_port.end.node) == ("h0", "s0")
    assert h0.tx_packets == s0_port.rx_packets  # nothing else talks on a testbed link (IPv6 is off)
    state = service.status(info.name)
    eth0 = next(i for i in state.namespaces[0].interfaces if i.ifname == "eth0")
    assert eth0.addresses == ("198.18.0.1/24",) and eth0.qdiscs[0].rate_bps == 10**9
    report = service.down(info.name)
    assert report.testbeds == (info.name,)
    assert _ours() == [] and not record_path(info.name).exists()


BULK = r"""
import socket, sys
role, address, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
piece = int(sys.argv[4]) if len(sys.argv) > 4 else size  # the sender's messages, each its own segment
if role == "recv":
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((address, 47002)); srv.listen(1); srv.settimeout(20)
    conn, _ = srv.accept(); got = 0
    while chunk := conn.recv(1 << 20):
        got += len(chunk)
    print(got)
else:
    for _ in range(200):
        try:
            c = socket.create_connection((address, 47002), timeout=2); break
        except OSError:
            import time; time.sleep(0.05)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(size // piece):
        c.sendall(bytes(piece))
        if piece < size:
            import time; time.sleep(0.002)
    c.close()
"""


def _class_stats(netns: str) -> dict[str, tuple[int, int]]:
    """HTB class -> (bytes, packets) sent on eth0 (``tc -s class show``: iproute2 has no JSON for classes)."""
    text = _run(["ip", "netns", "exec", netns, "tc", "-s", "class", "show", "dev", "eth0"]).stdout
    return {handle: (int(sent), int(packets))
            for handle, sent, packets in re.findall(r"class htb (\S+) .*?\n Sent (\d+) bytes (\d+) pkt", text)}


def test_the_ack_lane_carries_the_pure_acks_and_only_them(state_dir: Path) -> None:
    """A bulk transfer h0 -> h1 over a shaped link: h1's egress sends its pure ACKs in class 1:2 (none in the
    data class but the handshake and the close), h0's egress sends all data in 1:1 (a payload, however
    small, never takes the lane: it would overtake the flow's queued data)."""
    topology = star(2, shape=LinkShape(rate_bps=200 * 10**6))
    info = _up(topology=topology, suffix="ack")
    h0, h1 = info.hosts
    size = 8 * 2**20
    receiver = subprocess.Popen(["ip", "netns", "exec", h1.netns, sys.executable, "-c", BULK, "recv", h1.address,
                                 str(size)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sender = _run(["ip", "netns", "exec", h0.netns, sys.executable, "-c", BULK, "send", h1.address, str(size)])
    out, err = receiver.communicate(timeout=30)
    assert sender.returncode == 0 and receiver.returncode == 0, sender.stderr + err
    assert int(out) == size
    acks, data = _class_stats(h1.netns), _class_stats(h0.netns)
    ack_bytes, ack_packets = acks["1:2"]
    assert ack_packets > 20 and ack_bytes / ack_packets < 128, acks  # the receiver's ACKs, all small
    assert acks["1:1"][1] <= 8, acks  # only what is not a pure ACK: SYN-ACK, FIN, ARP
    assert data["1:1"][0] > size and data["1:2"][0] < size // 100, data  # the data, at the link's rate
    filters = _run(["ip", "netns", "exec", h1.netns, "tc", "filter", "show", "dev", "eth0"]).stdout
    keys = re.findall(r"match (\S+) at (\d+)", filters)  # as the kernel holds them: one filter per TCP header
    assert keys == [key for words in range(5, 16)  # length, the IPv4 length exactly both headers (no payload)
                    for key in ((f"0500{20 + 4 * words:04x}/0f00ffff", "0"), ("06000000/ff000000", "9"),
                                (f"{words:x}0100000/f03f0000", "32"))] + [("00000000/ff800000", "2")], filters
    assert "link 2:" in filters  # the gate (total length < 128) in front of the table that holds them
    service.down(info.name)
    assert _ours() == []


def test_a_refused_u32_message_raises(state_dir: Path) -> None:
    """The ACK lane's u32 table and filters go in as raw messages (netlink.backend._add_u32) that ask for an ACK:
    a kernel NACK - here table 2: made again, NLM_F_EXCL - raises, nothing is swallowed."""
    import errno

    from genie.testbed.netlink import NetlinkBackend
    from genie.testbed.netlink.backend import ACK_TABLE, _add_u32

    info = _up(topology=star(2, shape=LinkShape(rate_bps=200 * 10**6)), suffix="nack")
    h0 = info.hosts[0]
    with NetlinkBackend() as backend:
        with pytest.raises(Exception) as refused:
            _add_u32(backend._ipr(h0.netns), backend._index(h0.netns, "eth0"), ACK_TABLE, [("TCA_U32_DIVISOR", 1)])
    assert getattr(refused.value, "code", None) == errno.EEXIST, refused.value
    service.down(info.name)
    assert _ours() == []


def test_small_data_segments_pass_the_ack_gate_into_the_data_class(state_dir: Path) -> None:
    """Segments under 128 bytes pass the ACK lane's gate into its filters; those that carry data, however
    little, are no pure ACKs and go to the data class 1:1 (the gate's own class), never to the lane."""
    topology = star(2, shape=LinkShape(rate_bps=200 * 10**6))
    info = _up(topology=topology, suffix="gate")
    h0, h1 = info.hosts
    messages, piece = 200, 16  # 16 + 52 bytes of headers: 68-byte IPv4 packets, inside the gate
    receiver = subprocess.Popen(["ip", "netns", "exec", h1.netns, sys.executable, "-c", BULK, "recv", h1.address,
                                 str(messages * piece)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sender = _run(["ip", "netns", "exec", h0.netns, sys.executable, "-c", BULK, "send", h1.address,
                   str(messages * piece), str(piece)])
    out, err = receiver.communicate(timeout=30)
    assert sender.returncode == 0 and receiver.returncode == 0, sender.stderr + err
    assert int(out) == messages * piece
    data, acks = _class_stats(h0.netns), _class_stats(h1.netns)
    assert data["1:1"][1] >= messages * 9 // 10, data  # NODELAY, 2 ms apart: a segment each (a few may merge)
    assert data["1:1"][0] / data["1:1"][1] < 128, data  # small ones
    assert data["1:2"][1] <= 3, data  # only the sender's own pure ACKs: the handshake's and the close's
    assert acks["1:2"][1] > 0 and acks["1:2"][0] / acks["1:2"][1] < 128, acks  # the receiver's pure ACKs: the lane
    service.down(info.name)
    assert _ours() == []


def test_leaf_spine_full_mesh_with_ecmp_routes(state_dir: Path) -> None:
    info = _up("leaf-spine-2x4.yaml", suffix="ls")
    _tcp_mesh(info)
    routes = json.loads(_run(["ip", "-j", "-n", f"genie-{RUN}-ls-leaf0", "route", "show"]).stdout)
    remote = [r for r in routes if r["dst"] in ("198.18.0.17", "198.18.0.29")]
    assert len(remote) == 2
    assert all(sorted(h["gateway"] for h in r["nexthops"]) == ["198.18.0.34", "198.18.0.38"] for r in remote)
    assert not any(r["dst"] == "default" for r in routes)
    _paths_read_are_the_paths_bytes_took(info)
    service.down(info.name)
    assert _ours() == []


def _paths_read_are_the_paths_bytes_took(info: core_testbed.TestbedInfo) -> None:
    """Eight connections h0 -> h4 send 1..8 MB each; the path read for each (the kernels' ECMP choice for its
    5-tuple) predicts the bytes each leaf0 -> spine link carried."""
    import socket
    import threading

    from genie.core.flowpath import FlowTuple
    from genie.testbed.flow_paths import read_session_paths
    from genie.testbed.netlink import TcpDiag, link_counters, run_in_netns

    h0, h4 = info.endpoint("h0"), info.endpoint("h4")
    listener = run_in_netns(h4.netns, lambda: socket.create_server((h4.address, 0)))
    port = listener.getsockname()[1]
    conns = [run_in_netns(h0.netns, lambda: socket.create_connection((h4.address, port), timeout=20,
                                                                     source_address=(h0.address, 0)))
             for _ in range(8)]
    accepted = [listener.accept()[0] for _ in conns]

    def drain(sock: socket.socket) -> None:
        while sock.recv(1 << 20):
            pass

    drains = [threading.Thread(target=drain, args=(a,)) for a in accepted]
    for t in drains:
        t.start()
    flows = [FlowTuple(0, 1, *c.getsockname(), *c.getpeername()) for c in conns]
    with TcpDiag() as diag:  # sock_diag in each host's namespace: its eight connections, no one else's
        sent, received = diag.established(h0.netns), diag.established(h4.netns)
    assert len(sent) == len(received) == 8
    assert all(c.cwnd_segments >= 1 and c.srtt_us > 0 for c in sent)
    paths = read_session_paths(info, flows, "test")
    assert paths.unresolved == 0 and len(paths.paths) == 8
    spines = [p.nodes[2] for p in paths.paths]
    assert all(p.nodes[:2] == ("h0", "leaf0") and p.nodes[3:] == ("leaf1", "h4") for p in paths.paths)

    def uplinks() -> dict[str, int]:
        return {c.end.peer: c.tx_bytes for c in link_counters(info) if c.end.node == "leaf0" and
                c.end.peer.startswith("spine")}

    before = uplinks()
    for i, conn in enumerate(conns):
        conn.sendall(bytes((i + 1) << 20))
        conn.shutdown(socket.SHUT_WR)
    for t in drains:
        t.join(30)
    moved = {spine: n - before[spine] for spine, n in uplinks().items()}
    for sock in [*conns, *accepted, listener]:
        sock.close()
    for spine in ("spine0", "spine1"):
        predicted = sum((i + 1) << 20 for i, s in enumerate(spines) if s == spine)
        # veth counters count GSO super-packets: ~0.1% of headers; a wrong path is off by >= 1 MB
        assert abs(moved[spine] - predicted) < 0.01 * predicted + 200_000, (spine, moved, spines)


def _inspected(status: NamespaceStatus) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """A namespace's interfaces (with addresses and qdiscs) and routes, in a canonical order."""
    interfaces = sorted((i.ifname, i.kind, i.up, i.mtu_bytes, tuple(sorted(i.addresses)), i.master,
                         tuple((q.kind, q.handle, q.parent, q.rate_bps, q.detail) for q in i.qdiscs))
                        for i in status.interfaces)
    return interfaces, sorted((r.destination, tuple(sorted(r.nexthops))) for r in status.routes)


@pytest.mark.parametrize("suffix, topology", [
    ("mstar", load_topology_file(TOPOLOGIES / "star-4.yaml")),
    ("mls", load_topology_file(TOPOLOGIES / "leaf-spine-2x4.yaml")),
    ("mring", ring(3, shape=LinkShape(rate_bps=10**8, queue_packets=50))),
])
def test_the_kernel_model_of_the_fakes_matches_the_kernel(state_dir: Path, suffix: str, topology: object) -> None:
    """What `FakeBackend`'s KernelModel makes of a plan is what the kernel makes of it, as inspected."""
    info = _up(topology=topology, suffix=suffix)
    model = KernelModel()
    apply_plan(FakeBackend(kernel=model), load_record(info.name).steps)
    assert sorted(model.namespaces) == sorted(_ours())
    live = {ns.netns: ns for ns in service.status(info.name).namespaces}
    for netns in model.namespaces:
        assert _inspected(model.inspect_namespace(netns)) == _inspected(live[netns])
    service.down(info.name)
    assert _ours() == []


def test_ring_4_forwards_through_hosts(state_dir: Path) -> None:
    info = _up(topology=ring(4), suffix="ring")
    _tcp_mesh(info)
    service.down(info.name)
    assert _ours() == []


def test_down_ends_processes_inside_and_registered(state_dir: Path) -> None:
    info = _up(topology=star(2), suffix="procs")
    inside = subprocess.Popen(["ip", "netns", "exec", info.hosts[0].netns, "sleep", "60"])
    outside = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 5
        from genie.testbed.netlink import namespace_pids

        while inside.pid not in namespace_pids(info.hosts[0].netns) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert inside.pid in namespace_pids(info.hosts[0].netns)
        service.register_pids(info.name, [outside.pid])
        report = service.down(info.name)
        assert {inside.pid, outside.pid} <= set(report.pids_ended)
        assert inside.wait(timeout=5) == -signal.SIGTERM and outside.wait(timeout=5) == -signal.SIGTERM
    finally:
        for proc in (inside, outside):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert _ours() == []


def test_temporary_testbed_is_torn_down_even_on_error(state_dir: Path) -> None:
    with pytest.raises(RuntimeError):
        with service.temporary_testbed(ring(3), name=f"{RUN}-tmp") as info:
            assert len(_ours()) == 3 and info.hosts[2].address
            raise RuntimeError("boom")
    assert _ours() == [] and not record_path(f"{RUN}-tmp").exists()


def test_name_in_use_and_second_up_of_the_same_file_are_refused(state_dir: Path) -> None:
    first = f"{RUN}-dup"
    star4 = str(TOPOLOGIES / "star-4.yaml")
    done = run_genie("testbed", "up", star4, "--name", first)
    assert done.returncode == 0
    assert f"testbed {first} is up" in done.stdout
    done = run_genie("testbed", "up", star4, "--name", f"{RUN}-dup2")
    assert done.returncode == 2
    err = done.stderr
    assert err.count("\n") == 1 and f"already up as testbed '{first}'" in err
    done = run_genie("testbed", "up", str(TOPOLOGIES / "ring-8.yaml"), "--name", first)
    assert done.returncode == 2
    assert f"testbed '{first}' is already up" in done.stderr
    assert len(_ours()) == 5  # nothing of the refused attempts was built
    done = run_genie("testbed", "list")
    assert done.returncode == 0
    assert first in done.stdout
    done = run_genie("testbed", "status", first)
    assert done.returncode == 0
    assert "qdisc htb 1: parent root rate 1 Gbit/s" in done.stdout
    assert run_genie("testbed", "down", first).returncode == 0
    assert _ours() == []


def test_without_cap_net_admin_one_line_exit_2(state_dir: Path) -> None:
    result = _run(["setpriv", "--bounding-set=-net_admin", "--inh-caps=-net_admin", "--", sys.executable, "-m",
                   "genie.cli.main", "testbed", "up", str(TOPOLOGIES / "star-4.yaml"), "--name", f"{RUN}-nocap"],
                  env=_env(state_dir), cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr == "genie: error: needs CAP_NET_ADMIN: run as root\n"
    assert _ours() == []


def test_delay_without_netem_is_refused_before_anything_is_built(state_dir: Path, tmp_path: Path) -> None:
    from genie.testbed.netlink import probe_netem

    if probe_netem():
        pytest.skip("this kernel has sch_netem")
    topology = tmp_path / "delayed.yaml"
    topology.write_text("name: delayed\nhosts: [{prefix: h, count: 2}]\n"
                        "links: [{endpoints: [h0, h1], bandwidth: 1gbit, delay: 100us}]\n")
    done = run_genie("testbed", "up", str(topology), "--name", f"{RUN}-delay", "--shaper", "netem")
    assert done.returncode == 2
    err = done.stderr
    assert err.count("\n") == 1 and "links[0]" in err and "sch_netem" in err
    assert _ours() == [] and not record_path(f"{RUN}-delay").exists()


def _start_up_and_wait_for_a_namespace(name: str, state_dir: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "genie.cli.main", "testbed", "up",
                             str(TOPOLOGIES / "leaf-spine-2x4.yaml"), "--name", name],
                            env=_env(state_dir), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not any(n.startswith(f"genie-{name}-") for n in namespace_names()):
        assert proc.poll() is None and time.monotonic() < deadline, "up ended before building anything"
        time.sleep(0.005)
    return proc


def test_sigterm_during_up_rolls_everything_back(state_dir: Path) -> None:
    for attempt in range(3):
        name = f"{RUN}-term{attempt}"
        proc = _start_up_and_wait_for_a_namespace(name, state_dir)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        if record_path(name).exists():  # finished before the signal landed: try again
            service.down(name)
            continue
        assert not any(n.startswith(f"genie-{name}-") for n in namespace_names())
        # 130 once genie.cli.main returns the exit code typer hands back for KeyboardInterrupt (it drops it now)
        assert proc.returncode in (0, 130), err.decode()
        return
    pytest.skip("`up` kept finishing before SIGTERM arrived")


@pytest.mark.parametrize("how", ["down NAME", "down --all"])
def test_a_sigkilled_up_leaves_nothing_after_down(how: str, state_dir: Path) -> None:
    foreign = [n for n in namespace_names() if n.startswith("genie-") and not n.startswith(f"genie-{RUN}")]
    if how == "down --all" and foreign:
        pytest.skip(f"other genie testbeds are live ({foreign[0]}...); `down --all` would remove them")
    name = f"{RUN}-kill"
    proc = _start_up_and_wait_for_a_namespace(name, state_dir)
    proc.kill()
    proc.wait(timeout=10)
    assert any(n.startswith(f"genie-{name}-") for n in namespace_names())
    orphan = f"genie-{RUN}-orphan-h0"  # as if killed before its state record was written
    subprocess.run(["ip", "netns", "add", orphan], check=True)
    argv = ["testbed", "down", name] if how == "down NAME" else ["testbed", "down", "--all"]
    result = run_genie(*argv, env=_env(state_dir), cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert not record_path(name).exists()
    assert not any(n.startswith(f"genie-{name}-") for n in namespace_names())
    if how == "down --all":
        assert f"removed leftover namespace {orphan}" in result.stdout
        assert orphan not in namespace_names()
    else:
        subprocess.run(["ip", "netns", "delete", orphan], check=True)
    with pytest.raises(GenieError):
        service.down(name)
