"""`genie report` on every run kind, from small run directories written with the real writers (no root, no
processes): experiment, estimate, diagnose, verify and compare runs, and an experiment without a manifest."""

import json
from types import SimpleNamespace

import pytest

from astra_adapter.calibrate import CalibratedDim, Calibration, CalibrationPoint
from astra_adapter.calibration_io import write_calibration
from astra_adapter.config import TopologyKind
from astra_adapter.experiment import AccuracyRow, accuracy_csv
from astra_adapter.mapping import DimRole
from astra_adapter.measurements import Measurement, detail_csv
from astra_adapter.timeline import RankTimes
from astra_adapter.workload_estimate import EstimateMode, TraceEstimate, write_estimate
from genie.core.collective import Algorithm, Collective
from genie.core.topology import LinkShape
from genie.engine.program import build_programs
from genie.measure.diagnose import PairMeasurement, diagnose
from genie.measure.metrics import case_stats
from genie.report.diagnose import write_diagnosis
from genie.report.html import build_page
from genie.report.manifest import RunRecorder
from genie.report.replay import write_replay
from genie.report.rundata import RunKind, load_run
from genie.report.sweep import write_sweep
from genie.testbed.verify import Metric, Status, VerifyRow, write_verify_csv_file
from genie.topology.builders import star
from genie.workloads.loader import load_trace

try:  # the shared record types move to genie.core on the protocol branch
    from genie.core.records import IterationRecords, RankRecords
except ImportError:
    from genie.measure.replay import IterationRecords, RankRecords

AR, RING = Collective.ALL_REDUCE, Algorithm.RING
TRACE = """format: genie-trace
version: 1
name: small
ranks: 2
program:
  - {id: 0, name: fwd, type: compute, duration: 2ms}
  - {id: 1, name: grad_ar, type: all_reduce, size: 64KiB, deps: [0]}
  - {id: 2, name: step, type: compute, duration: 1ms, deps: [1]}
"""
# (ranks, size, iterations in us): a 2-rank and a 4-rank curve with a size in common (64 KiB)
CASES = ((2, 1024, (50.0, 52.0, 51.0, 80.0)), (2, 65536, (300.0, 310.0, 305.0, 320.0)),
         (4, 1024, (90.0, 95.0, 91.0, 99.0)), (4, 65536, (900.0, 950.0, 910.0, 990.0)))


def _stats():
    return [case_stats(AR, RING, ranks, size, 4, [int(t * 1000) for t in times]) for ranks, size, times in CASES]


def _measurements():
    return [Measurement(AR, RING, ranks, size, sorted(times)[1], "sweep",
                        ((0, 1),) if ranks == 2 else ((0, 1, 2, 3),), times) for ranks, size, times in CASES]


def _calibration():
    points = tuple(CalibrationPoint(AR, RING, ranks, size, sorted(times)[1], sorted(times)[1] * 1.1,
                                    tuple(range(ranks))) for ranks, size, times in CASES)
    dims = (CalibratedDim(DimRole.HOSTS, TopologyKind.SWITCH, 4, 0.1, 5000.0, True),)
    return Calibration("star-4", dims, 2000, points)


def _estimate(mode, iteration_ns):
    return TraceEstimate(mode, (RankTimes(0, iteration_ns, 3_000_000, iteration_ns - 3_000_000,
                                          iteration_ns - 3_000_000, 0),
                                RankTimes(1, iteration_ns - 1000, 3_000_000, 100, 100, 0)))


def _outcome(tmp_path, iterations=3):
    """A replay outcome of TRACE as the engine records it (times made up)."""
    (tmp_path / "small.yaml").write_text(TRACE)
    programs = build_programs(load_trace(tmp_path / "small.yaml"))
    its = []
    for it in range(iterations):
        t0 = it * 10_000_000
        ranks = tuple(RankRecords(p.rank, t0, ((0, t0, t0 + 2_000_000), (1, t0 + 2_000_000, t0 + 2_500_000 + it),
                                               (2, t0 + 2_500_000 + it, t0 + 3_500_000 + it)))
                      for p in programs)
        its.append(IterationRecords(it, ranks))
    return SimpleNamespace(programs=tuple(programs), iterations=tuple(its))


def _experiment_files(out, tmp_path):
    write_sweep(out, _stats(), {"experiment": "x"})
    (out / "sweep_detail.csv").write_text(detail_csv(_measurements()))
    write_calibration(_calibration(), out)
    write_estimate(_estimate(EstimateMode.MEASURED, 4_000_000), out, "estimate-measured.csv")
    write_estimate(_estimate(EstimateMode.CALIBRATED, 3_800_000), out, "estimate-calibrated.csv")
    rows = (AccuracyRow("small", "star-4", "measured", 0.0040, 0.0035),
            AccuracyRow("small", "star-4", "calibrated", 0.0038, 0.0035))
    (out / "accuracy.csv").write_text(accuracy_csv(rows))
    (out / "replay").mkdir()
    write_replay(out / "replay", _outcome(tmp_path), {"trace": "small", "ranks": 2})
    (out / "experiment.json").write_text(json.dumps({"experiment": "x", "best_of": [
        {**rows[0].__dict__, "error_pct": rows[0].error_pct}]}))
    (out / "summary.txt").write_text("# experiment x: small on star-4\n")
    return [p.relative_to(out).as_posix() for p in sorted(out.rglob("*")) if p.is_file()]


@pytest.fixture()
def experiment_run(tmp_path):
    out = tmp_path / "exp"
    with RunRecorder("experiment", out=out, argv=["genie", "experiment", "x.yaml"]) as run:
        for name in _experiment_files(out, tmp_path):
            run.record(name)
    return out


def test_experiment_report_has_accuracy_curves_calibration_replay_and_iterations(experiment_run):
    run = load_run(experiment_run)
    assert run.kind is RunKind.EXPERIMENT and run.replay_prefix == "replay/" and run.iteration_source == \
        "sweep_detail.csv"
    page = build_page(run)
    html = page.html
    # the accuracy rows, with their errors
    assert "Accuracy (accuracy.csv)" in html and "measured estimate (small on star-4): estimated 4.000 ms vs measured 3.500 ms, error +14.29%" \
        in html and "calibrated" in html and "+8.57%" in html
    # one curve per (collective, group size): two labels, never one merged line
    assert "all_reduce, 2 ranks (2 sizes" in html and "all_reduce, 4 ranks (2 sizes" in html
    assert "2 curve(s)" in html
    # per-iteration times from sweep_detail.csv, with the groups
    assert "Per-iteration times (sweep_detail.csv)" in html and "0 1 2 3" in html
    assert "not recorded" not in html
    # calibration: link classes, residuals per curve and per point, plot
    assert "Calibration: fitted link classes (calibration.json)" in html and "hosts" in html
    assert "Calibration: residual per point (calibration.csv)" in html and "rms residual 10.00%" in html
    assert "Calibration: residuals per curve" in html
    # the replay's per-rank and timeline summary from replay/
    assert "Ranks (replay/ranks.csv, iteration 0)" in html and "Timeline summary (replay/ops.csv" in html
    assert "iteration time median" in html and "from replay/replay.json" in html
    assert "Estimate per rank (estimate-measured.csv)" in html and "Experiment summary (summary.txt)" in html
    assert {"busbw.png", "latency.png", "calibration.png", "timeline.png", "accuracy.png"} <= set(page.plots)
    assert "genie experiment x.yaml" in html and "no manifest.json" not in html


def test_sweep_curves_never_merge_group_sizes(experiment_run):
    from genie.report.cases import sweep_curves

    curves = sweep_curves(load_run(experiment_run).sweep)
    assert [c.label for c in curves] == ["all_reduce, 2 ranks", "all_reduce, 4 ranks"]
    assert all([r.size_bytes for r in rows] == [1024, 65536] for rows in curves.values())


def test_experiment_without_a_manifest_renders_and_says_so(tmp_path):
    out = tmp_path / "old"
    out.mkdir()
    _experiment_files(out, tmp_path)
    run = load_run(out)
    assert run.kind is RunKind.EXPERIMENT and run.manifest is None
    html = build_page(run).html
    assert html.count("no manifest.json") == 1 and "genie experiment" in html
    assert "Accuracy (accuracy.csv)" in html and "all_reduce, 4 ranks" in html
    assert "Per-iteration times (sweep_detail.csv)" in html and "Ranks (replay/ranks.csv, iteration 0)" in html


def test_estimate_report_has_per_rank_table_and_calibration(tmp_path):
    out = tmp_path / "est"
    with RunRecorder("estimate", out=out) as run:
        write_estimate(_estimate(EstimateMode.MEASURED, 4_000_000), out)
        write_calibration(_calibration(), out)
        for name in ("estimate.csv", "calibration.json", "calibration.csv"):
            run.record(name)
    page = build_page(load_run(out))
    assert "Estimate per rank (estimate.csv)" in page.html and "iteration_ms" in page.html
    assert "measured estimate (estimate.csv): iteration 4.000 ms (slowest rank 0)" in page.html
    assert "Calibration: residual per point (calibration.csv)" in page.html and "calibration.png" in page.plots


def test_diagnose_report_has_pair_matrix_and_flagged_links(tmp_path):
    topo = star(3, shape=LinkShape(rate_bps=10**9))
    hosts = [h.name for h in topo.hosts]
    measured = {(a, b): PairMeasurement(a, b, 100.0, 0.01 if b == hosts[2] else 0.11)
                for a in hosts for b in hosts if a != b}
    verdict = diagnose(topo, measured)
    assert verdict.suspect_links
    out = tmp_path / "diag"
    with RunRecorder("diagnose", out=out) as run:
        write_diagnosis(out, verdict)
        for name in ("diagnose.csv", "diagnose.json", "diagnose_heatmap.png"):
            run.record(name)
    page = build_page(load_run(out))
    html = page.html
    assert "6 host pairs measured, 2 flagged" in html and "Flagged pairs (diagnose.csv)" in html
    assert "Pair matrix: bandwidth in GB/s" in html and "pairs.png" in page.plots
    link = verdict.suspect_links[0]
    assert f"suspect links: {link.src}-&gt;{link.dst} (links[{link.link_index}])" in html


def test_verify_report_has_per_link_checks(tmp_path):
    rows = [VerifyRow("links[0]", "h0-s0-h1", "h0<->h1", Metric.RTT, 100.0, 104.0, 4.0, "±20%", Status.OK),
            VerifyRow("links[0]", "h0-s0-h1", "h0->h1", Metric.THROUGHPUT, 1e9, 5e8, -50.0, "-10%", Status.FAIL),
            VerifyRow("links[1]", "h1-s0-h2", "h1->h2", Metric.LOSS, 0.0, 0.0, 0.0, "±1pp", Status.OK)]
    out = tmp_path / "ver"
    with RunRecorder("verify", out=out) as run:
        write_verify_csv_file(rows, out / "links_verify.csv")
        run.record("links_verify.csv")
    run = load_run(out)
    assert run.kind is RunKind.VERIFY and run.verify is not None
    html = build_page(run).html
    assert "3 checks (links_verify.csv): 2 ok, 1 FAIL" in html and "Checks (links_verify.csv)" in html
    assert "Per link" in html and "throughput h0-&gt;h1" in html


def test_compare_run_renders_its_rows(tmp_path):
    out = tmp_path / "cmp"
    with RunRecorder("compare", out=out) as run:
        run.write("compare.csv", "scope,collective,size_bytes,time_a_us,time_b_us,time_delta_us,time_delta_pct\n"
                                 "case,all_reduce,1024,100,150,50,50\n")
    page = build_page(load_run(out))
    assert "Comparison (compare.csv)" in page.html and "1 rows compared" in page.html and "compare.png" in page.plots


def test_report_cli_in_process_on_an_experiment(experiment_run, capsys):
    from genie.cli.main import main

    assert main(["report", str(experiment_run)]) == 0
    out = capsys.readouterr().out
    assert "# experiment run, status complete" in out
    html = (experiment_run / "report.html").read_text()
    assert "all_reduce, 2 ranks" in html and (experiment_run / "plots" / "calibration.png").is_file()
    listed = {f["name"] for f in json.loads((experiment_run / "manifest.json").read_text())["files"]}
    assert {"report.html", "plots/busbw.png", "plots/calibration.png"} <= listed
