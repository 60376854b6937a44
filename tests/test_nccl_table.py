"""`genie bench` stdout in nccl-tests' layout: compared with lines nccl-tests prints (its format strings in
src/util.cu and output pasted in NVIDIA/nccl-tests issues), and read by the parsers users run on it."""

import dataclasses
import json
import re
import subprocess
import sys

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.units import parse_nccl_size_bytes
from genie.measure.metrics import case_stats
from genie.report import nccl_table

# nccl-tests 2.x output (NVIDIA/nccl-tests issue #128: reduce_scatter_perf, 8 ranks), whitespace exact; that
# version printed #wrong with %5g, current src/util.cu with %6g (one column wider)
NCCL_BANNER = ("#                                                              out-of-place                       "
               "in-place          ")
NCCL_ROW = ("         128             4     float     sum      -1    32.31    0.00    0.00      0    25.35    0.01"
            "    0.00      0")
NCCL_FOOTER = ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 95.3009"]


def _config(**kw):
    base = dict(program="reduce_scatter_perf", min_bytes=128, max_bytes=128, step_factor=2, warmup_iters=5,
                iterations=20, validation=1)
    return nccl_table.TableConfig(**{**base, **kw})


def _stats(collective, ranks, size, time_us, iterations=4):
    return case_stats(collective, Algorithm.RING, ranks, size, 4, [int(time_us * 1000)] * iterations)


def _columns(line):
    """Where each whitespace-separated field ends (what a fixed-width parser relies on)."""
    return [m.end() for m in re.finditer(r"\S+", line)]


def test_row_lines_up_with_nccl_tests_output():
    row = nccl_table.row(_stats(Collective.REDUCE_SCATTER, 8, 128, 32.31),
                         _stats(Collective.REDUCE_SCATTER, 8, 128, 25.35), _config())
    assert len(row.split()) == 13 == len(NCCL_ROW.split())
    assert row.split()[:6] == NCCL_ROW.split()[:6] and row.split()[9] == "25.35"
    ends, old = _columns(row), _columns(NCCL_ROW)
    assert ends[:8] == old[:8]  # the same character positions as nccl-tests' up to the first #wrong
    # current src/util.cu: writeBenchmarkLinePreamble + writeBenchmarkLineBody x 2
    current = ("%12li  %12li  %8s  %6s  %6s" % (128, 4, "float", "sum", "%6i" % -1)
               + "  %7s  %6s  %6s  %6g" % ("  32.31", "  0.00", "  0.00", 0)
               + "  %7s  %6s  %6s  %6g" % ("  25.35", "  0.01", "  0.00", 0))
    assert row == current


def test_header_and_footer_as_nccl_tests_prints_them():
    devices = [nccl_table.Device(r, 100 + r, "h0", "genie rank (netns ns)") for r in range(2)]
    text = nccl_table.header(_config(), devices).splitlines()
    assert text[2] == ("# nThread 1 nGpus 1 minBytes 128 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 "
                       "agg iters: 1 validation: 1 graph: 0 unalign: 0")
    assert text[4] == "# Using devices" and text[5].startswith("#  Rank  0 Group  0 Pid    100 on         h0 ")
    linear = nccl_table.header(dataclasses.replace(_config(), step_bytes=1 << 20), devices).splitlines()
    assert " step: 1048576(bytes) warmup iters: " in linear[2]  # -i: nccl-tests prints the step in bytes
    assert NCCL_BANNER in text
    titles = text[-2].split()
    assert titles == ["#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                      "algbw", "busbw", "#wrong"]
    oop = [_stats(Collective.ALL_REDUCE, 2, 1 << 20, 100.0)]
    footer = nccl_table.footer(oop, [None], "all_reduce_perf").splitlines()
    assert footer[0] == NCCL_FOOTER[0]
    assert footer[1].startswith("# Avg bus bandwidth    : ") and footer[1][:25] == NCCL_FOOTER[1][:25]
    assert footer[2:5] == ["#", "# Collective test concluded: all_reduce_perf", "#"]


def test_conventions_of_the_per_collective_files():
    cfg = _config(validation=0)
    gather = nccl_table.row(_stats(Collective.ALL_GATHER, 4, 4096, 10.0), None, cfg).split()
    assert gather[:5] == ["4096", "256", "float", "none", "-1"]  # count per rank, no reduction
    assert gather[8] == "N/A" and gather[9:] == ["N/A"] * 4  # validation off; in-place not measured
    bcast = nccl_table.row(_stats(Collective.BROADCAST, 4, 4096, 10.0), None, cfg, root_rank=2).split()
    assert bcast[3:5] == ["none", "2"]


def test_float_fields_shrink_like_get_float_str():
    assert nccl_table.float_str(32.314, 7) == "  32.31"
    assert nccl_table.float_str(158070.2, 7) == " 158070"
    assert nccl_table.float_str(12345678.0, 7) == "1.2e+07"


def test_sizes_as_nccl_tests_parse_them():
    assert parse_nccl_size_bytes("1KB") == parse_nccl_size_bytes("1K") == parse_nccl_size_bytes("1k") == 1024
    assert parse_nccl_size_bytes("64M") == 64 << 20 and parse_nccl_size_bytes("1G") == 1 << 30
    assert parse_nccl_size_bytes("4096") == 4096
    with pytest.raises(ValueError):
        parse_nccl_size_bytes("1X")


def _bench(tmp_path, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "genie.cli.main", "bench", "--loopback", "--out",
                           str(tmp_path / "run"), *args], capture_output=True, text=True, timeout=timeout)


def test_cli_output_reads_with_the_scripts_users_run(tmp_path):
    proc = _bench(tmp_path, "-g", "2", "-b", "1KB", "-e", "4K", "-f", "4", "-n", "3", "-w", "1",
                  "-J", str(tmp_path / "ar.json"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # grep '# Avg bus bandwidth' | awk '{print $NF}'  (CI dashboards)
    avg = [line for line in lines if line.startswith("# Avg bus bandwidth")]
    assert len(avg) == 1 and float(avg[0].split()[-1]) > 0
    assert "# Out of bounds values : 0 OK" in lines
    rows = [line.split() for line in lines if line and not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [1024, 4096]  # -b 1KB is 1024, as nccl-tests
    for r in rows:  # awk '{print $6, $8, $10, $12}': oop time, oop busbw, in-place time, in-place busbw
        assert len(r) == 13 and r[8] == r[12] == "0"
        assert float(r[5]) > 0 and float(r[9]) > 0 and float(r[7]) >= 0 and float(r[11]) >= 0  # 2 decimals
    doc = json.loads((tmp_path / "ar.json").read_text())
    assert doc["version"] == 3 and [r["size"] for r in doc["results"]] == [1024, 4096]
    assert all(r["in_place"]["time"] > 0 for r in doc["results"])
    assert all(d["pid"] > 0 for d in doc["config"]["devices"])


@pytest.mark.parametrize("args,needle", [
    (["--ranks", "1"], "at least 2 ranks"), (["--ranks", "2", "-o", "max"], "sum only"),
    (["--ranks", "2", "-d", "double"], "float"), (["--ranks", "2", "-N", "3"], "-N"),
])
def test_cli_refuses_what_cpu_ranks_cannot_do(tmp_path, args, needle):
    proc = _bench(tmp_path, *args, "-b", "1K", "-e", "1K", "-n", "1", "-w", "0")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_cli_help_with_h_and_an_example():
    proc = subprocess.run([sys.executable, "-m", "genie.cli.main", "bench", "-h"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "--check" in proc.stdout and "genie bench --loopback" in proc.stdout


def test_per_iteration_columns_and_unmeasured_in_place():
    cfg = _config(per_iteration=True)
    s = case_stats(Collective.ALL_REDUCE, Algorithm.RING, 2, 1024, 4, [10_000, 20_000, 30_000])
    fields = nccl_table.row(s, None, cfg).split()
    assert len(fields) == 5 + 8 + 8 and fields[13:] == ["N/A"] * 8
    assert [float(v) for v in fields[9:12]] == [10.0, 30.0, 30.0]  # i_min, i_max, i_p99 (nearest rank)
    titles = nccl_table.header(cfg, []).splitlines()[-2].split()
    assert titles[10:14] == ["i_min", "i_max", "i_p99", "i_cv%"]  # after "#" and the first 9 titles
