"""ASTRA-sim adapter benchmark (run by hand, as root; not a test).

1. Accuracy: runs the experiments (default: every experiments/*.yaml - DP, TP+DP and MoE on star-8 and
   ring-8, PP+DP on star-8, the oversubscribed leaf-spines)
   with `genie experiment`'s service: sweep, calibrate, estimate in both modes, replay, compare. Prints
   estimated vs measured iteration time and the error per mode (target: within 5% of the measured replay).
2. Scale: times the built-in estimator (calibrated mode, in memory, no ET I/O) on a generated GPT-3 175B step,
   TP 8 x PP 16 x DP 8 = 1024 ranks, 8 micro-batches, on 128 hosts x 8 ranks (FullyConnected 8 x Switch 128)
   (target: < 10 s). Generating the trace is timed separately.

    sudo python3 benchmarks/astra_accuracy.py [--experiments FILE ...] [--out DIR] [--no-testbed] [--no-scale]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_accuracy(files: list[Path], out: Path) -> list:
    from astra_adapter.experiment_spec import load_experiment
    from genie.services.experiment import ExperimentCommand, run_experiment_command
    from genie.services.options import RunOptions

    rows = []
    for path in files:
        spec = load_experiment(path)
        started = time.perf_counter()
        result = run_experiment_command(ExperimentCommand(spec, RunOptions(out=out / spec.name)))
        took = time.perf_counter() - started
        print(f"# {spec.name}: {took:.0f} s, calibration rms residual {result.calibration.rms_residual_pct:.1f}%",
              file=sys.stderr)
        rows += [(spec.name, row, best, result.load_average) for row, best in zip(result.accuracy, result.best_of)]
    return rows


def print_accuracy(rows: list) -> None:
    print(f"{'experiment':<22} {'mode':<11} {'estimated_s':>12} {'measured_s':>11} {'error':>8}   "
          f"{'best-of: est_s':>14} {'meas_s':>8} {'error':>8}  load")
    for name, r, b, load in rows:
        print(f"{name:<22} {r.mode:<11} {r.estimated_s:>12.4f} {r.measured_s:>11.4f} {r.error_pct:>+7.2f}%   "
              f"{b.estimated_s:>14.4f} {b.measured_s:>8.4f} {b.error_pct:>+7.2f}%  "
              f"{load[0]:.1f}/{load[1]:.1f}")
    for mode in ("measured", "calibrated"):
        for label, pick in (("typical", lambda row: row[1]), ("best-of", lambda row: row[2])):
            errors = [abs(pick(row).error_pct) for row in rows if row[1].mode == mode]
            if errors:
                within = sum(e <= 5.0 for e in errors)
                print(f"# {mode} ({label}): max |error| {max(errors):.2f}%, mean {sum(errors) / len(errors):.2f}%, "
                      f"{within}/{len(errors)} within 5%")


def run_scale() -> None:
    from astra_adapter.calibrate import CalibratedDim, Calibration
    from astra_adapter.config import TopologyKind
    from astra_adapter.mapping import DimRole, map_topology
    from astra_adapter.workload_estimate import estimate_calibrated
    from genie.core.topology import LinkShape
    from genie.topology import star
    from genie.workloads.generators import Parallelism, TrainingConfig, generate
    from genie.workloads.presets import device_preset, model_preset

    started = time.perf_counter()
    trace = generate(model_preset("gpt3-175b"), device_preset("a100"), Parallelism(dp=8, tp=8, pp=16),
                     TrainingConfig(micro_batch_size=1, micro_batches=8))
    generated = time.perf_counter() - started
    nodes = sum(len(r.nodes) for r in trace.ranks)
    mapping = map_topology(star(128, shape=LinkShape(rate_bps=200_000_000_000), ranks_per_host=8))
    calibration = Calibration("dgx-like", (
        CalibratedDim(DimRole.INTRA_HOST, TopologyKind.FULLY_CONNECTED, 8, 150.0, 700.0, True),
        CalibratedDim(DimRole.HOSTS, TopologyKind.SWITCH, 128, 25.0, 2500.0, True)), 10, ())
    started = time.perf_counter()
    est = estimate_calibrated(trace, mapping, calibration)
    took = time.perf_counter() - started
    print(f"# scale: GPT-3 175B tp8 x pp16 x dp8 = {trace.num_ranks} ranks, {nodes} nodes (generated in "
          f"{generated:.1f} s)")
    print(f"# estimator (calibrated mode, in memory): {took:.2f} s, iteration {est.iteration_ns / 1e9:.3f} s "
          f"(target < 10 s: {'ok' if took < 10 else 'MISSED'})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="*", type=Path,
                        default=sorted((ROOT / "experiments").glob("*.yaml")))
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / time.strftime("%Y%m%d-%H%M%S-astra-accuracy"))
    parser.add_argument("--no-testbed", action="store_true", help="Skip the experiments (no root needed).")
    parser.add_argument("--no-scale", action="store_true", help="Skip the 1024-rank estimator timing.")
    args = parser.parse_args()
    if not args.no_testbed:
        print_accuracy(run_accuracy(args.experiments, args.out))
        print(f"# results in {args.out}")
    if not args.no_scale:
        run_scale()
    return 0


if __name__ == "__main__":
    sys.exit(main())
