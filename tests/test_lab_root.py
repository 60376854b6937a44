"""The lab's provisioning for real, in network namespaces standing in for its VMs: every VM a namespace
``genie-labtest<pid>-<machine>`` with the NICs, addresses and MACs the Vagrantfile declares (``eth0`` is left
to Vagrant's management NIC, so lab NICs start at ``eth1``; every network is one link, a veth pair between
the namespaces of its two VMs — a bridge is a VM of its own). Then, as in the VMs: provision/network.sh with
the Vagrantfile's arguments (a bridge VM makes its ``br0`` of the ports it finds by MAC), `genie lab shape`
inside every namespace, and `genie lab verify` (probes run in the namespaces instead of over ssh) must pass
within the testbed's tolerances."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from genie.lab import Lab, MachineRole, NetworkKind, plan_lab
from genie.lab.render import network_args, write_lab
from genie.services.lab import LabVerifyRequest, load_rendered_lab, run_lab_verify, shape_record_path
from genie.testbed.backend import apply_plan, undo_steps
from genie.testbed.netlink import NetlinkBackend, inspect_namespace, list_genie_namespaces
from genie.testbed.steps import AddAddress, CreateNetns, CreateVethPair, PlanStep, SetLinkUp
from genie.testbed.verify import Metric, Status, goodput_bps, rate_from_timeline
from genie.testbed.verify_run import PROBE_PORT, Probes, VerifySettings, namespace_probe_command
from genie.topology import load_topology_file

ROOT = Path(__file__).resolve().parents[1]
PREFIX = f"genie-labtest{os.getpid()}-"

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_ADMIN) to build namespaces"),
              pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed"),
              pytest.mark.timeout(900)]


def stand_in_steps(lab: Lab, *, fixed_macs: bool = True) -> list[PlanStep]:
    """Namespaces, NICs, addresses and MACs as Vagrant would give the lab's VMs. ``fixed_macs=False``: only the
    bridge VMs' ports get the MACs the Vagrantfile declares, every other NIC one of its own (52:54:00:..., as
    libvirt gives a NIC whose Vagrantfile entry sets no ``mac:``)."""
    steps: list[PlanStep] = [CreateNetns(PREFIX + m.name) for m in lab.machines]
    steps += [SetLinkUp(PREFIX + m.name, "lo") for m in lab.machines]
    next_nic = {m.name: 1 for m in lab.machines}
    bridges = {m.name for m in lab.bridges}
    for j, network in enumerate(lab.networks):
        assert network.kind is not NetworkKind.ALONE, "no sample has a host without links"
        a, b = network.machines
        ifa, ifb = f"eth{next_nic[a]}", f"eth{next_nic[b]}"
        mac_a, mac_b = (network.mac_of(m) if fixed_macs or m in bridges else f"52:54:00:00:{j:02x}:{k:02x}"
                        for k, m in enumerate((a, b)))
        steps.append(CreateVethPair(PREFIX + a, ifa, PREFIX + b, ifb, network.mtu_bytes, mac_a, mac_b))
        for machine, ifname in ((a, ifa), (b, ifb)):
            next_nic[machine] += 1
            address = network.address_of(machine)
            if address is not None:  # a bridge's port stays down and bare: network.sh makes it a port of br0
                steps += [AddAddress(PREFIX + machine, ifname, address, 24), SetLinkUp(PREFIX + machine, ifname)]
    return steps


def in_netns(machine: str, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", PREFIX + machine, *argv], capture_output=True, text=True,
                          timeout=120, env=env, check=False)


def lab_shape(machine: str, lab_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`genie lab shape` in the stand-in of VM `machine`: its namespace, and a UTS namespace of its own carrying
    the VM's hostname (`genie lab shape` acts only where the hostname is the lab VM's; this machine's own
    hostname is never changed)."""
    hostname = load_rendered_lab(lab_dir).lab.machine(machine).hostname
    genie = [sys.executable, "-m", "genie.cli.main", "lab", "shape", str(lab_dir), "--machine", machine, *args]
    return in_netns(machine, ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *genie],
                    env)


def provision(lab: Lab, lab_dir: Path, env: dict[str, str], shaper: str) -> None:
    """What every VM runs on boot: provision/network.sh with its Vagrantfile arguments, then `genie lab shape`."""
    for machine in lab.machines:
        args = [arg for group in network_args(lab, machine) for arg in group]
        network = in_netns(machine.name, ["bash", str(lab_dir / "provision" / "network.sh"), *args], env)
        assert network.returncode == 0, network.stdout + network.stderr
        shape = lab_shape(machine.name, lab_dir, env)
        assert shape.returncode == 0, shape.stdout + shape.stderr
        assert f"{machine.name}: shaper {shaper}" in shape.stdout


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch):  # type: ignore[no-untyped-def]
    """build(lab, fixed_macs=True) -> the environment for genie run in the stand-in VMs."""
    built: list[PlanStep] = []
    state = tmp_path / "state"
    monkeypatch.setenv("GENIE_STATE_DIR", str(state))

    def build(lab: Lab, *, fixed_macs: bool = True) -> dict[str, str]:
        steps = stand_in_steps(lab, fixed_macs=fixed_macs)
        with NetlinkBackend() as backend:
            apply_plan(backend, steps)
        built.extend(steps)
        return {**os.environ, "PYTHONPATH": str(ROOT), "GENIE_STATE_DIR": str(state)}

    yield build
    with NetlinkBackend() as backend:
        undo_steps(backend, built)
    assert not [name for name in list_genie_namespaces() if name.startswith(PREFIX)], "nothing of ours leaked"


#: shorter probes than the CLI's defaults (the tolerances stay the testbed's): 1 s flows, 100 RTT and 2000 loss probes
QUICK = VerifySettings(bulk_seconds=1.0, rtt_probes=100, loss_probes=2000)


@pytest.mark.parametrize("sample", ["leaf-spine-2x4", "star-4"])
def test_lab_provisioning_in_namespaces(sample: str, tmp_path: Path, stand_in) -> None:  # type: ignore[no-untyped-def]
    topology = load_topology_file(ROOT / "topologies" / f"{sample}.yaml")
    lab = plan_lab(topology)
    lab_dir = tmp_path / "lab"
    write_lab(lab, lab_dir)
    env = stand_in(lab)
    provision(lab, lab_dir, env, "kernel")
    # every lab NIC of every VM (a bridge's ports too) carries the HTB class of its link, at the link's rate
    for machine in lab.machines:
        status = {i.ifname: i for i in inspect_namespace(PREFIX + machine.name).interfaces}
        for k, name in enumerate(machine.networks):
            nic = status[f"eth{k + 1}"]
            (htb,) = [q for q in nic.qdiscs if q.kind == "htb"]
            link = topology.links[lab.network(name).link_index]  # type: ignore[index]
            assert htb.rate_bps == link.shape.rate_bps and nic.up
            if machine.role is MachineRole.BRIDGE:
                assert nic.master == "br0" and not nic.addresses
    assert shape_record_path(lab.machines[0].name).is_file()
    # provisioning again (every boot) replaces what is there
    for machine in (lab.machines[0], lab.machines[-1]):
        args = [arg for group in network_args(lab, machine) for arg in group]
        again = in_netns(machine.name, ["bash", str(lab_dir / "provision" / "network.sh"), *args], env)
        assert again.returncode == 0, again.stdout + again.stderr
        shaped = lab_shape(machine.name, lab_dir, env)
        assert shaped.returncode == 0 and "undid" in shaped.stdout, shaped.stdout + shaped.stderr
    netns_of = {m.name: PREFIX + m.name for m in lab.hosts}
    command = namespace_probe_command(netns_of)
    result = run_lab_verify(LabVerifyRequest(lab_dir, QUICK, out=tmp_path / "verify"), command=command,
                            server_command=command)
    throughput = [row for row in result.rows if row.metric is Metric.THROUGHPUT]
    bottleneck_bps = min(link.shape.rate_bps or 0 for link in topology.links)  # every sample path: its host links
    assert throughput and all(row.configured == pytest.approx(goodput_bps(bottleneck_bps, 1500)) for row in throughput)
    _print(result.rows)
    # this machine is shared: a pair whose check failed is measured again (verify's --pair), up to twice; the
    # tolerances stay the testbed's
    failed = result.failed
    for attempt in range(2):
        if not failed:
            break
        pairs = tuple(dict.fromkeys((row.route.split("-")[0], row.route.split("-")[-1]) for row in failed))
        again = run_lab_verify(LabVerifyRequest(lab_dir, QUICK, pairs=pairs, out=tmp_path / f"verify-again{attempt}"),
                               command=command, server_command=command)
        _print(again.rows)
        failed = again.failed
    assert not failed, [(r.direction, r.metric.value, r.measured, r.note) for r in failed]
    assert all(row.status in (Status.OK, Status.CEILING, Status.INFO)
               for row in result.rows if row not in result.failed)
    assert (result.run_dir / "links_verify.csv").is_file()
    if sample == "star-4":  # the check can fail: without the shaping, the links run at veth speed
        for machine in lab.machines:
            removed = lab_shape(machine.name, lab_dir, env, "--remove")
            assert removed.returncode == 0 and "removed the lab's shaping" in removed.stdout, removed
        unshaped = run_lab_verify(LabVerifyRequest(lab_dir, QUICK, pairs=(("h0", "h1"),), out=tmp_path / "unshaped"),
                                  command=command, server_command=command)
        _print(unshaped.rows)
        flows = [row for row in unshaped.rows if row.metric is Metric.THROUGHPUT]
        assert flows and all(row.status is Status.FAIL and row.measured > 1.5 * row.configured  # type: ignore
                             for row in flows)


def _print(rows) -> None:  # type: ignore[no-untyped-def]
    print("\n".join(f"{r.direction} {r.metric.value} configured {r.configured} measured {r.measured} "
                    f"{r.status.value} {r.note}" for r in rows))


DELAYED = """\
name: lab-delayed
hosts: [h0, h1]
switches: [{{name: sw, kind: {kind}}}]
defaults: {{bandwidth: 100mbit, delay: 2ms}}
links:
  - {{endpoints: [h0, sw]}}
  - {{endpoints: [sw, h1]}}
"""


def _delayed_lab(kind: str, tmp_path: Path) -> tuple[Lab, Path]:
    from genie.testbed.netlink import probe_netem
    from genie.topology import load_topology

    if not probe_netem() and shutil.which("iptables") is None:
        pytest.skip("no sch_netem and no iptables (the userspace emulator's NFQUEUE rules)")
    lab = plan_lab(load_topology(DELAYED.format(kind=kind)))
    lab_dir = tmp_path / "lab"
    write_lab(lab, lab_dir)
    return lab, lab_dir


def _verify_delayed(lab: Lab, lab_dir: Path, out: Path, *, attempts: int = 3) -> dict:  # type: ignore[type-arg]
    """Verify h0 <-> h1; when a flow misses its rate or the round trip its bounds, the pair is measured again,
    up to twice (this machine is shared, and its idle vCPUs wake the emulators late now and then — see
    docs/link-emulation.md; as the sample labs' test does); the bounds stay as they are."""
    from genie.testbed.verify_run import VerifySettings

    command = namespace_probe_command({m.name: PREFIX + m.name for m in lab.hosts})
    settings = VerifySettings(bulk_seconds=1.5, rtt_probes=100, loss_probes=3000)
    by: dict = {}  # type: ignore[type-arg]
    for attempt in range(attempts):
        result = run_lab_verify(LabVerifyRequest(lab_dir, settings, out=out / f"verify{attempt}"),
                                command=command, server_command=command)
        _print(result.rows)
        by = {(row.direction, row.metric): row for row in result.rows}
        if not _flows_off(by) and not _rtt_off(by):
            break
    return by


def _rtt_off(by: dict) -> bool:  # type: ignore[type-arg]
    """The round trip outside 0.8-1.25 of the configured one (the bound test_lab_delays_in_namespaces holds)."""
    rtt = by[("h0<->h1", Metric.RTT)]
    return rtt.measured is None or not 0.8 < rtt.measured / rtt.configured < 1.25


def _flows_off(by: dict) -> list:  # type: ignore[type-arg]
    """Flows not within 10% of the link's TCP goodput."""
    return [row for d in ("h0->h1", "h1->h0") for row in [by[(d, Metric.THROUGHPUT)]]
            if row.error_pct is None or abs(row.error_pct) > 10]


@pytest.mark.parametrize("kind", ["router", "bridge"])
def test_lab_delays_in_namespaces(kind: str, tmp_path: Path, stand_in) -> None:  # type: ignore[no-untyped-def]
    """Delay needs netem or, where the kernel lacks sch_netem (as here), the userspace emulator, started by
    `genie lab shape` in the VM itself; `--remove` ends it again. Through a bridge VM the receiver's emulator
    runs each packet through both links' stages, telling the sender apart by the MAC Vagrant set on its NIC."""
    from genie.testbed.netlink import probe_netem

    lab, lab_dir = _delayed_lab(kind, tmp_path)
    env = stand_in(lab)
    expected = "kernel" if probe_netem() else "userspace"
    try:
        provision(lab, lab_dir, env, expected)
        by = _verify_delayed(lab, lab_dir, tmp_path)
        rtt = by[("h0<->h1", Metric.RTT)]
        assert rtt.configured == 8000.0  # 2 links, 2 ms each, both ways
        # as generous as the testbed's own userspace test: this machine is shared
        assert not _rtt_off(by), rtt
        assert not _flows_off(by), _flows_off(by)  # both directions within 10% of the link's TCP goodput
        for direction in ("h0->h1", "h1->h0"):
            assert by[(direction, Metric.LOSS)].measured == pytest.approx(0.0, abs=0.5)
    finally:
        for machine in lab.machines:
            removed = lab_shape(machine.name, lab_dir, env, "--remove")
            assert removed.returncode == 0, removed.stdout + removed.stderr
    for machine in lab.machines:
        status = inspect_namespace(PREFIX + machine.name)
        assert not status.pids, f"{machine.name}: the emulator was ended"
        assert not [q for i in status.interfaces for q in i.qdiscs if q.kind in ("htb", "netem", "pfifo")]


def test_lab_bridge_delays_need_the_fixed_macs(tmp_path: Path, stand_in) -> None:  # type: ignore[no-untyped-def]
    """The negative control of the bridge case above, where it matters (the userspace emulator): with NICs of
    random MACs behind the bridge the receiver's emulator cannot tell the sender, applies only the delay of
    the link into it, and the round trip falls to half of the topology's."""
    from genie.testbed.netlink import probe_netem

    if probe_netem():
        pytest.skip("sch_netem is here: the bridge VM delays its ports itself and MACs do not matter")
    lab, lab_dir = _delayed_lab("bridge", tmp_path)
    env = stand_in(lab, fixed_macs=False)
    probes = Probes(namespace_probe_command({m.name: PREFIX + m.name for m in lab.hosts}))
    try:
        provision(lab, lab_dir, env, "userspace")
        probes.start_server("h1", "udp", 60)
        echoes = probes.run("h0", "rtt", "--to", lab.machine("h1").address or "", "--port", str(PROBE_PORT),
                            "--count", "50", "--rate", "100", "--wait", "0.1", timeout_s=60)
        samples = sorted(echoes["rtt_us"])  # type: ignore[arg-type]
        median_us = samples[len(samples) // 2]
        print(f"h0<->h1 without the fixed MACs: RTT median {median_us:.1f} us of {len(samples)} (topology: 8000)")
        assert 0.4 < median_us / 8000 < 0.65, median_us  # only the link into each receiver: 2 x 2 ms
    finally:
        probes.stop_servers()
        for machine in lab.machines:
            lab_shape(machine.name, lab_dir, env, "--remove")


def _concurrent_flows(lab: Lab, senders: list[str], receiver: str, seconds: float) -> dict[str, float]:
    """One TCP flow from each sender into `receiver` at once (verify's probes); each flow's rate after a
    1 s warm-up, bit/s."""
    command = namespace_probe_command({m.name: PREFIX + m.name for m in lab.hosts})
    probes = Probes(command)
    address = lab.machine(receiver).address or ""
    rates: dict[str, float] = {}
    errors: list[BaseException] = []

    def send(sender: str) -> None:
        try:
            flow = probes.run(sender, "bulk", "--to", address, "--port", str(PROBE_PORT), "--seconds",
                              f"{1 + seconds:.1f}", timeout_s=120)
            rates[sender] = rate_from_timeline(flow["timeline"], 1.0) or 0.0  # type: ignore[arg-type]
        except BaseException as error:  # noqa: BLE001 - reported by the caller
            errors.append(error)

    try:
        probes.start_server(receiver, "tcp", 120)
        threads = [threading.Thread(target=send, args=(sender,)) for sender in senders]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        probes.stop_servers()
    assert not errors, errors
    print(f"{' + '.join(senders)} -> {receiver}: " + ", ".join(f"{s} {r / 1e6:.1f} Mbit/s" for s, r in rates.items()))
    return rates


INCAST_RATE_BPS = 200 * 10**6  # low enough that this shared 2-core machine carries twice it unshaped


def test_bridge_vm_limits_many_senders_into_one_host(tmp_path: Path, stand_in) -> None:  # type: ignore[no-untyped-def]
    """As on the emulated testbed, where the bridge's namespace shapes the egress of each of its ports: two
    hosts of a star sending into a third at once share that host's link at the bridge VM, about half its
    rate each. Negative control: with the bridge VM's shaping removed (the hosts keep theirs) each sender
    gets its own link's rate, the receiver twice its link's."""
    from genie.core.topology import LinkShape
    from genie.topology import star

    lab = plan_lab(star(3, shape=LinkShape(rate_bps=INCAST_RATE_BPS)))
    lab_dir = tmp_path / "lab"
    write_lab(lab, lab_dir)
    env = stand_in(lab)
    provision(lab, lab_dir, env, "kernel")
    goodput = goodput_bps(INCAST_RATE_BPS, 1500)

    def shared(rates: dict[str, float]) -> bool:
        total = sum(rates.values())
        return abs(total / goodput - 1) < 0.1 and all(0.3 < rate / total < 0.7 for rate in rates.values())

    # the first measurement after provisioning is often split ~75/25 (measured: 3 of 3 runs; the later ones
    # ~50/50), most likely the sender whose probe starts first holding the FIFO. Measured again when missed, up to four
    # times; bounds unchanged
    rates = _concurrent_flows(lab, ["h1", "h2"], "h0", seconds=3.0)
    for _ in range(4):
        if shared(rates):
            break
        rates = _concurrent_flows(lab, ["h1", "h2"], "h0", seconds=3.0)
    assert shared(rates), rates
    removed = lab_shape("s0", lab_dir, env, "--remove")
    assert removed.returncode == 0 and "s0: removed the lab's shaping (3 objects)" in removed.stdout, removed
    unshaped = _concurrent_flows(lab, ["h1", "h2"], "h0", seconds=3.0)
    assert sum(unshaped.values()) > 1.5 * goodput and not shared(unshaped), unshaped
