"""The userspace shaper's plan (golden), shaper choice, state, dispatching backend, bad input, and the pure part
of `genie testbed verify` (pairs, targets, rows, CSV). No root needed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from cli_support import run_genie
from genie.core.errors import EnvironmentProblem, InputError
from genie.core.testbed import Shaping
from genie.core.topology import Host, Link, LinkShape, Switch, SwitchKind, Topology
from genie.testbed.backend import FakeBackend, StepFailed, TestbedBackend, apply_plan
from genie.testbed.emulators import EmulatorBackend
from genie.testbed.layout import plan_layout
from genie.testbed.plan import build_plan, describe_plan, plan_testbed
from genie.testbed.service import resolve_shaper
from genie.testbed.state import TestbedRecord, record_from_dict, record_to_dict
from genie.testbed.steps import (AddHtb, AddNetem, AddPfifo, AddQueueRule, CreateVethPair, SetSysctl, Shaper,
                                 ShaperChoice, StartEmulator)
from genie.testbed.userspace import emulator_configs, tcp_buffer_bytes, veth_macs
from genie.testbed.verify import (CSV_COLUMNS, Metric, Status, choose_pairs, format_table, goodput_bps,
                                  loss_row, rate_from_timeline, rtt_row, throughput_row, uncovered_links,
                                  write_verify_csv, write_verify_csv_file)
from genie.topology import leaf_spine, load_topology, ring, star
from genie.topology.link_properties import EmulatedLinkShape

GBIT = 10**9
MBIT = 10**6


def _pair(shape: LinkShape) -> Topology:
    return Topology("p", hosts=(Host("h0"), Host("h1")), links=(Link("h0", "h1", shape),))


def test_two_hosts_golden_userspace_plan() -> None:
    shape = LinkShape(rate_bps=GBIT, delay_us=1000.0, loss_pct=2.0)
    lines = [step.describe() for step in plan_testbed(_pair(shape), "u", netem_available=False,
                                                        shaper=Shaper.USERSPACE)]
    htb = "tc htb dev eth0 root 1: class 1:1 rate 1 Gbit/s burst 1000000B ceil 1.02 Gbit/s cburst 128KiB quantum 200000; class 1:2 (pure ACKs, prio 0) rate 1.02 Gbit/s"
    assert lines[8:] == [
        "veth genie-u-h0:eth0 <-> genie-u-h1:eth0 mtu 1500 mac 02:67:00:00:00:00 / 02:67:00:00:00:01",
        "genie-u-h0: addr add 198.18.0.1/30 dev eth0",
        f"genie-u-h0: {htb}",
        "genie-u-h0: link set eth0 up",
        "genie-u-h1: addr add 198.18.0.2/30 dev eth0",
        f"genie-u-h1: {htb}",
        "genie-u-h1: link set eth0 up",
        "genie-u-h0: sysctl net.ipv4.tcp_slow_start_after_idle=0",
        "genie-u-h1: sysctl net.ipv4.tcp_slow_start_after_idle=0",
        "genie-u-h0: start link emulator (python -m genie.linkemu): queue 0 on eth0 [others: links[0] h1>h0]; "
        "stages: links[0] h1>h0 wire 1 Gbit/s delay 1ms loss 2% limit 1000 seed 922845397",
        "genie-u-h0: iptables -w 5 -t mangle -A PREROUTING -i eth0 -j NFQUEUE --queue-num 0",
        "genie-u-h1: start link emulator (python -m genie.linkemu): queue 0 on eth0 [others: links[0] h0>h1]; "
        "stages: links[0] h0>h1 wire 1 Gbit/s delay 1ms loss 2% limit 1000 seed 1590549650",
        "genie-u-h1: iptables -w 5 -t mangle -A PREROUTING -i eth0 -j NFQUEUE --queue-num 0",
    ]


def test_the_kernel_plan_is_unchanged_by_the_userspace_shaper_code() -> None:
    steps = plan_testbed(_pair(LinkShape(rate_bps=GBIT, delay_us=1000.0)), "k", netem_available=True)
    assert any(isinstance(s, AddNetem) for s in steps)
    assert not any(isinstance(s, (StartEmulator, AddQueueRule)) for s in steps)
    assert all(s.mac_a is None for s in steps if isinstance(s, CreateVethPair))


def test_userspace_keeps_htb_and_the_queue_pfifo_but_no_netem() -> None:
    shape = LinkShape(rate_bps=100 * MBIT, delay_us=5000.0, jitter_us=100.0, queue_packets=300)
    steps = plan_testbed(_pair(shape), "q", netem_available=False, shaper=Shaper.USERSPACE)
    kinds = [type(s) for s in steps if isinstance(s, (AddHtb, AddPfifo, AddNetem))]
    assert kinds == [AddHtb, AddPfifo, AddHtb, AddPfifo]
    stage = next(s for s in steps if isinstance(s, StartEmulator)).config.stages[0]
    assert (stage.delay_ns, stage.jitter_ns, stage.limit_packets, stage.reorder) == (5_000_000, 100_000, 300, False)


def test_a_bridged_star_emulates_both_links_at_the_receiver_by_source_mac() -> None:
    topology = star(3, shape=LinkShape(delay_us=500.0))
    configs = {c.netns: c for c in emulator_configs(plan_layout(topology, "s"))}
    assert set(configs) == {"genie-s-h0", "genie-s-h1", "genie-s-h2"}  # never the bridge namespace
    h1 = configs["genie-s-h1"]
    (queue,) = h1.queues
    assert (queue.queue_num, queue.ifname) == (0, "eth0")
    chains = {r.source: [h1.stages[i].name for i in r.chain] for r in queue.routes}
    assert chains == {"h0": ["links[0] h0>s0", "links[1] s0>h1"], "h2": ["links[2] h2>s0", "links[1] s0>h1"]}
    assert {r.source: r.mac for r in queue.routes} == {"h0": veth_macs(0)[0], "h2": veth_macs(2)[0]}
    assert [h1.stages[i].name for i in queue.default_chain] == ["links[1] s0>h1"]
    seeds = [stage.seed for c in configs.values() for stage in c.stages]
    assert len(seeds) == len(set(seeds)) == 9  # per receiver: its own last hop and the other hosts' first hops


def test_routers_emulate_what_they_receive_and_unshaped_links_get_no_queue() -> None:
    shaped = LinkShape(rate_bps=GBIT, delay_us=100.0)
    topology = leaf_spine(2, 2, 2, shape=LinkShape(rate_bps=GBIT))
    topology = Topology(topology.name, topology.hosts, topology.switches,
                        tuple(Link(link.a, link.b, shaped if "spine" in (link.a + link.b) else link.shape)
                              for link in topology.links), topology.subnet)
    configs = {c.netns: c for c in emulator_configs(plan_layout(topology, "l"))}
    assert set(configs) == {"genie-l-leaf0", "genie-l-leaf1", "genie-l-spine0", "genie-l-spine1"}
    assert [q.ifname for q in configs["genie-l-spine0"].queues] == ["eth0", "eth1"]


def test_dry_run_shows_the_userspace_steps(tmp_path: Path) -> None:
    topology = tmp_path / "d.yaml"
    topology.write_text("name: d\nhosts: [{prefix: h, count: 2}]\nlinks: [{endpoints: [h0, h1], delay: 1ms}]\n")
    done = run_genie("testbed", "up", str(topology), "--dry-run", "--shaper", "userspace")
    assert done.returncode == 0
    out = done.stdout
    assert "start link emulator" in out and "-j NFQUEUE --queue-num 0" in out and "netem" not in out


def test_resolve_shaper() -> None:
    delayed, plain = _pair(LinkShape(delay_us=10.0)), _pair(LinkShape(rate_bps=GBIT))

    def never() -> bool:
        raise AssertionError("probed without need")

    assert resolve_shaper(delayed, ShaperChoice.AUTO, netem_available=lambda: True) is Shaper.KERNEL
    assert resolve_shaper(delayed, ShaperChoice.AUTO, netem_available=lambda: False) is Shaper.USERSPACE
    assert resolve_shaper(plain, ShaperChoice.AUTO, netem_available=never) is Shaper.KERNEL
    assert resolve_shaper(delayed, ShaperChoice.NETEM, netem_available=never) is Shaper.KERNEL
    assert resolve_shaper(delayed, ShaperChoice.USERSPACE, netem_available=never) is Shaper.USERSPACE
    assert resolve_shaper(delayed, Shaper.USERSPACE, netem_available=never) is Shaper.USERSPACE


def test_long_fat_links_get_larger_tcp_buffers() -> None:
    assert tcp_buffer_bytes(10 * GBIT, 20_000) == 64 * 1024**2  # 2 x 25 MB rounded up
    steps = plan_testbed(_pair(LinkShape(rate_bps=10 * GBIT, delay_us=10_000.0)), "b", netem_available=False,
                         shaper=Shaper.USERSPACE)
    sysctls = [s for s in steps if isinstance(s, SetSysctl) and "tcp_" in s.key]
    assert [(s.netns, s.key, s.value) for s in sysctls] == [
        (f"genie-b-h{i}", "net.ipv4.tcp_slow_start_after_idle", "0") for i in (0, 1)] + [
        (f"genie-b-h{i}", key, f"4096 {mid} 67108864") for i in (0, 1)
        for key, mid in (("net.ipv4.tcp_rmem", 131072), ("net.ipv4.tcp_wmem", 16384))]
    assert not any(isinstance(s, SetSysctl) and s.key in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem")
                   for s in plan_testbed(_pair(LinkShape(rate_bps=GBIT, delay_us=100.0)), "c",
                                         netem_available=False, shaper=Shaper.USERSPACE))


def test_a_userspace_record_round_trips() -> None:
    shape = EmulatedLinkShape(rate_bps=GBIT, delay_us=100.0, jitter_us=50.0, loss_pct=1.0, reorder=True,
                              loss_burst_packets=3.0)
    plan = build_plan(star(2, shape=shape), "r", netem_available=False, shaper=Shaper.USERSPACE)
    record = TestbedRecord(plan.info, plan.steps, len(plan.steps), True, Shaper.USERSPACE, 1,
                           emulators=(("genie-r-h0", 123, 456), ("genie-r-h1", 124, None)))
    again = record_from_dict(record_to_dict(record))
    assert again == record
    assert again.info.topology.links[0].shape == shape
    assert plan.info.shaper == Shaping.HTB | Shaping.USERSPACE and plan.info.shaper.label == "htb+userspace"


def test_a_failing_emulator_step_rolls_back_both_backends_in_reverse() -> None:
    steps = plan_testbed(_pair(LinkShape(delay_us=100.0)), "f", netem_available=False, shaper=Shaper.USERSPACE)
    first_emulator = next(i for i, s in enumerate(steps) if isinstance(s, StartEmulator))
    netlink, userspace = FakeBackend(), FakeBackend(fail_at=0)
    with pytest.raises(StepFailed, match="start link emulator"):
        apply_plan(TestbedBackend(netlink, userspace), steps)
    assert netlink.applied == list(steps[:first_emulator])
    assert netlink.undone == list(reversed(steps[:first_emulator]))
    assert userspace.applied == []


def test_the_emulator_backend_acts_only_inside_genie_namespaces() -> None:
    backend = EmulatorBackend("x")
    with pytest.raises(EnvironmentProblem, match="outside genie's namespaces"):
        backend.apply(AddQueueRule("not-genie", "eth0", 0))


@pytest.mark.parametrize("link, field, message", [
    ("delay: -1ms", "links[0].delay", "expected a time"),
    ("loss: -1", "links[0].loss", "[0, 100)"),
    ("loss: 101", "links[0].loss", "[0, 100)"),
    ("delay: 1ms, jitter: 2ms", "links[0].jitter", "exceeds delay"),
    ("delay: 1ms, jitter: 2ms, reorder: true", "links[0].jitter", "exceeds delay"),
    ("delay: 1ms, loss_burst: 3", "links[0].loss_burst", "set loss too"),
    ("loss: 1, loss_burst: 0.5", "links[0].loss_burst", "at least 1"),
    ("loss: 60, loss_burst: 1", "links[0].loss_burst", "cannot come in bursts"),
    ("reorder: maybe", "links[0].reorder", "true or false"),
])
def test_bad_link_emulation_input_is_one_line_exit_2(link: str, field: str, message: str, tmp_path: Path) -> None:
    topology = tmp_path / "bad.yaml"
    topology.write_text(f"name: bad\nhosts: [{{prefix: h, count: 2}}]\nlinks: [{{endpoints: [h0, h1], {link}}}]\n")
    done = run_genie("testbed", "up", str(topology), "--name", "never", "--shaper", "userspace")
    assert done.returncode == 2
    err = done.stderr
    assert err.count("\n") == 1 and f"{topology}: {field}: " in err and message in err


def test_the_emulator_options_round_trip_through_yaml() -> None:
    text = ("name: o\nhosts: [{prefix: h, count: 2}]\n"
            "links: [{endpoints: [h0, h1], delay: 1ms, jitter: 100us, reorder: true, loss: 2, loss_burst: 4}]\n")
    shape = load_topology(text).links[0].shape
    assert isinstance(shape, EmulatedLinkShape) and shape.reorder and shape.loss_burst_packets == 4
    plain = load_topology(text.replace(", reorder: true", "").replace(", loss_burst: 4", "")).links[0].shape
    assert type(plain) is LinkShape  # plain shapes stay plain (and equal to builders' shapes)


# --- verify, pure ---------------------------------------------------------------------------------------------

def _star4() -> Topology:
    slow = LinkShape(rate_bps=100 * MBIT, delay_us=1000.0)
    lossy = LinkShape(delay_us=5000.0, loss_pct=2.0)
    return Topology("v", tuple(Host(f"h{i}") for i in range(4)), (Switch("s0"),),
                    (Link("h0", "s0", slow), Link("h1", "s0", slow), Link("h2", "s0", lossy), Link("h3", "s0")))


def test_verify_pairs_cover_every_link_with_path_sums() -> None:
    first, second = choose_pairs(plan_layout(_star4(), "v"))
    assert (first.there.src, first.there.dst, first.links, first.route) == ("h0", "h1", "links[0]+links[1]",
                                                                            "h0-s0-h1")
    assert (first.rtt_us, first.rate_there_bps, first.loss_there_pct) == (4000.0, 100 * MBIT, 0.0)
    assert (second.there.src, second.there.dst, second.rtt_us) == ("h2", "h3", 10_000.0)
    assert second.rate_there_bps is None and second.loss_there_pct == second.loss_back_pct == 2.0
    explicit = choose_pairs(plan_layout(_star4(), "v"), [("h1", "h2")])
    assert explicit[0].rtt_us == 12_000.0 and explicit[0].loss_there_pct == 2.0
    with pytest.raises(InputError, match="no host 'h9'"):
        choose_pairs(plan_layout(_star4(), "v"), [("h0", "h9")])


@pytest.mark.parametrize("topology, alternatives", [(leaf_spine(2, 2, 2), [5, 7]), (ring(5), []), (star(8), [])],
                         ids=["leaf-spine", "ring", "star"])
def test_verify_pairs_cross_every_link_but_equal_cost_alternatives(topology: Topology,
                                                                   alternatives: list[int]) -> None:
    layout = plan_layout(topology, "c")
    targets = choose_pairs(layout)
    assert uncovered_links(layout, targets) == alternatives
    assert len(targets) == (4 if topology.name.startswith("star") else len(targets))


def test_verify_rows() -> None:
    (target, _) = choose_pairs(plan_layout(_star4(), "v"))
    rtt = rtt_row(target, [4150.0, 4100.0, 4120.0], [100.0, 110.0], 3)
    assert (rtt.metric, rtt.measured, rtt.status, rtt.tolerance) == (Metric.RTT, 4015.0, Status.OK, "±200us")
    assert rtt_row(target, [5000.0], [100.0], 10).status is Status.FAIL
    assert rtt_row(target, [], [100.0], 10).measured is None
    (plain, _) = choose_pairs(plan_layout(star(4, shape=LinkShape(rate_bps=GBIT)), "p"))  # no delay configured
    stack = rtt_row(plain, [140.0], [100.0], 1)  # the path's own 40 us: more than the 20 us floor, still fine
    assert (stack.configured, stack.measured, stack.status, stack.tolerance) == (0.0, 40.0, Status.OK, "<=250us")
    assert rtt_row(plain, [1100.0], [100.0], 1).status is Status.FAIL  # 1 ms where none is configured
    expected = goodput_bps(100 * MBIT, 1500)
    assert expected == pytest.approx(100 * MBIT * 1448 / 1514)
    ok = throughput_row(target, "h0", "h1", 100 * MBIT, 0.0, expected * 0.97, 0.3)
    short_cpu = throughput_row(target, "h0", "h1", 100 * MBIT, 0.0, expected * 0.5, 0.97)
    short = throughput_row(target, "h0", "h1", 100 * MBIT, 0.0, expected * 0.5, 0.4)
    lossy = throughput_row(target, "h0", "h1", 100 * MBIT, 2.0, expected * 0.5, 0.4)
    unshaped = throughput_row(target, "h0", "h1", None, 0.0, 7e9, 0.9)
    assert [r.status for r in (ok, short_cpu, short, lossy, unshaped)] == [
        Status.OK, Status.CEILING, Status.FAIL, Status.INFO, Status.INFO]
    assert "ceiling" in short_cpu.note
    loss = loss_row(target, "h0", "h1", 2.0, 5000, 4880)
    assert (loss.measured, loss.error_pct, loss.status) == (2.4, 0.4, Status.OK)
    assert loss_row(target, "h0", "h1", 2.0, 5000, 4000).status is Status.FAIL


def test_rate_from_a_sink_timeline_skips_the_warm_up() -> None:
    timeline = [(0, 0), (500_000_000, 1_000), (1_000_000_000, 10_000_000), (3_000_000_000, 260_000_000)]
    assert rate_from_timeline(timeline, 1.0) == pytest.approx(1e9)
    assert rate_from_timeline([(0, 0)], 1.0) is None


def test_verify_csv_and_table(tmp_path: Path) -> None:
    (target, _) = choose_pairs(plan_layout(_star4(), "v"))
    rows = [rtt_row(target, [4100.0], [100.0], 1), loss_row(target, "h0", "h1", 0.0, 100, 100),
            throughput_row(target, "h0", "h1", 100 * MBIT, 0.0, 95e6, 0.5)]
    stream = io.StringIO()
    write_verify_csv(rows, stream)
    lines = stream.getvalue().splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS)
    assert lines[1].startswith("links[0]+links[1],h0-s0-h1,h0<->h1,rtt,us,4000,4000,0,±200us,ok,")
    assert lines[3].startswith("links[0]+links[1],h0-s0-h1,h0->h1,throughput,bit/s,95640687,95000000,-0.67,")
    path = write_verify_csv_file(rows, tmp_path / "links_verify.csv")
    assert path.read_text() == stream.getvalue() and [p.name for p in tmp_path.iterdir()] == ["links_verify.csv"]
    table = format_table(rows)
    assert table[0].split() == ["link", "route", "direction", "metric", "configured", "measured", "error", "status"]
    assert "4.000 ms" in table[1] and "95.6 Mbit/s" in table[3] and table[3].endswith("ok")


def test_switch_kinds_are_realised_as_planned() -> None:
    topology = Topology("m", (Host("h0"), Host("h1")), (Switch("r0", SwitchKind.ROUTER),),
                        (Link("h0", "r0", LinkShape(delay_us=50.0)), Link("h1", "r0")))
    lines = describe_plan(plan_testbed(topology, "m", netem_available=False, shaper=Shaper.USERSPACE))
    emulated = [line for line in lines if "start link emulator" in line]
    assert len(emulated) == 2 and "genie-m-h0:" in emulated[0] and "genie-m-r0:" in emulated[1]
