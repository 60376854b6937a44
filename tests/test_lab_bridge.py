"""Bridge switches in a Vagrant lab: a VM each, its ports found by MAC and shaped as the testbed shapes the
bridge's namespace; the MACs every NIC of a port network carries are the testbed's, so the userspace
emulator of a receiver tells senders apart as on the testbed. Without a hypervisor (the namespace stand-in
runs in tests/test_lab_root.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.lab import MachineRole, NetworkKind, lab_files, plan_lab, write_lab
from genie.lab.plan import default_sizing, sizing_warnings
from genie.lab.render import network_args, virtualbox_nics
from genie.lab.shape import plan_machine_shaping
from genie.testbed.steps import AddHtb, AddNetem, AddPfifo, Shaper, StartEmulator
from genie.testbed.userspace import veth_macs
from genie.topology import load_topology, load_topology_file, star
from lab_support import vm_addresses

ROOT = Path(__file__).resolve().parents[1]
VAGRANT = shutil.which("vagrant")

BRIDGED = """\
name: lab-bridged
hosts: [h0, h1, h2]
switches: [{name: s0, kind: bridge}, {name: s1, kind: bridge}]
links:
  - {endpoints: [h0, s0], bandwidth: 1gbit, delay: 1ms}
  - {endpoints: [h1, s0], bandwidth: 1gbit, queue: 50}
  - {endpoints: [s0, s1], bandwidth: 2gbit, delay: 500us}
  - {endpoints: [h2, s1], bandwidth: 1gbit, mtu: 9000}
"""


def test_bridges_linked_to_bridges_are_one_segment_of_port_networks() -> None:
    lab = plan_lab(load_topology(BRIDGED))
    assert [m.name for m in lab.bridges] == ["s0", "s1"] and all(not m.forwards for m in lab.bridges)
    assert all(n.kind is NetworkKind.BRIDGE_PORT for n in lab.networks)
    assert {n.network for n in lab.networks} == {"198.18.0.0/24"}
    assert [m.address for m in lab.hosts] == ["198.18.0.10", "198.18.0.11", "198.18.0.12"]
    between = lab.link_network(2)
    assert between.members == () and between.macs == (("s0", veth_macs(2)[0]), ("s1", veth_macs(2)[1]))
    assert between.description == "link s0 - s1 (bridges s0, s1)"
    s1 = lab.machine("s1")
    assert network_args(lab, s1) == [["--port", f"{veth_macs(2)[1]}=1500"], ["--port", f"{veth_macs(3)[1]}=9000"]]
    assert network_args(lab, lab.machine("h2")) == [["--source", "198.18.0.12"], ["--mtu", "198.18.0.0/24=9000"]]


@pytest.mark.parametrize("shaper", [Shaper.KERNEL, Shaper.USERSPACE])
def test_a_bridge_vm_shapes_its_ports_as_the_testbed_shapes_the_bridge(shaper: Shaper) -> None:
    from genie.lab.shape import LAYOUT_NAME
    from genie.testbed.layout import plan_layout
    from genie.testbed.plan import node_shaping_steps

    lab = plan_lab(load_topology(BRIDGED))
    layout = plan_layout(lab.topology, LAYOUT_NAME)
    for bridge in ("s0", "s1"):
        shaping = plan_machine_shaping(lab, bridge, shaper, vm_addresses(lab, bridge))
        testbed = node_shaping_steps(layout, bridge, shaper)
        rename = {i.testbed_ifname: i.ifname for i in shaping.interfaces}
        assert [i.address for i in shaping.interfaces] == [lab.end_mac(i.link_index, bridge)
                                                          for i in shaping.interfaces], "ports found by MAC"
        assert shaping.steps and len(shaping.steps) == len(testbed)
        for ours, theirs in zip(shaping.steps, testbed):
            assert isinstance(ours, (AddHtb, AddNetem, AddPfifo)), "a bridge only shapes its ports' egress"
            assert ours.ifname == rename[theirs.ifname] and ours.ifname.startswith("ens")  # type: ignore[union-attr]
    s0 = plan_machine_shaping(lab, "s0", shaper, vm_addresses(lab, "s0"))
    toward_h0 = [s for s in s0.steps if s.ifname == "ens5"]  # type: ignore[union-attr]
    assert [type(s) for s in toward_h0] == ([AddHtb, AddNetem, AddNetem] if shaper is Shaper.KERNEL else [AddHtb])


def test_the_receivers_emulator_knows_the_senders_by_the_macs_vagrant_sets() -> None:
    """With the userspace shaper a receiver on a bridged segment runs each packet through the stages of every
    link it crossed, chosen by its source MAC: those MACs are the ones the Vagrantfile gives the senders."""
    lab = plan_lab(load_topology(BRIDGED))
    shaping = plan_machine_shaping(lab, "h2", Shaper.USERSPACE, vm_addresses(lab, "h2"))
    (start,) = [s for s in shaping.steps if isinstance(s, StartEmulator)]
    (queue,) = start.config.queues
    stages = [stage.name for stage in start.config.stages]
    by_source = {route.source: (route.mac, [stages[i] for i in route.chain]) for route in queue.routes}
    assert by_source["h0"][0] == lab.end_mac(0, "h0") and by_source["h1"][0] == lab.end_mac(1, "h1")
    chain = by_source["h0"][1]  # the delayed topology's links are wires too: every link crossed is a stage
    assert [name.split()[1] for name in chain] == ["h0>s0", "s0>s1", "s1>h2"], \
        "h0 -> s0 (1 ms) and s0 -> s1 (500 us): both delays, not only the last"
    text = lab_files(lab, repo="..")["Vagrantfile"]
    for sender in ("h0", "h1"):
        assert f"mac: '{by_source[sender][0].replace(':', '')}'" in text


def test_virtualbox_lets_a_bridge_vms_ports_receive_for_other_macs() -> None:
    """VirtualBox hands a NIC only the frames for its own MAC unless its promiscuous mode is allowed: a bridge
    VM's ports (adapters 2.. after NAT's 1) must be, no other VM's NIC is."""
    text = lab_files(plan_lab(star(4)), repo="..")["Vagrantfile"]
    bridge = text[text.index("config.vm.define 's0'"):]
    assert [f'"--nicpromisc{n}", "allow-all"' in bridge for n in range(1, 7)] == [False] + [True] * 4 + [False]
    assert text.count("--nicpromisc") == 4


def test_a_bridge_with_many_ports_gets_ich9_and_more_libvirt_nics_or_is_refused() -> None:
    lab = plan_lab(star(10))
    assert virtualbox_nics(lab)["s0"] == 11 and virtualbox_nics(lab)["h0"] == 2
    text = lab_files(lab, repo="..")["Vagrantfile"]
    assert text.count('vb.customize ["modifyvm", :id, "--chipset", "ich9"]') == 1
    assert text.count("lv.nic_adapter_count = 11") == 1
    assert "lv.nic_adapter_count" not in lab_files(plan_lab(star(8)), repo="..")["Vagrantfile"], "9 NICs fit"
    with pytest.raises(InputError, match=r"^t.yaml: links: bridge s0 needs 37 NICs \(NAT \+ 36 lab networks\), "
                                         r"more than the 36 VirtualBox's ICH9 chipset allows"):
        lab_files(plan_lab(star(36)), repo="..", source="t.yaml")


def test_sizing_counts_the_bridge_vms() -> None:
    topology = load_topology_file(ROOT / "topologies" / "star-8.yaml")
    lab = plan_lab(topology)
    assert [m.role for m in lab.machines].count(MachineRole.BRIDGE) == 1 and len(lab.machines) == 9
    sizing = default_sizing(topology, host_memory_mb=16 * 1024, host_cpus=16)
    assert sizing.memory_mb == 1280  # (12288 - 512 for the bridge VM) / 8 hosts, in 256 MiB steps
    sized = plan_lab(topology, memory_mb=sizing.memory_mb, cpus=sizing.cpus)
    assert sum(m.memory_mb for m in sized.machines) == 8 * 1280 + 512
    assert sizing_warnings(sized, host_memory_mb=16 * 1024, host_cpus=16) == [
        "the lab's VMs have 17 vCPUs and this machine has 16 CPUs: they will share them, and timings measured "
        "in the lab will suffer (`cpus`, `router_cpus`)"]


@pytest.mark.skipif(shutil.which("ssh-keygen") is None or VAGRANT is None,
                    reason="needs ssh-keygen and vagrant (apt-get install -y --no-install-recommends vagrant)")
def test_vagrant_validates_a_wide_bridged_lab(tmp_path: Path) -> None:
    out = tmp_path / "lab"
    write_lab(plan_lab(star(10), memory_mb=1024), out)
    write_lab(plan_lab(load_topology(BRIDGED), memory_mb=1024), tmp_path / "bridged")
    env = {**os.environ, "VAGRANT_HOME": str(tmp_path / "vagrant-home"), "VAGRANT_CHECKPOINT_DISABLE": "1"}
    for lab_dir in (out, tmp_path / "bridged"):
        result = subprocess.run([VAGRANT, "validate", "--ignore-provider"], cwd=lab_dir, env=env,
                                capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stdout + result.stderr


def test_local_macs_leave_the_bridge_out(tmp_path: Path) -> None:
    """br0 takes the MAC of one of its ports: `genie lab shape` must find the port, not the bridge."""
    from genie.services.lab import local_macs

    for device, mac in (("br0", "02:67:00:00:00:01"), ("ens5", "02:67:00:00:00:01"), ("ens6", "02:67:00:00:01:01"),
                        ("eth0", "52:54:00:AA:BB:CC")):
        (tmp_path / device).mkdir()
        (tmp_path / device / "address").write_text(mac + "\n")
    (tmp_path / "br0" / "bridge").mkdir()
    assert local_macs(tmp_path) == {"02:67:00:00:00:01": "ens5", "02:67:00:00:01:01": "ens6",
                                    "52:54:00:aa:bb:cc": "eth0"}
