"""`genie report` on every run kind, from small run directories written with the real writers (no root, no
processes): experiment, estimate, diagnose, verify and compare runs, and an experiment without a manifest."""

import json

import pytest

from astra_adapter.calibration_io import write_calibration
from astra_adapter.workload_estimate import EstimateMode, write_estimate
from genie.core.topology import LinkShape
from genie.measure.diagnose import PairMeasurement, diagnose
from genie.report.diagnose import write_diagnosis
from genie.report.html import build_page
from genie.report.manifest import RunRecorder
from genie.report.rundata import RunKind, load_run
from genie.testbed.verify import Metric, Status, VerifyRow, write_verify_csv_file
from genie.topology.builders import star
from report_runs import calibration, estimate, experiment_files
from report_runs import experiment_run as build_experiment_run


@pytest.fixture()
def experiment_run(tmp_path):
    return build_experiment_run(tmp_path / "exp", tmp_path)


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
    experiment_files(out, tmp_path)
    run = load_run(out)
    assert run.kind is RunKind.EXPERIMENT and run.manifest is None
    html = build_page(run).html
    assert html.count("no manifest.json") == 1 and "genie experiment" in html
    assert "Accuracy (accuracy.csv)" in html and "all_reduce, 4 ranks" in html
    assert "Per-iteration times (sweep_detail.csv)" in html and "Ranks (replay/ranks.csv, iteration 0)" in html


def test_estimate_report_has_per_rank_table_and_calibration(tmp_path):
    out = tmp_path / "est"
    with RunRecorder("estimate", out=out) as run:
        write_estimate(estimate(EstimateMode.MEASURED, 4_000_000), out)
        write_calibration(calibration(), out)
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
        run.write("compare.csv", "scope,collective,size_bytes,median_a_us,median_b_us,median_delta_us,median_delta_pct\n"
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


def test_bench_run_of_two_group_sizes_draws_two_curves(tmp_path):
    from genie.core.collective import Collective
    from report_runs import bench_run

    t = (100.0, 101.0, 102.0)
    out = bench_run(tmp_path / "b", [(Collective.ALL_REDUCE, 2, 1024, t), (Collective.ALL_REDUCE, 4, 1024, t),
                                     (Collective.ALL_REDUCE, 2, 4096, t), (Collective.ALL_REDUCE, 4, 4096, t)])
    page = build_page(load_run(out))
    assert "all_reduce, 2 ranks (2 sizes" in page.html and "all_reduce, 4 ranks (2 sizes" in page.html
    assert "on groups of 2 and 4 ranks" in page.html and "Per-iteration times (sweep.json)" in page.html
    assert set(page.plots) == {"busbw.png", "latency.png"}
