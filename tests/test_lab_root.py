"""The lab's provisioning for real, in network namespaces standing in for its VMs: every VM a namespace
``genie-labtest<pid>-<machine>`` with the NICs and addresses the Vagrantfile declares (``eth0`` is left to
Vagrant's management NIC, so lab NICs start at ``eth1``; a bridged network is a namespace with a bridge,
standing in for the hypervisor's switch). Then, as in the VMs: provision/network.sh with the Vagrantfile's
arguments, `genie lab shape` inside every namespace, and `genie lab verify` (probes run in the namespaces
instead of over ssh) must pass within the testbed's tolerances."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from genie.lab import Lab, NetworkKind, plan_lab
from genie.lab.render import network_args, write_lab
from genie.services.lab import LabVerifyRequest, run_lab_verify, shape_record_path
from genie.testbed.backend import apply_plan, undo_steps
from genie.testbed.netlink import NetlinkBackend, inspect_namespace, list_genie_namespaces
from genie.testbed.steps import (AddAddress, AddBridge, CreateNetns, CreateVethPair, EnslaveLink, PlanStep,
                                 SetLinkUp)
from genie.testbed.verify import Metric, Status, goodput_bps
from genie.testbed.verify_run import namespace_probe_command
from genie.topology import load_topology_file

ROOT = Path(__file__).resolve().parents[1]
PREFIX = f"genie-labtest{os.getpid()}-"

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_ADMIN) to build namespaces"),
              pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed"),
              pytest.mark.timeout(900)]


def stand_in_steps(lab: Lab) -> list[PlanStep]:
    """Namespaces, NICs and addresses as Vagrant would give the lab's VMs."""
    steps: list[PlanStep] = [CreateNetns(PREFIX + m.name) for m in lab.machines]
    steps += [SetLinkUp(PREFIX + m.name, "lo") for m in lab.machines]
    next_nic = {m.name: 1 for m in lab.machines}
    for j, network in enumerate(lab.networks):
        switch = f"{PREFIX}sw{j}"
        if network.kind is NetworkKind.BRIDGED:
            steps += [CreateNetns(switch), AddBridge(switch, "br0"), SetLinkUp(switch, "br0")]
        pair = [m for m, _ in network.members]
        if network.kind is NetworkKind.POINT_TO_POINT:
            (a, b) = pair
            ifa, ifb = f"eth{next_nic[a]}", f"eth{next_nic[b]}"
            steps.append(CreateVethPair(PREFIX + a, ifa, PREFIX + b, ifb, network.mtu_bytes))
            for machine, ifname in ((a, ifa), (b, ifb)):
                steps += [AddAddress(PREFIX + machine, ifname, network.address_of(machine) or "", 24),
                          SetLinkUp(PREFIX + machine, ifname)]
                next_nic[machine] += 1
            continue
        for k, machine in enumerate(pair):
            ifname, port = f"eth{next_nic[machine]}", f"p{k}"
            next_nic[machine] += 1
            steps += [CreateVethPair(PREFIX + machine, ifname, switch, port, network.mtu_bytes),
                      EnslaveLink(switch, port, "br0"), SetLinkUp(switch, port),
                      AddAddress(PREFIX + machine, ifname, network.address_of(machine) or "", 24),
                      SetLinkUp(PREFIX + machine, ifname)]
    return steps


def in_netns(machine: str, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", PREFIX + machine, *argv], capture_output=True, text=True,
                          timeout=120, env=env, check=False)


@pytest.fixture
def stand_in(tmp_path: Path):  # type: ignore[no-untyped-def]
    built: list[PlanStep] = []

    def build(lab: Lab) -> None:
        steps = stand_in_steps(lab)
        with NetlinkBackend() as backend:
            apply_plan(backend, steps)
        built.extend(steps)

    yield build
    with NetlinkBackend() as backend:
        undo_steps(backend, built)
    assert not [name for name in list_genie_namespaces() if name.startswith(PREFIX)], "nothing of ours leaked"


@pytest.mark.parametrize("sample", ["leaf-spine-2x4", "star-4"])
def test_lab_provisioning_in_namespaces(sample: str, tmp_path: Path, stand_in,  # type: ignore[no-untyped-def]
                                        monkeypatch) -> None:
    topology = load_topology_file(ROOT / "topologies" / f"{sample}.yaml")
    lab = plan_lab(topology)
    lab_dir = tmp_path / "lab"
    write_lab(lab, lab_dir)
    stand_in(lab)
    state = tmp_path / "state"
    monkeypatch.setenv("GENIE_STATE_DIR", str(state))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GENIE_STATE_DIR": str(state)}
    for machine in lab.machines:
        args = [arg for group in network_args(lab, machine) for arg in group]
        network = in_netns(machine.name, ["bash", str(lab_dir / "provision" / "network.sh"), *args], env)
        assert network.returncode == 0, network.stderr
        shape = in_netns(machine.name, [sys.executable, "-m", "genie.cli.main", "lab", "shape", str(lab_dir),
                                        "--machine", machine.name], env)
        assert shape.returncode == 0, shape.stdout + shape.stderr
        assert f"{machine.name}: shaper kernel" in shape.stdout
    # every lab NIC of every VM carries the HTB class of its link, at the link's rate
    for machine in lab.machines:
        status = inspect_namespace(PREFIX + machine.name)
        nics = [i for i in status.interfaces if i.addresses and i.ifname != "lo"]
        assert len(nics) == len(machine.networks)
        for nic in nics:
            (htb,) = [q for q in nic.qdiscs if q.kind == "htb"]
            address = nic.addresses[0].split("/")[0]
            link = next(topology.links[i] for n in lab.networks for i in n.links
                        if n.address_of(machine.name) == address and machine.name in topology.links[i].endpoints)
            assert htb.rate_bps == link.shape.rate_bps
    assert shape_record_path(lab.machines[0].name).is_file()
    # shaping again (every boot) replaces what is there
    again = in_netns(lab.machines[0].name, [sys.executable, "-m", "genie.cli.main", "lab", "shape", str(lab_dir),
                                            "--machine", lab.machines[0].name], env)
    assert again.returncode == 0, again.stdout + again.stderr
    netns_of = {m.name: PREFIX + m.name for m in lab.hosts}
    command = namespace_probe_command(netns_of)
    result = run_lab_verify(LabVerifyRequest(lab_dir, out=tmp_path / "verify"), command=command,
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
        again = run_lab_verify(LabVerifyRequest(lab_dir, pairs=pairs, out=tmp_path / f"verify-again{attempt}"),
                               command=command, server_command=command)
        _print(again.rows)
        failed = again.failed
    assert not failed, [(r.direction, r.metric.value, r.measured, r.note) for r in failed]
    assert all(row.status in (Status.OK, Status.CEILING, Status.INFO)
               for row in result.rows if row not in result.failed)
    assert (result.run_dir / "links_verify.csv").is_file()
    if sample == "star-4":  # the check can fail: without the shaping, the links run at veth speed
        for machine in lab.machines:
            removed = in_netns(machine.name, [sys.executable, "-m", "genie.cli.main", "lab", "shape", str(lab_dir),
                                              "--machine", machine.name, "--remove"], env)
            assert removed.returncode == 0 and "removed the lab's shaping (1 objects)" in removed.stdout, removed
        unshaped = run_lab_verify(LabVerifyRequest(lab_dir, pairs=(("h0", "h1"),), out=tmp_path / "unshaped"),
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
switches: [{name: r0, kind: router}]
defaults: {bandwidth: 100mbit, delay: 2ms}
links:
  - {endpoints: [h0, r0]}
  - {endpoints: [r0, h1]}
"""


def test_lab_delays_in_namespaces(tmp_path: Path, stand_in, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Delay needs netem or, where the kernel lacks sch_netem (as here), the userspace emulator, started by
    `genie lab shape` in the VM itself; `--remove` ends it again."""
    from genie.testbed.netlink import probe_netem
    from genie.testbed.verify_run import VerifySettings
    from genie.topology import load_topology

    if not probe_netem() and shutil.which("iptables") is None:
        pytest.skip("no sch_netem and no iptables (the userspace emulator's NFQUEUE rules)")
    lab = plan_lab(load_topology(DELAYED))
    lab_dir = tmp_path / "lab"
    write_lab(lab, lab_dir)
    stand_in(lab)
    state = tmp_path / "state"
    monkeypatch.setenv("GENIE_STATE_DIR", str(state))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GENIE_STATE_DIR": str(state)}
    expected = "kernel" if probe_netem() else "userspace"
    shaped: list[str] = []
    try:
        for machine in lab.machines:
            args = [arg for group in network_args(lab, machine) for arg in group]
            assert in_netns(machine.name, ["bash", str(lab_dir / "provision" / "network.sh"), *args],
                            env).returncode == 0
            shape = in_netns(machine.name, [sys.executable, "-m", "genie.cli.main", "lab", "shape", str(lab_dir),
                                            "--machine", machine.name], env)
            assert shape.returncode == 0, shape.stdout + shape.stderr
            shaped.append(machine.name)
            assert f"{machine.name}: shaper {expected}" in shape.stdout
        command = namespace_probe_command({m.name: PREFIX + m.name for m in lab.hosts})
        settings = VerifySettings(bulk_seconds=1.5, rtt_probes=100, loss_probes=3000)

        def verify(attempt: int) -> dict:  # type: ignore[type-arg]
            result = run_lab_verify(LabVerifyRequest(lab_dir, settings, out=tmp_path / f"verify{attempt}"),
                                    command=command, server_command=command)
            _print(result.rows)
            return {(row.direction, row.metric): row for row in result.rows}

        def flows_off(by: dict) -> list:  # type: ignore[type-arg]
            return [row for d in ("h0->h1", "h1->h0") for row in [by[(d, Metric.THROUGHPUT)]]
                    if row.error_pct is None or abs(row.error_pct) > 10]

        # this machine is shared: when a flow misses, the pair is measured again, up to twice (as the sample
        # labs' test does); the bounds stay as they are
        by = verify(0)
        for attempt in (1, 2):
            if not flows_off(by):
                break
            by = verify(attempt)
        rtt = by[("h0<->h1", Metric.RTT)]
        assert rtt.configured == 8000.0  # 2 links, 2 ms each, both ways
        # as generous as the testbed's own userspace test: this machine is shared
        assert rtt.measured is not None and 0.8 < rtt.measured / rtt.configured < 1.25, rtt
        assert not flows_off(by), flows_off(by)  # both directions within 10% of the link's TCP goodput
        for direction in ("h0->h1", "h1->h0"):
            assert by[(direction, Metric.LOSS)].measured == pytest.approx(0.0, abs=0.5)
    finally:
        for machine in shaped:
            removed = in_netns(machine, [sys.executable, "-m", "genie.cli.main", "lab", "shape", str(lab_dir),
                                         "--machine", machine, "--remove"], env)
            assert removed.returncode == 0, removed.stdout + removed.stderr
    for machine in lab.machines:
        status = inspect_namespace(PREFIX + machine.name)
        assert not status.pids, f"{machine.name}: the emulator was ended"
        assert not [q for i in status.interfaces for q in i.qdiscs if q.kind in ("htb", "netem", "pfifo")]
