"""genie.measure.nccl_output: reading nccl-tests output as people have it — real posted output (excerpts inline,
the whole files of /work/shared/real-nccl-examples when present), every layout genie's own writers produce
(genie.report.nccl_table, genie.report.nccl_json) read back exactly, older releases' layouts, and bad input
refused in one line that names the line or the JSON field."""

import dataclasses
import json
from datetime import datetime
from pathlib import Path

import pytest

from genie.core.collective import ROOTED, Algorithm, Collective
from genie.core.errors import InputError
from genie.measure import nccl_output
from genie.measure.metrics import case_stats
from genie.measure.nccl_output import NcclDevice, Phase, parse_nccl_tests
from genie.report import nccl_json, nccl_table

EXAMPLES = Path("/work/shared/real-nccl-examples")

BANNER = "#                                                              out-of-place                       in-place          "
TITLES = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
          "#wrong")
UNITS = "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
HEADER = "\n".join([BANNER, TITLES, UNITS])

# NVIDIA/nccl-tests issue (2 x 8 H100, srun --label), whitespace as posted
H100_TWO_NODES = """### (B) Two nodes (node005 + node007), 16 ranks
 0: # nThread 1 nGpus 1 minBytes 8388608 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 200 agg iters: 1 validation: 0 graph: 0
 0: #
 0: # Using devices
""" + "".join(f" 0: #  Rank {r:2d} Group  0 Pid {291000 + r:6d} on    node00{5 if r < 8 else 7} device  {r % 8} [0x18] "
              "NVIDIA H100 80GB HBM3\n" for r in range(16)) + """ 0: #
 0: #                                                              out-of-place                       in-place
 0: #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
 0: #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
 0:      8388608       2097152     float     sum      -1    215.3   38.96   73.04    N/A    180.0   46.60   87.38    N/A
 0:     16777216       4194304     float     sum      -1    262.9   63.81  119.65    N/A    261.9   64.05  120.10    N/A
 0:   8589934592    2147483648     float     sum      -1   103530   82.97  155.57    N/A   103538   82.96  155.56    N/A
 0: # Out of bounds values : 0 OK
 0: # Avg bus bandwidth    : 142.735
 0: #
 0:
"""

# A40 pairs, posted without nccl-tests' preamble (two runs, no devices: ranks from busbw/algbw, collective from the
# command in the collector's title)
A40_HEADERLESS = """### Run 1: CUDA_VISIBLE_DEVICES=0,1 ./build/all_reduce_perf -b 1G -e 10G -f 2 -g 2
  1073741824     268435456     float     sum      -1    22661   47.38   47.38      0    22658   47.39   47.39      0
  2147483648     536870912     float     sum      -1    45244   47.46   47.46      0    45276   47.43   47.43      0
# Out of bounds values : 0 OK
### Run 2: CUDA_VISIBLE_DEVICES=0,1,6,7 NCCL_P2P_DISABLE=1 ./build/all_reduce_perf -b 1G -e 10G -f 2 -g 4
""" + HEADER + """
  1073741824     268435456     float     sum      -1  1121937    0.96    1.44      0  1120530    0.96    1.44      0
  8589934592    2147483648     float     sum      -1  9542917    0.90    1.35      0  9550375    0.90    1.35      0
"""

# 1 x A100 per node, 2 nodes (mpirun --tag-output added here), NCCL's own version line inside the preamble
A100 = """[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
[1,0]<stdout>:#
[1,0]<stdout>:# Using devices
[1,0]<stdout>:#  Rank  0 Group  0 Pid   5425 on      test1 device  0 [0x81] NVIDIA A100-PCIE-40GB
[1,0]<stdout>:#  Rank  1 Group  0 Pid   4962 on      test2 device  0 [0x81] NVIDIA A100-PCIE-40GB
NCCL version 2.21.5+cuda12.4
[1,0]<stdout>:#
""" + "\n".join("[1,0]<stdout>:" + line for line in HEADER.split("\n")) + """
[1,0]<stdout>:           8             2     float     sum      -1    17.08    0.00    0.00      0    16.76    0.00    0.00      0
[1,0]<stdout>:      131072         32768     float     sum      -1    392.0    0.33    0.33      0    393.4    0.33    0.33      0
[1,0]<stdout>:  1073741824     268435456     float     sum      -1   166733    6.44    6.44      0   167090    6.43    6.43      0
"""


def _parse(text, source="nccl-tests.txt", **kw):
    return parse_nccl_tests(text.encode(), source=source, **kw)


def _refused(text, match, path, source="nccl-tests.txt", **kw):
    with pytest.raises(InputError, match=match) as info:
        _parse(text, source, **kw)
    assert info.value.path == path and info.value.source == source
    assert "\n" not in str(info.value)
    return info.value


def _row(size, count, time_us, factor, dtype="float", redop="sum", root=-1, wrong="0"):
    """A row as nccl-tests prints it (writeBenchmarkLinePreamble, writeBenchmarkLineBody x 2)."""
    algbw = size / time_us / 1e3
    body = f"  {time_us:7.2f}  {algbw:6.2f}  {algbw * factor:6.2f}  {wrong:>6}"
    return f"{size:12d}  {count:12d}  {dtype:>8}  {redop:>6}  {root:6d}" + body + body


def _sweep(collective, ranks, sizes=(1 << 20, 1 << 22, 1 << 24), redop="sum", root=-1, dtype="float", word=4):
    per_rank = collective in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_TO_ALL)
    factor = {Collective.ALL_REDUCE: 2 * (ranks - 1) / ranks}.get(collective, (ranks - 1) / ranks if per_rank else 1)
    return [_row(s, s // word // (ranks if per_rank else 1), 10 + s / 5e3, factor, dtype, redop, root) for s in sizes]


# ---------------------------------------------------------------------------------------------- real output

def test_two_h100_nodes_with_srun_labels():
    (table,) = _parse(H100_TWO_NODES).tables
    assert (table.collective, table.ranks, len(table.rows)) == (Collective.ALL_REDUCE, 16, 3)
    assert table.nodes() == ("node005", "node007") and table.ranks_per_node() == 8
    assert table.devices[8] == NcclDevice(8, "node007", 0, "NVIDIA H100 80GB HBM3", 291008)
    assert table.gpus_per_thread == 1  # a process per GPU (srun)
    assert table.title == "(B) Two nodes (node005 + node007), 16 ranks" and table.nccl_version == ""
    first = table.rows[0]
    assert (first.size_bytes, first.count, first.dtype, first.redop, first.root) == (8388608, 2097152, "float", "sum", -1)
    assert (first.time_us, first.algbw_gb_s, first.busbw_gb_s) == (215.3, 38.96, 73.04)
    assert first.figures(Phase.IN_PLACE) == (180.0, 46.60, 87.38)  # `N/A` in #wrong (validation off) is normal
    assert first.line == 25 and table.first_line == 23
    assert table.rows[-1].size_bytes == 8589934592  # huge sizes


def test_rows_without_a_header_and_ranks_from_the_bandwidth_ratio():
    one, two = _parse(A40_HEADERLESS).tables
    assert (one.collective, one.ranks, len(one.rows), one.first_line) == (Collective.ALL_REDUCE, 2, 2, 2)
    assert (two.collective, two.ranks, len(two.rows)) == (Collective.ALL_REDUCE, 4, 2)  # 1.44 / 0.96: 2(n-1)/n
    assert one.nodes() == () and one.ranks_per_node() is None
    assert two.title.startswith("Run 2: ")


def test_mpirun_labels_and_the_nccl_version_line():
    (table,) = _parse(A100, collective=Collective.ALL_REDUCE).tables
    assert (table.ranks, len(table.rows), table.nccl_version) == (2, 3, "2.21.5")
    assert table.nodes() == ("test1", "test2") and table.ranks_per_node() == 1
    assert table.devices[0].gpu == "NVIDIA A100-PCIE-40GB"


def test_all_reduce_on_two_ranks_looks_like_sendrecv():
    """sum, root -1, busbw = algbw: all_reduce on 2 ranks or sendrecv_perf; the reader asks instead of guessing."""
    _refused(A100, r"could be all_reduce or send_recv .*give the collective", "line 11")


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason="the real-output corpus is not on this machine")
@pytest.mark.parametrize("case, given, tables", [
    ("a40-nvbridge-pcie-1node", None, [(Collective.ALL_REDUCE, 2, 4, (), None)] + [
        (Collective.ALL_REDUCE, 4, 4, (), None), (Collective.ALL_REDUCE, 2, 4, (), None)]),
    ("nccltests290-h100-ib-1node-2node", None, [(Collective.ALL_REDUCE, 8, 6, ("node005",), 8)] + [
        (Collective.ALL_REDUCE, 16, 11, ("node005", "node007"), 8)] * 2),
    ("nccltests293-a100pcie-2node-hdr-ib", Collective.ALL_REDUCE, [
        (Collective.ALL_REDUCE, 2, 28, ("test1", "test2"), 1)] * 2),
])
def test_every_real_example(case, given, tables):
    path = EXAMPLES / case / "nccl-tests.txt"
    out = parse_nccl_tests(path.read_bytes(), source=str(path), collective=given)
    assert [(t.collective, t.ranks, len(t.rows), t.nodes(), t.ranks_per_node()) for t in out.tables] == tables
    assert all(t.title for t in out.tables) and out.source == str(path)


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason="the real-output corpus is not on this machine")
def test_real_summary_tables_are_refused():
    path = EXAMPLES / "rtx3060-2node-100gbe-b2b-socket-vs-roce" / "nccl-tests.txt"
    with pytest.raises(InputError, match="Markdown summary table, not nccl-tests output") as info:
        parse_nccl_tests(path.read_bytes(), source=str(path))
    assert info.value.path == "line 3"



def test_a_file_of_two_collectives_is_told_apart_by_a_title_line():
    """all_reduce then all_gather (8 ranks: all_gather's rows read as alltoall's too) pasted into one file: a flag
    cannot name the second table alone, a `### <binary>_perf` title above it can, and the error says so."""
    case = Path(__file__).resolve().parents[1] / "benchmarks/data/real-nccl/superbench-a100sxm4-40g-8gpu-1node"
    ar, ag = ("".join(t for t in (case / f"{c}-8r.txt").read_text().splitlines(True) if not t.startswith("###"))
              for c in ("all_reduce", "all_gather"))
    with pytest.raises(InputError, match=r"could be all_gather or all_to_all .*: give the collective \(for one table "
                       r"of several, a `### <binary>_perf` line above it\)"):
        parse_nccl_tests((ar + ag).encode(), source="two.log")
    out = parse_nccl_tests((ar + "### all_gather_perf -b 1 -e 8G\n" + ag).encode(), source="two.log")
    assert [(t.collective, t.ranks) for t in out.tables] == [(Collective.ALL_REDUCE, 8), (Collective.ALL_GATHER, 8)]

def test_kubectl_timestamps_and_a_powershell_utf16_file():
    """`kubectl logs --timestamps` puts an RFC 3339 time before each line (before srun's label too); Windows
    PowerShell's `>` saves UTF-16 with a byte-order mark: both read as the plain output, line numbers kept."""
    plain = _parse(H100_TWO_NODES, source="x.txt").tables
    stamped = "".join(f"2025-03-04T12:00:{i % 60:02d}.{i:09d}Z {line}" for i, line in
                      enumerate(H100_TWO_NODES.splitlines(True)))
    offset = "".join(f"2025-03-04T12:00:00+01:00\t{line}" for line in H100_TWO_NODES.splitlines(True))
    for data in (stamped.encode(), offset.encode(), H100_TWO_NODES.encode("utf-16"),
                 H100_TWO_NODES.encode("utf-16-be").join([b"\xfe\xff", b""])):
        assert parse_nccl_tests(data, source="x.txt").tables == plain
    cut = H100_TWO_NODES.replace("103538   82.96  155.56    N/A", "")  # the last row cut: the error's line kept
    with pytest.raises(InputError, match=r"row has 9 columns") as info:
        parse_nccl_tests(cut.encode("utf-16"), source="x.txt")
    assert info.value.path == "line 27"

def test_a_failed_check_is_read_from_the_footer():
    """`# Out of bounds values : N FAILED`: nccl-tests found wrong results; the table keeps its rows and says so
    (each table its own footer); `0 OK` and `-c 0` (N/A) are no failure."""
    failed = H100_TWO_NODES.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 1536 FAILED")
    (table,) = _parse(failed).tables
    assert len(table.rows) == 3 and table.wrong is not None
    assert (table.wrong.count, table.wrong.at) == (1536, "line 28")
    assert "line 28: nccl-tests counted 1536 wrong value(s)" in table.wrong.describe("x.txt")
    assert _parse(H100_TWO_NODES).tables[0].wrong is None
    (one, two) = _parse(A40_HEADERLESS.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED")
                        ).tables
    assert one.wrong is not None and one.wrong.count == 3 and two.wrong is None


def test_a_failed_check_is_read_from_the_json():
    doc = json.loads(_json())
    doc["results"][2]["in_place"]["nwrong"] = 7.0
    doc["results"][3]["out_of_place"]["nwrong"] = 2
    (table,) = parse_nccl_tests(json.dumps(doc).encode(), source="r.json").tables
    assert table.wrong is not None and (table.wrong.count, table.wrong.at) == (9, "results[2].in_place.nwrong")
    assert parse_nccl_tests(_json().encode(), source="r.json").tables[0].wrong is None

# ---------------------------------------------------------------------------------------------- genie's writers

def _stats(collective, ranks, size, time_us, dtype=4, spread=37):
    return case_stats(collective, Algorithm.RING, ranks, size, dtype, [int(time_us * 1000) + i * spread for i in range(4)])


def _genie_run(collective, ranks=4, in_place_every=2, dtype=4):
    sizes = [dtype * ranks * 4 ** k for k in range(12)]
    oop = [_stats(collective, ranks, s, 3 + s / 2e4, dtype) for s in sizes]
    ip = [_stats(collective, ranks, s, 4 + s / 3e4, dtype) if i % in_place_every == 0 else None
          for i, s in enumerate(sizes)]
    return oop, ip


def _assert_read_back(table, oop, ip, *, root=-1):
    assert len(table.rows) == len(oop)
    for row, o, i in zip(table.rows, oop, ip):
        assert (row.size_bytes, row.count, row.redop) == (o.size_bytes, nccl_table.param_count(o), nccl_table.redop(o))
        assert row.root == (root if o.collective in ROOTED else -1)
        assert row.time_us == pytest.approx(o.time_us, rel=1e-3, abs=0.006)
        assert row.algbw_gb_s == pytest.approx(o.algbw_GBps, rel=1e-3, abs=0.006)
        assert row.busbw_gb_s == pytest.approx(o.busbw_GBps, rel=1e-3, abs=0.006)
        if i is None:
            assert row.figures(Phase.IN_PLACE) is None and row.in_place_time_us is None
        else:
            assert row.in_place_time_us == pytest.approx(i.time_us, rel=1e-3, abs=0.006)


@pytest.mark.parametrize("collective", list(nccl_json.BINARIES))
@pytest.mark.parametrize("layout", [{}, {"per_iteration": True}, {"extra": True}, {"cputime": True},
                                    {"validation": 0, "per_iteration": True, "extra": True}])
def test_genie_table_reads_back(collective, layout):
    oop, ip = _genie_run(collective)
    config = nccl_table.TableConfig(**{**dict(program=nccl_json.BINARIES[collective], min_bytes=16, max_bytes=1 << 26,
                                              step_factor=4, warmup_iters=1, iterations=4, validation=1), **layout})
    devices = [nccl_table.Device(r, 100 + r, f"host{r // 2}", "genie rank (netns g-h)") for r in range(4)]
    root = 2 if collective in (Collective.BROADCAST, Collective.REDUCE, Collective.GATHER, Collective.SCATTER) else -1
    text = "\n".join([nccl_table.header(config, devices)]
                     + [nccl_table.row(o, i, config, root_rank=max(root, 0)) for o, i in zip(oop, ip)]
                     + [nccl_table.footer(oop, ip, config.program)])
    (table,) = parse_nccl_tests(text.encode(), source="genie-bench.out").tables
    assert (table.collective, table.ranks, table.first_line) == (collective, 4, 12 + bool(layout.get("per_iteration")))
    assert table.nodes() == ("host0", "host1") and table.ranks_per_node() == 2
    assert table.devices[3] == NcclDevice(3, "host1", 0, "genie rank (netns g-h)", 103) and table.nccl_version == ""
    assert table.gpus_per_thread == 1  # the header says nGpus 1 (a genie rank is one process)
    _assert_read_back(table, oop, ip, root=root)


@pytest.mark.parametrize("collective", list(nccl_json.BINARIES))
@pytest.mark.parametrize("cputime", [False, True])
def test_genie_json_reads_back(collective, cputime):
    oop, ip = _genie_run(collective, ranks=8, dtype=2)
    docs = nccl_json.nccl_tests_documents(
        oop, ip, config={"min_bytes": 16, "max_bytes": 1 << 26, "iterations": 4, "verify": True, "root": 3,
                         "cputime": cputime},
        argv=["genie", "bench"], devices=[{"rank": r, "host": f"n{r // 4}", "netns": "ns", "pid": 9} for r in range(8)],
        start_time=datetime(2025, 1, 1), end_time=datetime(2025, 1, 1), genie_version="0")
    ((name, text),) = docs.items()
    out = parse_nccl_tests(text.encode(), source=f"run/{name}")
    (table,) = out.tables
    assert (table.collective, table.ranks, table.ranks_per_node(), table.first_line) == (collective, 8, 4, 0)
    assert table.rows[0].line == 0 and table.rows[0].dtype == "half"
    for row, o in zip(table.rows, oop):  # JSON keeps every digit
        assert (row.time_us, row.algbw_gb_s, row.busbw_gb_s) == (o.time_us, o.algbw_GBps, o.busbw_GBps)
    _assert_read_back(table, oop, ip, root=3)


def test_genie_bench_stdout_with_two_collectives():
    """`genie bench` prints one header per collective: two tables from one stream."""
    config = nccl_table.TableConfig(program="", min_bytes=16, max_bytes=1 << 26, step_factor=4, warmup_iters=1,
                                    iterations=4, validation=1)
    devices = [nccl_table.Device(r, 100 + r, "h", "genie rank") for r in range(4)]
    parts = []
    for collective in (Collective.ALL_REDUCE, Collective.ALL_GATHER):
        cfg = dataclasses.replace(config, program=nccl_json.BINARIES[collective])
        oop, ip = _genie_run(collective)
        parts += [nccl_table.header(cfg, devices)] + [nccl_table.row(o, i, cfg) for o, i in zip(oop, ip)]
        parts.append(nccl_table.footer(oop, ip, cfg.program))
    out = parse_nccl_tests("\n".join(parts).encode(), source="stdout", collective=Collective.BROADCAST)
    assert [(t.collective, t.ranks, len(t.rows)) for t in out.tables] == [(Collective.ALL_REDUCE, 4, 12),
                                                                           (Collective.ALL_GATHER, 4, 12)]


def test_real_nccl_tests_json():
    """What nccl-tests -J writes (%lf doubles, root as text, the binary in args, nccl_version as a code)."""
    doc = {"version": 3, "args": ["./build/alltoall_perf", "-b", "8", "-J", "out.json"], "env": [],
           "nccl_version": 22105,
           "config": {"devices": [{"rank": r, "group": 0, "pid": 1, "hostname": "gpu1", "device": r,
                                   "device_hex": "0000:18:00", "device_info": "NVIDIA H100"} for r in range(4)]},
           "results": [{"size": 4096, "count": 256, "type": "float", "redop": "none", "root": "    -1",
                        "out_of_place": {"time": 20.5, "alg_bw": 0.199805, "bus_bw": 0.149854, "nwrong": 0.0},
                        "in_place": {"time": "nan", "alg_bw": 0.2, "bus_bw": 0.15, "nwrong": None},
                        "actual_iterations": 20, "experiment_name": ""}]}
    (table,) = parse_nccl_tests(json.dumps(doc).encode(), source="x.json").tables
    assert (table.collective, table.ranks, table.nccl_version, table.nodes()) == (Collective.ALL_TO_ALL, 4, "2.21.5",
                                                                                  ("gpu1",))
    assert table.rows[0].figures(Phase.IN_PLACE) is None and table.rows[0].algbw_gb_s == 0.199805


# ---------------------------------------------------------------------------------------------- other layouts

def test_release_2_11_layout():
    """Before 2.13 each test printed its own header: all_gather without redop and root, an `error` column."""
    text = """# nThread 1 nGpus 8 minBytes 4096 maxBytes 8192 step: 2(factor) warmup iters: 5 iters: 20 validation: 1 
#
# Using devices
""" + "".join(f"#   Rank {r:2d} Pid  12345 on     dgx-01 device {r:2d} [0x07] Tesla V100-SXM2-32GB\n" for r in range(8)) + """#
#                                             out-of-place                       in-place          
#       size         count      type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
        4096           128     float    20.15    0.20    0.18  0e+00    19.99    0.20    0.18  0e+00
        8192           256     float    20.40    0.40    0.35  0e+00    20.11    0.41    0.36  0e+00
"""
    (table,) = _parse(text, "all_gather_perf.out").tables
    assert (table.collective, table.ranks, table.ranks_per_node()) == (Collective.ALL_GATHER, 8, 8)
    assert (table.rows[0].redop, table.rows[0].root, table.rows[0].count) == ("none", -1, 128)
    assert table.devices[7] == NcclDevice(7, "dgx-01", 7, "Tesla V100-SXM2-32GB", 12345)
    assert table.gpus_per_thread == 8  # nThread 1 nGpus 8: one thread launches on the 8 GPUs


def test_current_preamble_names_the_collective_and_version():
    text = "\n".join(["# nccl-tests version 2.17.1 nccl-headers=22704 nccl-library=22703",
                      "# Collective test starting: alltoall_perf", "# Using devices",
                      *(f"#  Rank {r:2d} Group  0 Pid {r:6d} on      gpu-a device {r:2d} [0000:18:00] NVIDIA B200"
                        for r in range(4)), "#", HEADER,
                      *_sweep(Collective.ALL_TO_ALL, 4, redop="none"),
                      "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.2 ", "#",
                      "# Collective test concluded: alltoall_perf"])
    (table,) = _parse(text, collective=Collective.ALL_GATHER).tables  # the output's own word wins
    assert (table.collective, table.ranks, table.nccl_version, table.first_line) == (Collective.ALL_TO_ALL, 4,
                                                                                     "2.27.3", 10)


def test_sweeps_of_several_types_and_ops_under_one_header():
    rows = (_sweep(Collective.ALL_REDUCE, 8) + _sweep(Collective.ALL_REDUCE, 8, redop="prod")
            + _sweep(Collective.ALL_REDUCE, 8, dtype="double", word=8))
    (table,) = _parse("\n".join([HEADER, *rows])).tables
    assert len(table.rows) == 9 and {r.dtype for r in table.rows} == {"float", "double"}


def test_timestamps_cputime_wide_figures_and_repeated_sizes():
    """-Z adds a timestamp, -C 1 titles CPU time (its bandwidths stay GPU figures), huge times print as %7.1e,
    and sizes too small to split over the ranks print as 0 several times."""
    titles = TITLES.replace("time", "cputime") + "           timestamp"
    zeros = [f"{0:12d}  {0:12d}  {'float':>8}  {'none':>6}  {-1:6d}" + f"  {0.5:7.2f}  {0.0:6.2f}  {0.0:6.2f}  {0:6d}" * 2
             + "  2025-03-04 10:11:12"] * 3
    huge = (f"{1 << 40:12d}  {(1 << 40) // 64:12d}  {'float':>8}  {'none':>6}  {-1:6d}"
            + f"  {'1.2e+07':>7}  {88.0:6.2f}  {82.5:6.2f}  {0:6d}" * 2 + "  2025-03-04 10:11:13")
    (table,) = _parse("\n".join([BANNER, titles, UNITS, *zeros, huge]), collective=Collective.ALL_GATHER).tables
    assert (table.ranks, len(table.rows), table.rows[-1].time_us) == (16, 4, 1.2e7)  # 82.5 / 88 = 15/16


@pytest.mark.parametrize("collective, redop, root, ranks, sizes", [
    (Collective.ALL_REDUCE, "sum", -1, 8, (1 << 20, 1 << 22)),
    (Collective.REDUCE_SCATTER, "sum", -1, 8, (1 << 20, 1 << 22)),  # ranks from size = count x 4 x ranks
    (Collective.REDUCE, "sum", 0, None, (1 << 20,)),
    (Collective.BROADCAST, "none", 1, None, (1 << 20,)),
    (Collective.ALL_GATHER, "none", -1, 4, (1 << 20,)),
])
def test_collective_inferred_from_the_rows(collective, redop, root, ranks, sizes):
    rows = _sweep(collective, ranks or 2, sizes, redop, root)
    (table,) = _parse("\n".join(rows), ranks=None if ranks else 2,
                      collective=Collective.ALL_GATHER if collective is Collective.ALL_GATHER else None).tables
    assert (table.collective, table.ranks) == (collective, ranks or 2)


def test_sendrecv_from_ratio_and_rank_count():
    rows = _sweep(Collective.SEND_RECV, 4)
    assert _parse("\n".join(rows), ranks=4).tables[0].collective is Collective.SEND_RECV


@pytest.mark.parametrize("source, expected", [
    ("logs/all_gather_perf.log", Collective.ALL_GATHER), ("alltoall-8gpu.txt", Collective.ALL_TO_ALL),
    ("run3_allgather.out", Collective.ALL_GATHER), ("nccl_all_to_all.txt", Collective.ALL_TO_ALL),
])
def test_collective_from_the_file_name(source, expected):
    rows = _sweep(expected, 4, redop="none")
    assert _parse("\n".join([HEADER, *rows]), source).tables[0].collective is expected


def test_all_gather_and_alltoall_rows_are_ambiguous():
    rows = _sweep(Collective.ALL_GATHER, 4, redop="none")
    _refused("\n".join([HEADER, *rows]), r"could be all_gather or all_to_all .*give the collective", "line 4")


def test_a_rooted_table_without_devices_needs_the_rank_count():
    rows = _sweep(Collective.BROADCAST, 4, redop="none", root=0)
    _refused("\n".join([HEADER, *rows]), r"cannot tell how many ranks .*give the rank count", "line 2")
    assert _parse("\n".join([HEADER, *rows]), ranks=4).tables[0].ranks == 4


def test_unsupported_binaries_are_refused():
    text = "# Collective test starting: hypercube_perf\n" + HEADER + "\n" + _sweep(Collective.ALL_GATHER, 4)[0]
    _refused(text, r"hypercube_perf output is not supported", "line 1")
    _refused("\n".join(_sweep(Collective.ALL_REDUCE, 4)), "hypercube_perf output is not supported", None,
             source="hypercube_perf.txt")


# ---------------------------------------------------------------------------------------------- bad input

GOOD = [BANNER, TITLES, UNITS, *_sweep(Collective.ALL_REDUCE, 8)]  # rows on lines 4-6


def _with(line4=None, line5=None, extra=()):
    lines = list(GOOD)
    if line4 is not None:
        lines[3] = line4
    if line5 is not None:
        lines[4] = line5
    return "\n".join(lines + list(extra))


@pytest.mark.parametrize("text, match, path", [
    ("hello\nworld\n", "no nccl-tests table rows found", None),
    ("", "no nccl-tests table rows found", None),
    (_with(line5=GOOD[4][:60]), r"^nccl-tests.txt: line 5: row has 6 columns, the table's header has 13 \(truncated\?\)$",
     "line 5"),
    (_with(line5=GOOD[4][:-4] + " N/"), "'N/' is not a number", "line 5"),
    ("\n".join(GOOD[:3]) + "\n# Out of bounds values : 0 OK", r"header has no rows \(truncated\?\)", "line 2"),
    ("\n".join(GOOD) + "\n" + HEADER, r"header has no rows", "line 8"),
    (_with(line5=GOOD[4].replace("  1048576  ", "  1048000  ", 1)),
     r"size 4194304 is not count 1048000 x 4 B \(float\) = 4192000", "line 5"),
    ("\n".join(GOOD).replace(" float ", "  half "), r"size 1048576 is not count 262144 x 2 B \(half\)", "line 4"),
    ("\n".join(GOOD).replace(" float ", "  quux "), r"unknown type 'quux'", "line 4"),
    (_with(line4=_row(1 << 20, 1 << 18, 20.0, 1.75).replace(" 52.43 ", " 50.00 ", 1)),
     r"algbw 50 GB/s but size 1048576 / time 20 us is 52.43 GB/s", "line 4"),
    (_with(line5=_sweep(Collective.ALL_REDUCE, 4, (1 << 22,))[0]), r"busbw/algbw is 1.500 here but 1.7\d\d..1.7\d\d above",
     "line 5"),
    (_with(line5=_sweep(Collective.ALL_GATHER, 8, (1 << 22,), redop="none")[0]),
     r"redop/root none/-1 after sum/-1 in one table", "line 5"),
    (_with(extra=_sweep(Collective.ALL_REDUCE, 8, (1 << 20,))), r"size 1048576 after 16777216: sizes go down",
     "line 7"),
    (_with(line5=GOOD[5], line4=GOOD[4]).replace(GOOD[5], GOOD[5].replace("sum", "max"), 1),
     r"type/redop/root change to float/max/-1 while the size still grows", "line 5"),
    ("| Size | busBW |\n|---|---|\n| 8 B | 0.00 GB/s |\n", "Markdown summary table", "line 1"),
    ("\n".join(["# Using devices", "#  Rank  0 Group  0 Pid 1 on a device 0 [0x1] G", *GOOD]),
     "the output lists 1 ranks but 8 were given", "line 1"),
    ("  1024  256  float  sum  -1  1.0  1.0  1.75  0", "row has 9 columns and no header says what they are", "line 1"),
])
def test_bad_text_names_the_line(text, match, path):
    _refused(text, match, path, ranks=8 if "Using devices" in text else None)


def test_input_size_and_row_caps(monkeypatch):
    _refused(" " * ((64 << 20) + 1), "more than the 64 MiB read", None)
    monkeypatch.setattr(nccl_output, "MAX_ROWS", 2)
    _refused("\n".join(GOOD), "more than 2 rows", "line 6")


def _json(**changes):
    oop, ip = _genie_run(Collective.ALL_REDUCE)
    doc = json.loads(next(iter(nccl_json.nccl_tests_documents(
        oop, ip, config={"verify": True}, argv=["./all_reduce_perf"], devices=[{"rank": r} for r in range(4)],
        start_time=datetime(2025, 1, 1), end_time=datetime(2025, 1, 1), genie_version="0").values())))
    for path, value in changes.items():
        *parents, key = path.split("__")
        target = doc
        for p in parents:
            target = target[int(p)] if p.isdigit() else target[p]
        target[int(key) if key.isdigit() else key] = value
    return json.dumps(doc, indent=1)


@pytest.mark.parametrize("text, match, path", [
    (_json()[:-40], r"not valid JSON: .* \(truncated\?\)", None),
    (_json(results__2__out_of_place__alg_bw="fast"), "expected a number, got 'fast'", "results[2].out_of_place.alg_bw"),
    (_json(results__2__out_of_place__alg_bw=123.0), r"algbw 123 GB/s but size 256 / time 3.0\d+ us is 0.08\d+ GB/s", "results[2].out_of_place.alg_bw"),
    (_json(results__3__count=7), r"size 1024 is not count 7 x 4 B \(float\) = 28", "results[3].size"),
    (_json(results__1__size=1.5), "expected a whole number, got 1.5", "results[1].size"),
    (_json(results__1__out_of_place=None), r"no out-of-place figures", "results[1].out_of_place"),
    (_json(results=[]), r"0 rows", "results"),
    (_json(results={"a": 1}), "expected a list of objects", "results"),
    (_json(config__devices=[1, 2]), "expected a list of objects", "config.devices"),
    ('{"version": 3}', "no results list", "results"),
])
def test_bad_json_names_the_field(text, match, path):
    with pytest.raises(InputError, match=match) as info:
        parse_nccl_tests(text.encode(), source="r.json")
    if path is None:
        assert info.value.path.startswith("line ")
    else:
        assert info.value.path == path


def test_json_devices_against_the_given_rank_count():
    with pytest.raises(InputError, match="the output lists 4 ranks but 2 were given") as info:
        parse_nccl_tests(_json().encode(), source="r.json", ranks=2)
    assert info.value.path == "config.devices"


def test_bytes_that_are_not_utf8_are_read():
    data = ("\n".join(GOOD) + "\n").encode() + b"\xff\xfe garbage \x00\n"
    assert len(parse_nccl_tests(data, source="x").tables[0].rows) == 3
