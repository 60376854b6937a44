"""`genie experiment`: the YAML format and its errors, the sweep planned from the trace, and the comparison
(without a testbed; tests/test_experiment_root.py runs one for real)."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from astra_adapter.calibrate import model_ns
from astra_adapter.experiment import (ExperimentResult, Statistic, accuracy_csv, evaluate, format_summary,
                                      measurements_of, prepare, sweep_stats)
from astra_adapter.experiment_spec import load_experiment, parse_experiment, plan_sweep
from astra_adapter.measurements import Measurement, op_time_us
from cli_support import run_genie
from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.workloads.loader import load_trace

ROOT = Path(__file__).resolve().parents[1]
TINY_TRACE = """format: genie-trace
version: 1
ranks: 4
groups: {pair0: [0, 1], pair1: [2, 3]}
program:
  - {id: 0, type: compute, duration: 2ms}
  - {id: 1, type: all_reduce, size: 256KiB, group: "pair{rank//2}", deps: [0]}
  - {id: 2, type: compute, duration: 1ms, deps: [1]}
  - {id: 3, type: all_reduce, size: 1MiB, deps: [2]}
"""


def write_tiny(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "tiny.yaml").write_text(TINY_TRACE)
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"name: tiny\nworkload: {{trace: tiny.yaml}}\ntopology: {ROOT}/topologies/star-4.yaml\n"
                    f"sweep: {{iterations: 3, warmup: 1, grid: [64KiB]}}\nreplay: {{iterations: 2, warmup: 1}}\n"
                    + extra)
    return spec


@pytest.mark.parametrize("text, where", [
    ("workload: {trace: t}\n", "topology: missing"),
    ("workload: {trace: t}\ntopology: x.yaml\nsweeps: {}\n", "sweeps: unknown key"),
    ("workload: {trace: t, generate: {model: resnet50}}\ntopology: x\n", "workload: give exactly one"),
    ("workload: {generate: {dp: 8}}\ntopology: x\n", "workload.generate.model: missing"),
    ("workload: {generate: {model: resnet50, dpp: 8}}\ntopology: x\n", "workload.generate.dpp: unknown key"),
    ("workload: {trace: t}\ntopology: x\nsweep: {iterations: 0}\n", "sweep.iterations: expected an integer >= 1"),
    ("workload: {trace: t}\ntopology: x\nsweep: {grid: [1XB]}\n", "sweep.grid[0]"),
    ("workload: {trace: t}\ntopology: x\nalgorithms: {all_reduce: fastest}\n", "algorithms.all_reduce: unknown"),
    ("workload: {trace: t}\ntopology: x\nalgorithms: {broadcast: ring}\n", "algorithms.broadcast: unknown key"),
    ("workload: {trace: t}\ntopology: x\nreplay: {timeout: -1}\n", "replay.timeout: expected seconds > 0"),
    ("workload: {trace: t}\ntopology: x\nestimate: {share_nic: maybe}\n", "estimate.share_nic: expected true"),
    ("workload: [1, 2]\ntopology: x\n", "workload: expected a mapping"),
    ("[a, b]\n", "expected a mapping"),
    ("workload: {trace: t\n", "not YAML"),
])
def test_bad_experiment_files_name_file_and_key(text: str, where: str) -> None:
    with pytest.raises(InputError) as err:
        parse_experiment(text, source="e.yaml")
    assert str(err.value).startswith("e.yaml: ") and where in str(err.value)


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    spec = load_experiment(write_tiny(tmp_path))
    assert spec.name == "tiny" and spec.workload.trace_path == tmp_path / "tiny.yaml"
    assert dict(spec.algorithms)[Collective.ALL_TO_ALL] is Algorithm.DIRECT
    assert (spec.sweep_iterations, spec.replay_iterations, spec.grid_bytes, spec.share_nic) == (3, 2, (65536,), True)


def test_prepare_checks_everything_before_a_testbed(tmp_path: Path) -> None:
    prepared = prepare(load_experiment(write_tiny(tmp_path)))
    assert prepared.mapping.dims[0].npus_count == 4
    curves = {(c.collective, c.algorithm, c.ranks): (c.sizes, c.groups) for c in prepared.sweep}
    assert curves == {(Collective.ALL_REDUCE, Algorithm.RING, 2): ((65536, 262144), ((0, 1), (2, 3))),
                      (Collective.ALL_REDUCE, Algorithm.RING, 4): ((65536, 1 << 20), ((0, 1, 2, 3),))}
    assert all(n.algorithm is Algorithm.RING for r in prepared.trace.ranks for n in r.nodes if n.comm_type)
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"workload: {{trace: tiny.yaml}}\ntopology: {ROOT}/topologies/star-8.yaml\n")
    with pytest.raises(InputError, match="bad.yaml: workload: the workload has 4 ranks but topology star-8 runs 8"):
        prepare(load_experiment(bad))
    bad.write_text("workload: {trace: nothing-here}\ntopology: x.yaml\n")
    with pytest.raises(InputError, match="topology: no such topology file"):
        prepare(load_experiment(bad))
    bad.write_text(f"workload: {{trace: nothing-here}}\ntopology: {ROOT}/topologies/star-4.yaml\n")
    with pytest.raises(InputError, match="workload.trace: no such trace"):
        prepare(load_experiment(bad))
    bad.write_text(f"workload: {{generate: {{model: gpt3-125m, layers: 0, dp: 4}}}}\n"
                   f"topology: {ROOT}/topologies/star-4.yaml\n")
    with pytest.raises(InputError, match="workload.generate.layers"):
        prepare(load_experiment(bad))


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_experiments_are_ready(path: Path) -> None:
    prepared = prepare(load_experiment(path))
    assert prepared.trace.num_ranks == 8 and prepared.sweep


def test_sweep_of_a_pipeline_measures_its_message_pairs() -> None:
    trace = load_trace(ROOT / "traces" / "gen_pp4_dp2_gpt3")
    p2p = [c for c in plan_sweep(trace) if c.collective is Collective.SEND_RECV]
    assert len(p2p) == 1 and p2p[0].ranks == 2 and p2p[0].groups == ((0, 1), (2, 3), (4, 5), (6, 7))


def model_sweep(prepared) -> list[Measurement]:
    """The prepared sweep as the ASTRA-sim model measures it itself (20 us per hop, 1 Gbit/s, 10 ns endpoint)."""
    theta = np.array([20_000.0, 8.0, 10.0])
    rows = []
    for case in prepared.sweep:
        for size in case.sizes:
            op = case.op(size)
            rows.append(Measurement(op.collective, op.algorithm, op.ranks, size,
                                    model_ns(op, prepared.mapping, theta, group=case.groups[0]) / 1000,
                                    groups=case.groups))
    return rows


def test_evaluate_compares_both_modes_with_the_replay(tmp_path: Path) -> None:
    prepared = prepare(load_experiment(write_tiny(tmp_path)))
    rows = model_sweep(prepared)
    calibration, estimates, accuracy = evaluate(prepared, tuple(rows), (9_000_000, 10_000_000, 11_000_000))
    assert calibration.rms_residual_pct < 0.01
    assert [a.mode for a in accuracy] == ["measured", "calibrated"]
    assert all(a.measured_s == 0.01 for a in accuracy)
    # the model measured itself: both modes agree (one op in flight per rank at a time here)
    assert estimates[0].iteration_ns == pytest.approx(estimates[1].iteration_ns, rel=1e-4)
    text = accuracy_csv(accuracy)
    assert text.splitlines()[0] == "workload,topology,mode,estimated_s,measured_s,error_pct"
    assert text.splitlines()[1].startswith("tiny.yaml,star-4,measured,")
    result = ExperimentResult(tmp_path, prepared, tuple(rows), calibration, estimates, (10_000_000,), accuracy)
    summary = format_summary(result)
    assert "calibrated" in summary and "star -> Switch(4)" in summary and len(summary.splitlines()) < 24


def test_measurements_keep_their_groups_and_iterations(tmp_path: Path) -> None:
    prepared = prepare(load_experiment(write_tiny(tmp_path)))
    times = [[1000 * (i + 1)] * 9 + [50_000 * (i + 1)] for i in range(4)]  # one stall in ten iterations
    stats = sweep_stats(prepared.sweep, times)
    typical = measurements_of(stats, prepared.sweep, times)
    assert [m.groups for m in typical] == [((0, 1), (2, 3))] * 2 + [((0, 1, 2, 3),)] * 2
    assert typical[1].size_bytes == 262144 and typical[1].time_us == pytest.approx(2.0)  # the stall is trimmed
    assert stats[1].time_median_us == 2.0 and len(typical[1].iterations_us) == 10
    best = measurements_of(stats, prepared.sweep, times, Statistic.BEST)
    assert [m.time_us for m in best] == [1.0, 2.0, 3.0, 4.0]
    assert op_time_us([1.0, 2.0, 3.0, 100.0]) == pytest.approx(26.5)  # fewer than 10: nothing trimmed
    assert op_time_us([10.0] * 8 + [1.0, 1000.0]) == 10.0


def test_cli_experiment_bad_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: {trace: t}\ntopology: x\nsweep: {warmup: -1}\n")
    done = run_genie("experiment", str(bad), "--out", str(tmp_path / "run"), cwd=ROOT)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "bad.yaml: sweep.warmup: expected an integer >= 0" in done.stderr
    assert not (tmp_path / "run").exists()


def test_the_experiment_service_runs_the_bench_and_replay_paths_on_loopback(tmp_path: Path) -> None:
    """The whole `genie experiment` path without root: the spec's ranks on 127.0.0.1, sweep through the bench
    path, replay, evaluate, every file in the run directory and listed in its manifest."""
    import json

    from genie.services.experiment import ExperimentCommand, run_experiment_command
    from genie.services.options import RunOptions

    spec = load_experiment(write_tiny(tmp_path))
    messages: list[str] = []
    result = run_experiment_command(ExperimentCommand(spec, RunOptions(loopback=True, out=tmp_path / "run")),
                                    messages.append)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["kind"] == "experiment" and manifest["status"] == "complete"
    assert manifest["target"] == "loopback" and manifest["params"]["ranks"] == 4
    listed = {f["name"] for f in manifest["files"]}
    for name in ("sweep.csv", "sweep.json", "sweep_detail.csv", "replay/ops.csv", "replay/replay.json",
                 "calibration.json", "estimate-measured.csv", "estimate-calibrated.csv", "accuracy.csv",
                 "experiment.json", "summary.txt", "astra/system.json", "astra/workload/workload.0.et"):
        assert name in listed and (tmp_path / "run" / name).is_file(), name
    assert [r.mode for r in result.accuracy] == ["measured", "calibrated"]
    assert len(result.replay_iteration_ns) == 2 and all(t > 3_000_000 for t in result.replay_iteration_ns)
    # the sweep ran on the trace's own groups: the two pairs side by side, then the 4-rank all-reduce
    assert sorted(m.groups for m in result.measurements) == [((0, 1), (2, 3)), ((0, 1), (2, 3)),
                                                            ((0, 1, 2, 3),), ((0, 1, 2, 3),)]
    assert messages[0] == "running on loopback" and messages[-1] == "done"


def test_an_experiment_stopped_in_its_second_round_keeps_the_first(tmp_path: Path) -> None:
    """SIGTERM while round 2 runs (issue #18 finding 6): the run directory stays, its manifest says
    `interrupted`, and round 1's sweep and replay files are there and listed."""
    import json
    import signal
    import time

    spec_path = write_tiny(tmp_path, "rounds: 2\n")
    # each round's replay long enough (~2 s) that the SIGTERM 50 ms after its start lands in it: with 1 iteration
    # the rest of the run took ~0.4 s, and a loaded CI machine delayed the test's signal past its end (5 of 12)
    spec_path.write_text(spec_path.read_text().replace("replay: {iterations: 2,", "replay: {iterations: 400,"))
    script = ("import sys\n"
              "from astra_adapter.experiment_spec import load_experiment\n"
              "from genie.services.experiment import ExperimentCommand, run_experiment_command\n"
              "from genie.services.options import RunOptions\n"
              "from genie.testbed.lifecycle import signals_raise\n"
              "spec = load_experiment(sys.argv[1])\n"
              "with signals_raise():\n"
              "    run_experiment_command(ExperimentCommand(spec, RunOptions(loopback=True, out=sys.argv[2])),\n"
              "                           lambda m: print(m, flush=True))\n")
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", script, str(spec_path), str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("round 2/2: replay"):
                break
        else:
            pytest.fail(f"the experiment ended before its second replay: {proc.stderr.read()}")
        time.sleep(0.05)  # the replay's rank processes are still starting (a Python start-up takes longer)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted", manifest["status"]
    listed = {f["name"] for f in manifest["files"]}
    for name in ("sweep.csv", "sweep.json", "replay/ops.csv", "replay/replay.json"):
        assert name in listed and (out / name).is_file(), name
    assert "accuracy.csv" not in listed and not (out / "accuracy.csv").exists()  # the comparison never ran
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert rows and {r["iterations"] for r in rows} == {"2"}  # round 1's: 3 iterations over 2 rounds, 2 each


DUMBBELL = """name: dumbbell-4
defaults: {bandwidth: 1gbit}
hosts: [{name: h0}, {name: h1}, {name: h2}, {name: h3}]
switches: [{name: sw0}, {name: sw1}]
links:
  - {endpoints: [h0, sw0]}
  - {endpoints: [h1, sw0]}
  - {endpoints: [h2, sw1]}
  - {endpoints: [h3, sw1]}
  - {endpoints: [sw0, sw1], bandwidth: 500mbit}
"""


def write_dumbbell(tmp_path: Path) -> Path:
    """The tiny experiment on two switches joined by one link: a topology ASTRA-sim's dimensions cannot express."""
    spec = write_tiny(tmp_path)
    (tmp_path / "dumbbell.yaml").write_text(DUMBBELL)
    spec.write_text(spec.read_text().replace(f"{ROOT}/topologies/star-4.yaml", "dumbbell.yaml"))
    return spec


def test_an_unmappable_topology_is_estimated_by_the_fabric_model_alone(tmp_path: Path) -> None:
    from astra_adapter.fabric.experiment import evaluate_fabric

    prepared = prepare(load_experiment(write_dumbbell(tmp_path)))
    assert prepared.mapping is None and prepared.fabric and "2 switches" in prepared.unmapped
    rows = []
    for case in prepared.sweep:
        for size in case.sizes:
            op = case.op(size)
            rows.append(Measurement(op.collective, op.algorithm, op.ranks, size, 100 + size / 50_000,
                                    groups=case.groups))
    replay = (9_000_000, 10_000_000, 11_000_000)
    calibration, estimates, accuracy = evaluate(prepared, tuple(rows), replay)
    assert calibration is None and [a.mode for a in accuracy] == ["measured"]
    fabric_cal, fabric_est, fabric_row = evaluate_fabric(prepared, tuple(rows), replay)
    assert fabric_row.mode == "fabric" and fabric_est.iteration_ns > 3_000_000  # the trace's compute alone: 3 ms
    result = ExperimentResult(tmp_path, prepared, tuple(rows), None, (*estimates, fabric_est), replay,
                              (*accuracy, fabric_row), fabric_calibration=fabric_cal)
    summary = format_summary(result)
    assert "(4 ranks, not an ASTRA-sim dimension stack)" in summary
    assert ("no ASTRA-sim calibration or calibrated row: ASTRA-sim's dimensions cannot express this topology "
            "(2 switches but 2 with hosts") in summary
    modes = [line.split()[0] for line in summary.splitlines() if re.match(r"[a-z]+ +[0-9.]+ +[0-9.]+ ", line)]
    assert modes == ["measured", "fabric"]


def test_the_experiment_service_on_an_unmappable_topology(tmp_path: Path) -> None:
    """The service end to end on loopback (no root) with the dumbbell's spec: measured and fabric rows, the fabric
    calibration written, no ASTRA-sim calibration or export."""
    import json

    from genie.services.experiment import ExperimentCommand, run_experiment_command
    from genie.services.options import RunOptions

    spec = load_experiment(write_dumbbell(tmp_path))
    result = run_experiment_command(ExperimentCommand(spec, RunOptions(loopback=True, out=tmp_path / "run")))
    assert [r.mode for r in result.accuracy] == ["measured", "fabric"] and result.calibration is None
    listed = {f["name"] for f in json.loads((tmp_path / "run" / "manifest.json").read_text())["files"]}
    for name in ("fabric_calibration.json", "estimate-measured.csv", "estimate-fabric.csv", "accuracy.csv",
                 "summary.txt"):
        assert name in listed and (tmp_path / "run" / name).is_file(), name
    assert not {n for n in listed if n.startswith(("calibration", "astra/"))}
    assert not (tmp_path / "run" / "astra").exists()
    assert "ASTRA-sim's dimensions cannot express" in (tmp_path / "run" / "summary.txt").read_text()


def test_the_astra_sim_fit_leaves_out_impossible_points_and_the_summary_lists_them(tmp_path: Path) -> None:
    from dataclasses import replace

    from astra_adapter.fabric.calibrate import FabricCalibration, FabricPoint
    from astra_adapter.fabric.flows import FabricParams
    from astra_adapter.measurements import CommOp

    prepared = prepare(load_experiment(write_tiny(tmp_path)))
    rows = model_sweep(prepared)
    # the 1 MiB all-reduce on 4 ranks at 1 Gbit/s carries 2 x 3/4 MiB per link: 12.6 ms at least, not 1 ms
    impossible = replace(rows[-1], time_us=1000.0)
    calibration, _, _ = evaluate(prepared, (*rows[:-1], impossible), (10_000_000,))
    assert [(q.size_bytes, q.measured_us) for q in calibration.excluded] == [(1 << 20, 1000.0)]
    assert calibration.excluded[0].bound_us == pytest.approx(2 * 3 / 4 * (1 << 20) / 125)
    assert len(calibration.points) == 3 and calibration.rms_residual_pct < 0.01  # the rest still fit exactly
    result = ExperimentResult(tmp_path, prepared, tuple(rows), calibration, (), (10_000_000,), ())
    assert ("# excluded from the ASTRA-sim calibration (faster than the links allow): all_reduce/ring on 4 ranks, "
            "1048576 B: 1000.0 us < 12582.9 us") in format_summary(result)
    # on a fabric topology the fabric calibration lists the same points above: one line instead
    point = FabricPoint(CommOp(Collective.ALL_REDUCE, Algorithm.RING, 4, 1 << 20), ((0, 1, 2, 3),), 1000.0, 0.0,
                        12582.912, ())
    fabric = FabricCalibration("star-4", FabricParams(), (), (point,))
    summary = format_summary(replace(result, fabric_calibration=fabric))
    assert "# the ASTRA-sim calibration leaves out the same 1 point(s)" in summary
    assert "excluded from the ASTRA-sim calibration" not in summary


def test_the_summary_shows_how_far_one_session_s_ecmp_draw_moves_the_fabric_estimate(tmp_path: Path) -> None:
    from astra_adapter.timeline import RankTimes
    from astra_adapter.workload_estimate import EstimateMode, TraceEstimate
    from astra_adapter.experiment import AccuracyRow

    prepared = prepare(load_experiment(write_dumbbell(tmp_path)))
    est = TraceEstimate(EstimateMode.FABRIC, (RankTimes(0, 10_000_000, 3_000_000, 7_000_000, 7_000_000, 0),),
                        draw_iterations_ns=(9_000_000, 11_000_000))
    row = AccuracyRow("tiny.yaml", "dumbbell-4", "fabric", 0.01, 0.01)
    summary = format_summary(ExperimentResult(tmp_path, prepared, (), None, (est,), (10_000_000,), (row,)))
    assert ("# fabric: one testbed session draws one ECMP hash; over the model's 2 draws the iteration spans "
            "9.0-11.0 ms (sd 10.0%): the replay's 1 round(s) sample that spread") in summary


def test_the_shipped_ring_experiment_with_link_sharing_groups_gets_the_fabric_row():
    """TP2 x DP4 on ring-8 maps exactly to ASTRA-sim's Ring, but its DP rings share links: the fabric row is
    added beside the calibrated one; on star-8 (no shared link) and for one group on the ring it is not."""
    root = Path(__file__).resolve().parents[1] / "experiments"
    ring = prepare(load_experiment(root / "tp2dp4-gpt3-ring8.yaml"))
    assert ring.mapping is not None and ring.fabric
    assert not prepare(load_experiment(root / "tp2dp4-gpt3-star8.yaml")).fabric
    assert not prepare(load_experiment(root / "moe-ep8-gpt3-ring8.yaml")).fabric


def test_the_shipped_pipeline_experiment_names_the_slot_wait_and_gets_the_fabric_row(tmp_path: Path) -> None:
    """PP4 x DP2 on star-8: its ranks send beside their collectives, so the fabric row is added; the calibrated
    estimate holds the last stage's last gradient send behind its DP all-reduce (ASTRA-sim's one communication
    op per NPU) and the summary says so."""
    prepared = prepare(load_experiment(ROOT / "experiments" / "pp4dp2-gpt3-star8.yaml"))
    assert prepared.mapping is not None and prepared.fabric
    rows = model_sweep(prepared)
    calibration, estimates, accuracy = evaluate(prepared, tuple(rows), (2_000_000_000,))
    calibrated = estimates[1]
    assert "rank 3's 'send.grad.mb7.to2' waited" in calibrated.slot_note
    assert "behind 'allreduce.dp.bucket0'" in calibrated.slot_note and not estimates[0].slot_note
    summary = format_summary(ExperimentResult(tmp_path, prepared, tuple(rows), calibration, estimates,
                                              (2_000_000_000,), accuracy))
    assert f"# calibrated: {calibrated.slot_note}" in summary
