"""The peers harness's pure parts (benchmarks/peers): sizes and iterations policy, genie bench bands, results
files to rows, tables, ratios, targets and peers.csv. No root, no torch, no processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.peers import plan, report
from benchmarks.peers.report import GENIE, GLOO, MPI, FlowLimit, Row, ScaleResult, Verdict
from benchmarks.peers.results import rows_from_results
from benchmarks.peers.scale import vm_rss_kib
from genie.core.collective import Collective

AR, AG, A2A = Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.ALL_TO_ALL
MIB = 1 << 20


def row(system, shaped, collective, size, time_us, ranks=8, iterations=5):
    return report.row_from_time(system, shaped, collective, ranks, size, time_us, iterations)


def test_parse_sizes_range_and_list():
    assert plan.parse_sizes("1K-256M", 4) == [1024 * 4 ** k for k in range(10)]
    assert plan.parse_sizes("1K-64M", 16) == [1024, 16384, 262144, 4 * MIB, 64 * MIB]
    assert plan.parse_sizes("64M,1K,1K", 4) == [1024, 64 * MIB]
    with pytest.raises(ValueError):
        plan.parse_sizes("1K-256M", 1)
    with pytest.raises(ValueError):
        plan.parse_sizes("4K-1K", 2)


def test_policy_and_iterations():
    policy = plan.parse_policy("16M:2/10,1M:5/20")
    assert policy[0] == (MIB, plan.Iterations(5, 20))
    assert plan.iterations_for(1024, policy) == plan.Iterations(5, 20)
    assert plan.iterations_for(4 * MIB, policy) == plan.Iterations(2, 10)
    assert plan.iterations_for(256 * MIB, policy) == plan.Iterations(2, 10)  # above the last entry: the last
    for bad in ("1M:5", "1M:x/2", "1M:1/0", ""):
        with pytest.raises(ValueError):
            plan.parse_policy(bad)


def test_bands_split_on_policy_and_factor():
    policy = plan.parse_policy(plan.DEFAULT_POLICY)
    got = plan.bands(plan.parse_sizes("1K-256M", 4), policy)
    assert got == [plan.Band(1024, MIB, 4, 5, 20), plan.Band(4 * MIB, 16 * MIB, 4, 2, 10),
                   plan.Band(64 * MIB, 64 * MIB, 2, 1, 5), plan.Band(256 * MIB, 256 * MIB, 2, 1, 2)]
    # a change of step factor starts a new band; a non-integer ratio stands alone
    got = plan.bands([1024, 2048, 8192, 12288], plan.parse_policy("1M:1/3"))
    assert [(b.min_bytes, b.max_bytes, b.factor) for b in got] == [(1024, 2048, 2), (8192, 8192, 2),
                                                                   (12288, 12288, 2)]


def test_cases_and_size_check():
    policy = plan.parse_policy("1M:5/20,64M:1/5")
    cs = plan.cases([AR, AG], [64 * MIB, 1024], policy)
    assert [(c.collective, c.size_bytes, c.warmup, c.iterations) for c in cs] == [
        (AR, 1024, 5, 20), (AR, 64 * MIB, 1, 5), (AG, 1024, 5, 20), (AG, 64 * MIB, 1, 5)]
    assert cs[0].to_json() == {"collective": "all_reduce", "size_bytes": 1024, "warmup": 5, "iterations": 20}
    plan.check_sizes([1024, 64 * MIB], 8)
    with pytest.raises(ValueError):
        plan.check_sizes([1000], 8)


def test_rows_from_results_use_genies_iteration_definition():
    # two ranks, two iterations: iteration 0 from the last start (100) to the last end (1100); iteration 1
    # from there to the last end (3100): 1000 ns and 2000 ns, median 1500 ns
    doc = {"collective": "all_reduce", "size_bytes": 1024,
           "spans": [[[0, 1000], [1000, 3000]], [[100, 1100], [1100, 3100]]]}
    text = json.dumps(doc) + "\n" + '{"collective": "all_redu'  # a half-written last line is skipped
    rows = rows_from_results(text, GLOO, True, 2)
    assert len(rows) == 1
    r = rows[0]
    assert (r.system, r.shaped, r.collective, r.size_bytes, r.iterations) == (GLOO, True, AR, 1024, 2)
    assert r.time_us == pytest.approx(1.5)
    assert r.algbw == pytest.approx(1024 / 1500)
    assert r.busbw == pytest.approx(1024 / 1500 * 2 * 1 / 2)
    with pytest.raises(ValueError):
        rows_from_results(json.dumps(doc), GLOO, True, 3)


def test_row_from_time_uses_nccl_factors():
    r = row(GENIE, True, AG, 64 * MIB, 1e6)
    assert r.algbw == pytest.approx(64 * MIB / 1e9)
    assert r.busbw == pytest.approx(r.algbw * 7 / 8)
    assert r.count == 16 * MIB
    assert row(GENIE, True, AR, 64 * MIB, 1e6).busbw == pytest.approx(64 * MIB / 1e9 * 14 / 8)


def test_system_table_layout():
    rows = [row(GENIE, True, AR, 1024, 500.0), row(GENIE, True, AR, 64 * MIB, 1e6), row(GLOO, True, AR, 1024, 9.0)]
    text = report.format_system_table(rows, GENIE, True, 8)
    lines = text.splitlines()
    assert lines[0] == "# genie all_reduce, 8 ranks, 1 Gbit/s HTB"
    assert "size" in lines[1] and "busbw" in lines[1] and "(GB/s)" in lines[2]
    assert lines[3].split() == ["1024", "256", "float", "sum", "500.0", "0.0020", "0.0036", "5"]
    assert len(lines) == 5
    assert "nothing measured" in report.format_system_table(rows, MPI, True, 8)


def test_ratios_and_ratio_table():
    rows = [row(GENIE, True, AR, 1024, 100.0), row(GLOO, True, AR, 1024, 400.0), row(MPI, True, AR, 1024, 50.0),
            row(GENIE, True, AG, 1024, 100.0)]
    rs = {(r.peer, r.collective): r for r in report.ratios(rows)}
    assert rs[GLOO, AR].time_ratio == pytest.approx(0.25) and rs[GLOO, AR].busbw_ratio == pytest.approx(4.0)
    assert rs[MPI, AR].time_ratio == pytest.approx(2.0) and rs[MPI, AR].busbw_ratio == pytest.approx(0.5)
    assert (GLOO, AG) not in rs
    table = report.format_ratio_table(rows, True).splitlines()
    assert table[2].split() == ["all_reduce", "1K", "0.250", "4.000", "2.000", "0.500"]
    assert table[3].split() == ["all_gather", "1K", "-", "-", "-", "-"]
    assert "genie not measured" in report.format_ratio_table(rows, False)


def _full_rows(genie_us: float, gloo_us: float, mpi_us: float) -> list[Row]:
    rows = []
    for system, t in ((GENIE, genie_us), (GLOO, gloo_us), (MPI, mpi_us)):
        for shaped in (True, False):
            rows.append(row(system, shaped, AR, 64 * MIB, t))
            rows.append(row(system, shaped, AR, 1024, t / 1000))
            rows.append(row(system, shaped, AG, 64 * MIB, t / 2))
            rows.append(row(system, shaped, A2A, 64 * MIB, t / 2))
    return rows


def test_targets_pass_and_fail():
    # 64 MiB all-reduce at 8 ranks in 0.98 s: busbw = 64 MiB / 0.98 s x 1.75 = 0.1198 GB/s
    rows = _full_rows(0.98e6, 1.0e6, 0.9e6)
    limit = FlowLimit(shaped=False, per_flow_GBps=(0.12, 0.14))
    got = {t.name: t for t in report.targets(rows, limit)}
    assert got["1G: 64M all_reduce busbw >= 0.119 GB/s"].verdict == Verdict.PASS
    assert got["1G: 64M all_reduce busbw >= 1.0 x gloo"].verdict == Verdict.PASS
    # all_gather in 0.49 s: 64 MiB / 0.49 s x 7/8 = 0.1198 >= 0.95 x 0.1196
    assert got["1G: 64M all_gather busbw >= 0.95 x payload limit"].verdict == Verdict.PASS
    assert got["1G: 1K all_reduce latency <= MPI"].verdict == Verdict.FAIL  # 980 us > 900 us
    assert got["1G: 1K all_reduce latency <= MPI"].measured == "980.0 us"
    assert got["unshaped: 64M all_reduce busbw >= 0.9 x per-flow limit"].verdict == Verdict.PASS  # 0.1198 >= 0.117
    assert got["unshaped: 64M all_reduce busbw >= 1.0 x MPI"].verdict == Verdict.FAIL
    assert all(t.verdict == Verdict.NOT_RUN for n, t in got.items() if n.startswith("scale"))
    assert len(got) == 11


def test_targets_not_run_without_measurements():
    got = report.targets([], None)
    assert all(t.verdict == Verdict.NOT_RUN for t in got)
    text = report.format_targets(got)
    assert text.splitlines()[-1] == "# 0 passed, 0 failed, 11 not run"


def test_scale_targets():
    rate = report.SCALE_RATE_BPS
    limit = report.payload_limit_GBps(rate)
    assert limit == pytest.approx(0.0125 * 1448 / 1514)
    # 16 MiB ring all-reduce at 64 ranks: busbw = size / t x 2 x 63 / 64
    t_us = 16 * MIB * 2 * 63 / 64 / (0.95 * limit * 1e9) * 1e6
    rows = (report.row_from_time(GENIE, True, AR, 64, 16 * MIB, t_us, 3),)
    ok = ScaleResult(ranks=64, rate_bps=rate, rows=rows, completed=True, max_rss_kib=50_000, rss_samples=100)
    got = {t.name: t.verdict for t in report.scale_targets(ok)}
    assert list(got.values()) == [Verdict.PASS, Verdict.PASS, Verdict.PASS]
    bad = ScaleResult(ranks=64, rate_bps=rate, rows=(), completed=False, max_rss_kib=70_000, rss_samples=3,
                      error="rank 5 died")
    got = report.scale_targets(bad)
    assert [t.verdict for t in got] == [Verdict.FAIL, Verdict.NOT_RUN, Verdict.FAIL]
    assert "rank 5 died" in got[0].measured


def test_peers_csv_round_trip():
    rows = [row(GENIE, True, AR, 1024, 123.456), row(MPI, False, A2A, 64 * MIB, 1e6, iterations=3)]
    text = report.peers_csv(rows)
    assert text.splitlines()[0] == "system,shaped,collective,size_bytes,time_us,algbw,busbw,iterations"
    assert text.splitlines()[2].startswith("mpi,0,all_to_all,67108864,1000000.000,")
    back = report.read_peers_csv(text)
    assert [(r.system, r.shaped, r.collective, r.size_bytes, r.iterations) for r in back] == [
        (GENIE, True, AR, 1024, 5), (MPI, False, A2A, 64 * MIB, 3)]
    assert back[0].time_us == pytest.approx(123.456)
    with pytest.raises(ValueError):
        report.read_peers_csv("system,shaped\n")


def test_full_report_sections():
    rows = _full_rows(0.98e6, 1.0e6, 0.9e6)
    limits = {False: FlowLimit(False, (0.3,) * 8, retrans_segs=5), True: FlowLimit(True, (0.119,) * 8)}
    text = report.full_report(rows, ranks=8, flow_limits=limits, scale=None, header=["# head"])
    assert text.startswith("# head\n")
    assert text.index("1 Gbit/s HTB, 8 ranks") < text.index("unshaped, 8 ranks") < text.index("# targets")
    assert "per flow mean 0.3000 GB/s" in text and "; 5 TCP retransmissions" in text
    assert text.count("# genie / peer") == 2


def test_vm_rss():
    assert vm_rss_kib("Name:\tpython\nVmRSS:\t   41236 kB\nThreads: 1\n") == 41236
    assert vm_rss_kib("Name:\tkworker\n") is None


def test_format_size():
    assert [report.format_size(s) for s in (1024, 64 * MIB, 1 << 30, 1000)] == ["1K", "64M", "1G", "1000"]


def test_host_interface_is_the_first_link_of_the_host():
    from genie.core.testbed import HostEndpoint, LinkEnd, TestbedInfo
    from genie.topology.builders import star

    from benchmarks.peers.systems import RunError, host_interface

    topo = star(2)
    info = TestbedInfo(name="t", prefix="genie-t", topology=topo,
                       hosts=(HostEndpoint("h0", "genie-t-h0", "198.18.0.1"),
                              HostEndpoint("h1", "genie-t-h1", "198.18.0.2")),
                       link_ends=(LinkEnd(1, "h0", "s0", "genie-t-h0", "eth1"),
                                  LinkEnd(0, "h0", "s0", "genie-t-h0", "eth0"),
                                  LinkEnd(0, "s0", "h0", "genie-t-s0", "eth0")))
    assert host_interface(info, "h0") == "eth0"
    with pytest.raises(RunError):
        host_interface(info, "h1")


def test_missing_packages(tmp_path):
    from benchmarks.peers.install import TORCH, missing_packages

    assert missing_packages(["genie"]) == []
    python = tmp_path / "bin" / "python"  # no mpiexec beside it
    assert "mpich" in missing_packages(["mpi"], python=str(python))
    assert all(p in ("mpi4py", "mpich", TORCH) for p in missing_packages(["gloo", "mpi"], python=str(python)))


def test_markdown_summary():
    rows = [row(GENIE, True, AR, 1024, 100.0), row(GLOO, True, AR, 1024, 400.0)]
    text = report.markdown_summary(rows, {True: FlowLimit(True, (0.1,) * 8)})
    lines = [line for line in text.splitlines() if line]
    assert lines[0] == "**1 Gbit/s HTB** — per-flow limit (8 flows i → i+1): 0.1000 GB/s"
    assert lines[-1].startswith("| 1K | 100 | ") and lines[-1].endswith(" | - | - | 4.00 | - |")


def test_genie_bench_argv():
    from benchmarks.peers.systems import genie_bench_argv

    band = plan.Band(1024, MIB, 4, 5, 20)
    argv = genie_bench_argv("tb", [AR, AG], band, Path("/o"))
    assert argv[argv.index("bench"):] == ["bench", "--testbed", "tb", "--collective", "all_reduce,all_gather",
                                          "-b", "1024", "-e", str(MIB), "-f", "4", "-w", "5", "-n", "20", "-c", "0",
                                          "--no-in-place", "--out", "/o", "--sample-ms", "0"]
    assert genie_bench_argv("tb", [AR], band, Path("/o"), op_timeout_s=150)[-2:] == [
        "--timeout", "150"]
    assert genie_bench_argv("tb", [AG], band, Path("/o"), algorithm="pat")[-2:] == ["--algorithm", "pat"]


def test_best_flow_limit():
    a, b = FlowLimit(False, (0.1, 0.1), 7), FlowLimit(False, (0.2, 0.3), 3)
    best = report.best_flow_limit([a, b])
    assert best.per_flow_GBps == (0.2, 0.3) and best.retrans_segs == 3 and best.other_means_GBps == (0.1,)
    assert "best of 2 measurements, the other per-flow means: 0.1000" in report.format_flow_limit(best)
    assert report.best_flow_limit([]) is None
