"""benchmarks.iteration_spread: the per-iteration arithmetic (pure; no root, no processes)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks.iteration_spread import iteration_spread, rank_lateness, report, share_lateness_ms, steps_by_case


def test_a_short_last_iteration_and_long_short_pairs():
    times = [10.0, 10.2, 12.0, 8.0, 9.9, 10.1, 8.8]  # one late end (12 then 8), the last short
    s = iteration_spread(times)
    assert s.iterations == 7 and s.within == 4  # 10.0 10.2 9.9 10.1 around the median 10.0
    assert s.misses_before_last == 2 and s.last_over_median == pytest.approx(0.88)
    assert s.first_over_median == pytest.approx(1.0)
    assert s.lag1_autocorrelation < 0  # the late end lengthens one iteration and shortens the next
    assert s.pairs == 6 and s.pairs_within == 3  # 10.1, (12 + 8) / 2 and 10.0; not 11.1, 8.95, 9.45


def test_even_iterations_are_all_within_and_have_no_autocorrelation():
    s = iteration_spread([5.0] * 6)
    assert (s.within, s.misses_before_last, s.pairs_within, s.last_over_median) == (6, 0, 5, 1.0)
    assert math.isnan(s.lag1_autocorrelation)


def test_no_iterations_is_an_error():
    with pytest.raises(ValueError):
        iteration_spread([])


def test_rank_lateness_follows_the_last_rank():
    # 3 ranks, 4 iterations; rank 2 ends iteration 1 late by 3 ms, which is the long iteration
    ms = 1_000_000
    ends = np.array([[10, 20, 30, 40], [10, 20, 30, 40], [11, 24, 31, 41]], dtype=np.int64) * ms
    starts = np.array([[0, 10, 20, 30], [0, 10, 20, 30], [1, 11, 24, 31]], dtype=np.int64) * ms
    late = rank_lateness(starts, ends)
    # times 10, 13, 7, 10 ms (excess 0, +0.3, -0.3, 0) against lateness 1, 4, 1, 1 ms
    assert late.excess_vs_lateness == pytest.approx(math.sqrt(2 / 3))
    assert late.lateness_p50_ms == pytest.approx(1.0)
    assert late.start_spread_p50_ms == pytest.approx(1.0)


def test_steps_rows_become_per_rank_spans():
    rows = [dict(collective="all_to_all", size_bytes="8", iteration=str(i), rank=str(r), start_ns=str(100 * i + r),
                 end_ns=str(100 * i + 50 + r)) for i in range(2) for r in range(2)]
    rows.append(dict(collective="all_to_all", size_bytes="8", iteration="1", rank="1", start_ns="90", end_ns="170"))
    starts, ends = steps_by_case(rows)[("all_to_all", 8)]
    assert starts.tolist() == [[0, 100], [1, 90]] and ends.tolist() == [[50, 150], [51, 170]]


def test_report_reads_a_run_directory(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"results": [
        {"collective": "all_to_all", "size_bytes": 1048576, "iteration_us": [8.0, 8.1, 9.0, 8.0, 7.2]}]}))
    (line,) = report(tmp_path, 0.05)
    assert "within 5% 3/5" in line and "last/median 0.90" in line and "the last one of the misses" in line


def test_a_short_first_iteration_and_the_last_ranks_lateness_from_the_nccl_json(tmp_path):
    # 3 ranks: rank 2 ends every iteration 0.5 ms after the others, 1.5 ms in the second
    shares_ms = [[6.0, 8.0, 8.0, 8.0], [6.0, 8.0, 8.0, 8.0], [6.5, 9.5, 8.5, 8.5]]
    shares_us = [[x * 1e3 for x in row] for row in shares_ms]  # the JSON's unit
    assert share_lateness_ms(shares_us) == pytest.approx((0.5, 1.2))
    times = [max(column) for column in zip(*shares_us)]  # 6.5 9.5 8.5 8.5 ms: the first iteration short
    (tmp_path / "sweep.json").write_text(json.dumps({"results": [
        {"collective": "all_to_all", "size_bytes": 1024, "iteration_us": times}]}))
    (tmp_path / "nccl_alltoall_perf.json").write_text(json.dumps({"results": [
        {"size": 1024, "out_of_place_per_iter": {"per_process_max_times_us": shares_us}}]}))
    (line,) = report(tmp_path, 0.05)
    assert "first/median 0.76 (a miss)" in line and "last rank's lateness p50/p90 0.50/1.20 ms" in line
    with pytest.raises(ValueError):
        share_lateness_ms([])


def test_report_names_an_unreadable_run(tmp_path):
    with pytest.raises(SystemExit, match="sweep.json"):
        report(tmp_path, 0.05)
