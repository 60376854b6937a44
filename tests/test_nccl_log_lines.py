"""genie.measure.nccl_log_lines and its use by the nccl-tests reader: a row whose head NCCL's log (NCCL_DEBUG=INFO,
lazy connection at a collective's first call) cut from its figures is read whole; `make NAME_SUFFIX=_mpi` binaries
are read as the collective they test. Excerpts from a real 2-node H100 log (odissei-benchmarks/nccl-tests,
runs/2nodes/all_reduce_mpi.log; the corpus case snellius-h100-ndr200-2node holds the whole files)."""

import pytest

from genie.core.collective import Collective
from genie.core.errors import InputError
from genie.measure.nccl_log_lines import rejoin_rows
from genie.measure.nccl_output import parse_nccl_tests

DEVICES = "".join(f"#  Rank  {r} Group  0 Pid {1904979 + r} on     gcn15{1 if r < 4 else 4} device  {r % 4} "
                  "[0000:06:00] NVIDIA H100\n" for r in range(8))
HEADER = """#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
"""
CUT = ("     2097152        524288     float     sum      -1gcn151:1904979:1905073 [0] NCCL INFO Channel 00/0 : "
       "7[3] -> 0[0] [receive] via NET/IB/2/GDRDMA\n"
       "gcn154:1793998:1794081 [0] NCCL INFO Channel 00/0 : 3[3] -> 4[0] [receive] via NET/IB/2/GDRDMA\n"
       "    87.18   24.05   42.10      0    85.11   24.64   43.12      0\n")
ROWS = ("     1048576        262144     float     sum      -1    69.55   15.08   26.38      0    68.58   15.29   26.76"
        "      0\n" + CUT +
        "     4194304       1048576     float     sum      -1    137.6   30.48   53.34      0    136.6   30.70   53.72"
        "      0\n")


def log(binary: str, rows: str) -> bytes:
    return (f"# Collective test starting: {binary}\n# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: "
            f"2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n"
            f"{DEVICES}{HEADER}{rows}# Out of bounds values : 0 OK\n").encode()


def test_a_row_cut_by_nccl_log_lines_is_read_whole():
    table, = parse_nccl_tests(log("all_reduce_perf_mpi", ROWS), source="all_reduce_mpi.log").tables
    assert table.collective is Collective.ALL_REDUCE and table.ranks == 8
    assert [r.size_bytes for r in table.rows] == [1048576, 2097152, 4194304]
    cut = table.rows[1]
    assert (cut.time_us, cut.algbw_gb_s, cut.busbw_gb_s, cut.in_place_time_us) == (87.18, 24.05, 42.1, 85.11)


def test_rejoin_keeps_line_numbers_and_leaves_whole_rows_alone():
    lines = [line.strip() for line in ROWS.split("\n")]
    out = rejoin_rows(lines)
    assert len(out) == len(lines) and out[0] == lines[0] and out[-2] == lines[-2]
    assert out[1] == "2097152        524288     float     sum      -1 87.18   24.05   42.10      0    85.11   24.64   " \
                     "43.12      0"
    assert out[2] == lines[2] and out[3] == ""


def test_a_host_name_starting_with_a_digit_is_not_read_as_the_root():
    out = rejoin_rows(["1024 256 float sum -10666a154:1:2 [0] NCCL INFO x", "1.0 2.0 3.0 0 1.0 2.0 3.0 0"])
    assert out == ["1024 256 float sum -1 1.0 2.0 3.0 0 1.0 2.0 3.0 0", ""]


def test_a_cut_row_whose_figures_never_come_is_refused_with_its_line():
    rows = ROWS.replace("    87.18   24.05   42.10      0    85.11   24.64   43.12      0\n", "")
    with pytest.raises(InputError, match=r"x\.log: line 18: row has 17 columns"):
        parse_nccl_tests(log("all_reduce_perf", rows), source="x.log")


PER_RANK_ROWS = {  # the same log's all_gather and reduce_scatter rows
    "none": "     1048576         32768     float    none      -1    44.72   23.45   20.52      0    42.48   24.68   21.60"
            "      0\n     2097152         65536     float    none      -1    50.57   41.47   36.28      0    49.79   42.12"
            "   36.86      0\n",
    "sum": "     1048576         32768     float     sum      -1    43.88   23.90   20.91      0    43.40   24.16   21.14"
           "      0\n     2097152         65536     float     sum      -1    52.81   39.71   34.75      0    55.45   37.82"
           "   33.10      0\n"}


@pytest.mark.parametrize("binary, redop, expected", [("all_gather_perf_mpi", "none", Collective.ALL_GATHER),
                                                     ("reduce_scatter_perf_mpi", "sum", Collective.REDUCE_SCATTER)])
def test_binaries_built_with_a_name_suffix(binary, redop, expected):
    table, = parse_nccl_tests(log(binary, PER_RANK_ROWS[redop]), source="run.log").tables
    assert table.collective is expected and table.ranks == 8 and len(table.rows) == 2


def test_an_unsupported_binary_with_a_suffix_is_still_refused():
    with pytest.raises(InputError, match="hypercube_perf output is not supported"):
        parse_nccl_tests(log("hypercube_perf_mpi", ROWS), source="h.log")
