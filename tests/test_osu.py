"""`genie bench --osu TEST`: OSU micro-benchmarks' point-to-point tests, in OSU's output layout (its
c/util/osu_util*.c format strings: ``%-10s%20s`` titles, ``%-10d%20.2f`` rows)."""

import subprocess
import sys

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.measure.metrics import case_stats
from genie.measure.osu import OsuTest, osu_row
from genie.report import osu_table
from genie.services.bench import BenchRequest, sweep_cases
from genie.services.osu import osu_request


def _stats(size, time_us, algorithm=Algorithm.P2P):
    return case_stats(Collective.SEND_RECV, algorithm, 2, size, 4, [int(time_us * 1000)] * 3)


def test_figures_follow_osu():
    assert osu_row(OsuTest.LATENCY, _stats(1024, 50.0, Algorithm.PING_PONG)).latency_us == pytest.approx(25.0)
    assert osu_row(OsuTest.BW, _stats(1 << 20, 1000.0)).bandwidth_MBps == pytest.approx((1 << 20) / 1000.0)
    assert osu_row(OsuTest.BIBW, _stats(1 << 20, 1000.0)).bandwidth_MBps == pytest.approx(2 * (1 << 20) / 1000.0)
    mr = osu_row(OsuTest.MBW_MR, _stats(1024, 10.0), pairs=4)
    assert mr.bandwidth_MBps == pytest.approx(4 * 1024 / 10.0) and mr.messages_per_s == pytest.approx(4e5)


def test_layout_is_osus():
    head = osu_table.header(OsuTest.LATENCY).splitlines()
    assert head[0].startswith("# OSU MPI Latency Test") and head[1] == "# Size            Latency (us)"
    assert osu_table.row(OsuTest.LATENCY, osu_row(OsuTest.LATENCY, _stats(8, 3.0))) == "%-10d%20.2f" % (8, 1.5)
    assert osu_table.header(OsuTest.BW).splitlines()[1] == "%-10s%20s" % ("# Size", "Bandwidth (MB/s)")
    mr = osu_table.header(OsuTest.MBW_MR, pairs=2).splitlines()
    assert mr[1] == "# [ pairs: 2 ] [ window size: 1 ]" and mr[2].split() == ["#", "Size", "MB/s", "Messages/s"]


def test_requests_map_to_send_recv_schedules():
    base = BenchRequest(min_bytes=4, max_bytes=64, factor=4)
    latency = osu_request(OsuTest.LATENCY, base)
    assert (latency.algorithm, latency.ranks, latency.in_place) == (Algorithm.PING_PONG, 2, False)
    assert osu_request(OsuTest.BIBW, base).algorithm is Algorithm.RING
    mbw = osu_request(OsuTest.MBW_MR, BenchRequest(min_bytes=4, max_bytes=4, ranks=6))
    cases = sweep_cases(mbw, 6)
    assert [op.group for op in cases[0].ops] == [(0, 3), (1, 4), (2, 5)]
    with pytest.raises(InputError, match="2 ranks"):
        osu_request(OsuTest.BW, BenchRequest(ranks=4))
    with pytest.raises(InputError, match="unknown OSU test"):
        OsuTest.parse("alltoall")


@pytest.mark.parametrize("test,args", [("latency", []), ("bw", []), ("bibw", []), ("mbw_mr", ["--ranks", "4"])])
def test_cli_prints_osus_table(tmp_path, test, args):
    proc = subprocess.run([sys.executable, "-m", "genie.cli.main", "bench", "--loopback", "--osu", test, *args,
                           "-b", "4", "-e", "4K", "-f", "32", "-n", "5", "-w", "1", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# OSU MPI ")
    rows = [line.split() for line in proc.stdout.splitlines() if line and not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [4, 128, 4096]  # awk '!/^#/ {print $1, $2}'
    assert all(len(r) == (3 if test == "mbw_mr" else 2) for r in rows)
    # 2 decimals: a loaded machine may print 0.00 MB/s at 4 B, never at 4 KiB
    assert all(float(r[1]) >= 0 for r in rows) and float(rows[-1][1]) > 0
