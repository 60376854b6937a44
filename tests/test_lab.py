"""Vagrant labs: the plan (VMs, /24 per segment, routes that reach every host), the rendered files, the
provisioning scripts (with stub `ip`/`sysctl`), the CLI, and `vagrant validate` when vagrant is installed."""

from __future__ import annotations

import functools
import ipaddress
import os
import shutil
import stat
from dataclasses import replace
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from genie.cli.flags import flag_names
from genie.cli.lab_cmd import LAB_FLAGS
from genie.core.errors import EnvironmentProblem, InputError
from genie.core.topology import LinkShape
from genie.inventory import HostfileFormat, hostfile, load_inventory_file
from genie.lab import Lab, MachineRole, NetworkKind, lab_files, lab_inventory, plan_lab, render_lab, write_lab
from genie.lab.plan import default_sizing, sizing_warnings
from genie.lab.render import PROVISION_SCRIPTS
from genie.lab.shape import LAYOUT_NAME, plan_machine_shaping
from genie.testbed.steps import AddHtb, AddNetem, AddPfifo, AddQueueRule, SetSysctl, Shaper, StartEmulator
from genie.topology import leaf_spine, load_topology, load_topology_file, ring, star
from lab_support import vm_addresses

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "topologies").glob("*.yaml"))
VAGRANT = shutil.which("vagrant")
needs_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None,
                                  reason="ssh-keygen is not installed (openssh-client): rendering makes the lab's key")

MIXED = """\
name: lab-mixed
subnet: 10.20.0.0/16
hosts:
  - gpu0
  - {name: gpu1, ranks: 4}
  - {prefix: w, count: 2, start: 5, ranks: 2}
switches:
  - sw
  - {name: core, kind: router}
  - {prefix: leaf, count: 2, kind: router}
links:
  - {endpoints: [gpu0, sw]}
  - {endpoints: [gpu1, sw]}
  - {endpoints: [sw, core]}
  - {endpoints: [core, leaf0]}
  - {endpoints: [core, leaf1]}
  - {endpoints: [w5, leaf0]}
  - {endpoints: [w6, leaf1], mtu: 9000}
"""


def _walker(lab: Lab, limit: int = 16):
    """walk(src, dst): follow the lab's routes hop by hop (every ECMP branch) from VM `src` to host `dst`'s rank
    address; returns the VMs of the longest branch. Fails when a branch has no route or loops. (The lab's
    indexes are built once: a 128-GPU lab has ~20 000 pairs.)"""
    machines = {m.name: m for m in lab.machines}
    owner = {address: name for net in lab.networks for name, address in net.members}
    attached = {m.name: {lab.network(n).network for n in m.networks} for m in lab.machines}
    attached_nets = {name: [ipaddress.IPv4Network(n) for n in nets] for name, nets in attached.items()}
    routes = {m.name: {r.destination: r for r in m.routes} for m in lab.machines}
    net_of = {name: net.network for net in lab.networks for name, address in net.members
              if address == machines[name].address}  # a host's rank address: the network it is on

    @functools.cache
    def on_net(name: str, gateway: str) -> bool:
        return any(ipaddress.IPv4Address(gateway) in net for net in attached_nets[name])

    def walk(src: str, dst: str) -> list[str]:
        target = machines[dst].address
        target_net = net_of[dst]
        longest: list[str] = []
        frontier = [[src]]
        while frontier:
            path = frontier.pop()
            here = machines[path[-1]]
            assert len(path) <= limit, f"loop from {src} to {dst}: {path}"
            if target_net in attached[here.name]:
                longest = max(longest, path + [dst] if here.name != dst else path, key=len)
                continue
            route = routes[here.name].get(f"{target}/32")
            assert route is not None, f"{here.name} has no route to {dst} ({target})"
            for gateway in route.gateways:
                hop = owner[gateway]
                shared = on_net(here.name, gateway)
                assert shared, f"{here.name}: gateway {gateway} is not on one of its networks"
                assert machines[hop].forwards or hop == dst, f"{hop} must forward for {src} -> {dst}"
                frontier.append(path + [hop])
        return longest

    return walk


def _walk(lab: Lab, src: str, dst: str) -> list[str]:
    return _walker(lab)(src, dst)


def _all_labs() -> list[tuple[str, Lab]]:
    labs = [(p.stem, plan_lab(load_topology_file(p))) for p in SAMPLES]
    single = load_topology("name: one\nhosts: [{name: h0, ranks: 2}]\n")
    return labs + [("lab-mixed", plan_lab(load_topology(MIXED))), ("single", plan_lab(single)),
                   ("star-1", plan_lab(star(1)))]


@pytest.mark.parametrize(("name", "lab"), _all_labs(), ids=lambda v: v if isinstance(v, str) else "")
def test_plan_structure_and_reachability(name: str, lab: Lab) -> None:
    topology = lab.topology
    routers = [s.name for s in topology.switches if s.kind.value == "router"]
    bridges = [s.name for s in topology.switches if s.kind.value == "bridge"]
    assert [m.name for m in lab.hosts] == [h.name for h in topology.hosts]
    assert [m.name for m in lab.routers] == routers and [m.name for m in lab.bridges] == bridges
    assert sum(m.ranks for m in lab.hosts) == topology.world_size
    subnet = ipaddress.IPv4Network(topology.subnet)
    addresses = [address for net in lab.networks for _, address in net.members]
    assert len(addresses) == len(set(addresses)), "every VM address is unique"
    assert [n.link_index for n in lab.networks if n.kind is not NetworkKind.ALONE] == list(range(len(topology.links)))
    segments: dict[str, list[str]] = {}  # a /24 and the addresses in it: a bridged segment's is shared
    for net in lab.networks:
        block = ipaddress.IPv4Network(net.network)
        assert block.prefixlen == 24 and block.subnet_of(subnet)
        assert net.hypervisor_address == str(block.network_address + 1)
        segments.setdefault(net.network, []).extend(a for _, a in net.members)
        if net.kind is NetworkKind.ALONE:
            assert len(net.machines) == 1
        else:
            link = topology.links[net.link_index]  # type: ignore[index]
            assert net.machines == link.endpoints, "a network is one link, between the VMs of its two ends"
            bridged = any(end in bridges for end in link.endpoints)
            assert (net.kind is NetworkKind.BRIDGE_PORT) is bridged and bool(net.macs) is bridged
    for network, in_it in segments.items():
        block = ipaddress.IPv4Network(network)
        offsets = [int(ipaddress.IPv4Address(a)) - int(block.network_address) for a in in_it]
        assert offsets == list(range(10, 10 + len(offsets))), "VMs from .10, never .1 (the hypervisor's)"
    blocks = [ipaddress.IPv4Network(n) for n in segments]
    assert all(not a.overlaps(b) for i, a in enumerate(blocks) for b in blocks[i + 1:])
    for machine in lab.machines:
        assert machine.networks, f"{machine.name} has a network"
        if machine.role is MachineRole.HOST:
            assert lab.primary_network(machine.name).address_of(machine.name) == machine.address
        elif machine.role is MachineRole.ROUTER:
            assert machine.forwards and machine.address is None and machine.ranks == 0
        else:  # a bridge: L2 only, one NIC per port, no address, no route
            assert not machine.forwards and machine.address is None and machine.ranks == 0 and not machine.routes
            assert all(lab.network(n).mac_of(machine.name) for n in machine.networks)
    walk = _walker(lab)
    for src in [*lab.hosts, *lab.routers]:
        for dst in lab.hosts:
            if src.name != dst.name:
                walk(src.name, dst.name)


def test_star_is_a_bridge_vm_with_a_network_per_port() -> None:
    from genie.testbed.userspace import veth_macs

    lab = plan_lab(load_topology_file(ROOT / "topologies" / "star-4.yaml"))
    assert len(lab.networks) == 4 and all(n.kind is NetworkKind.BRIDGE_PORT for n in lab.networks)
    assert {n.network for n in lab.networks} == {"198.18.0.0/24"}, "one IP segment, as on the testbed"
    assert [n.description for n in lab.networks][0] == "link h0 - s0 (bridge s0)"
    assert [m.address for m in lab.hosts] == ["198.18.0.10", "198.18.0.11", "198.18.0.12", "198.18.0.13"]
    assert all(not m.routes and not m.forwards for m in lab.machines)
    (s0,) = lab.bridges
    assert s0.networks == tuple(n.name for n in lab.networks) and s0.memory_mb == 512 and s0.cpus == 1
    for i, network in enumerate(lab.networks):  # the testbed's veth MACs, both ends
        assert network.macs == ((f"h{i}", veth_macs(i)[0]), ("s0", veth_macs(i)[1]))


def test_leaf_spine_routes_and_ecmp() -> None:
    lab = plan_lab(leaf_spine(2, 4, 2))
    assert len(lab.machines) == 12 and len(lab.networks) == 12
    assert all(n.kind is NetworkKind.POINT_TO_POINT for n in lab.networks)
    machines = {m.name: m for m in lab.machines}
    h0_routes = {r.destination: r.gateways for r in machines["h0"].routes}
    leaf0_on_h0 = lab.network(machines["h0"].networks[0]).address_of("leaf0")
    assert h0_routes[f"{machines['h4'].address}/32"] == (leaf0_on_h0,)
    leaf0_routes = {r.destination: r.gateways for r in machines["leaf0"].routes}
    assert len(leaf0_routes[f"{machines['h4'].address}/32"]) == 2 and machines["leaf0"].multipath
    assert _walk(lab, "h0", "h4") in (["h0", "leaf0", "spine0", "leaf1", "h4"],
                                      ["h0", "leaf0", "spine1", "leaf1", "h4"])
    assert not machines["h0"].forwards


def test_ring_hosts_forward() -> None:
    lab = plan_lab(ring(8))
    assert all(m.forwards and m.multipath for m in lab.hosts)
    assert len(_walk(lab, "h0", "h4")) == 5


def test_mixed_fabric_mtu_and_bridge_members() -> None:
    lab = plan_lab(load_topology(MIXED))
    ports = [n for n in lab.networks if n.kind is NetworkKind.BRIDGE_PORT]
    assert [n.machines for n in ports] == [("gpu0", "sw"), ("gpu1", "sw"), ("sw", "core")]
    assert [n.members for n in ports] == [(("gpu0", "10.20.0.10"),), (("gpu1", "10.20.0.11"),),
                                          (("core", "10.20.0.12"),)]
    assert {n.network for n in ports} == {"10.20.0.0/24"}
    jumbo = next(n for n in lab.networks if n.description == "link w6 - leaf1")
    assert jumbo.mtu_bytes == 9000


def test_plan_errors() -> None:
    small = replace(star(4), subnet="10.0.0.0/25")
    with pytest.raises(InputError, match=r"^t.yaml: subnet: a lab gives every network segment its own /24 .*"
                                         r"10.0.0.0/25 cannot hold; expected a /24 or larger"):
        plan_lab(small, source="t.yaml")
    routed = replace(ring(8), subnet="10.0.0.0/22")
    with pytest.raises(InputError, match=r"8 segments, which 10.0.0.0/22 cannot hold; expected a /21 or larger"):
        plan_lab(routed)
    with pytest.raises(InputError, match=r"^--memory: expected the memory of a VM in MiB"), flag_names(LAB_FLAGS):
        plan_lab(star(2), memory_mb=100)
    with pytest.raises(InputError, match=r"^--cpus:"), flag_names(LAB_FLAGS):
        plan_lab(star(2), cpus=0)
    with pytest.raises(InputError, match=r"^--box:"), flag_names(LAB_FLAGS):
        plan_lab(star(2), box="debian bookworm")


@needs_keygen
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_render_every_sample(sample: Path, tmp_path: Path) -> None:
    topology = load_topology_file(sample)
    out = tmp_path / "lab"
    written = render_lab(topology, out, box="example/box", provider_memory_mb=1536, cpus=3, source=str(sample))
    names = sorted(str(p.relative_to(out)) for p in written)
    assert names == sorted([".gitignore", "Vagrantfile", "hostfile", "hostfile.openmpi", "inventory.yaml",
                            "provision/genie.sh", "provision/network.sh", "provision/shape.sh", "ssh/id_ed25519",
                            "ssh/id_ed25519.pub", "topology.yaml"])
    lab = plan_lab(topology)
    vagrantfile = (out / "Vagrantfile").read_text()
    assert vagrantfile.count("config.vm.define ") == len(lab.machines)
    assert vagrantfile.count('node.vm.network "private_network"') == sum(len(m.networks) for m in lab.machines)
    assert vagrantfile.count('node.vm.provider "libvirt"') == len(lab.machines)
    assert vagrantfile.count('node.vm.provider "virtualbox"') == len(lab.machines)
    assert vagrantfile.count("lv.memory = 1536") == len(lab.hosts) == vagrantfile.count("vb.cpus = 3")
    assert vagrantfile.count("lv.memory = 512") == len(lab.routers) + len(lab.bridges)
    assert "BOX = 'example/box'" in vagrantfile
    assert vagrantfile.count('path: "provision/genie.sh"') == len(lab.machines), "routers shape too: genie"
    assert vagrantfile.count('path: "provision/shape.sh", run: "always"') == len(lab.machines)
    assert plan_lab(load_topology_file(out / "topology.yaml")) == lab, "the VMs plan from the same topology"
    for machine in lab.machines:
        assert f"config.vm.define '{machine.name}' do |node|" in vagrantfile
        for name in machine.networks:
            network = lab.network(name)
            if machine.role is MachineRole.BRIDGE:  # a port: no address, found by its MAC
                mac = (network.mac_of(machine.name) or "").replace(":", "")
                assert f"auto_config: false, mac: '{mac}'" in vagrantfile
            else:
                assert f"ip: '{network.address_of(machine.name)}', netmask: '255.255.255.0'" in vagrantfile
    inventory = load_inventory_file(out / "inventory.yaml")
    assert inventory == lab_inventory(lab)
    assert [h.address for h in inventory.hosts] == [m.address for m in lab.hosts]
    assert all(h.ssh_user == "vagrant" and h.subnet for h in inventory.hosts)
    assert (out / "hostfile").read_text() == hostfile(inventory)
    assert (out / "hostfile.openmpi").read_text() == hostfile(inventory, HostfileFormat.OPENMPI)
    assert stat.S_IMODE((out / "ssh" / "id_ed25519").stat().st_mode) == 0o600
    assert (out / "ssh" / "id_ed25519.pub").read_text().startswith("ssh-ed25519 ")
    assert os.access(out / "provision" / "network.sh", os.X_OK)
    genie_sh = (out / "provision" / "genie.sh").read_text()
    for machine in lab.hosts:
        assert f"{machine.address} {machine.hostname} # genie-lab" in genie_sh
        assert f"Host {machine.name} {machine.address}\n" in genie_sh
    for script in ("network.sh", "genie.sh"):
        check = subprocess.run(["bash", "-n", str(out / "provision" / script)], capture_output=True, text=True,
                               timeout=30)
        assert check.returncode == 0, check.stderr


@needs_keygen
def test_rerender_keeps_the_key(tmp_path: Path) -> None:
    render_lab(star(2), tmp_path)
    key = (tmp_path / "ssh" / "id_ed25519").read_bytes()
    render_lab(star(3), tmp_path)
    assert (tmp_path / "ssh" / "id_ed25519").read_bytes() == key
    assert (tmp_path / "Vagrantfile").read_text().count("config.vm.define") == 4  # 3 hosts and their bridge
    assert not [p.name for p in tmp_path.rglob(".*") if p.name.startswith((".Vagrantfile.", ".keygen-"))]


def _fake_repo(root: Path) -> Path:
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "setup.sh").write_text("#!/bin/sh\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'genie'\n")
    return root


@needs_keygen
def test_lab_inside_the_repo_uses_a_relative_path(tmp_path: Path) -> None:
    repo = _fake_repo(tmp_path / "genie")
    render_lab(star(2), repo / "lab", repo=repo)
    vagrantfile = (repo / "lab" / "Vagrantfile").read_text()
    assert "GENIE_REPO = '..'" in vagrantfile
    assert "'/lab/']" in vagrantfile, "the lab (and its ssh key) is not copied into the VMs"
    render_lab(star(2), tmp_path / "elsewhere", repo=repo)
    assert "GENIE_REPO = '../genie'" in (tmp_path / "elsewhere" / "Vagrantfile").read_text(), "relative, movable"


def test_render_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--repo: .* is not a genie source tree"), flag_names(LAB_FLAGS):
        render_lab(star(2), tmp_path / "lab", repo=tmp_path)
    repo = _fake_repo(tmp_path / "genie")
    with pytest.raises(InputError, match="expected a directory of its own for the lab"):
        render_lab(star(2), repo, repo=repo)
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="expected a directory for the lab, found a file"):
        render_lab(star(2), tmp_path / "file", repo=repo)


def _stub_bin(tmp_path: Path) -> tuple[Path, Path]:
    """`ip` and `sysctl` that log their argv; `ip -o -4 addr show to CIDR` answers with an interface."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    (bin_dir / "ip").write_text(f"""#!/bin/sh
echo "ip $*" >> {log}
if [ "$1 $2" = "-o -4" ]; then echo "3: eth7    inet 10.0.0.10/24 brd 10.0.0.255 scope global eth7"; fi
if [ "$1 $2" = "-o link" ]; then
    echo "4: eth8@if9: <UP> mtu 1500 qdisc noqueue state UP link/ether 02:67:00:00:01:01 brd ff:ff:ff:ff:ff:ff"
    echo "5: eth9: <UP> mtu 1500 qdisc noqueue state UP link/ether 02:67:00:00:02:01 brd ff:ff:ff:ff:ff:ff"
fi
if [ "$1 $2 $3" = "link show dev" ]; then exit 1; fi
""")
    (bin_dir / "sysctl").write_text(f'#!/bin/sh\necho "sysctl $*" >> {log}\n')
    for tool in ("ip", "sysctl"):
        (bin_dir / tool).chmod(0o755)
    return bin_dir, log


@needs_keygen
def test_network_script_applies_its_arguments(tmp_path: Path) -> None:
    render_lab(load_topology(MIXED), tmp_path / "lab")
    bin_dir, log = _stub_bin(tmp_path)
    args = ["--forward", "--multipath", "--source", "10.20.0.10", "--mtu", "10.20.3.0/24=9000",
            "--route", "10.20.5.10/32=10.20.0.12", "--route", "10.20.6.10/32=10.20.1.11,10.20.2.11"]
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(["bash", str(tmp_path / "lab" / "provision" / "network.sh"), *args], env=env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert log.read_text().splitlines() == [
        "sysctl -q -w net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=2",
        "sysctl -q -w net.ipv4.fib_multipath_hash_fields=0x0037 net.ipv4.fib_multipath_hash_policy=3",
        "sysctl -q -w net.ipv4.conf.all.rp_filter=2",
        "ip -o -4 addr show to 10.20.3.0/24",
        "ip link set dev eth7 mtu 9000",
        "ip route replace 10.20.5.10/32 src 10.20.0.10 via 10.20.0.12",
        "ip route replace 10.20.6.10/32 src 10.20.0.10 nexthop via 10.20.1.11 nexthop via 10.20.2.11",
    ]
    assert "2 routes, 0 bridge ports, forwarding on" in result.stdout
    # a bridge VM: br0 made, its ports found by MAC (a veth's name as `ip -o link` shows it: eth8@if9)
    log.unlink()
    bridge = subprocess.run(["bash", str(tmp_path / "lab" / "provision" / "network.sh"), "--port",
                             "02:67:00:00:02:01=9000", "--port", "02:67:00:00:01:01=1500"], env=env,
                            capture_output=True, text=True, timeout=30)
    assert bridge.returncode == 0, bridge.stderr
    assert [line for line in log.read_text().splitlines() if not line.startswith("ip -o link")] == [
        "ip link show dev br0", "ip link add br0 type bridge",
        "ip link set dev eth9 mtu 9000", "ip link set dev eth9 master br0", "ip link set dev eth9 up",
        "ip link set dev eth8 mtu 1500", "ip link set dev eth8 master br0", "ip link set dev eth8 up",
        "ip link set dev br0 up",
    ]
    assert "0 routes, 2 bridge ports, forwarding off" in bridge.stdout
    missing = subprocess.run(["bash", str(tmp_path / "lab" / "provision" / "network.sh"), "--port",
                              "02:67:00:00:07:01=1500"], env=env, capture_output=True, text=True, timeout=30)
    assert missing.returncode == 1 and "no interface has the MAC address 02:67:00:00:07:01" in missing.stderr
    bad = subprocess.run(["bash", str(tmp_path / "lab" / "provision" / "network.sh"), "--bogus"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown argument: --bogus" in bad.stderr


@needs_keygen
def test_rendered_network_args_match_the_plan(tmp_path: Path) -> None:
    lab = plan_lab(load_topology(MIXED))
    render_lab(load_topology(MIXED), tmp_path)
    vagrantfile = (tmp_path / "Vagrantfile").read_text()
    assert "'--mtu', '10.20.4.0/24=9000'" in vagrantfile and "libvirt__mtu: 9000" in vagrantfile
    core = next(m for m in lab.machines if m.name == "core")
    for route in core.routes:
        assert f"'--route', '{route.destination}={','.join(route.gateways)}'" in vagrantfile


@needs_keygen
def test_cli_render(tmp_path: Path) -> None:
    from genie.cli.lab_cmd import app

    runner = CliRunner()
    result = runner.invoke(app, ["render", str(ROOT / "topologies" / "star-4.yaml"), str(tmp_path / "lab"),
                                 "--memory", "1024", "--cpus", "1"])
    assert result.exit_code == 0, result.output
    assert "lab star-4: 4 host VMs, 1 bridge VM, 4 private networks, box debian/bookworm64" in result.output
    assert "h3              198.18.0.13     ranks 1" in result.output
    assert "lv.memory = 1024" in (tmp_path / "lab" / "Vagrantfile").read_text()
    bad = runner.invoke(app, ["render", str(ROOT / "topologies" / "star-4.yaml"), str(tmp_path / "x"),
                              "--memory", "12"])
    assert isinstance(bad.exception, InputError) and not (tmp_path / "x").exists()


#: Vagrant's validate loads each machine's configuration in turn, ~0.5 s per VM here: dgx-16node's 156 VMs took
#: 67-84 s. It is left to dgx-2node, which renders the same kinds of VMs and networks (every sample's plan, routes
#: and addresses are checked above without Vagrant).
VALIDATED = [p for p in SAMPLES if p.stem != "dgx-16node"]


@needs_keygen
@pytest.mark.skipif(VAGRANT is None, reason="vagrant is not installed (apt-get install -y --no-install-recommends "
                                            "vagrant); the rendered Vagrantfiles are checked textually only")
@pytest.mark.parametrize("sample", VALIDATED + ["mixed"], ids=lambda p: getattr(p, "stem", p))
def test_vagrant_validates_rendered_lab(sample: Path | str, tmp_path: Path) -> None:
    topology = load_topology(MIXED) if sample == "mixed" else load_topology_file(sample)
    out = tmp_path / "lab"
    render_lab(topology, out, provider_memory_mb=1024)
    env = {**os.environ, "VAGRANT_HOME": str(tmp_path / "vagrant-home"), "VAGRANT_CHECKPOINT_DISABLE": "1"}
    result = subprocess.run([VAGRANT, "validate", "--ignore-provider"], cwd=out, env=env, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Vagrantfile validated successfully" in result.stdout


@needs_keygen
@pytest.mark.skipif(VAGRANT is None, reason="vagrant is not installed")
def test_vagrant_validate_catches_a_broken_lab(tmp_path: Path) -> None:
    """The check above is not vacuous: a misspelt setting fails validation."""
    out = tmp_path / "lab"
    render_lab(star(2), out)
    vagrantfile = out / "Vagrantfile"
    vagrantfile.write_text(vagrantfile.read_text().replace("node.vm.hostname", "node.vm.hostnam", 1))
    env = {**os.environ, "VAGRANT_HOME": str(tmp_path / "vagrant-home"), "VAGRANT_CHECKPOINT_DISABLE": "1"}
    result = subprocess.run([VAGRANT, "validate", "--ignore-provider"], cwd=out, env=env, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode != 0 and "hostnam" in result.stdout + result.stderr


def test_single_host_lab_gets_a_network() -> None:
    lab = plan_lab(load_topology("name: one\nhosts: [{name: h0, ranks: 2}]\n"))
    (net,) = lab.networks
    assert net.kind is NetworkKind.ALONE and lab.hosts[0].address == "198.18.0.10"


def test_link_shape_is_not_needed() -> None:
    """A link's shape changes no network of the lab (the VMs shape their NICs: genie lab shape)."""
    shaped = plan_lab(star(2, shape=LinkShape(rate_bps=10**9, delay_us=100)))
    assert [n.network for n in shaped.networks] == [n.network for n in plan_lab(star(2)).networks]


def test_render_without_ssh_keygen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genie.core.errors import EnvironmentProblem

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(EnvironmentProblem, match="ssh-keygen not found: install openssh-client"):
        render_lab(star(2), tmp_path / "lab")


# ---- shaping inside the VMs: the testbed's own steps, renamed to the VM's NICs --------------------------------
DELAYED = """\
name: lab-delayed
hosts: [h0, h1, h2]
switches: [{name: r0, kind: router}, {name: s0, kind: bridge}]
links:
  - {endpoints: [h0, r0], bandwidth: 1gbit, delay: 2ms, loss: 0.5}
  - {endpoints: [r0, s0], bandwidth: 2gbit}
  - {endpoints: [h1, s0], bandwidth: 1gbit, queue: 50}
  - {endpoints: [h2, s0], delay: 1ms}
"""


@pytest.mark.parametrize("shaper", [Shaper.KERNEL, Shaper.USERSPACE])
def test_vm_shaping_is_the_testbeds_plan_for_its_node(shaper: Shaper) -> None:
    from genie.testbed.plan import build_plan

    topology = load_topology(DELAYED)
    lab = plan_lab(topology)
    testbed = build_plan(topology, LAYOUT_NAME, netem_available=True, shaper=shaper).steps
    for machine in lab.machines:
        shaping = plan_machine_shaping(lab, machine.name, shaper, vm_addresses(lab, machine.name))
        rename = {i.testbed_ifname: i.ifname for i in shaping.interfaces}
        netns = f"genie-{LAYOUT_NAME}-{machine.name}"
        expected = [s for s in testbed if getattr(s, "netns", None) == netns
                    and isinstance(s, (AddHtb, AddNetem, AddPfifo, AddQueueRule, StartEmulator))
                    or isinstance(s, SetSysctl) and s.netns == netns and s.key.startswith("net.ipv4.tcp_")]
        assert len(shaping.steps) == len(expected) and shaping.steps, machine.name
        for ours, theirs in zip(shaping.steps, expected):
            assert type(ours) is type(theirs) and ours.netns == machine.name
            if isinstance(theirs, StartEmulator):
                assert ours.config.stages == theirs.config.stages
                assert [(q.queue_num, q.ifname) for q in ours.config.queues] == \
                    [(q.queue_num, rename[q.ifname]) for q in theirs.config.queues]
            elif hasattr(theirs, "ifname"):
                assert replace(ours, netns=netns, ifname=theirs.ifname) == theirs  # type: ignore[call-arg]
                assert ours.ifname == rename[theirs.ifname] and ours.ifname.startswith("ens")  # type: ignore
            else:
                assert replace(ours, netns=netns) == theirs
    h0 = plan_machine_shaping(lab, "h0", shaper, vm_addresses(lab, "h0"))
    assert [(i.link_index, i.address, i.ifname, i.testbed_ifname) for i in h0.interfaces] == [
        (0, lab.end_address(0, "h0"), "ens5", "eth0")]
    kinds = [type(s) for s in h0.steps]
    assert AddHtb in kinds and (AddNetem in kinds) is (shaper is Shaper.KERNEL)
    r0 = plan_machine_shaping(lab, "r0", shaper, vm_addresses(lab, "r0"))
    assert [i.link_index for i in r0.interfaces] == [0, 1], "both ends of every link between VMs are shaped"


def test_vm_shaping_errors() -> None:
    lab = plan_lab(load_topology(DELAYED))
    missing = r"h0: no interface has the lab address 198\.18\.1\.10 \(links\[0\] h0 - r0\)"
    with pytest.raises(EnvironmentProblem, match=missing):
        plan_machine_shaping(lab, "h0", Shaper.KERNEL, {"10.0.2.15": "eth0"})
    with pytest.raises(InputError, match=r"^--machine: expected one of the lab's VMs \(h0, h1, h2, r0, s0\), "
                                         r"got 's1'"), flag_names(LAB_FLAGS):
        plan_machine_shaping(lab, "s1", Shaper.KERNEL, {})
    port = r"s0: no interface has the MAC address of bridge port 02:67:00:00:01:01 \(links\[1\] s0 - r0\)"
    with pytest.raises(EnvironmentProblem, match=port):
        plan_machine_shaping(lab, "s0", Shaper.KERNEL, {"10.0.2.15": "eth0"})


def test_host_backend_refuses_what_is_not_shaping() -> None:
    from genie.testbed.netlink import HostNetlinkBackend
    from genie.testbed.steps import AddRoute, NextHop

    with pytest.raises(TypeError, match="not a step a host applies to itself"):
        HostNetlinkBackend().apply(AddRoute("h0", "10.0.0.1/32", (NextHop("eth1"),)))


def test_virtualbox_nics_need_ich9_or_are_refused(tmp_path: Path) -> None:
    from genie.lab.render import virtualbox_nics

    wide = load_topology("name: wide\nhosts: [{prefix: h, count: 10}]\nswitches: [{name: r, kind: router}]\n"
                         "links:\n" + "".join(f"  - {{endpoints: [h{i}, r]}}\n" for i in range(10)))
    lab = plan_lab(wide)
    assert virtualbox_nics(lab)["r"] == 11 and virtualbox_nics(lab)["h0"] == 2
    text = lab_files(lab, repo="..")["Vagrantfile"]
    assert text.count('vb.customize ["modifyvm", :id, "--chipset", "ich9"]') == 1
    assert "# 11 NICs (NAT + 10 lab networks): more than the PIIX3 chipset's 8" in text
    huge = load_topology("name: huge\nhosts: [{prefix: h, count: 36}]\nswitches: [{name: core, kind: router}]\n"
                         "links:\n" + "".join(f"  - {{endpoints: [h{i}, core]}}\n" for i in range(36)))
    with pytest.raises(InputError, match=r"^t.yaml: links: router core needs 37 NICs \(NAT \+ 36 lab networks\), "
                                         r"more than the 36 VirtualBox's ICH9 chipset allows"):
        lab_files(plan_lab(huge), repo="..", source="t.yaml")


def test_default_sizing_follows_the_host_and_warns() -> None:
    topology = load_topology_file(ROOT / "topologies" / "leaf-spine-2x4.yaml")
    big = default_sizing(topology, host_memory_mb=64 * 1024, host_cpus=32)
    assert (big.memory_mb, big.cpus, big.router_memory_mb, big.router_cpus) == (2048, 2, 512, 1)
    small = default_sizing(topology, host_memory_mb=16 * 1024, host_cpus=8)
    assert small.memory_mb == 1280 and small.cpus == 1  # (12288 - 4 * 512) / 8 = 1280
    lab = plan_lab(topology, memory_mb=small.memory_mb, cpus=small.cpus)
    warnings = sizing_warnings(lab, host_memory_mb=16 * 1024, host_cpus=8)
    assert len(warnings) == 1 and "12 vCPUs and this machine has 8 CPUs" in warnings[0]
    assert not sizing_warnings(lab, host_memory_mb=16 * 1024, host_cpus=12)
    tight = sizing_warnings(plan_lab(topology), host_memory_mb=8 * 1024, host_cpus=64)
    assert tight == ["the lab's 12 VMs take 18432 MiB of memory and this machine has 8192 MiB: lower `memory_mb` "
                     "/ `router_memory_mb`, or use a larger host"]


@needs_keygen
def test_cli_render_sizes_from_the_host_and_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genie.cli.lab_cmd import app
    from genie.services import lab as lab_service

    monkeypatch.setattr(lab_service, "host_resources", lambda: (4096, 2))
    result = CliRunner().invoke(app, ["render", str(ROOT / "topologies" / "leaf-spine-2x4.yaml"),
                                      str(tmp_path / "lab"), "--router-cpus", "2"])
    assert result.exit_code == 0, result.output
    vagrantfile = (tmp_path / "lab" / "Vagrantfile").read_text()
    assert vagrantfile.count("lv.memory = 1024") == 8 and vagrantfile.count("lv.cpus = 2") == 4
    assert "warning: the lab's 12 VMs take 10240 MiB of memory and this machine has 4096 MiB: lower --memory / " \
           "--router-memory" in result.output
    assert "warning: the lab's VMs have 16 vCPUs" in result.output
    bad = CliRunner().invoke(app, ["render", str(ROOT / "topologies" / "star-4.yaml"), str(tmp_path / "x"),
                                   "--router-cpus", "0"])
    assert isinstance(bad.exception, InputError) and str(bad.exception).startswith("--router-cpus: expected")


def test_wheelhouse_argv_downloads_what_the_vms_install(tmp_path: Path) -> None:
    from genie.services.lab import wheelhouse_argv

    argv = wheelhouse_argv(ROOT, tmp_path / "wheelhouse", python="python3")
    assert argv[:4] == ["python3", "-m", "pip", "download"]
    assert argv[argv.index("--dest") + 1] == str(tmp_path / "wheelhouse")
    assert argv[argv.index("--python-version") + 1] == "3.11" and "--only-binary=:all:" in argv
    for requirement in ("pyroute2>=0.9", "mpi4py>=4.0", "mpich", "pytest>=8", "setuptools>=77", "wheel", "pip"):
        assert requirement in argv
    requirements = argv[len(argv) - 1 - argv[::-1].index("--platform") + 2:]
    assert requirements[0] == "typer>=0.12,<0.29" and len(requirements) == len(set(requirements))


@needs_keygen
def test_offline_lab_installs_from_its_wheelhouse(tmp_path: Path) -> None:
    lab = plan_lab(star(2))
    genie_sh = lab_files(lab, repo="..", wheelhouse="wheelhouse")["provision/genie.sh"]
    assert "export PIP_NO_INDEX=1 PIP_FIND_LINKS=/vagrant/wheelhouse" in genie_sh
    assert "PIP_NO_INDEX" not in lab_files(lab, repo="..")["provision/genie.sh"]


def test_ssh_probe_command_quotes_the_remote_argv() -> None:
    from genie.services.lab import ssh_probe_command

    inventory = lab_inventory(plan_lab(star(2)))
    argv = ssh_probe_command(inventory)("h1", ["rtt", "--to", "198.18.0.10", "--port", "47311"])
    assert argv == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "vagrant@198.18.0.11",
                    "/opt/genie/.venv/bin/python -m genie.testbed.probe rtt --to 198.18.0.10 --port 47311"]
    assert "-tt" in ssh_probe_command(inventory, tty=True)("h0", ["serve"])


@needs_keygen
@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck is not installed (scripts/setup.sh --test, or apt-get install shellcheck)")
@pytest.mark.parametrize("sample", SAMPLES + ["mixed", "offline"], ids=lambda p: getattr(p, "stem", p))
def test_provisioning_scripts_pass_shellcheck(sample: Path | str, tmp_path: Path) -> None:
    topology = load_topology(MIXED) if sample in ("mixed", "offline") else load_topology_file(sample)
    write_lab(plan_lab(topology), tmp_path, wheelhouse="wheelhouse" if sample == "offline" else None)
    scripts = [str(tmp_path / path) for path in PROVISION_SCRIPTS]
    result = subprocess.run(["shellcheck", "--shell=bash", *scripts], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_shellcheck_is_not_vacuous(tmp_path: Path) -> None:
    script = tmp_path / "bad.sh"
    script.write_text("#!/usr/bin/env bash\nrm -rf $1/*\n")
    assert subprocess.run(["shellcheck", str(script)], capture_output=True, timeout=60).returncode != 0


@needs_keygen
def test_cli_shape_dry_run_names_a_missing_interface(tmp_path: Path) -> None:
    from genie.cli.lab_cmd import app

    render_lab(load_topology(DELAYED), tmp_path / "lab")
    result = CliRunner().invoke(app, ["shape", str(tmp_path / "lab"), "--machine", "h0", "--dry-run"])
    assert isinstance(result.exception, EnvironmentProblem), result.output  # this machine is not the lab's h0
    assert "no interface has the lab address 198.18.1.10" in str(result.exception)


@needs_keygen
@pytest.mark.skipif(VAGRANT is None, reason="vagrant is not installed")
def test_vagrant_validates_an_ich9_offline_lab(tmp_path: Path) -> None:
    wide = load_topology("name: wide\nhosts: [{prefix: h, count: 10}]\nswitches: [{name: r, kind: router}]\n"
                         "links:\n" + "".join(f"  - {{endpoints: [h{i}, r]}}\n" for i in range(10)))
    out = tmp_path / "lab"
    write_lab(plan_lab(wide, memory_mb=1024), out, wheelhouse="wheelhouse")
    assert '"--chipset", "ich9"' in (out / "Vagrantfile").read_text()
    env = {**os.environ, "VAGRANT_HOME": str(tmp_path / "vagrant-home"), "VAGRANT_CHECKPOINT_DISABLE": "1"}
    result = subprocess.run([VAGRANT, "validate", "--ignore-provider"], cwd=out, env=env, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
