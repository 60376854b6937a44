"""The built-in estimator against ASTRA-sim itself (the reference runs of the analytical congestion-unaware and
congestion-aware binaries, under tests/data/astra-reference): finish times, exposed communication and
statistics, and the whole stdout but for timestamps."""

from __future__ import annotations

import json
import re
import statistics
from functools import cache
from pathlib import Path

import pytest

from astra_adapter.config import NetworkBackend
from astra_adapter.estimate import Estimate, estimate_files
from astra_reference import REFERENCE, result_rows

COLUMNS = ("max_finish_cycles", "min_finish_cycles", "exposed_comm_cycles", "max_comm_time", "max_gpu_time",
           "max_overlap")


def _rows(backend: NetworkBackend = NetworkBackend.CONGESTION_UNAWARE) -> list[dict]:
    return result_rows(backend.value)


def _folder(case: str) -> Path:
    bundled = REFERENCE / case
    return bundled if bundled.is_dir() else next(r["folder"] for r in result_rows("congestion_unaware")
                                                 if r["case"] == case)


@cache
def _estimate(case: str, backend: NetworkBackend = NetworkBackend.CONGESTION_UNAWARE) -> Estimate:
    folder = _folder(case)
    prefix = json.loads((folder / "case.json").read_text())["workload_prefix"]
    return estimate_files(folder / prefix, folder / "system.json", folder / "network.yml",
                          folder / "remote_memory.json", backend=backend)


def _summary(est: Estimate) -> tuple[int, ...]:
    r = est.result
    return (r.max_finish_cycles, r.min_finish_cycles, r.max_exposed_comm_cycles, r.max_comm_time, r.max_gpu_time,
            r.max_overlap)


def test_max_finish_accuracy_over_all_cases() -> None:
    rows = _rows()
    assert len(rows) >= 47 and len([r for r in rows if r["folder"].parent == REFERENCE]) == 47
    errors = [abs(_estimate(row["case"]).result.max_finish_cycles - int(row["max_finish_cycles"]))
              / int(row["max_finish_cycles"]) for row in rows]
    assert statistics.median(errors) <= 0.01
    assert max(errors) <= 0.05


@pytest.mark.parametrize("row", _rows(), ids=lambda row: row["case"])
def test_case_statistics_are_exact(row: dict) -> None:
    assert _summary(_estimate(row["case"])) == tuple(int(row[c]) for c in COLUMNS)


def _strip_timestamps(text: str) -> list[str]:
    return [re.sub(r"^\[[^\]]*\] ", "", line) for line in text.splitlines()]


@pytest.mark.parametrize("row", _rows(), ids=lambda row: row["case"])
def test_stdout_matches_astra_sim(row: dict) -> None:
    """Same lines in the same order, including which of several ranks finishing on the same tick comes first."""
    ours = _strip_timestamps(_estimate(row["case"]).stdout())
    theirs = _strip_timestamps((row["folder"] / "stdout_congestion_unaware.txt").read_text())
    assert ours == theirs


AWARE = NetworkBackend.CONGESTION_AWARE


def test_every_aware_case_is_bundled() -> None:
    assert len([r for r in _rows(AWARE) if r["folder"].parent == REFERENCE]) == 46


@pytest.mark.parametrize("row", _rows(AWARE), ids=lambda row: row["case"])
def test_aware_case_statistics_and_stdout_are_exact(row: dict) -> None:
    """The congestion-aware binary: same statistics, same lines in the same order."""
    est = _estimate(row["case"], AWARE)
    assert _summary(est) == tuple(int(row[c]) for c in COLUMNS)
    theirs = _strip_timestamps((row["folder"] / "stdout_congestion_aware.txt").read_text())
    assert _strip_timestamps(est.stdout()) == theirs


def test_aware_differs_from_unaware_where_links_are_shared() -> None:
    """Store-and-forward through the switch, and a double binary tree whose edges share ring links."""
    for case, unaware, aware in (("all_gather_8npus_1MB_sw_Ring_4chunks", 165016, 301712),
                                 ("all_reduce_8npus_1MB_ring_DBT_4chunks", 139052, 309892)):
        assert _estimate(case).result.max_finish_cycles == unaware
        assert _estimate(case, AWARE).result.max_finish_cycles == aware


def test_aware_refuses_more_than_one_dimension() -> None:
    from genie.core.errors import GenieError

    with pytest.raises(GenieError, match="only supports 1-dim"):
        _estimate("all_reduce_16npus_1MB_2D-ring2-sw8_Ring2D_4chunks", AWARE)


def test_per_rank_double_binary_tree() -> None:
    est = _estimate("all_reduce_8npus_1MB_ring_DBT_4chunks")
    assert [r.finish_cycles for r in est.result.by_rank()] == [119898, 139052, 133660, 139052, 127279, 139052,
                                                               133660, 139052]


def test_overlap_and_exposed_communication() -> None:
    rank0 = _estimate("cc_trainstep_L4_f50us_b100us_ar4MB_8npus_ring").result.by_rank()[0]
    assert (rank0.finish_cycles, rank0.exposed_comm_cycles, rank0.comm_time, rank0.gpu_time, rank0.overlap) == \
        (988400, 388400, 688400, 600000, 300000)
    assert rank0.type_times[0][0] == "Comm"  # ASTRA-sim prints Comm before GPU here, GPU first in cc_serial
    serial = _estimate("cc_serial_comp100us_ar1MB_comp100us_8npus_ring").result.by_rank()[0]
    assert serial.type_times == (("GPU", 200000), ("Comm", 64440)) and serial.overlap == 0
