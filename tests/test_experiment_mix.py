"""`genie experiment` with a job mix as its workload (issue #34 item 1): the spec, the per-job comparison, and
the whole path on loopback (no root; tests/test_experiment_root.py::test_a_job_mix_experiment_runs_on_a_testbed
runs it on a testbed)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from astra_adapter.experiment_mix import JobAccuracy, MixExperimentResult, compare_jobs, jobs_accuracy_csv
from astra_adapter.experiment_spec import load_experiment, parse_experiment
from cli_support import run_genie
from genie.core.errors import InputError
from genie.core.trace import CommType, collective_node, compute_node, make_trace
from genie.workloads.loader import OutputFormat, save_trace
from test_experiment import DUMBBELL

ROOT = Path(__file__).resolve().parents[1]


def _ddp(ranks: int, size: int, compute_ns: int):
    return make_trace([[compute_node(1, "fwd", duration_ns=compute_ns),
                        collective_node(2, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=size, data_deps=(1,))]
                       for _ in range(ranks)])


def write_mix_experiment(tmp_path: Path, extra: str = "") -> Path:
    """Two 2-rank jobs on the dumbbell, each with one rank on either side: both cross the 500 Mbit/s link."""
    save_trace(_ddp(2, 1_000_000, 2_000_000), tmp_path / "a.json", to=OutputFormat.JSON)
    save_trace(_ddp(2, 512_000, 1_000_000), tmp_path / "b.json", to=OutputFormat.JSON)
    (tmp_path / "dumbbell.yaml").write_text(DUMBBELL)
    (tmp_path / "mix.yaml").write_text("jobs:\n  - {name: a, trace: a.json, hosts: [h0, h2], iterations: 2}\n"
                                       "  - {name: b, trace: b.json, hosts: [h1, h3], iterations: 2}\n")
    spec = tmp_path / "exp.yaml"
    spec.write_text("name: two\nworkload: {jobs: mix.yaml}\ntopology: dumbbell.yaml\n"
                    "sweep: {iterations: 2, warmup: 1, grid: [64KiB]}\nreplay: {iterations: 1, warmup: 1}\n" + extra)
    return spec


def test_a_spec_s_workload_may_be_a_job_mix(tmp_path: Path) -> None:
    spec = load_experiment(write_mix_experiment(tmp_path))
    assert spec.workload.jobs_path == tmp_path / "mix.yaml" and spec.workload.trace_path is None
    assert spec.workload.describe() == "jobs:mix.yaml"


@pytest.mark.parametrize("workload, where", [
    ("{jobs: m.yaml, trace: t}", "workload: give exactly one of trace"),
    ("{jobs: m.yaml, npus: 4}", "workload.npus: a job mix's jobs give their own npus"),
    ("{jobs: 3}", "workload.jobs: expected a path"),
])
def test_bad_mix_workloads_name_the_key(workload: str, where: str) -> None:
    with pytest.raises(InputError) as err:
        parse_experiment(f"workload: {workload}\ntopology: x.yaml\n", source="e.yaml")
    assert where in str(err.value)


class _Measured:
    def __init__(self, name, alone, together):
        self.name, self.hosts, self.repetitions = name, ("h0", "h1"), 2
        self.alone_ns, self.together_ns = alone, together
        self.slowdown_pct = None if alone is None else (together / alone - 1) * 100


class _Est:
    def __init__(self, name, alone, mixed):
        self.name, self.alone_ns, self.mixed_ns = name, alone, mixed
        self.slowdown_pct = (mixed / alone - 1) * 100


def test_each_job_is_compared_alone_together_and_by_slowdown() -> None:
    estimate = type("E", (), {"jobs": (_Est("b", 1.1e9, 1.21e9), _Est("a", 2e9, 3e9))})
    rows = compare_jobs((_Measured("a", 2e9, 4e9), _Measured("b", 1e9, 1.1e9)), estimate)
    a, b = rows
    assert (a.name, b.name) == ("a", "b")  # matched by name, in the replay's order
    assert a.error_alone_pct == pytest.approx(0.0) and a.error_together_pct == pytest.approx(-25.0)
    assert a.measured_slowdown_pct == pytest.approx(100.0) and a.slowdown_points == pytest.approx(-50.0)
    assert b.error_alone_pct == pytest.approx(10.0) and b.slowdown_points == pytest.approx(0.0)
    table = list(csv.DictReader(jobs_accuracy_csv(rows).splitlines()))
    assert table[0]["error_together_pct"] == "-25.000" and table[1]["measured_alone_s"] == "1.000000"
    result = MixExperimentResult(Path("r"), "x", "t", "as placed", rows, 3, (), (), ())
    assert result.measured_ranking == ("b", "a") == result.estimated_ranking
    skipped = JobAccuracy("c", (), 1, None, 1.0, 2.0, 2.0, None, 0.0)
    assert skipped.error_alone_pct is None and skipped.slowdown_points is None


def test_the_mix_experiment_runs_sweep_replay_and_estimate_on_loopback(tmp_path: Path) -> None:
    from genie.services.experiment import ExperimentCommand, run_experiment_command
    from genie.services.options import RunOptions

    spec = load_experiment(write_mix_experiment(tmp_path))
    messages: list[str] = []
    result = run_experiment_command(ExperimentCommand(spec, RunOptions(loopback=True, out=tmp_path / "run")),
                                    messages.append)
    run = tmp_path / "run"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["kind"] == "experiment" and manifest["status"] == "complete"
    assert manifest["params"]["jobs"] == ["a", "b"] and manifest["params"]["slots"] == [[0, 2], [1, 3]]
    listed = {f["name"] for f in manifest["files"]}
    for name in ("sweep.csv", "sweep_detail.csv", "fabric_calibration.json", "mix.csv", "mix.json",
                 "jobs/a/alone/ops.csv", "jobs/a/together/ops.csv", "jobs/b/together/replay.json",
                 "jobs_estimate.csv", "jobs_links.csv", "jobs_accuracy.csv", "experiment.json", "summary.txt"):
        assert name in listed and (run / name).is_file(), name
    assert [r.name for r in result.jobs] == ["a", "b"]
    for r in result.jobs:  # measured: at least the job's compute; estimated: the model's, alone and together
        assert r.measured_alone_ns > 1e6 and r.measured_together_ns > 1e6
        assert r.estimated_alone_ns > 1e6 and r.estimated_together_ns >= r.estimated_alone_ns
    # both jobs cross sw0 -> sw1 in the model: they meet there and each is estimated slower together
    assert "sw0->sw1" in result.shared_links and all(r.estimated_slowdown_pct > 0 for r in result.jobs)
    rows = list(csv.DictReader((run / "jobs_accuracy.csv").open()))
    assert [r["job"] for r in rows] == ["a", "b"] and all(r["error_together_pct"] for r in rows)
    doc = json.loads((run / "experiment.json").read_text())
    assert doc["workload"] == "jobs" and len(doc["jobs"]) == 2
    # the sweep measured the jobs' own groups (slots 0,2 and 1,3 side by side) and covered the fabric link
    sweep = list(csv.DictReader((run / "sweep.csv").open()))
    assert {r["collective"] for r in sweep} >= {"all_reduce"}
    assert messages[0] == "running on loopback" and "done" in messages
    summary = (run / "summary.txt").read_text()  # what `genie experiment` prints
    assert "job mix of 2 jobs on dumbbell-4" in summary and "ranking by slowdown" in summary
    assert summary.count("\n a ") == summary.count("\n b ") == 1


@pytest.mark.parametrize("extra, words", [
    ("rounds: 2\n", "exp.yaml: rounds: a job mix runs in one round"),
])
def test_a_bad_mix_experiment_fails_in_one_line_before_anything_runs(tmp_path: Path, extra: str,
                                                                     words: str) -> None:
    write_mix_experiment(tmp_path, extra)
    r = run_genie("experiment", "exp.yaml", "--out", "run", cwd=tmp_path)
    assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "run").exists()


def test_two_jobs_on_one_host_slot_fail_before_anything_runs(tmp_path: Path) -> None:
    spec = write_mix_experiment(tmp_path)
    (tmp_path / "mix.yaml").write_text("jobs:\n  - {name: a, trace: a.json, hosts: [h0, h2]}\n"
                                       "  - {name: b, trace: b.json, hosts: [h2, h3]}\n")
    r = run_genie("experiment", str(spec), "--out", "run", cwd=tmp_path)
    assert r.returncode == 2 and "jobs[1].hosts[0]" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()
