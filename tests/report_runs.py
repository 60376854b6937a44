"""Small run directories for the report tests, written with the real writers (no root, no processes)."""

import json
from types import SimpleNamespace

from astra_adapter.calibrate import CalibratedDim, Calibration, CalibrationPoint
from astra_adapter.calibration_io import write_calibration
from astra_adapter.config import TopologyKind
from astra_adapter.experiment import AccuracyRow, accuracy_csv
from astra_adapter.mapping import DimRole
from astra_adapter.measurements import Measurement, detail_csv
from astra_adapter.timeline import RankTimes
from astra_adapter.workload_estimate import EstimateMode, TraceEstimate, write_estimate
from genie.core.collective import Algorithm, Collective
from genie.engine.program import build_programs
from genie.measure.metrics import case_stats
from genie.report.manifest import RunRecorder
from genie.report.replay import write_replay
from genie.report.sweep import sweep_csv, sweep_json, write_sweep
from genie.workloads.loader import load_trace

from genie.core.records import IterationRecords, RankRecords

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


def stats():
    return [case_stats(AR, RING, ranks, size, 4, [int(t * 1000) for t in times]) for ranks, size, times in CASES]


def measurements():
    return [Measurement(AR, RING, ranks, size, sorted(times)[1], "sweep",
                        ((0, 1),) if ranks == 2 else ((0, 1, 2, 3),), times) for ranks, size, times in CASES]


def calibration():
    points = tuple(CalibrationPoint(AR, RING, ranks, size, sorted(times)[1], sorted(times)[1] * 1.1,
                                    tuple(range(ranks))) for ranks, size, times in CASES)
    dims = (CalibratedDim(DimRole.HOSTS, TopologyKind.SWITCH, 4, 0.1, 5000.0, True),)
    return Calibration("star-4", dims, 2000, points)


def estimate(mode, iteration_ns):
    return TraceEstimate(mode, (RankTimes(0, iteration_ns, 3_000_000, iteration_ns - 3_000_000,
                                          iteration_ns - 3_000_000, 0),
                                RankTimes(1, iteration_ns - 1000, 3_000_000, 100, 100, 0)))


def outcome(tmp_path, iterations=3):
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


def experiment_files(out, tmp_path):
    write_sweep(out, stats(), {"experiment": "x"})
    (out / "sweep_detail.csv").write_text(detail_csv(measurements()))
    write_calibration(calibration(), out)
    write_estimate(estimate(EstimateMode.MEASURED, 4_000_000), out, "estimate-measured.csv")
    write_estimate(estimate(EstimateMode.CALIBRATED, 3_800_000), out, "estimate-calibrated.csv")
    rows = (AccuracyRow("small", "star-4", "measured", 0.0040, 0.0035),
            AccuracyRow("small", "star-4", "calibrated", 0.0038, 0.0035))
    (out / "accuracy.csv").write_text(accuracy_csv(rows))
    (out / "replay").mkdir()
    write_replay(out / "replay", outcome(tmp_path), {"trace": "small", "ranks": 2})
    (out / "experiment.json").write_text(json.dumps({"experiment": "x", "best_of": [
        {**rows[0].__dict__, "error_pct": rows[0].error_pct}]}))
    (out / "summary.txt").write_text("# experiment x: small on star-4\n")
    return [p.relative_to(out).as_posix() for p in sorted(out.rglob("*")) if p.is_file()]




def experiment_run(out, tmp_path, **describe):
    """An experiment run directory with its manifest (every file recorded)."""
    with RunRecorder("experiment", out=out, argv=["genie", "experiment", "x.yaml"]) as run:
        if describe:
            run.describe(**describe)
        for name in experiment_files(out, tmp_path):
            run.record(name)
    return out


def bench_run(out, cases, *, iterations=True, target=None, topology=None):
    """A bench run directory: `cases` are (collective, ranks, size, iteration times in us); sweep.json carries
    the per-iteration times when `iterations`."""
    rows = [case_stats(c, Algorithm.RING, ranks, size, 4, [int(t * 1000) for t in times])
            for c, ranks, size, times in cases]
    with RunRecorder("bench", out=out) as run:
        run.describe(target=target, topology=topology)
        run.write("sweep.csv", sweep_csv(rows))
        run.write("sweep.json", sweep_json(rows, {}, [r.iteration_ns for r in rows] if iterations else None))
    return out
