"""The userspace link emulator's core, pure: delay heap, jitter with and without reordering, loss models with
fixed seeds, delay-line limits, chains of stages, the wake-up planner, netlink message parsing."""

from __future__ import annotations

import random
import socket
import struct

import pytest

from genie.linkemu.config import EmulatorConfig, QueueSpec, SourceRoute, StageSpec
from genie.linkemu.emulator import WakePlanner
from genie.linkemu.line import (BernoulliLoss, DelayLine, DropReason, GilbertElliottLoss, mac_bytes, release_order,
                                segments)
from genie.linkemu.nfqueue import (_NFGEN, _NLMSG, _PACKET_TYPE, _VERDICT, NFQA_CAP_LEN, NFQA_HWADDR,
                                   NFQA_PACKET_HDR, NFQA_PAYLOAD, NFQA_TIMESTAMP, QueuedPacket, _attr, _parse_packet)

MS = 1_000_000


def _line(*stages: StageSpec, routes: tuple[SourceRoute, ...] = (), default: tuple[int, ...] = (0,)) -> DelayLine:
    return DelayLine(EmulatorConfig("genie-t-h1", stages, (QueueSpec(0, "eth0", default, routes),)))


def test_constant_delay_releases_each_packet_after_exactly_the_delay_in_order() -> None:
    line = _line(StageSpec("links[0] h0>h1", delay_ns=MS))
    for i in range(5):
        assert line.admit(0, i, 100 * i, 1500) == 100 * i + MS
    assert line.next_release_ns() == MS
    assert line.due(MS + 150) == [(0, 0), (0, 1)]
    assert len(line) == 3
    assert [r.packet_id for r in line.due(MS + 400)] == [2, 3, 4]
    assert line.next_release_ns() is None


def test_jitter_without_reordering_keeps_the_arrival_order() -> None:
    stage = StageSpec("s", delay_ns=MS, jitter_ns=MS // 2, reorder=False, seed=7, limit_packets=10**6)
    arrivals = [(i, i * 10_000, 1500) for i in range(2000)]  # 10 us apart, jitter +-500 us
    assert release_order(_line(stage), arrivals) == list(range(2000))


def test_jitter_with_reordering_reorders_and_keeps_the_mean_delay() -> None:
    stage = StageSpec("s", delay_ns=MS, jitter_ns=MS // 2, reorder=True, seed=7, limit_packets=10**6)
    line = _line(stage)
    releases = [line.admit(0, i, i * 10_000, 1500) for i in range(5000)]
    delays = [r - i * 10_000 for i, r in enumerate(releases)]  # type: ignore[operator]
    assert all(MS // 2 <= d <= 3 * MS // 2 for d in delays)
    assert abs(sum(delays) / len(delays) - MS) < 0.02 * MS  # uniform +-jitter, like netem without a table
    order = [r.packet_id for r in line.drain()]
    assert order != sorted(order)


def test_seeds_make_runs_repeatable_and_differ_between_stages() -> None:
    def run(seed: int) -> list[int | str]:
        line = _line(StageSpec("s", delay_ns=MS, jitter_ns=MS // 4, loss_pct=10, seed=seed, limit_packets=10**6))
        return [line.admit(0, i, i * 1000, 100) for i in range(500)]

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_loss_and_jitter_use_separate_random_streams() -> None:
    lossy = StageSpec("s", delay_ns=MS, loss_pct=20, seed=3, limit_packets=10**6)
    jittered = StageSpec("s", delay_ns=MS, jitter_ns=MS // 2, loss_pct=20, seed=3, limit_packets=10**6)
    drops = [[isinstance(_l.admit(0, i, i, 100), str) for i in range(300)] for _l in (_line(lossy), _line(jittered))]
    assert drops[0] == drops[1]


def test_bernoulli_loss_rate_with_a_fixed_seed() -> None:
    model = BernoulliLoss(0.02, random.Random(42))
    lost = sum(model.lost() for _ in range(200_000))
    assert abs(lost / 200_000 - 0.02) < 0.002


@pytest.mark.parametrize("loss, burst", [(0.02, 4.0), (0.05, 1.0), (0.01, 10.0)])
def test_gilbert_elliott_statistics_with_a_fixed_seed(loss: float, burst: float) -> None:
    model = GilbertElliottLoss.from_rate(loss, burst, random.Random(1234))
    assert model.stationary_loss() == pytest.approx(loss)
    draws = [model.lost() for _ in range(400_000)]
    bursts, run = [], 0
    for lost in draws:
        if lost:
            run += 1
        elif run:
            bursts.append(run)
            run = 0
    assert abs(sum(draws) / len(draws) - loss) < 0.15 * loss
    assert sum(bursts) / len(bursts) == pytest.approx(burst, rel=0.1)


def test_general_gilbert_elliott_losses_in_both_states() -> None:
    model = GilbertElliottLoss(0.01, 0.1, random.Random(5), loss_bad=0.5, loss_good=0.001)
    expected = (0.01 * 0.5 + 0.1 * 0.001) / 0.11
    assert model.stationary_loss() == pytest.approx(expected)
    assert abs(sum(model.lost() for _ in range(300_000)) / 300_000 - expected) < 0.1 * expected


def test_gilbert_parameters_that_cannot_exist_are_refused() -> None:
    with pytest.raises(ValueError):
        GilbertElliottLoss.from_rate(0.8, 1.0, random.Random(0))


def test_queue_limit_drops_at_the_tail_and_frees_room_on_release() -> None:
    line = _line(StageSpec("s", delay_ns=MS, limit_packets=10))
    fates = [line.admit(0, i, 0, 1500) for i in range(15)]
    assert fates[:10] == [MS] * 10 and fates[10:] == [DropReason.LIMIT] * 5
    assert line.counters()["s"]["overflow"] == 5
    assert len(line.due(MS)) == 10
    assert line.admit(0, 99, MS, 1500) == 2 * MS


def test_a_gso_packet_counts_as_its_segments() -> None:
    assert segments(64000, 1500) == 43 and segments(60, 1500) == 1 and segments(1500, 1500) == 1
    line = _line(StageSpec("s", delay_ns=MS, limit_packets=50))
    assert line.admit(0, 0, 0, 64000) == MS
    assert line.admit(0, 1, 0, 64000) == DropReason.LIMIT  # 43 + 43 > 50
    assert line.admit(0, 2, 0, 1500) == MS


def test_chains_add_up_and_routes_follow_the_source_mac() -> None:
    into_bridge = StageSpec("links[0] h0>s0", delay_ns=2 * MS)
    out_of_bridge = StageSpec("links[1] s0>h1", delay_ns=MS)
    route = SourceRoute("02:67:00:00:00:00", "h0", (0, 1))
    line = _line(into_bridge, out_of_bridge, routes=(route,), default=(1,))
    assert line.admit(0, 1, 0, 100, mac_bytes("02:67:00:00:00:00")) == 3 * MS
    assert line.admit(0, 2, 0, 100, mac_bytes("02:67:00:00:09:00")) == MS  # unknown sender: last hop only
    assert line.admit(0, 3, 0, 100, None) == MS
    assert line.admit(5, 4, 0, 100, None) == 0  # a queue without stages passes packets at once
    assert line.passed_through == 1


def test_config_json_round_trip_and_description() -> None:
    config = EmulatorConfig("genie-t-h1", (StageSpec("links[0] h0>h1", MS, 100_000, True, 2.0, 4.0, 1000, 1500, 9),),
                            (QueueSpec(0, "eth0", (0,), (SourceRoute("02:67:00:00:00:00", "h0", (0,)),)),))
    assert EmulatorConfig.from_json(config.to_json()) == config
    assert config.describe() == ("queue 0 on eth0 [from h0 (02:67:00:00:00:00): links[0] h0>h1; others: links[0] "
                                 "h0>h1]; stages: links[0] h0>h1 delay 1ms jitter 100us reorder loss 2% burst 4 "
                                 "limit 1000 seed 9")


def test_wake_planner_learns_its_margin_and_caps_the_compensation() -> None:
    planner = WakePlanner(50_000, max_compensation_ns=80_000)
    assert planner.compensation_ns == 0
    planner.observe_wake_lag(60_000)
    assert planner.compensation_ns == 60_000
    for lag in [70_000] * 40 + [1_500_000] * 20:  # preemptions do not move the median
        planner.observe_wake_lag(lag)
    assert planner.compensation_ns == 70_000
    for _ in range(200):
        planner.observe_wake_lag(500_000)
    assert planner.compensation_ns == 80_000
    planner.observe_wake_lag(10**9)  # a preemption, not a wake-up: ignored
    assert planner.target_ns(MS) == MS - 80_000
    for _ in range(100):
        planner.observe_late(10_000)
    assert planner.margin_ns > 50_000
    assert not WakePlanner(compensate=False).compensation_ns
    assert planner.should_sleep(0, None) and not planner.should_sleep(0, planner.compensation_ns)


def _packet_message(packet_id: int, queue: int, *, length: int, mac: bytes, stamp_us: int) -> bytearray:
    attrs = (_attr(NFQA_PACKET_HDR, struct.pack("!IHBx", packet_id, 0x0800, 0))
             + _attr(NFQA_HWADDR, struct.pack("!HH", 6, 0) + mac + b"\0\0")
             + _attr(NFQA_TIMESTAMP, struct.pack("!QQ", stamp_us // 10**6, stamp_us % 10**6))
             + _attr(NFQA_CAP_LEN, struct.pack("!I", length))
             + _attr(NFQA_PAYLOAD, bytes(64)))
    body = _NFGEN.pack(0, 0, socket.htons(queue)) + attrs
    return bytearray(_NLMSG.pack(_NLMSG.size + len(body), _PACKET_TYPE, 0, 0, 0) + body)


def test_parsing_a_queued_packet_message() -> None:
    mac = bytes.fromhex("026700000100")
    message = _packet_message(77, 3, length=64000, mac=mac, stamp_us=5_000_123)
    assert _parse_packet(message, 0, len(message)) == QueuedPacket(3, 77, 64000, mac, 5_000_123_000)


def test_a_verdict_message_is_one_netlink_message_of_32_bytes() -> None:
    assert _VERDICT.size == 32
    raw = _VERDICT.pack(32, (3 << 8) | 1, 1, 9, 0, 0, 0, socket.htons(4), 12, 2, socket.htonl(1), socket.htonl(77))
    assert struct.unpack("!II", raw[-8:]) == (1, 77)  # NF_ACCEPT, packet id, big-endian
    assert struct.unpack_from("!H", raw, 18)[0] == 4  # queue number


# ---- the wire stage: serialization in virtual time ---------------------------------------------------------
def _wire_ns(length: int, rate_bps: int, mtu: int = 1500) -> int:
    from genie.linkemu.line import wire_bytes

    return -(-wire_bytes(length, mtu) * 8_000_000_000 // rate_bps)


def test_wire_bytes_frame_every_segment_of_a_gso_packet() -> None:
    from genie.linkemu.line import wire_bytes, wire_segments

    assert wire_segments(1500, 1500) == 1 and wire_bytes(1500, 1500) == 1514  # one full-sized packet
    assert wire_bytes(100, 1500) == 114
    # 10 full segments of 1448 payload bytes as one GSO packet: 10 x 1514 on the wire
    gso = 52 + 10 * 1448
    assert wire_segments(gso, 1500) == 10 and wire_bytes(gso, 1500) == 10 * 1514


def test_a_wire_serializes_each_packet_after_the_one_before_it() -> None:
    rate = 10**9
    line = _line(StageSpec("links[0] h0>h1", delay_ns=0, rate_bps=rate, limit_packets=10**6))
    one = _wire_ns(1500, rate)  # 12.1 us at 1 Gbit/s
    # a burst of 10 packets at the same instant leaves one packet time apart: a burst never beats the wire
    releases = [line.admit(0, i, 0, 1500) for i in range(10)]
    assert releases == [(i + 1) * one for i in range(10)]
    # after an idle period the next packet starts when it arrives (no credit is saved while idle)
    assert line.admit(0, 10, MS, 1500) == MS + one


def test_a_wire_then_a_delay_and_a_late_admission_costs_no_capacity() -> None:
    rate = 100 * 10**6
    line = _line(StageSpec("s", delay_ns=5 * MS, rate_bps=rate, limit_packets=10**6))
    gso = 52 + 40 * 1448  # one 40-segment GSO packet: its last byte leaves after 40 packet times
    assert line.admit(0, 0, 0, gso) == _wire_ns(gso, rate) + 5 * MS
    # the next packet is serialized after it in virtual time, whenever the emulator gets to admit it
    assert line.admit(0, 1, 10, 1500) == _wire_ns(gso, rate) + _wire_ns(1500, rate) + 5 * MS


def test_two_wires_pipeline_a_gso_packet_segment_by_segment() -> None:
    rate = 10**9
    stages = (StageSpec("links[0] h0>s0", delay_ns=1000, rate_bps=rate, limit_packets=10**6),
              StageSpec("links[1] s0>h1", delay_ns=1000, rate_bps=rate, limit_packets=10**6))
    line = _line(*stages, default=(0, 1))
    gso = 52 + 20 * 1448
    total = _wire_ns(gso, rate)
    segment = total // 20
    # store and forward per segment: the second wire adds one segment's time, not the whole packet's
    assert line.admit(0, 0, 0, gso) == total + 1000 + segment + 1000


def test_a_slower_second_wire_is_the_bottleneck() -> None:
    stages = (StageSpec("a", delay_ns=0, rate_bps=10**9, limit_packets=10**6),
              StageSpec("b", delay_ns=0, rate_bps=10**8, limit_packets=10**6))
    line = _line(*stages, default=(0, 1))
    gso = 52 + 20 * 1448
    fast, slow = _wire_ns(gso, 10**9), _wire_ns(gso, 10**8)
    assert line.admit(0, 0, 0, gso) == fast // 20 + slow


def test_a_live_override_changes_the_wire_rate() -> None:
    line = _line(StageSpec("links[0] h0>h1", delay_ns=0, rate_bps=10**9, limit_packets=10**6))
    line.apply_overrides({"links[0] h0>h1": {"rate_bps": 10**8}})
    assert line.admit(0, 0, 0, 1500) == _wire_ns(1500, 10**8)
    line.apply_overrides({})  # back to the configured rate
    assert line.admit(0, 1, MS, 1500) == MS + _wire_ns(1500, 10**9)


def test_an_idle_wire_may_start_a_packet_its_slack_before_it_arrived() -> None:
    """The sender's HTB may hand a packet to an idle wire late: up to the slack the wire counts it as sent
    earlier, so late timers cost no capacity — and a burst after idle is early by at most the slack."""
    rate, slack = 10**9, 20_000
    line = _line(StageSpec("s", delay_ns=0, rate_bps=rate, wire_slack_ns=slack, limit_packets=10**6))
    one = _wire_ns(1500, rate)  # 12.1 us: shorter than the slack, so it leaves as soon as it arrives, not before
    assert line.admit(0, 0, MS, 1500) == MS
    burst = [line.admit(0, i, 2 * MS, 1500) for i in range(1, 11)]
    # the burst's wire time starts the slack early: the first packets leave at once, then one packet time apart
    assert burst == [max(2 * MS, 2 * MS - slack + k * one) for k in range(1, 11)]
    delayed = _line(StageSpec("d", delay_ns=MS, rate_bps=rate, wire_slack_ns=slack, limit_packets=10**6))
    assert delayed.admit(0, 0, 5 * MS, 100) == 6 * MS  # the slack never shortens the delay
