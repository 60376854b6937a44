"""ASTRA-sim stdout parsing, ASTRA's line format and estimate.csv."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from astra_adapter.output import (AstraResult, RankResult, estimate_csv, format_astra_output, parse_astra_output,
                                  read_estimate_csv, write_estimate_csv)
from genie.core.errors import InputError

REFERENCE = Path(__file__).resolve().parent / "data" / "astra-reference"
needs_reference = pytest.mark.skipif(not REFERENCE.is_dir(), reason="ASTRA-sim reference data not found")

LOG = """[2026-11-30 00:42:49.882] [system::topology::RingTopology] [info] ring of node 0, id: 0 ...
[2026-11-30 00:42:49.883] [workload] [info] sys[1] finished, 988400 cycles, exposed communication 388400 cycles.
[2026-11-30 00:42:49.883] [statistics] [info] sys[1]. Post statistics processing start.
[2026-11-30 00:42:49.883] [statistics] [info] sys[1]. Post statistics processing end.
[2026-11-30 00:42:49.883] [statistics] [info] sys[1], Wall time: 988400
[2026-11-30 00:42:49.883] [statistics] [info] sys[1], Comm time: 688400
[2026-11-30 00:42:49.883] [statistics] [info] sys[1], GPU time: 600000
[2026-11-30 00:42:49.883] [statistics] [info] sys[1], Total compute-communication overlap: 300000
[2026-11-30 00:42:49.884] [workload] [info] sys[0] finished, 64440 cycles, exposed communication 64440 cycles.
[2026-11-30 00:42:49.884] [statistics] [info] sys[0], Wall time: 64440
[2026-11-30 00:42:49.884] [statistics] [info] sys[0], Comm time: 64440
[2026-11-30 00:42:49.884] [system] [warning] Exiting
"""


def test_parse_lines() -> None:
    result = parse_astra_output(LOG)
    assert [r.rank for r in result.ranks] == [1, 0]  # finishing order is kept
    one = result.ranks[0]
    assert (one.finish_cycles, one.exposed_comm_cycles, one.wall_time) == (988400, 388400, 988400)
    assert one.type_times == (("Comm", 688400), ("GPU", 600000)) and one.overlap == 300000
    zero = result.by_rank()[0]
    assert zero.gpu_time == 0 and zero.overlap == 0 and zero.comm_time == 64440
    assert (result.max_finish_cycles, result.min_finish_cycles, result.max_gpu_time) == (988400, 64440, 600000)


def test_nothing_parseable() -> None:
    with pytest.raises(InputError, match="no 'sys\\[N\\] finished"):
        parse_astra_output(b"Segmentation fault\n", source="log.txt")


def test_format_round_trip() -> None:
    result = parse_astra_output(LOG)
    text = format_astra_output(result, timestamp="2026-01-01 00:00:00.000")
    assert parse_astra_output(text) == result
    assert "[2026-01-01 00:00:00.000] [statistics] [info] sys[1], Total compute-communication overlap: 300000" in text
    assert text.endswith("[system] [warning] Exiting\n")
    no_overlap = format_astra_output(AstraResult((RankResult(0, 5, 5, 5, (("Comm", 5),)),)), timestamp="t")
    assert "overlap" not in no_overlap


def test_estimate_csv(tmp_path: Path) -> None:
    result = parse_astra_output(LOG)
    data = estimate_csv(result)
    assert data.decode().splitlines() == ["rank,finish_cycles,exposed_comm_cycles,comm_time,gpu_time,overlap",
                                          "0,64440,64440,64440,0,0", "1,988400,388400,688400,600000,300000"]
    path = write_estimate_csv(result, tmp_path / "out")
    assert path.read_bytes() == data and sorted(p.name for p in path.parent.iterdir()) == ["estimate.csv"]
    back = read_estimate_csv(data)
    assert [(r.rank, r.finish_cycles, r.comm_time, r.gpu_time, r.overlap) for r in back.by_rank()] == \
        [(0, 64440, 64440, 0, 0), (1, 988400, 688400, 600000, 300000)]
    with pytest.raises(InputError):
        read_estimate_csv(b"rank,finish\n0,1\n")


@needs_reference
def test_every_reference_stdout_matches_results_csv() -> None:
    rows = list(csv.DictReader((REFERENCE / "results.csv").open()))
    assert len(rows) == 93
    for row in rows:
        result = parse_astra_output((REFERENCE / row["case"] / f"stdout_{row['backend']}.txt").read_bytes())
        got = (result.max_finish_cycles, result.min_finish_cycles, result.max_exposed_comm_cycles,
               result.max_comm_time, result.max_gpu_time, result.max_overlap, len(result.ranks))
        want = tuple(int(row[k]) for k in ("max_finish_cycles", "min_finish_cycles", "exposed_comm_cycles",
                                           "max_comm_time", "max_gpu_time", "max_overlap", "n_sys_finished"))
        assert got == want, (row["case"], row["backend"])
