"""Report files without running anything: link/TCP counter diffs, links.csv, tcp.csv, link_samples.csv,
the nccl-tests JSON, compare on synthetic runs, the link observer with a fake testbed probe."""

import csv
import io
import json

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core import testbed as core_testbed
from genie.core.testbed import HostEndpoint, LinkEnd
from genie.core.topology import Host, Link, LinkShape, Switch, Topology
from genie.measure.links import (diff_link_counters, diff_tcp, parse_proc_net_dev, parse_snmp_tcp, rate_samples)
from genie.measure.metrics import case_stats
from genie.report import nccl_json
from genie.report.compare import COMPARE_COLUMNS, compare_csv, compare_runs, format_compare
from genie.report.links import LINKS_COLUMNS, SAMPLES_COLUMNS, TCP_COLUMNS, links_csv, samples_csv, tcp_csv
from genie.report.manifest import InputDigest, RunRecorder
from genie.report.observe import LinkObserver, ProcFile
from genie.report.rundata import accuracy_pairs, load_run
from genie.report.sweep import sweep_csv, sweep_json
from genie.testbed.observed import LinkCounters, TcpConnectionInfo

SNMP = """Ip: Forwarding DefaultTTL
Ip: 2 64
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 {ao} 0 0 0 1 {ins} {outs} {rt} 0 {rst} 0
Udp: InDatagrams
Udp: 0
"""

DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
  eth0: {rx} 10 0 0 0 0 0 0 {tx} 20 0 0 0 0 0 0
"""

ENDS = (LinkEnd(0, "h0", "s0", "ns-h0", "eth0"), LinkEnd(0, "s0", "h0", "ns-s0", "eth0"))


def _counters(end, tx, rx, *, tx_drops=0, rx_drops=0, qdisc=0):
    return LinkCounters(end, tx, tx // 1000, tx_drops, rx, rx // 1000, rx_drops, qdisc)


def _rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_link_diff_per_direction_with_drops_and_utilisation():
    before = [_counters(ENDS[0], 1000, 500), _counters(ENDS[1], 500, 1000)]
    after = [_counters(ENDS[0], 1000 + 125_000_000, 500 + 2000, tx_drops=1, qdisc=4),
             _counters(ENDS[1], 500 + 2000, 1000 + 125_000_000, rx_drops=2)]
    rows = diff_link_counters(before, after, duration_s=2.0, rates_bps={0: 10**9})
    fwd, back = rows
    assert (fwd.src, fwd.dst, fwd.bytes) == ("h0", "s0", 125_000_000)
    assert (fwd.tx_drops, fwd.qdisc_drops, fwd.rx_drops) == (1, 4, 2)
    assert fwd.mean_rate_bps == 500_000_000 and fwd.utilisation_pct == 50.0
    assert (back.src, back.bytes, back.rx_drops) == ("s0", 2000, 0)
    reset = diff_link_counters(after, before, duration_s=1.0)  # counters going backwards: 0, never negative
    assert all(r.bytes == 0 for r in reset) and reset[0].utilisation_pct is None


def test_links_tcp_and_samples_csv_schema():
    before = [_counters(ENDS[0], 0, 0), _counters(ENDS[1], 0, 0)]
    after = [_counters(ENDS[0], 8000, 4000), _counters(ENDS[1], 4000, 8000)]
    text = links_csv(diff_link_counters(before, after, duration_s=1.0, rates_bps={0: 10**6}))
    rows = _rows(text)
    assert tuple(rows[0]) == LINKS_COLUMNS and len(rows) == 2
    assert int(rows[0]["bytes"]) == 8000 and float(rows[0]["mean_rate_bps"]) == 64000.0
    assert float(rows[0]["utilisation_pct"]) == pytest.approx(6.4) and int(rows[0]["rate_bps"]) == 10**6

    t0 = parse_snmp_tcp(SNMP.format(ao=1, ins=10, outs=100, rt=0, rst=0))
    t1 = parse_snmp_tcp(SNMP.format(ao=3, ins=30, outs=300, rt=4, rst=1))
    delta = diff_tcp(t0, t1)
    assert (delta.active_opens, delta.in_segs, delta.out_segs, delta.retrans_segs, delta.out_rsts) == (2, 20, 200, 4, 1)
    from genie.measure.links import NamespaceTcp
    rows = _rows(tcp_csv([NamespaceTcp("ns-h0", "h0", delta)]))
    assert tuple(rows[0]) == TCP_COLUMNS and rows[0]["host"] == "h0" and float(rows[0]["retrans_pct"]) == 2.0

    snaps = [(0.0, {("ns-h0", "eth0"): 0}), (0.5, {("ns-h0", "eth0"): 62_500})]
    samples = rate_samples(ENDS, snaps)
    assert len(samples) == 1 and samples[0].rate_bps == 1_000_000  # the s0 end was not sampled: skipped
    rows = _rows(samples_csv(samples))
    assert tuple(rows[0]) == SAMPLES_COLUMNS and float(rows[0]["t_end_s"]) == 0.5 and int(rows[0]["bytes"]) == 62_500


def test_proc_net_dev_parser():
    assert parse_proc_net_dev(DEV.format(rx=123, tx=456)) == {"lo": (0, 0), "eth0": (123, 456)}


class _FakeTcpDiag:
    """genie.testbed.netlink.TcpDiag: two established connections per namespace (the kernel filters the
    listener out), their windows 10 and 30 segments, smoothed RTTs 0.5 and 1.5 ms."""

    def __init__(self, probe):
        self.probe, self.closed = probe, False

    def established(self, netns_name):
        assert not self.closed
        self.probe.diag_reads.append(netns_name)
        return [TcpConnectionInfo(10, 500), TcpConnectionInfo(30, 1500)]

    def close(self):
        self.closed = True


class _FakeDevFile:
    """A /proc/net/dev kept open (what `ProcFile.open` gives): TX grows by 1000 B per read."""

    def __init__(self, probe):
        self.probe, self.closed = probe, False

    def read(self):
        assert not self.closed
        self.probe.dev_reads += 1
        return DEV.format(rx=0, tx=self.probe.dev_reads * 1000)

    def close(self):
        self.closed = True


class _FakeSnmpFile(_FakeDevFile):
    """A /proc/net/snmp kept open: segments out grow by 10 and retransmitted by 1 per read."""

    def read(self):
        assert not self.closed
        self.probe.snmp_reads += 1
        n = self.probe.snmp_reads
        return SNMP.format(ao=n, ins=0, outs=n * 10, rt=n, rst=0)


class _FakeProbe:
    """genie.testbed.netlink's two functions, scripted: counters grow by 1 MB per call."""

    def __init__(self):
        self.calls = 0
        self.entered = []  # (namespace, path) of every call into a namespace
        self.dev_reads = 0
        self.snmp_reads = 0
        self.files = []
        self.diags = []
        self.diag_reads = []

    def link_counters(self, info):
        self.calls += 1
        n = self.calls * 1_000_000
        return [_counters(ENDS[0], n, n), _counters(ENDS[1], n, n)]

    def TcpDiag(self):  # noqa: N802 - genie.testbed.netlink's class
        self.diags.append(_FakeTcpDiag(self))
        return self.diags[-1]

    def run_in_netns(self, name, fn):
        self.calls += 1
        self.entered.append((name, fn.args[0]))
        if fn.func == ProcFile.open:
            self.files.append(_FakeSnmpFile(self) if fn.args[0].endswith("/snmp") else _FakeDevFile(self))
            return self.files[-1]
        if fn.args[0].endswith("/snmp"):
            return SNMP.format(ao=self.calls, ins=0, outs=self.calls * 10, rt=self.calls, rst=0)
        return DEV.format(rx=0, tx=self.calls * 1000)


def _info():
    topo = Topology("t", (Host("h0"),), (Switch("s0"),), (Link("h0", "s0", LinkShape(rate_bps=10**9)),))
    return core_testbed.TestbedInfo("tb", "genie-tb", topo, (HostEndpoint("h0", "ns-h0", "198.18.0.1"),), ENDS, "htb")


def test_link_observer_with_a_fake_probe():
    with LinkObserver(_info(), _FakeProbe(), interval_s=0.01) as obs:
        import time
        time.sleep(0.08)
    o = obs.observation
    assert o.error is None
    assert [(r.src, r.dst, r.rate_bps) for r in o.links] == [("h0", "s0", 10**9), ("s0", "h0", 10**9)]
    assert all(r.bytes > 0 for r in o.links)
    assert len(o.tcp) == 1 and o.tcp[0].host == "h0" and o.tcp[0].counters.retrans_segs > 0
    assert o.samples and all(s.bytes > 0 for s in o.samples)
    assert set(o.files()) == {"links.csv", "tcp.csv", "link_samples.csv"}


def _wait_for(condition, timeout_s: float = 10.0) -> None:
    """Until `condition()` holds (the sampler thread's progress), at most `timeout_s`."""
    import time

    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_link_samples_read_the_namespace_files_opened_once():
    """Each sample re-reads /proc/net/dev files opened once per namespace as the observation starts: no thread
    enters a namespace per sample (on the 2-core VM that cost 1.7 ms of CPU per sample of star-8's 9
    namespaces, taken from the ranks); the files are closed at the end."""
    probe = _FakeProbe()
    with LinkObserver(_info(), probe, interval_s=0.005) as obs:
        _wait_for(lambda: probe.dev_reads >= 2 * 3)  # 3 samples of 2 namespaces, however loaded the machine
    dev = [e for e in probe.entered if e[1] == "/proc/thread-self/net/dev"]
    assert sorted(dev) == [("ns-h0", "/proc/thread-self/net/dev"), ("ns-s0", "/proc/thread-self/net/dev")]
    assert len(obs.observation.samples) >= 2 * 3 and all(s.bytes > 0 for s in obs.observation.samples)
    assert probe.dev_reads >= 2 * 4 and all(f.closed for f in probe.files) and len(probe.files) == 3  # + snmp


def test_link_samples_enter_the_namespace_when_its_file_cannot_stay_open():
    class NoOpen(_FakeProbe):
        def run_in_netns(self, name, fn):
            if fn.func == ProcFile.open:
                raise OSError("no such namespace file")
            return super().run_in_netns(name, fn)

    probe = NoOpen()
    with LinkObserver(_info(), probe, interval_s=0.005) as obs:
        _wait_for(lambda: sum(e[1] == "/proc/thread-self/net/dev" for e in probe.entered) >= 2 * 2)
    dev = [e for e in probe.entered if e[1] == "/proc/thread-self/net/dev"]
    assert len(dev) >= 2 * 3  # read per sample, in each namespace
    assert obs.observation.samples and all(s.bytes > 0 for s in obs.observation.samples)
    assert obs.observation.error is None  # nothing was missed: the fallback read every sample


def test_proc_file_reads_again_from_the_start(tmp_path):
    path = tmp_path / "counters"
    path.write_text("a" * 70_000)  # longer than one pread
    f = ProcFile.open(str(path))
    assert f.read() == "a" * 70_000
    path.write_text("bc")  # the same inode, new contents
    assert f.read() == "bc"
    f.close()
    f.close()  # closing twice is harmless
    with pytest.raises(ValueError):
        f.read()


def test_an_observation_interrupted_while_it_opens_its_files_closes_those_it_opened():
    class Interrupted(_FakeProbe):  # Ctrl-C as the second namespace's file is opened: `with` skips __exit__
        def run_in_netns(self, name, fn):
            if fn.func == ProcFile.open and self.files:
                raise KeyboardInterrupt
            return super().run_in_netns(name, fn)

    probe = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        with LinkObserver(_info(), probe, interval_s=0.005):
            pass
    assert len(probe.files) == 1 and probe.files[0].closed


def test_an_observation_interrupted_while_it_takes_its_last_sample_closes_its_files():
    class Interrupting(_FakeDevFile):  # a second Ctrl-C as __exit__ reads the files once more
        def read(self):
            raise KeyboardInterrupt

    class Probe(_FakeProbe):
        def run_in_netns(self, name, fn):
            if fn.func == ProcFile.open and not fn.args[0].endswith("/snmp"):  # snmp is read as __enter__ ends
                self.files.append(Interrupting(self))
                return self.files[-1]
            return super().run_in_netns(name, fn)

    probe = Probe()
    entered = False
    with pytest.raises(KeyboardInterrupt):
        with LinkObserver(_info(), probe, interval_s=0):  # no sampler thread: only __exit__ reads
            entered = True
    assert entered  # the interrupt came from __exit__, not __enter__
    assert len(probe.files) == 3 and all(f.closed for f in probe.files)  # two /proc/net/dev, one snmp


def test_a_proc_file_opened_by_a_thread_in_another_namespace_keeps_reading_it_after_the_thread_ended():
    """What the link sampler relies on: /proc/thread-self/net/dev opened by run_in_netns's short-lived thread
    shows that thread's namespace, not the reader's, after the thread is gone (an unnamed namespace of the
    thread's own, which ends with the file)."""
    import ctypes
    import os
    import threading

    libc = ctypes.CDLL(None, use_errno=True)
    opened = {}

    def body():
        if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET, this thread only
            opened["error"] = os.strerror(ctypes.get_errno())
            return
        opened["file"] = ProcFile.open("/proc/thread-self/net/dev")

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if "error" in opened:
        pytest.skip(f"cannot make a network namespace here: {opened['error']}")
    f = opened["file"]
    try:
        with open("/proc/self/net/dev") as mine:
            if set(parse_proc_net_dev(mine.read())) == {"lo"}:
                pytest.skip("this namespace holds only its loopback: the two cannot be told apart")
        assert set(parse_proc_net_dev(f.read())) == {"lo"}  # the thread's new namespace: its loopback only
        assert set(parse_proc_net_dev(f.read())) == {"lo"}  # read again, from its start
    finally:
        f.close()


def test_link_observer_never_fails_the_run():
    class Broken(_FakeProbe):
        def link_counters(self, info):
            raise OSError("netlink gone")

    with LinkObserver(_info(), Broken(), interval_s=0) as obs:
        pass
    assert obs.observation.links == () and "netlink gone" in obs.observation.error


def _stats(collective, size, times_us, ranks=4):
    return case_stats(collective, Algorithm.RING, ranks, size, 4, [int(t * 1000) for t in times_us])


def test_nccl_tests_json_layout():
    from dataclasses import replace

    stats = [_stats(Collective.ALL_REDUCE, 1 << 20, [100, 200, 600]), _stats(Collective.ALL_GATHER, 4096, [10, 10])]
    stats[0] = replace(stats[0], rank_iteration_ns=((90_000, 200_000, 600_000), (100_000, 150_000, 500_000)))
    in_place = [_stats(Collective.ALL_REDUCE, 1 << 20, [400]), None]
    from datetime import datetime
    docs = nccl_json.nccl_tests_documents(
        stats, in_place, config={"min_bytes": 4096, "max_bytes": 1 << 20, "step_factor": 2, "warmup_iters": 1,
                                 "iterations": 3, "verify": True},
        argv=["genie", "bench"], devices=[{"rank": 0, "host": "h0", "netns": "ns0", "pid": 42}],
        start_time=datetime(2025, 1, 2, 3, 4, 5), end_time=datetime(2025, 1, 2, 3, 4, 6), genie_version="0.1.0")
    assert set(docs) == {"nccl_all_reduce_perf.json", "nccl_all_gather_perf.json"}
    doc = json.loads(docs["nccl_all_reduce_perf.json"])
    assert doc["version"] == 3 and doc["start_time"] == "2025-01-02 03:04:05" and doc["args"] == ["genie", "bench"]
    assert doc["config"]["minimum_bytes"] == 4096 and doc["config"]["validation"] == 1
    assert doc["config"]["per_iter_skip"] == 0 and doc["config"]["per_iter_timing"] == "true"
    assert doc["config"]["devices"][0]["hostname"] == "h0" and doc["config"]["devices"][0]["pid"] == 42
    r = doc["results"][0]
    assert (r["size"], r["count"], r["type"], r["redop"], r["root"]) == (1 << 20, 1 << 18, "float", "sum", "    -1")
    assert r["out_of_place"]["time"] == pytest.approx(300.0)  # the mean, as nccl-tests' loop time / iterations
    assert r["out_of_place"]["alg_bw"] == pytest.approx((1 << 20) / 300e3)
    assert r["out_of_place"]["bus_bw"] == pytest.approx(r["out_of_place"]["alg_bw"] * 2 * 3 / 4)
    assert r["out_of_place"]["nwrong"] == 0
    assert r["in_place"]["time"] == pytest.approx(400.0)  # its own measurement, not a copy
    per = r["out_of_place_per_iter"]
    assert per["times_us"] == [100.0, 200.0, 600.0] and per["p50_us"] == 200.0 and per["min_us"] == 100.0
    assert per["per_process_max_times_us"] == [[90.0, 200.0, 600.0], [100.0, 150.0, 500.0]]
    assert doc["average_bus_bandwidth"]["bandwidth"] == pytest.approx(
        (r["out_of_place"]["bus_bw"] + r["in_place"]["bus_bw"]) / 2)  # nccl-tests averages both bodies
    gather = json.loads(docs["nccl_all_gather_perf.json"])["results"][0]
    assert gather["redop"] == "none" and gather["count"] == 4096 // 4 // 4  # per rank, as nccl-tests
    assert gather["in_place"] is None


def _bench_run(path, rows, *, collectives_note=""):
    stats = [_stats(c, size, [t]) for c, size, t in rows]
    with RunRecorder("bench", out=path) as run:
        run.write("sweep.csv", sweep_csv(stats))
        run.write("sweep.json", sweep_json(stats, {}))
    return path


def test_compare_two_bench_runs_gives_the_expected_deltas(tmp_path):
    a = _bench_run(tmp_path / "a", [(Collective.ALL_REDUCE, 1024, 100.0), (Collective.ALL_REDUCE, 2048, 200.0)])
    b = _bench_run(tmp_path / "b", [(Collective.ALL_REDUCE, 1024, 150.0), (Collective.ALL_REDUCE, 2048, 100.0),
                                    (Collective.ALL_REDUCE, 4096, 100.0)])
    c = compare_runs(load_run(a), load_run(b))
    small, large = c.rows
    assert (small.size_bytes, small.median_delta_us, small.median_delta_pct) == (1024, 50.0, 50.0)
    assert large.median_delta_pct == -50.0 and large.busbw_delta_pct == pytest.approx(100.0)
    assert "1 (collective, size) rows are in one run only" in c.notes[0]
    rows = _rows(compare_csv(c))
    assert tuple(rows[0]) == COMPARE_COLUMNS and float(rows[0]["median_delta_pct"]) == 50.0
    assert "+50.0" in format_compare(c)


def test_compare_refuses_different_workloads_without_force(tmp_path):
    a = _bench_run(tmp_path / "a", [(Collective.ALL_REDUCE, 1024, 100.0)])
    b = _bench_run(tmp_path / "b", [(Collective.ALL_REDUCE, 1024, 90.0), (Collective.ALL_GATHER, 1024, 90.0)])
    with pytest.raises(InputError, match="different workloads"):
        compare_runs(load_run(a), load_run(b))
    forced = compare_runs(load_run(a), load_run(b), force=True)
    assert len(forced.rows) == 1 and "different workloads" in forced.notes[0]


def _replay_run(path, digest, median_ns):
    with RunRecorder("replay", out=path, inputs=[InputDigest("trace", "t.yaml", digest, 1, 1)]) as run:
        run.write("replay.json", json.dumps({"meta": {}, "iteration_ns": [median_ns], "iteration_median_ns": median_ns,
                                             "ranks": []}))
        run.write("ops.csv", "iteration,rank,node_id,name,type,bytes,group,algorithm,start_ns,end_ns\n"
                             f"0,0,1,ar,all_reduce,1024,,ring,0,{median_ns // 2}\n0,0,2,c,compute,0,,,0,10\n")
    return path


def test_compare_replays_iteration_time_and_trace_digest(tmp_path):
    a, b = _replay_run(tmp_path / "a", "d1", 2_000_000), _replay_run(tmp_path / "b", "d1", 3_000_000)
    c = compare_runs(load_run(a), load_run(b))
    assert [r.scope for r in c.rows] == ["op", "iteration"]
    assert c.iteration.median_a_us == 2000.0 and c.iteration.median_delta_pct == 50.0
    other = _replay_run(tmp_path / "c", "d2", 1_000_000)
    with pytest.raises(InputError, match="trace sha256"):
        compare_runs(load_run(a), load_run(other))
    with pytest.raises(InputError, match="cannot compare a bench run with a replay run"):
        compare_runs(load_run(_bench_run(tmp_path / "x", [(Collective.ALL_REDUCE, 1024, 1.0)])), load_run(a))


def test_load_run_bad_inputs(tmp_path):
    with pytest.raises(InputError, match="not a genie run directory"):
        load_run(tmp_path)
    with pytest.raises(InputError, match="not a directory"):
        load_run(tmp_path / "nope")
    run = _bench_run(tmp_path / "a", [(Collective.ALL_REDUCE, 1024, 100.0)])
    (run / "sweep.json").unlink()
    with pytest.raises(InputError, match="sweep.json: listed in manifest.json but missing"):
        load_run(run)
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "sweep.csv").write_text("collective,size_bytes\nall_reduce,x\n")
    with pytest.raises(InputError, match="missing column"):
        load_run(tmp_path / "legacy")


def test_accuracy_pairs_found_by_name():
    cols = ["workload", "estimated_iteration_us", "measured_iteration_us", "comm_ns_est", "comm_ns_meas", "x"]
    assert [(p.quantity, p.estimated, p.measured) for p in accuracy_pairs(cols)] == [
        ("iteration_us", "estimated_iteration_us", "measured_iteration_us"), ("comm_ns", "comm_ns_est", "comm_ns_meas")]


def test_link_observer_reports_every_interval():
    """iperf3-style -i lines (`genie bench --interval`): the sampler hands over the last interval's link rates
    and TCP counters; the line starts with '#' so nccl-tests parsers skip it."""
    reports = []
    probe = _FakeProbe()
    with LinkObserver(_info(), probe, interval_s=0.01, report_s=0.03, on_interval=reports.append):
        _wait_for(lambda: len(reports) >= 3)
    assert len(reports) >= 3 and all(r.t_end_s - r.t_start_s >= 0.03 for r in reports)
    # each host's /proc/net/snmp opened once and re-read per report: no thread enters its namespace per report
    assert [e for e in probe.entered if str(e[1]).endswith("/snmp")] == [("ns-h0", "/proc/thread-self/net/snmp")]
    assert probe.snmp_reads >= 3 + 2 and all(f.closed for f in probe.files)
    assert all(r.t_start_s >= prev.t_end_s for prev, r in zip(reports, reports[1:]))  # back to back
    first = reports[0]
    assert first.links and all(s.bytes > 0 for s in first.links) and first.tcp[0].counters.retrans_segs > 0
    assert [(s.host, s.count, s.cwnd_mean, s.cwnd_min, s.rtt_ms_mean, s.rtt_ms_max) for s in first.sockets] == [
        ("h0", 2, 20.0, 10, 1.0, 1.5)]
    # one sock_diag reader for the observation, read per report in the host's namespace, closed at the end
    assert len(probe.diags) == 1 and probe.diags[0].closed and set(probe.diag_reads) == {"ns-h0"}
    assert len(probe.diag_reads) >= 3
    line = first.line()
    assert line.startswith("# [") and "h0>s0" in line and "TCP segs out/retrans: h0 " in line
    assert line.endswith("| conns cwnd/rtt: h0 2x 20/1.00ms")


def test_link_observer_reports_a_dilated_testbed_in_emulated_time():
    """At N = 10 the same bytes over a tenth of the time: durations / 10, rates x 10."""
    import dataclasses
    from genie.core.dilation import TimeDilation

    ticks = iter(range(0, 10**6, 1))
    info = dataclasses.replace(_info(), dilation=TimeDilation(10.0))
    with LinkObserver(info, _FakeProbe(), interval_s=0, clock=lambda: float(next(ticks))) as obs:
        pass
    plain_ticks = iter(range(0, 10**6, 1))
    with LinkObserver(_info(), _FakeProbe(), interval_s=0, clock=lambda: float(next(plain_ticks))) as plain:
        pass
    for dilated, real in zip(obs.observation.links, plain.observation.links):
        assert dilated.duration_s == pytest.approx(real.duration_s / 10)
        assert dilated.mean_rate_bps == pytest.approx(real.mean_rate_bps * 10)
