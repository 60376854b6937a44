"""The testbed planner (pure, no root): golden plans, naming, addressing, routing, shaping, up-front errors."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from genie.core.dilation import TimeDilation
from genie.core.errors import InputError
from genie.core.testbed import LinkModel, Shaping
from genie.core.topology import Host, Link, LinkShape, Switch, SwitchKind, Topology
from genie.testbed.layout import check_testbed_name, netns_name, plan_layout
from genie.testbed.plan import RTO_MIN_US, build_plan, describe_plan, dilated_rto_min_us, plan_testbed
from genie.testbed.shaping import htb_class, htb_quantum_bytes
from genie.testbed.steps import (AddAddress, AddHtb, AddNetem, AddPfifo, AddRoute, CreateNetns, CreateVethPair,
                                 QdiscParent, SetSysctl, Shaper, step_namespaces)
from genie.topology import leaf_spine, load_topology_file, ring, star

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
GBIT = 10**9


def _lines(topology: Topology, name: str, *, netem: bool = False) -> list[str]:
    return [step.describe() for step in plan_testbed(topology, name, netem_available=netem)]


def _without_namespace_preamble(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith("netns add") and "link set lo up" not in line
            and "disable_ipv6" not in line]


def test_star_4_golden_plan() -> None:
    lines = _lines(load_topology_file(TOPOLOGIES / "star-4.yaml"), "s4")
    ns = [f"genie-s4-{n}" for n in ("h0", "h1", "h2", "h3", "s0")]
    preamble = []
    for name in ns:
        preamble += [f"netns add {name}", f"{name}: link set lo up",
                     f"{name}: sysctl net.ipv6.conf.all.disable_ipv6=1",
                     f"{name}: sysctl net.ipv6.conf.default.disable_ipv6=1"]
    htb = "tc htb dev {dev} root 1: class 1:1 rate 1 Gbit/s burst 1000000B ceil 1.02 Gbit/s cburst 128KiB quantum 200000; class 1:2 (pure ACKs, prio 0) rate 1.02 Gbit/s"
    links = []
    for i in range(4):
        h = f"genie-s4-h{i}"
        links += [f"veth {h}:eth0 <-> genie-s4-s0:eth{i} mtu 1500",
                  f"{h}: addr add 198.18.0.{i + 1}/24 dev eth0",
                  f"{h}: " + htb.format(dev="eth0"),
                  f"{h}: link set eth0 up",
                  f"genie-s4-s0: link set eth{i} master br0",
                  "genie-s4-s0: " + htb.format(dev=f"eth{i}"),
                  f"genie-s4-s0: link set eth{i} up"]
    bridge = ["genie-s4-s0: link add br0 type bridge", "genie-s4-s0: link set br0 up"] + [
        f"genie-s4-s0: sysctl net.bridge.bridge-nf-call-{table}=0 (where the kernel has it)"
        for table in ("iptables", "ip6tables", "arptables")]
    host_tcp = [f"genie-s4-h{i}: sysctl net.ipv4.tcp_slow_start_after_idle=0" for i in range(4)]
    assert lines == preamble + bridge + links + host_tcp  # one L2 segment: no routes at all


def test_ring_4_golden_plan_forwards_through_hosts() -> None:
    lines = _lines(ring(4), "r4")
    assert [line for line in lines if "ip_forward" in line or "multipath" in line] == [
        f"genie-r4-h{i}: sysctl {key}" for i in range(4)
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.fib_multipath_hash_fields=0x0037",
                    "net.ipv4.fib_multipath_hash_policy=3")]
    body = _without_namespace_preamble(lines)
    body = [line for line in body if "sysctl" not in line]
    assert body == [
        "veth genie-r4-h0:eth0 <-> genie-r4-h1:eth0 mtu 1500",
        "genie-r4-h0: addr add 198.18.0.1/30 dev eth0", "genie-r4-h0: link set eth0 up",
        "genie-r4-h1: addr add 198.18.0.2/30 dev eth0", "genie-r4-h1: link set eth0 up",
        "veth genie-r4-h1:eth1 <-> genie-r4-h2:eth0 mtu 1500",
        "genie-r4-h1: addr add 198.18.0.5/30 dev eth1", "genie-r4-h1: link set eth1 up",
        "genie-r4-h2: addr add 198.18.0.6/30 dev eth0", "genie-r4-h2: link set eth0 up",
        "veth genie-r4-h2:eth1 <-> genie-r4-h3:eth0 mtu 1500",
        "genie-r4-h2: addr add 198.18.0.9/30 dev eth1", "genie-r4-h2: link set eth1 up",
        "genie-r4-h3: addr add 198.18.0.10/30 dev eth0", "genie-r4-h3: link set eth0 up",
        "veth genie-r4-h3:eth1 <-> genie-r4-h0:eth1 mtu 1500",
        "genie-r4-h3: addr add 198.18.0.13/30 dev eth1", "genie-r4-h3: link set eth1 up",
        "genie-r4-h0: addr add 198.18.0.14/30 dev eth1", "genie-r4-h0: link set eth1 up",
        # h0 -> h2 (opposite): both ways round the ring; h0 -> h3: via h3's address on the shared link
        "genie-r4-h0: route add 198.18.0.6/32 nexthop via 198.18.0.2 dev eth0 nexthop via 198.18.0.13 dev eth1 "
        "src 198.18.0.1",
        "genie-r4-h0: route add 198.18.0.10/32 via 198.18.0.13 dev eth1 src 198.18.0.1",
        # h1 is attached to h2's link, but through eth1: pin the source to h1's rank address
        "genie-r4-h1: route add 198.18.0.6/32 dev eth1 src 198.18.0.2",
        "genie-r4-h1: route add 198.18.0.10/32 nexthop via 198.18.0.1 dev eth0 nexthop via 198.18.0.6 dev eth1 "
        "src 198.18.0.2",
        "genie-r4-h2: route add 198.18.0.1/32 nexthop via 198.18.0.5 dev eth0 nexthop via 198.18.0.10 dev eth1 "
        "src 198.18.0.6",
        "genie-r4-h2: route add 198.18.0.2/32 via 198.18.0.5 dev eth0 src 198.18.0.6",
        "genie-r4-h2: route add 198.18.0.10/32 dev eth1 src 198.18.0.6",
        "genie-r4-h3: route add 198.18.0.1/32 via 198.18.0.14 dev eth1 src 198.18.0.10",
        "genie-r4-h3: route add 198.18.0.2/32 nexthop via 198.18.0.14 dev eth1 nexthop via 198.18.0.9 dev eth0 "
        "src 198.18.0.10",
        "genie-r4-h3: route add 198.18.0.6/32 via 198.18.0.9 dev eth0 src 198.18.0.10",
    ]


def test_leaf_spine_plan_routes_with_ecmp_over_the_spines() -> None:
    plan = build_plan(load_topology_file(TOPOLOGIES / "leaf-spine-2x4.yaml"), "ls", netem_available=False)
    routes = [s for s in plan.steps if isinstance(s, AddRoute)]
    by_ns: dict[str, list[str]] = {}
    for route in routes:
        by_ns.setdefault(route.netns, []).append(route.describe().split(": ", 1)[1])
    assert by_ns["genie-ls-leaf0"] == [
        f"route add 198.18.0.{a}/32 nexthop via 198.18.0.34 dev eth4 nexthop via 198.18.0.38 dev eth5"
        for a in (17, 21, 25, 29)]  # hosts of leaf0 are attached: no routes to them
    assert by_ns["genie-ls-spine0"] == (
        [f"route add 198.18.0.{a}/32 via 198.18.0.33 dev eth0" for a in (1, 5, 9, 13)]
        + [f"route add 198.18.0.{a}/32 via 198.18.0.41 dev eth1" for a in (17, 21, 25, 29)])
    assert by_ns["genie-ls-h0"] == [f"route add 198.18.0.{a}/32 via 198.18.0.2 dev eth0 src 198.18.0.1"
                                    for a in (5, 9, 13, 17, 21, 25, 29)]
    assert len(routes) == 8 * 7 + 2 * 4 + 2 * 8
    assert all(r.destination.endswith("/32") for r in routes)  # never a default route
    sysctls = {(s.netns, s.key, s.value) for s in plan.steps if isinstance(s, SetSysctl) and "ipv6" not in s.key}
    assert sysctls == {(f"genie-ls-{r}", "net.ipv4.ip_forward", "1") for r in ("leaf0", "leaf1", "spine0", "spine1")} | {
        (f"genie-ls-{r}", key, value) for r in ("leaf0", "leaf1")  # ECMP on the 5-tuple
        for key, value in (("net.ipv4.fib_multipath_hash_policy", "3"), ("net.ipv4.fib_multipath_hash_fields", "0x0037"))} | {
        (f"genie-ls-h{i}", "net.ipv4.tcp_slow_start_after_idle", "0") for i in range(8)}  # hosts only
    rates = sorted({s.rate_bps for s in plan.steps if isinstance(s, AddHtb)})
    assert rates == [GBIT, 2 * GBIT]
    assert sum(isinstance(s, AddHtb) for s in plan.steps) == 2 * 12  # both ends of every link


@pytest.mark.parametrize("topology", [star(4), ring(4), ring(2), leaf_spine(2, 2, 3), star(1),
                                      load_topology_file(TOPOLOGIES / "ring-8.yaml")],
                         ids=lambda t: t.name)
def test_plan_invariants(topology: Topology) -> None:
    plan = build_plan(topology, "inv", netem_available=False)
    created: set[str] = set()
    for step in plan.steps:
        if isinstance(step, CreateNetns):
            assert step.netns.startswith("genie-inv-")
            created.add(step.netns)
        else:  # every step acts inside a namespace the plan created before it: never in the root namespace
            assert set(step_namespaces(step)) <= created, step
        for field in ("ifname", "ifname_a", "ifname_b"):
            assert len(getattr(step, field, "") or "") <= 15
    network = ipaddress.IPv4Network(topology.subnet)
    addresses = [s.address for s in plan.steps if isinstance(s, AddAddress)]
    assert len(addresses) == len(set(addresses))
    assert all(ipaddress.IPv4Address(a) in network for a in addresses)
    eth0 = {s.netns: s.address for s in plan.steps if isinstance(s, AddAddress) and s.ifname == "eth0"}
    for endpoint in plan.info.hosts:
        assert endpoint.netns == netns_name("inv", endpoint.host)
        if topology.links:
            assert eth0[endpoint.netns] == endpoint.address  # ranks listen on eth0
    assert len(plan.info.link_ends) == 2 * len(topology.links)
    assert len(plan.steps) == len(set(plan.steps))


def test_link_ends_name_every_interface() -> None:
    plan = build_plan(star(2), "le", netem_available=False)
    assert [(e.link_index, e.node, e.peer, e.netns, e.ifname) for e in plan.info.link_ends] == [
        (0, "h0", "s0", "genie-le-h0", "eth0"), (0, "s0", "h0", "genie-le-s0", "eth0"),
        (1, "h1", "s0", "genie-le-h1", "eth0"), (1, "s0", "h1", "genie-le-s0", "eth1")]
    assert plan.info.prefix == "genie-le-"
    assert plan.info.shaper is Shaping.NONE and plan.info.shaper.label == "none"


def test_only_bridges_turn_off_bridged_netfilter_and_only_where_the_kernel_has_it() -> None:
    """br_netfilter's keys exist only where the module is loaded: each bridge's namespace sets them if present."""
    plan = build_plan(leaf_spine(2, 2, 3), "bn", netem_available=False)  # routers: no bridge
    assert not any(isinstance(s, SetSysctl) and s.key.startswith("net.bridge.") for s in plan.steps)
    steps = [s for s in plan_testbed(star(3), "bn", netem_available=False)
             if isinstance(s, SetSysctl) and s.key.startswith("net.bridge.")]
    assert {(s.netns, s.value, s.if_present) for s in steps} == {("genie-bn-s0", "0", True)}
    assert len(steps) == 3
    assert not any(s.if_present for s in plan.steps if isinstance(s, SetSysctl))  # every other sysctl is required


def test_mixed_fabric_bridge_behind_a_router() -> None:
    """Two bridged racks joined by a router: hosts route to the other rack through the router's address."""
    topology = Topology(
        "mixed", hosts=tuple(Host(f"h{i}") for i in range(4)),
        switches=(Switch("b0"), Switch("b1"), Switch("r0", SwitchKind.ROUTER)),
        links=(Link("h0", "b0"), Link("h1", "b0"), Link("h2", "b1"), Link("h3", "b1"), Link("b0", "r0"),
               Link("b1", "r0")))
    lines = [line for line in _lines(topology, "mx") if "route add" in line]
    assert lines[:2] == ["genie-mx-h0: route add 198.18.1.1/32 via 198.18.0.3 dev eth0 src 198.18.0.1",
                         "genie-mx-h0: route add 198.18.1.2/32 via 198.18.0.3 dev eth0 src 198.18.0.1"]
    assert not any(line.startswith("genie-mx-r0") for line in lines)  # the router is attached to both racks
    assert "genie-mx-r0: sysctl net.ipv4.ip_forward=1" in _lines(topology, "mx")


def test_small_subnet_falls_back_to_tight_blocks() -> None:
    topology = Topology("tight", hosts=tuple(Host(f"h{i}") for i in range(6)),
                        links=tuple(Link(f"h{i}", f"h{(i + 1) % 6}") for i in range(6)), subnet="10.9.0.0/28")
    layout = plan_layout(topology, "tight")
    assert [s.network for s in layout.segments] == [f"10.9.0.{2 * i}/31" for i in range(6)]
    # 7 interfaces fit 8 addresses, but a 3-host segment needs a /29 of its own plus a /31 for the direct link
    tiny = Topology("tiny", hosts=tuple(Host(f"h{i}") for i in range(3)), switches=(Switch("s0"),),
                    links=(*(Link(f"h{i}", "s0") for i in range(3)), Link("h0", "h1")), subnet="10.9.0.0/29")
    with pytest.raises(InputError) as info:
        plan_testbed(tiny, "tiny", netem_available=False)
    assert info.value.path == "subnet"


def test_delay_without_netem_fails_up_front_naming_the_link() -> None:
    shaped = LinkShape(rate_bps=GBIT, delay_us=100.0)
    topology = Topology("d", hosts=(Host("h0"), Host("h1"), Host("h2")), switches=(Switch("s0"),),
                        links=(Link("h0", "s0"), Link("h1", "s0"), Link("h2", "s0", shaped)))
    with pytest.raises(InputError) as info:
        plan_testbed(topology, "d", netem_available=False, source="topo.yaml")
    message = str(info.value)
    assert message.startswith("topo.yaml: links[2]: ")
    assert "sch_netem" in message and "delay" in message and "--shaper userspace" in message
    steps = plan_testbed(topology, "d", netem_available=False, shaper=Shaper.USERSPACE)  # no netem needed
    assert not any(isinstance(step, AddNetem) for step in steps)


def test_netem_hangs_under_the_htb_class_when_available() -> None:
    shape = LinkShape(rate_bps=GBIT, delay_us=100.0, jitter_us=10.0, loss_pct=0.5, queue_packets=500)
    steps = plan_testbed(ring(2, shape=shape), "n", netem_available=True)
    netem = [s for s in steps if isinstance(s, AddNetem)]
    assert [(s.netns, s.ifname, s.parent) for s in netem] == [
        (f"genie-n-h{i}", "eth0", parent) for i in (0, 1) for parent in (QdiscParent.HTB_CLASS, QdiscParent.ACK_CLASS)]
    # a delayed topology's links are wires (LinkModel.WIRE by default): netem serializes at the rate too
    assert netem[0] == AddNetem("genie-n-h0", "eth0", QdiscParent.HTB_CLASS, 100.0, 10.0, 0.5, 500, GBIT)
    assert netem[0].describe() == ("genie-n-h0: tc netem dev eth0 parent 1:1 rate 1 Gbit/s delay 100us jitter 10us "
                                   "loss 0.5% limit 500")
    # the ACK lane's pure ACKs are delayed, jittered and lost alike, but not serialized
    assert netem[1] == AddNetem("genie-n-h0", "eth0", QdiscParent.ACK_CLASS, 100.0, 10.0, 0.5, 500, None)
    bucket = plan_testbed(ring(2, shape=shape), "n", netem_available=True, links=LinkModel.BUCKET)
    assert [s.rate_bps for s in bucket if isinstance(s, AddNetem)] == [None] * 4
    rate_only = plan_testbed(ring(2, shape=LinkShape(rate_bps=GBIT)), "n", netem_available=True,
                             links=LinkModel.WIRE)
    # a wire without delay: netem serializes data under 1:1, the ACK lane needs no netem
    assert [s.parent for s in rate_only if isinstance(s, AddNetem)] == [QdiscParent.HTB_CLASS] * 2
    index = steps.index(netem[0])
    assert isinstance(steps[index - 1], AddHtb)  # HTB first, netem under its class
    assert build_plan(ring(2, shape=shape), "n", netem_available=True).info.shaper == Shaping.HTB | Shaping.NETEM
    delay_only = plan_testbed(ring(2, shape=LinkShape(delay_us=10_000.0)), "n", netem_available=True)
    assert [s.parent for s in delay_only if isinstance(s, AddNetem)] == [QdiscParent.ROOT] * 2
    assert not any(isinstance(s, AddHtb) for s in delay_only)


def test_queue_alone_is_a_pfifo_and_unshaped_links_get_no_qdisc() -> None:
    steps = plan_testbed(ring(2, shape=LinkShape(queue_packets=64)), "q", netem_available=False)
    assert [s for s in steps if isinstance(s, AddPfifo)][0] == AddPfifo("genie-q-h0", "eth0", QdiscParent.ROOT, 64)
    plain = plan_testbed(ring(2), "q", netem_available=False)
    assert not any(isinstance(s, (AddHtb, AddNetem, AddPfifo)) for s in plain)


def test_mtu_per_link() -> None:
    steps = plan_testbed(ring(2, shape=LinkShape(mtu_bytes=9000)), "m", netem_available=False)
    assert [s.mtu_bytes for s in steps if isinstance(s, CreateVethPair)] == [9000]


def test_htb_buckets_and_quantum() -> None:
    gbit = htb_class("ns", "eth0", GBIT, 1500)
    assert (gbit.rate_bps, gbit.ceil_bps) == (GBIT, 1_020_000_000)  # pays late-timer losses back at +2%
    assert gbit.cburst_bytes == 128 * 1024  # at once: GSO packets and ~1 ms at the rate
    assert gbit.burst_bytes == 1_000_000  # long-term: 8 ms of lost link time can be paid back
    ten = htb_class("ns", "eth0", 10 * GBIT, 1500)
    assert (ten.cburst_bytes, ten.burst_bytes) == (1_250_000, 10_000_000)
    slow = htb_class("ns", "eth0", 10 * 10**6, 1500)
    assert slow.burst_bytes == slow.cburst_bytes == 128 * 1024  # never a smaller long-term bucket
    assert htb_quantum_bytes(GBIT, 1500) == 200_000
    assert htb_quantum_bytes(10 * 10**6, 1500) == 125_000
    assert htb_quantum_bytes(10**5, 1500) == 1514  # never below one full frame


@pytest.mark.parametrize("bad", ["", "-x", "a/b", "a b", "x" * 33, "ünï", None, "a.b"])
def test_bad_testbed_names_are_input_errors(bad: object) -> None:
    with pytest.raises(InputError) as info:
        check_testbed_name(bad)
    assert info.value.path == "name"
    with pytest.raises(InputError):
        plan_testbed(star(2), bad, netem_available=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("good", ["star-4", "leaf-spine-2x4", "t1", "A_b-9", "x" * 32])
def test_good_testbed_names(good: str) -> None:
    assert check_testbed_name(good) == good


def test_describe_plan_numbers_steps() -> None:
    lines = describe_plan(plan_testbed(star(1), "one", netem_available=False))
    assert lines[0] == " 1. netns add genie-one-h0"
    assert lines[-2].endswith("genie-one-s0: link set eth0 up")
    assert lines[-1] == "19. genie-one-h0: sysctl net.ipv4.tcp_slow_start_after_idle=0"


@pytest.mark.parametrize(("factor", "rto_min_us"), [(10, 2_000_000), (30, 6_000_000), (2.5, 500_000),
                                                     (600, 120_000_000), (1000, 120_000_000)])
def test_dilation_sets_every_hosts_minimum_rto(factor: float, rto_min_us: int) -> None:
    """Under dilation N the hosts' minimum RTO is the kernel's 200 ms x N, at most the kernel's 120 s ceiling,
    set only where the kernel has the key; switches get none."""
    plan = build_plan(star(4), "d", netem_available=True, dilation=TimeDilation(factor, "test"))
    rto = [s for s in plan.steps if isinstance(s, SetSysctl) and s.key == RTO_MIN_US]
    assert [(s.netns, s.value) for s in rto] == [(f"genie-d-h{i}", str(rto_min_us)) for i in range(4)]
    assert all(s.if_present for s in rto)
    shown = f"genie-d-h0: sysctl net.ipv4.tcp_rto_min_us={rto_min_us} (where the kernel has it)"
    assert any(line.endswith(shown) for line in describe_plan(plan.steps))  # what --dry-run prints
    assert dilated_rto_min_us(TimeDilation(factor, "test")) == rto_min_us


@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_no_dilation_keeps_the_kernels_minimum_rto(factor: float) -> None:
    plan = build_plan(star(4), "d", netem_available=True, dilation=TimeDilation(factor, "test"))
    assert not [s for s in plan.steps if isinstance(s, SetSysctl) and s.key == RTO_MIN_US]
    assert dilated_rto_min_us(TimeDilation(factor, "test")) is None
