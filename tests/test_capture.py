"""Flow analysis of captured packets (synthetic, no root): bytes, retransmissions, RTT with Karn's rule, pcap
round trip, frame decoding, --capture checks."""

from __future__ import annotations

import csv
import io
import struct

import pytest

from genie.cli.flags import RUN_FLAGS, flag_names
from genie.core.errors import InputError
from genie.core import testbed as core_testbed
from genie.core.testbed import LinkEnd
from genie.core.topology import Topology
from genie.measure.flows import (TCP_ACK, TCP_FIN, TCP_PSH, TCP_SYN, TcpSegment, analyze_flows,
                                 decode_ethernet_frame)
from genie.report.capture import (FLOW_COLUMNS, capture_end, flows_csv, pcap_flows, pcap_header, pcap_record,
                                  read_pcap, resolve_link)

A, B = "198.18.0.1", "198.18.0.2"
US = 1000


def seg(t_us, src, seq, ack=0, flags=TCP_ACK, payload=0):
    sport, dport = (40000, 5000) if src == A else (5000, 40000)
    return TcpSegment(t_us * US, src, sport, A if src == B else B, dport, seq % 2**32, ack % 2**32, flags, payload)


def by_src(flows):
    return {f.src: f for f in flows}


def handshake(isn_a=1000, isn_b=9000):
    return [seg(0, A, isn_a, flags=TCP_SYN), seg(10, B, isn_b, isn_a + 1, TCP_SYN | TCP_ACK),
            seg(20, A, isn_a + 1, isn_b + 1)]


def test_bytes_packets_and_rtt_samples():
    s = handshake() + [
        seg(100, A, 1001, 9001, TCP_ACK | TCP_PSH, 1000),
        seg(101, A, 2001, 9001, TCP_ACK | TCP_PSH, 1000),
        seg(150, B, 9001, 2001),          # covers the first: 50 us
        seg(171, B, 9001, 3001),          # covers the second: 70 us
        seg(200, B, 9001, 3001, TCP_ACK | TCP_PSH, 500),
        seg(230, A, 3001, 9501),          # 30 us
    ]
    flows = by_src(analyze_flows(s))
    a, b = flows[A], flows[B]
    assert (a.sport, a.dst, a.dport) == (40000, B, 5000)
    assert (a.bytes, a.packets, a.retransmissions) == (2000, 5, 0)
    assert (a.rtt_samples, a.rtt_median_us) == (2, 60.0)
    assert (b.bytes, b.packets, b.rtt_samples, b.rtt_median_us) == (500, 4, 1, 30.0)
    assert (a.first_ns, a.last_ns) == (0, 230 * US)


def test_retransmission_is_counted_and_gives_no_rtt_sample():
    s = handshake() + [
        seg(100, A, 1001, 9001, TCP_ACK, 1000),
        seg(101, A, 2001, 9001, TCP_ACK, 1000),   # lost downstream
        seg(102, A, 3001, 9001, TCP_ACK, 1000),
        seg(150, B, 9001, 2001),                  # covers the first: 50 us
        seg(151, B, 9001, 2001),                  # dup ack
        seg(300, A, 2001, 9001, TCP_ACK, 1000),   # the retransmission
        seg(340, B, 9001, 4001),                  # ambiguous: no sample for 2001..3001 (Karn) ...
        seg(400, A, 4001, 9001, TCP_ACK, 1000),
        seg(420, B, 9001, 5001),                  # 20 us
    ]
    a = by_src(analyze_flows(s))[A]
    assert a.retransmissions == 1
    assert a.bytes == 5000 and a.packets == 7
    # samples: first segment (50 us), third (340 - 102 = 238 us), fourth (20 us); not the retransmitted one
    assert a.rtt_samples == 3 and a.rtt_median_us == 50.0


def test_partial_overlap_counts_as_retransmission():
    s = handshake() + [seg(100, A, 1001, 9001, TCP_ACK, 1000), seg(200, A, 1501, 9001, TCP_ACK, 1000),
                       seg(250, B, 9001, 2501)]
    a = by_src(analyze_flows(s))[A]
    assert a.retransmissions == 1 and a.rtt_samples == 0 and a.rtt_median_us is None


def test_sequence_numbers_wrap():
    isn = 2**32 - 1500
    s = handshake(isn_a=isn) + [seg(100, A, isn + 1, 9001, TCP_ACK, 1000),
                                seg(101, A, isn + 1001, 9001, TCP_ACK, 1000),   # wraps past 0
                                seg(150, B, 9001, isn + 2001),
                                seg(160, A, isn + 2001, 9001, TCP_ACK | TCP_FIN, 1000)]
    a = by_src(analyze_flows(s))[A]
    assert a.retransmissions == 0 and a.rtt_samples == 2 and a.bytes == 3000


def test_capture_started_mid_connection_and_unrelated_flows():
    s = [seg(0, A, 5000, 1, TCP_ACK, 100), seg(5, B, 1, 5100),
         TcpSegment(7, "198.18.0.3", 1, "198.18.0.4", 2, 0, 0, TCP_ACK, 10)]
    flows = analyze_flows(s)
    assert [f.src for f in flows] == [A, B, "198.18.0.3"]
    assert flows[0].rtt_samples == 1 and flows[2].bytes == 10


def frame(src, dst, sport, dport, seq, ack, flags, payload, *, total_len=None, vlan=False):
    tcp = struct.pack("!HHIIHHHH", sport, dport, seq, ack, (5 << 12) | flags, 65535, 0, 0)
    ip_len = 20 + len(tcp) + payload if total_len is None else total_len
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len, 1, 0x4000, 64, 6, 0,
                     bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))))
    eth = b"\x02" * 6 + b"\x04" * 6 + ((b"\x81\x00\x00\x01") if vlan else b"") + b"\x08\x00"
    return eth + ip + tcp  # the payload itself was cut off by the snaplen


def test_decode_truncated_frames():
    s = decode_ethernet_frame(7, frame(A, B, 1, 2, 100, 200, TCP_ACK | TCP_PSH, 60000))
    assert s == TcpSegment(7, A, 1, B, 2, 100, 200, TCP_ACK | TCP_PSH, 60000)
    assert decode_ethernet_frame(1, frame(A, B, 1, 2, 0, 0, TCP_ACK, 40, vlan=True)).payload_bytes == 40
    big = frame(A, B, 1, 2, 0, 0, TCP_ACK, 0, total_len=0)
    assert decode_ethernet_frame(1, big, wire_len=14 + 40 + 100000).payload_bytes == 100000
    assert decode_ethernet_frame(1, b"\x00" * 12 + b"\x08\x06" + b"\x00" * 28) is None  # ARP
    assert decode_ethernet_frame(1, frame(A, B, 1, 2, 0, 0, 0, 0)[:40]) is None         # cut inside TCP


def test_pcap_round_trip_and_flows_csv():
    frames = [(1_000_000_000_123, frame(A, B, 1, 2, 10, 0, TCP_ACK, 100)),
              (1_000_000_050_123, frame(B, A, 2, 1, 0, 110, TCP_ACK, 0))]
    data = pcap_header() + b"".join(pcap_record(t, f, len(f) + 100) for t, f in frames)
    records = list(read_pcap(io.BytesIO(data + b"\x01\x02")))  # a record cut short at the end is ignored
    assert [(t, d) for t, d, _ in records] == frames and records[0][2] == len(frames[0][1]) + 100
    flows = pcap_flows(io.BytesIO(data))
    rows = list(csv.DictReader(io.StringIO(flows_csv(flows))))
    assert tuple(rows[0]) == FLOW_COLUMNS
    assert rows[0]["bytes"] == "100" and rows[0]["rtt_samples"] == "1" and rows[0]["rtt_median_us"] == "50.000"
    assert rows[1]["rtt_median_us"] == "" and rows[1]["first_ns"] == "1000000050123"
    with pytest.raises(InputError):
        list(read_pcap(io.BytesIO(b"not a pcap file at all, no")))


def test_pcap_opens_in_scapy(tmp_path):
    scapy = pytest.importorskip("scapy.all")
    path = tmp_path / "x.pcap"
    f = frame(A, B, 1, 2, 10, 0, TCP_ACK, 100)
    path.write_bytes(pcap_header() + pcap_record(1_700_000_000_000_000_001, f, len(f) + 100))
    packets = scapy.rdpcap(str(path))
    assert len(packets) == 1 and packets[0][scapy.TCP].sport == 1 and packets[0][scapy.IP].len == 140


def test_capture_link_names():
    ends = (LinkEnd(0, "h0", "s0", "genie-t-h0", "eth0"), LinkEnd(0, "s0", "h0", "genie-t-s0", "eth0"),
            LinkEnd(1, "leaf-1", "s0", "genie-t-leaf-1", "eth0"))
    info = core_testbed.TestbedInfo("t", "genie-t", Topology.__new__(Topology), (), ends)
    assert resolve_link(info, "h0-s0") == ends[0]
    assert resolve_link(info, "s0:h0") == ends[1]
    assert resolve_link(info, "leaf-1-s0") == ends[2]
    with pytest.raises(InputError, match="--capture: no link 'h0-h1'"), flag_names(RUN_FLAGS):
        resolve_link(info, "h0-h1")
    with pytest.raises(InputError, match="not --loopback"), flag_names(RUN_FLAGS):
        capture_end(None, "h0-s0")
    assert capture_end(None, None) is None
