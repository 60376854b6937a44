"""The saved job-mix accuracy runs (benchmarks/job_mix_saved.py): every archive indexed with its source and
holding what `job_mix.py evaluate` reads; the counts the issue's targets ask for; adding a run."""

from __future__ import annotations

import json
import tarfile

import pytest

from astra_adapter.fabric.calibration_io import FABRIC_CALIBRATION_JSON
from benchmarks.job_mix_saved import (INDEX, SAVED, SavedRun, add, extract, ranking_equal, read_index, row_key,
                                      summarize)


def test_every_saved_archive_is_indexed_and_holds_what_evaluate_reads():
    runs = read_index()
    assert runs, "no saved job-mix run"
    assert sorted(p.name for p in SAVED.glob("*.tar.xz")) == sorted(r.archive().name for r in runs)
    for run in runs:
        assert run.commit and run.recorded_utc and run.note
        with tarfile.open(run.archive(), "r:xz") as tar:
            names = set(tar.getnames())
            rows = json.load(tar.extractfile(f"{run.name}/accuracy.json"))
        for needed in ("inputs/a.yaml", "inputs/b.yaml", f"calibration/{FABRIC_CALIBRATION_JSON}"):
            assert f"{run.name}/{needed}" in names, (run.name, needed)
        for placement in {(r["scenario"], r["placement"]) for r in rows}:
            assert f"{run.name}/replay-{placement[0]}-{placement[1]}/mix.json" in names
        assert set(run.excluded) <= {row_key(r) for r in rows}
        assert all(run.excluded.values())  # every row left out says why


def _row(scenario, placement, job, err, est, meas):
    return {"scenario": scenario, "placement": placement, "job": job, "error_pct": err, "points": est - meas,
            "estimated_slowdown_pct": est, "measured_slowdown_pct": meas}


def test_summary_counts_the_targets_and_the_rankings():
    rows = [_row("a", "packed", "x", -1.0, 1.0, 0.5), _row("a", "packed", "y", 5.5, 2.0, -2.0),
            _row("a", "spread", "x", 3.0, 90.0, 80.0), _row("a", "spread", "y", -0.5, 50.0, 49.0),
            _row("b", "spread", "x", 0.0, 10.0, 10.0)]
    s = summarize(rows)
    assert (s.rows, s.within_5pct, s.within_3pts) == (5, 4, 3)
    assert s.mean_abs_error_pct == pytest.approx(10.0 / 5)
    assert s.mean_abs_points == pytest.approx((0.5 + 4.0 + 10.0 + 1.0 + 0.0) / 5)
    assert ranking_equal(rows) == [("a", True)]  # b has one placement: no ranking
    swapped = [dict(r, estimated_slowdown_pct=-r["estimated_slowdown_pct"]) for r in rows]
    assert ranking_equal(swapped) == [("a", False)]
    assert summarize([]).rows == 0


def _accuracy_dir(tmp_path):
    run = tmp_path / "acc"
    (run / "inputs").mkdir(parents=True)
    (run / "inputs" / "a.yaml").write_text("jobs: []\n")
    (run / "evaluate").mkdir()
    (run / "evaluate" / "x.json").write_text("{}")
    (run / "evaluate.json").write_text("[]")
    (run / "accuracy.json").write_text(json.dumps([_row("a", "spread", "ddp4", 1.0, 2.0, 1.0)]))
    return run


def test_add_archives_the_run_as_written_and_indexes_it(tmp_path):
    folder = tmp_path / "saved"
    run = add(_accuracy_dir(tmp_path), "r1", "quiet", ["a/spread/ddp4:disturbed"], "abc1234", "2026-12-06 04:00",
              folder=folder)
    assert read_index(folder) == (SavedRun("r1", "2026-12-06 04:00", "abc1234", "quiet",
                                           {"a/spread/ddp4": "disturbed"}),)
    assert not list(folder.glob(".*tmp"))
    out = extract(run, tmp_path / "x", folder)
    assert (out / "inputs" / "a.yaml").read_text() == "jobs: []\n"
    assert not (out / "evaluate").exists() and not (out / "evaluate.json").exists()  # a re-estimate's output
    assert json.loads((folder / INDEX).read_text())["runs"][0]["name"] == "r1"


def test_add_refuses_a_second_run_of_one_name_and_an_unknown_or_unexplained_row(tmp_path):
    folder = tmp_path / "saved"
    acc = _accuracy_dir(tmp_path)
    with pytest.raises(SystemExit, match="SCENARIO/PLACEMENT/JOB:REASON"):
        add(acc, "r1", "n", ["a/packed/ddp4:why"], "c", "t", folder=folder)
    with pytest.raises(SystemExit, match="SCENARIO/PLACEMENT/JOB:REASON"):
        add(acc, "r1", "n", ["a/spread/ddp4"], "c", "t", folder=folder)
    assert not folder.exists()  # nothing written for a refused run
    add(acc, "r1", "n", [], "c", "t", folder=folder)
    with pytest.raises(SystemExit, match="a run named r1 exists"):
        add(acc, "r1", "n", [], "c", "t", folder=folder)
    with pytest.raises(SystemExit, match="no accuracy.json"):
        add(tmp_path / "inputs-missing", "r2", "n", [], "c", "t", folder=folder)
