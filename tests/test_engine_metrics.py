"""Records → iteration times, busbw, the nccl-tests table and sweep files (pure, no root)."""

import csv
import io
import json

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.sizes import aligned_size
from genie.services.bench import sweep_sizes
from genie.core.errors import InputError
from genie.measure.metrics import case_stats, iteration_times_ns
from genie.report.sweep import SWEEP_COLUMNS, sweep_csv, sweep_json


def test_iteration_times_use_last_rank_completion():
    per_rank = {0: [(100, 200), (200, 310), (310, 400)],
                1: [(105, 220), (220, 300), (300, 420)]}
    # reference = last start (105); ends per iteration: max(200,220)=220, max(310,300)=310, max(400,420)=420
    assert iteration_times_ns(per_rank) == [115, 90, 110]
    assert sum(iteration_times_ns(per_rank)) == 420 - 105


def test_iteration_times_reject_mismatched_counts():
    with pytest.raises(ValueError):
        iteration_times_ns({0: [(0, 1)], 1: [(0, 1), (1, 2)]})


@pytest.mark.parametrize("collective,n,factor", [
    (Collective.ALL_REDUCE, 8, 2 * 7 / 8), (Collective.ALL_GATHER, 8, 7 / 8), (Collective.REDUCE_SCATTER, 4, 3 / 4),
    (Collective.ALL_TO_ALL, 8, 7 / 8), (Collective.BROADCAST, 8, 1.0)])
def test_case_stats_busbw_follows_nccl_tests(collective, n, factor):
    s = case_stats(collective, Algorithm.RING, n, 1_000_000, 4, [1_000_000, 2_000_000, 6_000_000])
    assert s.time_us == pytest.approx(3000.0)  # nccl-tests' time: the mean (loop time / iterations)
    assert s.time_median_us == pytest.approx(2000.0)  # the median keeps its own name
    assert s.algbw_GBps == pytest.approx(1_000_000 / 3_000_000)  # bytes / ns = GB/s, from the mean
    assert s.busbw_GBps == pytest.approx(s.algbw_GBps * factor)
    assert s.time_min_us == pytest.approx(1000.0) and s.time_max_us == pytest.approx(6000.0)
    assert s.count == 250_000


def test_sweep_sizes_and_alignment():
    assert sweep_sizes(1024, 8192, 2) == [1024, 2048, 4096, 8192]
    assert sweep_sizes(1, 100, 10) == [1, 10, 100]
    for bad in [(0, 10, 2), (10, 1, 2), (1, 10, 1), (1, 10, 2, -1)]:
        with pytest.raises(InputError):
            sweep_sizes(*bad)
    # nccl-tests' -i (--stepbytes here): a linear step instead of the factor, which it then ignores
    assert sweep_sizes(1024, 4096, 2, 1024) == [1024, 2048, 3072, 4096]
    assert sweep_sizes(8, 100, 1, 40) == [8, 48, 88]
    assert aligned_size(Collective.ALL_REDUCE, 1030, 8) == 1028
    assert aligned_size(Collective.ALL_GATHER, 1030, 8) == 1024
    assert aligned_size(Collective.ALL_TO_ALL, 4, 8) == 32  # never below one element per rank


def test_rank_shares_have_the_iteration_time_as_their_max():
    from genie.measure.metrics import rank_iteration_times_ns

    per_rank = {0: [(100, 200), (200, 310), (310, 400)], 1: [(105, 220), (220, 300), (300, 420)]}
    shares = rank_iteration_times_ns(per_rank)
    assert shares == [[95, 90, 90], [115, 80, 110]]
    assert [max(c) for c in zip(*shares)] == iteration_times_ns(per_rank)


def test_files():
    stats = [case_stats(Collective.ALL_REDUCE, Algorithm.RING, 4, 1024, 4, [10_000] * 3),
             case_stats(Collective.ALL_GATHER, Algorithm.RING, 4, 4096, 4, [20_000] * 3)]
    rows = list(csv.DictReader(io.StringIO(sweep_csv(stats))))
    assert tuple(rows[0]) == SWEEP_COLUMNS and float(rows[0]["time_us"]) == pytest.approx(10.0)
    assert rows[1]["collective"] == "all_gather" and float(rows[1]["algbw_GBps"]) == pytest.approx(4096 / 20_000)
    doc = json.loads(sweep_json(stats, {"ranks": 4}))
    assert doc["meta"]["ranks"] == 4 and len(doc["results"]) == 2
