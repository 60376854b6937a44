"""`genie report compare`: rows keyed on (collective, group size, algorithm, size), warnings for runs that differ
in ranks, target or workload, and the noise band from each run's iteration spread."""

import json

import pytest

from genie.core.collective import Collective
from genie.core.errors import InputError
from genie.report.compare import COMPARE_COLUMNS, Scope, compare_csv, compare_runs, comparison_document, \
    format_compare
from genie.report.manifest import read_manifest
from genie.report.rundata import load_run
from genie.services.report import CompareRequest, compare_run_dirs
from report_runs import CASES, experiment_run

AR, AG = Collective.ALL_REDUCE, Collective.ALL_GATHER


def test_an_experiment_compared_with_itself_is_zero_everywhere_and_within_noise(tmp_path):
    run = load_run(experiment_run(tmp_path / "exp", tmp_path))
    c = compare_runs(run, run)
    cases = [r for r in c.rows if r.scope is Scope.CASE]
    # the 2-rank and the 4-rank 64 KiB all-reduce are two rows, each against itself
    assert [(r.ranks, r.size_bytes) for r in cases] == [(ranks, size) for ranks, size, _ in CASES]
    assert {r.scope for r in c.rows} == {Scope.CASE, Scope.OP, Scope.ITERATION}
    assert all(r.median_delta_pct == 0 and r.within_noise for r in c.rows)
    assert not c.warnings
    assert c.band_sources("a") == ("per-iteration times (sweep_detail.csv)", "per-iteration times (replay/ops.csv)",
                                   "per-iteration times (replay/replay.json)")
    text = format_compare(c)
    assert f"# {len(c.rows)} of {len(c.rows)} rows within noise" in text and "+203" not in text
    assert "all_reduce 4r ring 65536B" in text and "all_reduce 2r ring 65536B" in text


def test_noise_band_from_per_iteration_times(tmp_path):
    from report_runs import bench_run

    noisy = (100.0, 101.0, 102.0, 103.0, 160.0)
    a = bench_run(tmp_path / "a", [(AR, 2, 1024, noisy), (AR, 2, 4096, (200.0, 201.0, 202.0, 203.0, 204.0))])
    b = bench_run(tmp_path / "b", [(AR, 2, 1024, (110.0, 111.0, 112.0, 113.0, 114.0)),
                                   (AR, 2, 4096, (400.0, 401.0, 402.0, 403.0, 404.0))])
    small, large = compare_runs(load_run(a), load_run(b)).rows
    # 1 KiB: +10 us; B's median (112) lies within A's range 100..157.7, but A's (102) is below B's 110..114: the
    # band in this direction is 112 - 110 = 2 us, and the row is outside it
    assert small.median_delta_us == 10.0 and small.noise_us == pytest.approx(2.0) and small.within_noise is False
    assert large.median_delta_pct == pytest.approx(100 * 200 / 202) and large.within_noise is False
    c = compare_runs(load_run(a), load_run(a))
    assert all(r.within_noise for r in c.rows) and c.band_sources("a") == ("per-iteration times (sweep.json)",)
    # B slower but inside both spreads: within noise
    d = bench_run(tmp_path / "d", [(AR, 2, 1024, (100.0, 103.0, 104.0, 150.0, 160.0)),
                                   (AR, 2, 4096, (200.0, 201.0, 202.0, 203.0, 204.0))])
    row = compare_runs(load_run(a), load_run(d)).rows[0]
    assert row.median_delta_us == 2.0 and row.within_noise is True and row.noise_us >= 2.0


def test_noise_band_from_the_summary_columns_when_iterations_are_missing(tmp_path):
    from report_runs import bench_run

    a = bench_run(tmp_path / "a", [(AR, 2, 1024, (100.0, 101.0, 102.0, 103.0, 160.0))], iterations=False)
    c = compare_runs(load_run(a), load_run(a))
    assert c.band_sources("a") == ("min/p99 columns (sweep.csv)",) and c.rows[0].within_noise
    assert "# noise band of A: min..p99 of min/p99 columns (sweep.csv)" in format_compare(c)


def test_runs_of_different_ranks_warn_and_match_only_equal_group_sizes(tmp_path):
    from report_runs import bench_run

    t = (100.0, 101.0, 102.0)
    a = bench_run(tmp_path / "a", [(AR, 2, 65536, t), (AR, 4, 65536, (300.0, 301.0, 302.0))])
    b = bench_run(tmp_path / "b", [(AR, 2, 65536, t)])
    c = compare_runs(load_run(a), load_run(b))
    assert [(r.ranks, r.median_delta_pct) for r in c.rows] == [(2, 0.0)]
    assert any("runs differ in ranks: group sizes 2,4 (A) vs 2 (B)" in w for w in c.warnings)
    assert "# warning: runs differ in ranks" in format_compare(c)
    four = bench_run(tmp_path / "four", [(AR, 4, 65536, t)])
    with pytest.raises(InputError, match="no measurement in common.*differ in ranks"):
        compare_runs(load_run(b), load_run(four))


def test_runs_on_different_targets_warn_and_the_manifest_records_it(tmp_path):
    from report_runs import bench_run

    t = (100.0, 101.0, 102.0)
    a = bench_run(tmp_path / "a", [(AR, 2, 1024, t)], target="loopback")
    b = bench_run(tmp_path / "b", [(AR, 2, 1024, t)], target="tb1", topology={"name": "star-2", "ranks": 2})
    recorded = compare_run_dirs(CompareRequest(a, b, tmp_path / "cmp"))
    assert "runs differ in target: loopback (A) vs tb1 (topology star-2) (B)" in recorded.comparison.warnings
    manifest = read_manifest(tmp_path / "cmp")
    assert any("differ in target" in w for w in manifest.warnings) and manifest.kind == "compare"
    rows = list(csv_rows(tmp_path / "cmp" / "compare.csv"))
    assert tuple(rows[0]) == COMPARE_COLUMNS and rows[0]["ranks"] == "2" and rows[0]["within_noise"] == "yes"


def test_different_workloads_need_force_and_then_warn(tmp_path):
    from report_runs import bench_run

    t = (100.0, 101.0, 102.0)
    a = bench_run(tmp_path / "a", [(AR, 2, 1024, t)])
    b = bench_run(tmp_path / "b", [(AR, 2, 1024, t), (AG, 2, 1024, t)])
    with pytest.raises(InputError, match="different workloads"):
        compare_runs(load_run(a), load_run(b))
    forced = compare_runs(load_run(a), load_run(b), force=True)
    assert forced.warnings == ("different workloads: collectives all_reduce vs all_reduce,all_gather",)


def csv_rows(path):
    import csv
    import io

    return csv.DictReader(io.StringIO(path.read_text()))


def test_json_carries_the_key_fields_and_the_band(tmp_path, capsys):
    from genie.cli.main import main

    run = experiment_run(tmp_path / "exp", tmp_path)
    assert main(["report", "compare", str(run), str(run), "--json", "--out", str(tmp_path / "cmp")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["key"] == ["collective", "ranks", "algorithm", "size_bytes"] and doc["warnings"] == []
    assert doc["noise_band"]["a"][0] == "per-iteration times (sweep_detail.csv)" and "min..p99" in \
        doc["noise_band"]["rule"]
    cases = [r for r in doc["rows"] if r["scope"] == "case"]
    assert [(r["ranks"], r["algorithm"], r["size_bytes"]) for r in cases] == \
        [(ranks, "ring", size) for ranks, size, _ in CASES]
    assert all(r["median_delta_pct"] == 0 and r["within_noise"] is True for r in doc["rows"])
    assert all(r["spread_a_min_us"] is not None and r["noise_us"] is not None for r in doc["rows"])
    assert comparison_document(compare_runs(load_run(run), load_run(run)), "x")["rows"] == doc["rows"]
    assert compare_csv(compare_runs(load_run(run), load_run(run))) == (tmp_path / "cmp" / "compare.csv").read_text()


def test_printed_output_has_the_warning(tmp_path, capsys):
    from genie.cli.main import main
    from report_runs import bench_run

    t = (100.0, 101.0, 102.0)
    a = bench_run(tmp_path / "a", [(AR, 2, 1024, t), (AR, 4, 1024, t)])
    b = bench_run(tmp_path / "b", [(AR, 2, 1024, t)])
    assert main(["report", "compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "# warning: runs differ in ranks" in out and "within noise" in out
    assert any("differ in ranks" in w for w in read_manifest(tmp_path / "cmp").warnings)


def test_an_experiment_without_a_manifest_compares_with_itself(tmp_path):
    from report_runs import experiment_files

    out = tmp_path / "old"
    out.mkdir()
    experiment_files(out, tmp_path)
    run = load_run(out)
    c = compare_runs(run, run)
    assert len([r for r in c.rows if r.scope is Scope.CASE]) == len(CASES)
    assert all(r.median_delta_pct == 0 and r.within_noise for r in c.rows)
