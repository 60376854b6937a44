"""benchmarks.op_cpu: the /proc readers and the per-message arithmetic (pure; no root, no processes)."""

from __future__ import annotations

import pytest

from benchmarks.op_cpu import Counters, difference, parse_cpu_total, parse_interrupts, parse_schedstat, \
    parse_softirq, parse_switches, parse_tcp

STAT = """cpu  100 5 50 800 10 0 35 0 0 0
cpu0 50 2 25 400 5 0 17 0 0 0
cpu1 50 3 25 400 5 0 18 0 0 0
intr 12345
"""

INTERRUPTS = """           CPU0       CPU1
  4:        100         0   IO-APIC    4-edge      ttyS0
LOC:       5000       6000   Local timer interrupts
RES:         30         12   Rescheduling interrupts
CAL:          7          1   Function call interrupts
"""

SOFTIRQS = """                    CPU0       CPU1
          HI:          0          0
      NET_RX:       1000       2500
"""

SNMP = """Ip: Forwarding DefaultTTL
Ip: 2 64
Tcp: RtoAlgorithm OutSegs RetransSegs
Tcp: 1 900 4
"""

NETSTAT = """TcpExt: SyncookiesSent TCPOrigDataSent
TcpExt: 0 600
"""


def test_parsers_read_the_kernels_formats():
    assert parse_schedstat("123456 789 10\n") == (123456, 789)
    assert parse_switches("Name:\tpython\nvoluntary_ctxt_switches:\t42\nnonvoluntary_ctxt_switches:\t7\n") == (42, 7)
    assert parse_cpu_total(STAT) == (100, 5, 50, 800, 10, 0, 35, 0)
    assert parse_interrupts(INTERRUPTS) == (42, 8)  # the description's words are not counts
    assert parse_softirq(SOFTIRQS) == 3500
    assert parse_tcp(SNMP, NETSTAT) == (900, 600, 4)


def test_parsers_refuse_what_they_do_not_find():
    with pytest.raises(ValueError):
        parse_cpu_total("intr 1\n")
    with pytest.raises(ValueError):
        parse_softirq("  CPU0\n  HI: 0\n")


def counters(t, run_ns, data, segs, jiffies, res=0):
    return Counters(t, 8, run_ns, run_ns // 2, data // 2, data // 20, jiffies, (res, 0), data, segs, data, 1)


def test_difference_is_per_data_segment():
    a = counters(0.0, 0, 1000, 1500, (0, 0, 0, 0, 0, 0, 0, 0))
    # 2000 messages more, 1000 pure ACKs more; 100 jiffies of 10 ms: 60 busy (40 user, 12 system, 8 softirq)
    b = counters(2.0, 36_000_000, 3000, 4500, (40, 0, 12, 40, 0, 0, 8, 0), res=200)
    op = difference(a, b, jiffy_us=10_000)
    assert op.messages == 2000
    assert op.pure_acks_per_message == pytest.approx(0.5)
    assert op.rank_run_us == pytest.approx(18.0)
    assert op.rank_wait_us == pytest.approx(9.0)
    assert op.voluntary_switches == pytest.approx(0.5)
    assert op.involuntary_switches == pytest.approx(0.05)
    assert op.machine_busy_us == pytest.approx(60 * 10_000 / 2000)
    assert op.softirq_us == pytest.approx(8 * 10_000 / 2000)
    assert dict(op.machine_shares)["idle"] == pytest.approx(0.4)
    assert dict(op.ipis_per_message)["RES"] == pytest.approx(0.1)
    assert op.net_rx_per_message == pytest.approx(1.0)
    assert op.rank_share_of_busy == pytest.approx(18.0 / 300.0)
    assert op.window_s == 2.0


def test_difference_without_messages_is_an_error():
    a = counters(0.0, 0, 1000, 1500, (0,) * 8)
    with pytest.raises(ValueError, match="no data segment"):
        difference(a, a, jiffy_us=10_000)


def test_affinity_places_hosts_on_cpus():
    from benchmarks.op_cpu import cpu_of_host
    assert [cpu_of_host("halves", i, 8, 2) for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [cpu_of_host("one", i, 8, 2) for i in range(8)] == [0] * 8
    assert cpu_of_host("none", 3, 8, 2) is None
    assert cpu_of_host("halves", 7, 8, 1) == 0  # one CPU: everything on it
    with pytest.raises(ValueError, match="unknown affinity"):
        cpu_of_host("spread", 0, 8, 2)
