"""Vagrant labs: the plan (VMs, /24 per segment, routes that reach every host), the rendered files, the
provisioning scripts (with stub `ip`/`sysctl`), the CLI, and `vagrant validate` when vagrant is installed."""

from __future__ import annotations

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
from genie.core.errors import InputError
from genie.core.topology import LinkShape
from genie.inventory import HostfileFormat, hostfile, load_inventory_file
from genie.lab import Lab, MachineRole, NetworkKind, lab_inventory, plan_lab, render_lab
from genie.topology import leaf_spine, load_topology, load_topology_file, ring, star

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


def _walk(lab: Lab, src: str, dst: str, limit: int = 16) -> list[str]:
    """Follow the lab's routes hop by hop (every ECMP branch) from VM `src` to host `dst`'s rank address;
    returns the VMs of the longest branch. Fails when a branch has no route or loops."""
    machines = {m.name: m for m in lab.machines}
    target = machines[dst].address
    owner = {address: name for net in lab.networks for name, address in net.members}
    attached = {m.name: {lab.network(n).network for n in m.networks} for m in lab.machines}
    longest: list[str] = []
    frontier = [[src]]
    while frontier:
        path = frontier.pop()
        here = machines[path[-1]]
        assert len(path) <= limit, f"loop from {src} to {dst}: {path}"
        target_net = next(n for n in lab.networks if n.address_of(dst) == target)
        if target_net.network in attached[here.name]:
            longest = max(longest, path + [dst] if here.name != dst else path, key=len)
            continue
        route = next((r for r in here.routes if r.destination == f"{target}/32"), None)
        assert route is not None, f"{here.name} has no route to {dst} ({target})"
        for gateway in route.gateways:
            hop = owner[gateway]
            shared = any(ipaddress.IPv4Address(gateway) in ipaddress.IPv4Network(net) for net in attached[here.name])
            assert shared, f"{here.name}: gateway {gateway} is not on one of its networks"
            assert machines[hop].forwards or hop == dst, f"{hop} must forward for {src} -> {dst}"
            frontier.append(path + [hop])
    return longest


def _all_labs() -> list[tuple[str, Lab]]:
    labs = [(p.stem, plan_lab(load_topology_file(p))) for p in SAMPLES]
    single = load_topology("name: one\nhosts: [{name: h0, ranks: 2}]\n")
    return labs + [("lab-mixed", plan_lab(load_topology(MIXED))), ("single", plan_lab(single)),
                   ("star-1", plan_lab(star(1)))]


@pytest.mark.parametrize(("name", "lab"), _all_labs(), ids=lambda v: v if isinstance(v, str) else "")
def test_plan_structure_and_reachability(name: str, lab: Lab) -> None:
    topology = lab.topology
    routers = [s for s in topology.switches if s.kind.value == "router"]
    assert [m.name for m in lab.hosts] == [h.name for h in topology.hosts]
    assert [m.name for m in lab.routers] == [r.name for r in routers]
    assert sum(m.ranks for m in lab.hosts) == topology.world_size
    subnet = ipaddress.IPv4Network(topology.subnet)
    addresses = [address for net in lab.networks for _, address in net.members]
    assert len(addresses) == len(set(addresses)), "every VM address is unique"
    blocks = [ipaddress.IPv4Network(net.network) for net in lab.networks]
    for net, block in zip(lab.networks, blocks):
        assert block.prefixlen == 24 and block.subnet_of(subnet)
        assert net.hypervisor_address == str(block.network_address + 1)
        offsets = [int(ipaddress.IPv4Address(a)) - int(block.network_address) for _, a in net.members]
        assert offsets == list(range(10, 10 + len(offsets))), "VMs from .10, never .1 (the hypervisor's)"
    assert all(not a.overlaps(b) for i, a in enumerate(blocks) for b in blocks[i + 1:])
    for machine in lab.machines:
        assert machine.networks, f"{machine.name} has a network"
        if machine.role is MachineRole.HOST:
            assert lab.primary_network(machine.name).address_of(machine.name) == machine.address
        else:
            assert machine.forwards and machine.address is None and machine.ranks == 0
    for src in lab.machines:
        for dst in lab.hosts:
            if src.name != dst.name:
                _walk(lab, src.name, dst.name)


def test_star_is_one_flat_network() -> None:
    lab = plan_lab(load_topology_file(ROOT / "topologies" / "star-4.yaml"))
    (net,) = lab.networks
    assert net.kind is NetworkKind.BRIDGED and net.network == "198.18.0.0/24" and net.description == "bridge s0"
    assert [m.address for m in lab.hosts] == ["198.18.0.10", "198.18.0.11", "198.18.0.12", "198.18.0.13"]
    assert all(not m.routes and not m.forwards for m in lab.machines)


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
    bridged = lab.networks[0]
    assert bridged.kind is NetworkKind.BRIDGED and [m for m, _ in bridged.members] == ["gpu0", "gpu1", "core"]
    assert bridged.network == "10.20.0.0/24"
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
    assert vagrantfile.count("lv.memory = 512") == len(lab.routers)
    assert "BOX = 'example/box'" in vagrantfile
    assert vagrantfile.count('path: "provision/genie.sh"') == len(lab.machines), "routers shape too: genie"
    assert vagrantfile.count('path: "provision/shape.sh", run: "always"') == len(lab.machines)
    assert plan_lab(load_topology_file(out / "topology.yaml")) == lab, "the VMs plan from the same topology"
    for machine in lab.machines:
        assert f"config.vm.define '{machine.name}' do |node|" in vagrantfile
        for name in machine.networks:
            assert f"ip: '{lab.network(name).address_of(machine.name)}', netmask: '255.255.255.0'" in vagrantfile
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
    assert (tmp_path / "Vagrantfile").read_text().count("config.vm.define") == 3
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
if [ "$1" = "-o" ]; then echo "3: eth7    inet 10.0.0.10/24 brd 10.0.0.255 scope global eth7"; fi
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
        "sysctl -q -w net.ipv4.fib_multipath_hash_policy=1 net.ipv4.conf.all.rp_filter=2",
        "ip -o -4 addr show to 10.20.3.0/24",
        "ip link set dev eth7 mtu 9000",
        "ip route replace 10.20.5.10/32 src 10.20.0.10 via 10.20.0.12",
        "ip route replace 10.20.6.10/32 src 10.20.0.10 nexthop via 10.20.1.11 nexthop via 10.20.2.11",
    ]
    assert "2 routes, forwarding on" in result.stdout
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
    assert "lab star-4: 4 host VMs, 1 private network, box debian/bookworm64" in result.output
    assert "h3              198.18.0.13     ranks 1" in result.output
    assert "lv.memory = 1024" in (tmp_path / "lab" / "Vagrantfile").read_text()
    bad = runner.invoke(app, ["render", str(ROOT / "topologies" / "star-4.yaml"), str(tmp_path / "x"),
                              "--memory", "12"])
    assert isinstance(bad.exception, InputError) and not (tmp_path / "x").exists()


@needs_keygen
@pytest.mark.skipif(VAGRANT is None, reason="vagrant is not installed (apt-get install -y --no-install-recommends "
                                            "vagrant); the rendered Vagrantfiles are checked textually only")
@pytest.mark.parametrize("sample", SAMPLES + ["mixed"], ids=lambda p: getattr(p, "stem", p))
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
