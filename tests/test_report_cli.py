"""Real small runs without root (`--loopback`): run directories of bench and replay, their CSV schemas, --json,
`genie report` (plots and HTML), `genie report compare`, interrupted runs and bad input."""

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_support import run_genie
from genie.report.compare import COMPARE_COLUMNS
from genie.report.replay import OPS_COLUMNS, RANKS_COLUMNS
from genie.report.sweep import STEPS_COLUMNS, SWEEP_COLUMNS

from report_runs import TRACE  # a 2-rank trace: compute, a 64 KiB all-reduce, compute


def _csv(path):
    return list(csv.DictReader(io.StringIO(Path(path).read_text())))


def _one_line_error(proc, needle):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "run"
    proc = run_genie("bench", "--loopback", "--ranks", "2", "-c", "all_reduce,all_gather", "-b", "1K", "-e",
                     "16K", "-f", "4", "-n", "4", "-w", "1", "--steps", "--out", out, "--json")
    assert proc.returncode == 0, proc.stderr
    return out, proc


@pytest.fixture(scope="module")
def replay_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("replay")
    (base / "small.yaml").write_text(TRACE)
    out = base / "run"
    proc = run_genie("replay", base / "small.yaml", "--loopback", "-n", "2", "--out", out)
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_bench_run_directory_and_schemas(bench_run):
    out, proc = bench_run
    names = {p.name for p in out.iterdir()}
    assert {"manifest.json", "sweep.csv", "sweep.json", "steps.csv", "nccl_all_reduce_perf.json",
            "nccl_all_gather_perf.json"} <= names
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["kind"] == "bench" and manifest["target"] == "loopback"
    assert "bench" in manifest["argv"] and {f["name"] for f in manifest["files"]} == names - {"manifest.json"}
    rows = _csv(out / "sweep.csv")
    assert tuple(rows[0]) == SWEEP_COLUMNS and len(rows) == 6
    for r in rows:
        assert int(r["size_bytes"]) > 0 and int(r["count"]) * 4 == int(r["size_bytes"]) and int(r["ranks"]) == 2
        assert 0 < float(r["time_min_us"]) <= float(r["time_median_us"]) <= float(r["time_max_us"])
        assert float(r["busbw_GBps"]) > 0 and r["dtype"] == "float"
    steps = _csv(out / "steps.csv")
    assert tuple(steps[0]) == STEPS_COLUMNS and all(int(s["end_ns"]) >= int(s["start_ns"]) for s in steps)
    doc = json.loads((out / "sweep.json").read_text())
    assert all(len(r["iteration_us"]) == 4 for r in doc["results"])
    nccl = json.loads((out / "nccl_all_reduce_perf.json").read_text())
    assert [r["size"] for r in nccl["results"]] == [1024, 4096, 16384]


def test_bench_json_output_and_summary(bench_run):
    out, proc = bench_run
    doc = json.loads(proc.stdout)  # only JSON on stdout
    assert doc["run_dir"] == str(out) and doc["status"] == "complete" and len(doc["results"]) == 6
    assert "# bench: 6 sizes of all_reduce, all_gather on 2 ranks" in proc.stderr
    assert f"# results in {out}" in proc.stderr


def test_replay_run_directory_and_schemas(replay_run):
    out, proc = replay_run
    assert {"manifest.json", "ops.csv", "ranks.csv", "timeline.json", "replay.json"} <= {p.name for p in out.iterdir()}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["inputs"][0]["role"] == "trace"
    assert len(manifest["inputs"][0]["sha256"]) == 64
    ops = _csv(out / "ops.csv")
    assert tuple(ops[0]) == OPS_COLUMNS and len(ops) == 2 * 2 * 3
    assert {o["type"] for o in ops} == {"compute", "all_reduce"}
    assert all(int(o["end_ns"]) >= int(o["start_ns"]) for o in ops)
    ranks = _csv(out / "ranks.csv")
    assert tuple(ranks[0]) == RANKS_COLUMNS and all(int(r["compute_ns"]) == 3_000_000 for r in ranks)
    assert "# replay: 2 ranks, iteration median" in proc.stdout


def test_replay_json_flag(tmp_path):
    (tmp_path / "small.yaml").write_text(TRACE)
    proc = run_genie("replay", tmp_path / "small.yaml", "--loopback", "--json", "--out", tmp_path / "r")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "complete" and doc["iteration_median_ns"] > 3_000_000 and len(doc["ranks"]) == 2


def _png_ok(path):
    data = Path(path).read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


def test_report_of_a_bench_run(bench_run):
    out, _ = bench_run
    proc = run_genie("report", out)
    assert proc.returncode == 0, proc.stderr
    assert _png_ok(out / "plots" / "busbw.png") and _png_ok(out / "plots" / "latency.png")
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and "Sweep (sweep.csv)" in html and "<table" in html
    assert "complete" in html and "all_gather" in html
    manifest = json.loads((out / "manifest.json").read_text())
    assert {"report.html", "plots/busbw.png"} <= {f["name"] for f in manifest["files"]}


def test_report_of_a_replay_run_with_show(replay_run, tmp_path):
    out, _ = replay_run
    proc = run_genie("report", "show", out, "--out", tmp_path / "page.html")
    assert proc.returncode == 0, proc.stderr
    assert _png_ok(tmp_path / "plots" / "timeline.png")
    html = (tmp_path / "page.html").read_text()
    assert "Ranks (ranks.csv, iteration 0)" in html and "iteration time median" in html
    assert 'href="plots/timeline.png"' in html


def test_report_with_links_and_accuracy(tmp_path):
    from genie.report.manifest import RunRecorder

    with RunRecorder("experiment", out=tmp_path / "x") as run:
        run.describe(topology={"name": "t", "link_rate_bps": 10**9})
        run.write("links.csv", "link_index,src,dst,netns,ifname,rate_bps,duration_s,bytes,packets,tx_drops,rx_drops,"
                               "qdisc_drops,mean_rate_bps,utilisation_pct\n"
                               "0,h0,s0,ns,eth0,1000000000,1.0,1000000,10,0,0,3,8000000,0.8\n")
        run.write("link_samples.csv", "t_start_s,t_end_s,link_index,src,dst,bytes,rate_bps\n"
                                      "0.0,0.5,0,h0,s0,500,8000\n0.5,1.0,0,h0,s0,999500,15992000\n")
        run.write("accuracy.csv", "workload,topology,mode,estimated_s,measured_s,error_pct\n"
                                  "dp,star-4,builtin,0.10,0.12,-16.7\ntp,star-4,builtin,0.08,0.07,14.3\n")
    proc = run_genie("report", tmp_path / "x")
    assert proc.returncode == 0, proc.stderr
    for name in ("links_heatmap.png", "links_totals.png", "accuracy.png"):
        assert _png_ok(tmp_path / "x" / "plots" / name), name
    html = (tmp_path / "x" / "report.html").read_text()
    assert "Accuracy (accuracy.csv)" in html and "Links (links.csv)" in html


def test_compare_cli_and_bad_inputs(bench_run, replay_run, tmp_path):
    out, _ = bench_run
    proc = run_genie("report", "compare", out, out, "--out", tmp_path / "cmp")
    assert proc.returncode == 0, proc.stderr
    rows = _csv(tmp_path / "cmp" / "compare.csv")
    assert tuple(rows[0]) == COMPARE_COLUMNS and len(rows) == 6 and all(float(r["median_delta_us"]) == 0 for r in rows)
    assert _png_ok(tmp_path / "cmp" / "compare.png")
    assert json.loads((tmp_path / "cmp" / "manifest.json").read_text())["kind"] == "compare"

    _one_line_error(run_genie("report", "compare", out, replay_run[0]),
                    "cannot compare a bench run with a replay run")
    _one_line_error(run_genie("report", tmp_path / "cmp" / "compare.csv"), "not a directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    _one_line_error(run_genie("report", empty), "not a genie run directory")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text((out / "manifest.json").read_text())
    _one_line_error(run_genie("report", broken), "listed in manifest.json but missing")


def test_bad_bench_input_leaves_no_run_directory(tmp_path):
    # one option name per meaning across commands (issue #17): --iterations, with --iters an alias
    _one_line_error(run_genie("bench", "--loopback", "--ranks", "2", "-n", "0", cwd=tmp_path), "--iterations")
    assert not (tmp_path / "runs").exists()


def test_interrupted_bench_keeps_finished_sizes(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "genie.cli.main", "bench", "--loopback", "--ranks", "2", "-b",
                             "1K", "-e", "1G", "-f", "2", "-n", "50", "-w", "1", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "sweep.csv").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert (out / "sweep.csv").exists(), "no size finished in time"
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["ended_at"]
    rows = _csv(out / "sweep.csv")
    assert 1 <= len(rows) < 21 and "sweep.csv" in {f["name"] for f in manifest["files"]}
