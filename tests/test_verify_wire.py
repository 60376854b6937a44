"""`genie testbed verify` on wire links (issue #36): the RTT target holds the probe's own packet on the path's
wires, by the link emulators' rule, so a healthy dilated wire testbed passes and a broken one fails. Pure: no
root, no testbed."""

from __future__ import annotations

from genie.core.dilation import TimeDilation
from genie.core.testbed import LinkModel
from genie.core.topology import LinkShape
from genie.linkemu.line import DelayLine
from genie.testbed.layout import plan_layout
from genie.testbed.probe import ECHO_IP_BYTES
from genie.testbed.userspace import emulator_configs, veth_macs
from genie.testbed.verify import Status, choose_pairs, emulated_row, rtt_row
from genie.topology import star

GBIT = 10**9
STAR8_AT_400 = TimeDilation(400.0)


def _dilated_star8(links: LinkModel = LinkModel.WIRE):
    layout = plan_layout(STAR8_AT_400.real_topology(star(8, shape=LinkShape(rate_bps=GBIT))), "vw")
    return layout, choose_pairs(layout, links=links)


def test_the_probe_is_a_41_byte_ip_packet() -> None:
    assert ECHO_IP_BYTES == 20 + 8 + 13  # IPv4, UDP, kind + sequence + send time


def test_a_dilated_wire_star_expects_the_probes_serialization_as_its_emulators_release_it() -> None:
    layout, targets = _dilated_star8()
    target = targets[0]
    # 55 bytes on the wire at 2.5 Mbit/s: 176 us per hop; the first wire of each direction starts up to its
    # 100 us slack early, so 76 + 176 us one way, 504 us both ways (the emulator's own rule, not a copy of it)
    assert (target.there.src, target.there.dst) == ("h0", "h1")
    assert (target.rtt_us, target.wire_rtt_us, target.early_us) == (504.0, 504.0, 200.0)
    # ... exactly what the emulators the plan starts release a lone probe at: h1's for h0 -> h1, h0's back
    configs = {config.netns: config for config in emulator_configs(layout, LinkModel.WIRE)}
    one_way = []
    for src, dst, link in (("h0", "h1", 0), ("h1", "h0", 1)):
        line = DelayLine(configs[layout.netns_of(dst)])
        mac = bytes(int(part, 16) for part in veth_macs(link)[0].split(":"))
        arrival = 10**9
        one_way.append(line.admit(0, 1, arrival, ECHO_IP_BYTES, mac) - arrival)
    assert sum(one_way) / 1000 == target.rtt_us


def test_a_healthy_dilated_wire_testbed_passes_and_a_broken_one_fails() -> None:
    _, (target, *_) = _dilated_star8()
    # measured on vr34a (star-8 at 400, 2026-12-06): median 576.0 us, loopback 104.2 us -> 471.8 us real
    healthy = rtt_row(target, [576.0], [104.2], 200)
    assert (healthy.status, healthy.tolerance, healthy.error_pct) == (Status.OK, "-225/+250us", None)
    shown = emulated_row(healthy, STAR8_AT_400)
    assert (shown.configured, shown.measured) == (1.26, 471.8 / 400)
    assert rtt_row(target, [104.2 + 30.0], [104.2], 200).status is Status.FAIL  # no wire: the bucket's 30 us
    assert rtt_row(target, [104.2 + 504.0 + 800.0], [104.2], 200).status is Status.FAIL  # a 1 us fault delay
    assert rtt_row(target, [], [104.2], 200).status is Status.FAIL  # a stopped emulator: no echo


def test_bucket_and_undilated_wire_targets_keep_their_rule() -> None:
    _, (bucket, *_) = _dilated_star8(LinkModel.BUCKET)
    assert (bucket.rtt_us, bucket.wire_rtt_us, bucket.early_us) == (0.0, 0.0, 0.0)
    row = rtt_row(bucket, [140.0], [100.0], 1)
    assert (row.configured, row.status, row.tolerance) == (0.0, Status.OK, "<=250us")
    layout = plan_layout(star(8, shape=LinkShape(rate_bps=GBIT)), "vu")
    (wire, *_) = choose_pairs(layout, links=LinkModel.WIRE)
    assert (wire.rtt_us, wire.early_us) == (0.88, 0.88)  # 55 bytes at 1 Gbit/s, 0.44 us one way
    assert rtt_row(wire, [140.0], [100.0], 1).status is Status.OK  # the stack's 40 us, as without wires
    assert rtt_row(wire, [1100.0], [100.0], 1).status is Status.FAIL
