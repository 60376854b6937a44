"""``--num-queues-per-dim`` in genie's ASTRA-sim engine (congestion_unaware): each phase's queue and ring direction
as ASTRA-sim's ``QueueLevelHandler`` gives them, and the result equal to the real binary's.

``tests/data/astra-reference/queues.csv`` holds what ``AstraSim_Analytical_Congestion_Unaware`` (astra-sim 518bd51 +
astra-network-analytical 599a047) printed at 1-4 queues per dimension, recorded by ``benchmarks/astra_queues.py``:
per (case, queues) the statistics and a digest of its stdout lines, sorted (same-tick finish lines may come in
another order: see docs/astra.md "Deviations and gaps")."""

from __future__ import annotations

import csv

import pytest

from astra_adapter.collective_plan import QueuePick
from astra_adapter.config import NetworkBackend
from astra_adapter.estimate import estimate_files
from astra_adapter.streams import SysState
from benchmarks.astra_queues import EXPORTS, QUEUES_CSV, REFERENCE, digest, export_case, lines, run_genie, summary
from genie.core.errors import InputError

ROWS = list(csv.DictReader(QUEUES_CSV.open()))
#: exported sets checked here (the rest of queues.csv: `python -m benchmarks.astra_queues`), chosen to cover
#: process groups, all-to-all, active chunks, localBWAware and a 2-D network in a few seconds
EXPORTED = {("moe_ring8__base", 2), ("moe_ring8__a2", 3), ("moe_ring8__a2aring", 4), ("moe_ring8__lbw", 4),
            ("ddp_star8__lbw", 4), ("ddp_star8__fifo", 2), ("tp2dp4_star8__a3", 2), ("tp2dp4_star8__base", 4),
            ("tp2dp4_fc2sw4__lbw", 2), ("tp2dp4_star8__hd", 1), ("tp2dp4_star8__hd", 2)}


def _picks(q: int, pick: QueuePick, count: int) -> list[tuple[int, bool]]:
    state = SysState(0, q, 2)
    return [state.take_queue(1, pick) for _ in range(count)]


def test_queue_allocators_follow_queue_level_handler() -> None:
    # level 1 of 2 levels: queue ids q..2q-1; NEXT cycles all, the second half anticlockwise
    assert _picks(4, QueuePick.NEXT, 5) == [(4, False), (5, False), (6, True), (7, True), (4, False)]
    assert _picks(4, QueuePick.FIRST, 3) == [(4, False), (5, False), (4, False)]
    assert _picks(4, QueuePick.LAST, 3) == [(6, True), (7, True), (6, True)]
    assert _picks(3, QueuePick.NEXT, 3) == [(3, False), (4, True), (5, True)]
    assert _picks(3, QueuePick.FIRST, 2) == [(3, False), (3, False)]  # q // 2 = 1: queue 0 only
    assert _picks(3, QueuePick.LAST, 3) == [(4, True), (5, True), (4, True)]
    # one queue: always it; LAST still runs anticlockwise (a localBWAware all-reduce's all-gather phases)
    assert _picks(1, QueuePick.NEXT, 2) == [(1, False), (1, False)]
    assert _picks(1, QueuePick.LAST, 2) == [(1, True), (1, True)]


def _reference_rows() -> list[dict]:
    return [r for r in ROWS if (REFERENCE / r["case"]).is_dir() and int(r["queues"]) > 1]


def _values(row: dict) -> tuple[int, ...]:
    return tuple(int(row[c]) for c in ("max_finish_cycles", "min_finish_cycles", "max_exposed_comm_cycles",
                                        "max_comm_time", "max_gpu_time", "max_overlap"))


@pytest.mark.parametrize("row", _reference_rows(), ids=lambda r: f"{r['case']}-q{r['queues']}")
def test_reference_cases_at_more_queues_equal_the_binary(row: dict) -> None:
    est = run_genie(REFERENCE / row["case"], int(row["queues"]))
    assert summary(est) == _values(row)
    assert digest(lines(est.stdout())) == row["sorted_lines_sha1"]


def test_more_queues_change_the_result_where_the_binary_says_so() -> None:
    # the 1-D localBWAware all-reduce takes its queues from the first half: 2 and 3 queues = 1 queue, 4 = 2 queues
    cycles = {int(r["queues"]): int(r["max_finish_cycles"]) for r in ROWS
              if r["case"] == "all_reduce_8npus_1MB_ring_Ring_4chunks"}
    assert cycles == {1: 64440, 2: 64440, 3: 64440, 4: 32220}
    assert [run_genie(REFERENCE / "all_reduce_8npus_1MB_ring_Ring_4chunks", q).result.max_finish_cycles
            for q in (1, 2, 3, 4)] == [64440, 64440, 64440, 32220]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    work = tmp_path_factory.mktemp("astra-queues")
    recipes = {name: (trace, topology) for name, trace, topology in EXPORTS}

    def folder(case: str):
        name, variant = case.split("__")
        return export_case(work, name, *recipes[name], variant)
    return folder


@pytest.mark.parametrize("row", [r for r in ROWS if (r["case"], int(r["queues"])) in EXPORTED],
                         ids=lambda r: f"{r['case']}-q{r['queues']}")
def test_exported_traces_at_more_queues_equal_the_binary(row: dict, exported) -> None:
    est = run_genie(exported(row["case"]), int(row["queues"]))
    assert summary(est) == _values(row)
    assert digest(lines(est.stdout())) == row["sorted_lines_sha1"]


def test_every_chosen_export_was_recorded() -> None:
    recorded = {(r["case"], int(r["queues"])) for r in ROWS}
    assert EXPORTED <= recorded


def test_queues_must_be_at_least_one() -> None:
    case = REFERENCE / "all_gather_8npus_1MB_sw_Ring_4chunks"
    with pytest.raises(InputError, match=">= 1") as info:
        estimate_files(case / "workload" / "all_gather", case / "system.json", case / "network.yml",
                       queues_per_dim=0, backend=NetworkBackend.CONGESTION_AWARE)
    assert info.value.path == "queues_per_dim"
