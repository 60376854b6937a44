"""The real testbed service (`up`, `status`, `down`, `down_all`) driven without root through `FakeEnvironment`:
its kernel model shows the end state — namespaces, interfaces, addresses, routes, qdiscs, emulators."""

from __future__ import annotations

import contextlib
import ipaddress
from pathlib import Path

import pytest

from genie.core.errors import GenieError
from genie.core.testbed import Shaping
from genie.core import testbed as core_testbed
from genie.core.topology import Host, Link, LinkShape, Topology
from genie.testbed import service
from genie.testbed.backend import FakeBackend, StepFailed, apply_plan, undo_steps
from genie.testbed.emulators import emulator_dir
from genie.testbed.environment import FakeEnvironment
from genie.testbed.kernel_model import KernelModel, Namespace
from genie.testbed.plan import build_plan
from genie.testbed.state import STATE_DIR_ENV, load_record, record_path
from genie.testbed.steps import CreateNetns, CreateVethPair, ShaperChoice, StartEmulator
from genie.topology import load_topology_file, star

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    return tmp_path / "state"


def _up(env: FakeEnvironment, file: str, name: str, **options: object) -> core_testbed.TestbedInfo:
    info = service.up(load_topology_file(TOPOLOGIES / file), name=name, source=TOPOLOGIES / file,
                      environment=env, **options)  # type: ignore[arg-type]
    assert isinstance(info, core_testbed.TestbedInfo)
    return info


def _reaches(ns: Namespace, address: str) -> bool:
    """Does namespace `ns` have a route (connected subnet of an up interface, or static) to `address`?"""
    target = ipaddress.ip_address(address)
    connected = [ipaddress.ip_interface(cidr).network for i in ns.interfaces.values() if i.up and i.kind != "loopback"
                 for cidr in i.addresses]
    static = [ipaddress.ip_network(destination) for destination in ns.routes]
    return any(target in network for network in connected + static)


def _assert_built(env: FakeEnvironment, info: core_testbed.TestbedInfo, shaped_rate_bps: dict[int, int]) -> None:
    kernel = env.kernel
    assert kernel.genie_namespaces() == sorted(kernel.namespaces)
    assert all(netns.startswith(info.prefix) for netns in kernel.namespaces)
    nodes = {h.name for h in info.topology.hosts} | {s.name for s in info.topology.switches}
    assert set(kernel.namespaces) == {f"{info.prefix}{node}" for node in nodes}
    for netns, ns in kernel.namespaces.items():
        assert ns.interfaces["lo"].up
        assert "default" not in ns.routes  # no default route anywhere
        assert all(i.up for i in ns.interfaces.values())
    for host in info.hosts:
        ns = kernel.namespaces[host.netns]  # type: ignore[index]
        assert any(cidr.startswith(f"{host.address}/") for cidr in ns.interfaces["eth0"].addresses)
        assert all(_reaches(ns, other.address) for other in info.hosts if other is not host)
        status = kernel.inspect_namespace(host.netns)  # type: ignore[arg-type]
        assert not any(route.destination == "default" for route in status.routes)
    for end in info.link_ends:
        interface = kernel.interface(end.netns, end.ifname)  # type: ignore[arg-type]
        assert interface.kind == "veth"
        other = next(e for e in info.link_ends if e.link_index == end.link_index and e is not end)
        assert interface.peer == (other.netns, other.ifname)
        qdiscs = kernel.inspect_namespace(end.netns).interfaces  # type: ignore[arg-type]
        qdisc = next(i for i in qdiscs if i.ifname == end.ifname).qdiscs[0]
        assert (qdisc.kind, qdisc.rate_bps) == ("htb", shaped_rate_bps[end.link_index])


def test_star_4_up_status_down(state_dir: Path) -> None:
    env = FakeEnvironment()
    info = _up(env, "star-4.yaml", "fk-star")
    _assert_built(env, info, {i: 10**9 for i in range(4)})
    bridge = env.kernel.namespaces["genie-fk-star-s0"]
    assert bridge.interfaces["br0"].kind == "bridge"
    assert [i.master for name, i in bridge.interfaces.items() if name.startswith("eth")] == ["br0"] * 4
    assert not any(i.addresses for name, i in bridge.interfaces.items() if name != "lo")  # a bridge has no L3

    state = service.status(info.name, environment=env)
    assert state.complete and all(ns.present for ns in state.namespaces)
    eth0 = next(i for i in state.namespaces[0].interfaces if i.ifname == "eth0")
    assert eth0.addresses == ("198.18.0.1/24",) and eth0.qdiscs[0].rate_bps == 10**9
    [summary] = service.list_testbeds(environment=env)
    assert info.shaper is Shaping.HTB and summary.shaper is Shaping.HTB
    assert summary.namespaces_present == summary.namespaces_planned == 5 and summary.complete
    assert load_record(info.name).applied_count == len(load_record(info.name).steps)

    report = service.down(info.name, environment=env)
    assert report.testbeds == (info.name,)
    assert env.kernel.is_empty() and not record_path(info.name).exists()
    with pytest.raises(GenieError, match="no testbed named 'fk-star'"):
        service.status(info.name, environment=env)


def test_leaf_spine_routes_are_ecmp_with_no_default_and_down_leaves_nothing(state_dir: Path) -> None:
    env = FakeEnvironment()
    info = _up(env, "leaf-spine-2x4.yaml", "fk-ls")
    _assert_built(env, info, {i: (10**9 if i < 8 else 2 * 10**9) for i in range(12)})
    leaf0 = env.kernel.namespaces["genie-fk-ls-leaf0"]
    assert leaf0.sysctls["net.ipv4.ip_forward"] == "1"
    remote = [leaf0.routes[f"{address}/32"] for address in ("198.18.0.17", "198.18.0.29")]
    assert all(sorted(hop.gateway for hop in r.nexthops) == ["198.18.0.34", "198.18.0.38"]  # type: ignore
               for r in remote)
    service.down(info.name, environment=env)
    assert env.kernel.is_empty() and not record_path(info.name).exists()


@pytest.mark.parametrize("fail_at", [0, 1, 9, 40, -1])
def test_a_step_failing_mid_way_leaves_nothing_and_no_record(state_dir: Path, fail_at: int) -> None:
    steps = build_plan(load_topology_file(TOPOLOGIES / "leaf-spine-2x4.yaml"), "fk-fail",
                       netem_available=True).steps
    env = FakeEnvironment(fail_at=fail_at % len(steps))
    with pytest.raises(StepFailed, match=f"step {fail_at % len(steps) + 1} "):
        _up(env, "leaf-spine-2x4.yaml", "fk-fail")
    assert env.kernel.is_empty()
    assert not record_path("fk-fail").exists() and service.list_testbeds(environment=env) == []
    [backend] = env.backends
    assert backend.undone == list(reversed(backend.applied))


def test_a_namespace_already_there_is_refused_before_anything(state_dir: Path) -> None:
    env = FakeEnvironment()
    env.kernel.apply(CreateNetns("genie-fk-busy-h1"))  # someone else's
    with pytest.raises(GenieError, match="namespace genie-fk-busy-h1 already exists"):
        service.up(star(2), name="fk-busy", environment=env)
    assert list(env.kernel.namespaces) == ["genie-fk-busy-h1"] and env.backends == []
    assert not record_path("fk-busy").exists()


def test_conflicting_steps_fail_like_the_kernel_and_roll_back() -> None:
    steps = build_plan(star(2), "fk-dup", netem_available=True).steps
    kernel = KernelModel()
    apply_plan(FakeBackend(kernel=kernel), steps)
    built = kernel.inspect_namespace("genie-fk-dup-h0")
    with pytest.raises(StepFailed, match="step 1 .*already exists"):
        apply_plan(FakeBackend(kernel=kernel), steps)  # the same plan again: its first namespace exists
    veth = next(s for s in steps if isinstance(s, CreateVethPair))
    with pytest.raises(FileExistsError):
        kernel.apply(veth)
    assert kernel.inspect_namespace("genie-fk-dup-h0") == built  # a failed step leaves nothing
    undo_steps(FakeBackend(kernel=kernel), steps)
    assert kernel.is_empty()
    assert undo_steps(FakeBackend(kernel=kernel), steps) == []  # undoing what is gone is fine


def test_a_veth_end_goes_with_its_peer_and_with_its_namespace() -> None:
    kernel = KernelModel()
    for netns in ("genie-x-a", "genie-x-b"):
        kernel.apply(CreateNetns(netns))
    kernel.apply(CreateVethPair("genie-x-a", "eth0", "genie-x-b", "eth0"))
    kernel.remove_namespace("genie-x-a")
    assert list(kernel.namespaces["genie-x-b"].interfaces) == ["lo"]


def test_userspace_emulators_are_recorded_running_and_ended_by_down(state_dir: Path) -> None:
    env = FakeEnvironment(netem=False)  # AUTO picks the userspace emulator
    topology = Topology("pair", (Host("h0"), Host("h1")), (), (Link("h0", "h1", LinkShape(10**9, 100.0)),))
    info = service.up(topology, name="fk-us", shaper=ShaperChoice.AUTO, environment=env)
    assert isinstance(info, core_testbed.TestbedInfo)
    record = load_record("fk-us")
    pids = sorted(env.kernel.processes)
    assert sorted(pid for _, pid, _ in record.emulators) == pids and len(pids) == 2
    assert {netns for netns, _, _ in record.emulators} == {"genie-fk-us-h0", "genie-fk-us-h1"}
    assert all(ns.queue_rules for ns in env.kernel.namespaces.values())
    state = service.status("fk-us", environment=env)
    assert all(e.running for e in state.emulators) and len(state.emulators) == 2
    report = service.down("fk-us", environment=env)
    assert sorted(report.pids_ended) == pids
    assert env.kernel.is_empty() and not emulator_dir("fk-us").exists()


def test_a_failing_emulator_start_ends_the_emulators_already_started(state_dir: Path) -> None:
    topology = Topology("pair", (Host("h0"), Host("h1")), (), (Link("h0", "h1", LinkShape(10**9, 100.0)),))
    steps = service.up(topology, name="fk-uf", dry_run=True, shaper=ShaperChoice.USERSPACE,
                       environment=FakeEnvironment())
    assert isinstance(steps, list)
    second = [i for i, s in enumerate(steps) if isinstance(s, StartEmulator)][1]
    env = FakeEnvironment(fail_at=second)
    with pytest.raises(StepFailed):
        service.up(topology, name="fk-uf", shaper=ShaperChoice.USERSPACE, environment=env)
    assert env.kernel.is_empty() and not record_path("fk-uf").exists()


def test_down_all_removes_recorded_testbeds_and_orphan_namespaces(state_dir: Path) -> None:
    env = FakeEnvironment()
    _up(env, "star-4.yaml", "fk-all")
    env.kernel.apply(CreateNetns("genie-orphan-h0"))
    env.kernel.apply(StartEmulator("genie-orphan-h0", None))  # type: ignore[arg-type]  # a process inside
    orphan_pid = env.kernel.namespace_pids("genie-orphan-h0")
    env.kernel.apply(CreateNetns("other-netns"))  # not genie's: never touched
    report = service.down_all(environment=env)
    assert report.testbeds == ("fk-all",) and report.orphan_namespaces == ("genie-orphan-h0",)
    assert report.pids_ended == tuple(orphan_pid)
    assert list(env.kernel.namespaces) == ["other-netns"] and not env.kernel.processes


def test_without_net_admin_nothing_is_done(state_dir: Path) -> None:
    env = FakeEnvironment(net_admin=False)
    with pytest.raises(GenieError, match="CAP_NET_ADMIN"):
        service.up(star(2), name="fk-noroot", environment=env)
    assert env.kernel.is_empty() and not state_dir.exists()


def test_a_netem_link_gets_netem_under_the_htb_class(state_dir: Path) -> None:
    env = FakeEnvironment(netem=True)
    topology = Topology("pair", (Host("h0"), Host("h1")), (), (Link("h0", "h1", LinkShape(10**9, 100.0)),))
    info = service.up(topology, name="fk-nm", environment=env)
    assert isinstance(info, core_testbed.TestbedInfo)
    for end in info.link_ends:
        status = env.kernel.inspect_namespace(end.netns)  # type: ignore[arg-type]
        qdiscs = next(i for i in status.interfaces if i.ifname == end.ifname).qdiscs
        assert [(q.kind, q.handle, q.parent) for q in qdiscs] == [("htb", "1:", "root"), ("netem", "10:", "1:1"),
                                                                  ("netem", "20:", "1:2")]
        assert qdiscs[1].detail.startswith("delay 100us") and qdiscs[2].detail == qdiscs[1].detail
    service.down("fk-nm", environment=env)
    assert env.kernel.is_empty()


class _InterruptedEnvironment(FakeEnvironment):
    """Ctrl-C arrives while step `at` is applied."""

    at: int = 0

    @contextlib.contextmanager
    def backend(self, testbed, on_started=None):  # type: ignore[no-untyped-def,override]
        environment = self

        class Interrupting(FakeBackend):
            def apply(self, step):  # type: ignore[no-untyped-def]
                if len(self.applied) == environment.at:
                    raise KeyboardInterrupt
                super().apply(step)

        backend = Interrupting(kernel=self.kernel)
        self.backends.append(backend)
        yield backend


def test_ctrl_c_mid_way_leaves_nothing_and_no_record(state_dir: Path) -> None:
    env = _InterruptedEnvironment()
    env.at = 30
    with pytest.raises(KeyboardInterrupt):
        _up(env, "star-4.yaml", "fk-intr")
    assert env.kernel.is_empty() and not record_path("fk-intr").exists()
    assert len(env.backends[0].applied) == 30 and env.backends[0].undone == env.backends[0].applied[::-1]


@pytest.mark.parametrize("netem", [True, False])
def test_dry_run_as_root_probes_nothing(state_dir: Path, netem: bool) -> None:
    """A dry run changes nothing, as root too: no scratch namespace for the netem probe (issue #17)."""
    topology = Topology("pair", (Host("h0"), Host("h1")), (), (Link("h0", "h1", LinkShape(10**9, 100.0)),))
    env = FakeEnvironment(netem=netem, net_admin=True)
    steps = service.up(topology, name="fk-dry", dry_run=True, environment=env)
    assert isinstance(steps, list) and env.probes == 0 and env.kernel.is_empty()
    assert any(isinstance(s, StartEmulator) for s in steps) is not netem  # the module list still decides
