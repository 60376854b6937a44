"""Job mixes (issue #34): the fabric model's estimate of several jobs sharing a fabric against their concurrent
replay, and a what-if at 256 hosts (run by hand; the testbed parts as root; not a test).

1. ``accuracy``: on ``topologies/leaf-spine-2x4-oversub.yaml`` (one testbed brought up for the whole run,
   named ``jobmix-bench``, torn down at the end): `genie bench` sweeps to fit the fabric model, then
   per scenario and placement the mix replayed (each job alone, then all at once) and estimated (fitted on that
   sweep) twice: on the paths the replay's sessions took (ECMP as it happened; the accuracy) and on 8 hash
   draws (what a user gets before any replay; the ranking). Scenarios: (a) a TP2 x DP2 and a DDP job of 4
   ranks, packed vs spread; (b) an MoE EP4 job and a DDP job of 4 ranks, spread. Prints per job the estimated
   and measured iteration in the mix, the error, the estimated and measured slowdown and their difference in
   percentage points, and the placement ranking both ways, with the load average. Targets: within 5 %,
   within 3 points, the same ranking. ``fit`` and ``evaluate`` re-fit on other sweeps and re-estimate the
   run's replays without a testbed.
2. ``scale``: 4 jobs of 64 ranks on a 256-host leaf-spine (16 leaves x 16 hosts, 8 spines; 100 Gbit/s host
   links, 100 Gbit/s fabric links: 2:1 oversubscribed) through the fabric model alone, placements packed,
   spread and random:1 ranked, ECMP as the expected share (one play each; `genie estimate` averages 8 hash
   draws); the placements estimated at once in ``--workers`` processes (default the CPUs, as `genie estimate
   --placements` does; 1: one after the other, wall time per placement). Target: under 60 s for the what-if.

    sudo .venv/bin/python benchmarks/job_mix.py accuracy [--out DIR] [--iterations N] [--job-iterations N]
                                                         [--time-dilation N]
    .venv/bin/python benchmarks/job_mix.py fit CAL_DIR SWEEP_RUN_DIR...     # fit the fabric model on sweeps
    .venv/bin/python benchmarks/job_mix.py evaluate ACCURACY_DIR --calibration CAL_DIR   # re-estimate, no testbed
    .venv/bin/python benchmarks/job_mix.py scale [--out DIR] [--workers N]
    .venv/bin/python benchmarks/job_mix.py ops ACCURACY_DIR SCENARIO PLACEMENT JOB   # per op, model vs replay

``ops`` takes ``--flow-contention C``: the model played with that flow contention instead of none (what a
calibration's fitted contention would add, op by op; benchmarks/README.md "Job mixes", session 22).
``evaluate``, ``ops`` and ``scale`` take ``--no-htb-credit``: the model without the links' HTB buckets
(astra_adapter/fabric/credit.py; on by default where the topology's testbed has bucket links, as in
`genie estimate --jobs`).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OVERSUB = ROOT / "topologies" / "leaf-spine-2x4-oversub.yaml"
TESTBED = "jobmix-bench"
BASE = {"model": "gpt3-125m", "layers": 1, "seq": 128, "batch": 1}


def _gen(options: dict, path: Path) -> Path:
    from genie.workloads.generators.options import GeneratorOptions, generate_from_options
    from genie.workloads.loader import OutputFormat, save_trace

    save_trace(generate_from_options(GeneratorOptions.parse(options)), path, to=OutputFormat.JSON)
    return path


JOB_ITERATIONS = 3  # the mix file's ``iterations:`` of every job (accuracy's --job-iterations)


def scenarios(work: Path, iterations: int = JOB_ITERATIONS, *, write: bool = True
              ) -> dict[str, tuple[Path, tuple[str, ...]]]:
    """Scenario name -> (mix file, placements to compare). ``iterations`` is every job's ``iterations:`` in the
    mix files: each job's timed iterations alone, and the longest job's repetitions in the mix (the others loop
    to cover it), so the replay and the estimate count that many more of each job's iterations alike. ``write``
    False: a saved run's own traces and mix files, as they were replayed (today's generators may differ)."""
    if write:
        work.mkdir(parents=True, exist_ok=True)
        _gen({**BASE, "tp": 2, "dp": 2}, work / "tp2dp2.json")
        _gen({**BASE, "dp": 4}, work / "ddp4.json")
        _gen({**BASE, "seq": 1024, "dp": 4, "ep": 4, "experts": 4, "top_k": 2, "moe_every": 1},
             work / "moe-ep4.json")
        n = int(iterations)
        (work / "a.yaml").write_text(f"jobs:\n  - {{name: tp2dp2, trace: tp2dp2.json, iterations: {n}}}\n"
                                     f"  - {{name: ddp4, trace: ddp4.json, iterations: {n}}}\n")
        (work / "b.yaml").write_text(f"jobs:\n  - {{name: moe-ep4, trace: moe-ep4.json, iterations: {n}}}\n"
                                     f"  - {{name: ddp4, trace: ddp4.json, iterations: {n}}}\n")
    return {"a": (work / "a.yaml", ("packed", "spread")), "b": (work / "b.yaml", ("spread",))}


def saved_job_iterations(work: Path) -> int:
    """The ``iterations:`` a saved run's mix files were written with (runs before the flag: 3)."""
    import re

    found = re.search(r"iterations: (\d+)\}", (work / "a.yaml").read_text()) if (work / "a.yaml").is_file() else None
    return int(found.group(1)) if found else JOB_ITERATIONS


def _with_placement(mix: Path, placement: str) -> Path:
    import re

    text = re.sub(r"iterations: (\d+)\}", lambda m: f"iterations: {m.group(1)}, placement: {placement}}}",
                  mix.read_text())
    out = mix.with_name(f"{mix.stem}-{placement}.yaml")
    out.write_text(text)
    return out


def run_accuracy(out: Path, iterations: int, dilation: float, job_iterations: int = JOB_ITERATIONS) -> None:
    from genie.services.mix import MixEstimateRequest, run_mix_estimate
    from genie.services.mix_replay import MixReplayCommand, run_mix_replay_command
    from genie.services.options import RunOptions
    from genie.services.replay import ReplayRequest
    from genie.testbed import service
    from genie.topology import load_topology_file

    work = out / "inputs"
    mixes = scenarios(work, job_iterations)
    from genie.core.dilation import TimeDilation

    with service.temporary_testbed(load_topology_file(OVERSUB), name=TESTBED, source=str(OVERSUB),
                                   dilation=TimeDilation(dilation, "benchmark") if dilation != 1 else TimeDilation()):
        calibration = _calibrate(_bench(out), out / "calibration")
        rows = []
        for name, (mix, placements) in mixes.items():
            for placement in placements:
                placed = _with_placement(mix, placement)
                replay = run_mix_replay_command(MixReplayCommand(
                    placed, ReplayRequest(iterations=iterations, warmup=1, timeout_s=300.0),
                    RunOptions(testbed=TESTBED, out=out / f"replay-{name}-{placement}")))
                rows += _compare(out, name, placement, placed, replay, calibration,
                                 out / f"replay-{name}-{placement}")
        (out / "accuracy.json").write_text(json.dumps(rows, indent=2) + "\n")
        _ranking(rows)


def _compare(out: Path, name: str, placement: str, placed: Path, replay, calibration: Path,
             replay_dir: Path, standing_queues: bool = True, htb_credit: bool | None = None) -> list[dict]:
    """One placement's rows: the mix estimated on the replay's own paths and on 8 hash draws, against it."""
    from genie.services.mix import MixEstimateRequest, run_mix_estimate

    rows = []
    est = run_mix_estimate(MixEstimateRequest(placed, OVERSUB, calibration=calibration,
                                              replay=replay_dir, standing_queues=standing_queues,
                                              htb_credit=htb_credit,
                                              out=out / f"estimate-{name}-{placement}"))
    ahead = run_mix_estimate(MixEstimateRequest(placed, OVERSUB, calibration=calibration,
                                                standing_queues=standing_queues, htb_credit=htb_credit,
                                                out=out / f"estimate-draws-{name}-{placement}"))
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    for measured, estimated, drawn in zip(replay.jobs, est.estimates[0].jobs, ahead.estimates[0].jobs):
        err = 100.0 * (estimated.mixed_ns / measured.together_ns - 1.0)
        points = estimated.slowdown_pct - (measured.slowdown_pct or 0.0)
        rows.append({"scenario": name, "placement": placement, "job": measured.name,
                     "estimated_ms": estimated.mixed_ns / 1e6, "measured_ms": measured.together_ns / 1e6,
                     "error_pct": err, "estimated_alone_ms": estimated.alone_ns / 1e6,
                     "measured_alone_ms": (measured.alone_ns or 0) / 1e6,
                     "estimated_slowdown_pct": estimated.slowdown_pct,
                     "measured_slowdown_pct": measured.slowdown_pct, "points": points, "load": load,
                     "draws_mixed_ms": drawn.mixed_ns / 1e6, "draws_alone_ms": drawn.alone_ns / 1e6,
                     "draws_slowdown_pct": drawn.slowdown_pct})
        print(f"{name} {placement:<7} {measured.name:<8} mix est {estimated.mixed_ns / 1e6:9.1f} ms "
              f"meas {measured.together_ns / 1e6:9.1f} ms ({err:+6.2f}%)  slowdown est "
              f"{estimated.slowdown_pct:6.1f}% meas {measured.slowdown_pct or 0:6.1f}% "
              f"({points:+5.1f} pts); 8 draws: {drawn.mixed_ns / 1e6:9.1f} ms slowdown "
              f"{drawn.slowdown_pct:6.1f}%  load {load}", flush=True)
    return rows


def run_evaluate(out: Path, calibration: Path, standing_queues: bool = True, htb_credit: bool | None = None) -> None:
    """Re-estimate every mix replay of an accuracy run directory with another fabric calibration (no testbed); a
    run's measured iterations in the mix recounted by today's rule where it saved every repetition
    (``mix_ops.csv``, benchmarks/job_mix_ops.py ``recounted_together``), else as saved."""
    from benchmarks.job_mix_ops import recounted_together
    from genie.measure.mix import JobComparison

    rows = []
    for name, (mix, placements) in scenarios(out / "inputs", saved_job_iterations(out / "inputs"), write=False).items():
        for placement in placements:
            replay_dir = out / f"replay-{name}-{placement}"
            if not (replay_dir / "mix.json").is_file():
                continue
            doc = json.loads((replay_dir / "mix.json").read_text())
            recounted = recounted_together(replay_dir, _with_placement(mix, placement)) or {}
            jobs = tuple(JobComparison(j["name"], tuple(j["hosts"]), j["repetitions"],
                                       recounted[j["name"]][0] if j["name"] in recounted else
                                       _together_ns(replay_dir, j["name"], j["together_ns"]),
                                       recounted[j["name"]][1] if j["name"] in recounted else
                                       j["together_iterations"], j["alone_ns"], j["alone_iterations"])
                         for j in doc["jobs"])
            replay = type("Replay", (), {"jobs": jobs})
            rows += _compare(out / "evaluate", name, placement, _with_placement(mix, placement), replay, calibration,
                             replay_dir, standing_queues, htb_credit)
    (out / "evaluate.json").write_text(json.dumps(rows, indent=2) + "\n")
    _ranking(rows)


def _together_ns(replay_dir: Path, job: str, saved_ns: float) -> float:
    """A job's measured iteration in the mix by today's rule (genie.core.jobmix.longest_rank_span_ns, the median
    over its iterations), from the run's saved ``jobs/<job>/together/ops.csv``: runs saved before the rule
    changed hold the window in mix.json. Without the file, the saved value."""
    import csv
    from statistics import median

    from benchmarks.job_mix_ops import rank_windows
    from genie.core.jobmix import longest_rank_span_ns

    path = replay_dir / "jobs" / job / "together" / "ops.csv"
    if not path.is_file():
        return saved_ns
    with path.open(newline="") as f:
        ranks = rank_windows(csv.DictReader(f))
    return float(median(longest_rank_span_ns(r.values()) for r in ranks.values())) if ranks else saved_ns


def _calibrate(sweeps: tuple[Path, ...], out: Path) -> Path:
    """The fabric model fitted once on the sweeps (every estimate of the run uses it)."""
    from astra_adapter.fabric.calibrate import calibrate_fabric
    from astra_adapter.fabric.calibration_io import FABRIC_CALIBRATION_JSON, fabric_calibration_json
    from astra_adapter.fabric.network import FabricNetwork
    from astra_adapter.measurements import read_measurements
    from genie.topology import load_topology_file

    started = time.perf_counter()
    cal = calibrate_fabric(read_measurements(list(sweeps)), FabricNetwork(load_topology_file(OVERSUB)))
    out.mkdir(parents=True, exist_ok=True)
    (out / FABRIC_CALIBRATION_JSON).write_text(fabric_calibration_json(cal))
    print(f"# fabric model fitted in {time.perf_counter() - started:.0f} s: " + "; ".join(cal.notes), flush=True)
    return out


def _bench(out: Path) -> tuple[Path, ...]:
    """The sweeps the fabric model is fitted on: ring all-reduces on one leaf's 4 hosts (host links only) and on
    all 8 (across the spines), and all-to-alls on all 8; 1-64 MiB (the jobs' DDP buckets are 25 MB and more: a
    fit on 1-16 MiB put the host links' efficiency at 0.86 and the packed jobs 15 % slow)."""
    import subprocess
    import sys

    runs = []
    for name, collective, ranks in (("sweep-ar4", "all_reduce", "4"), ("sweep-ar8", "all_reduce", "8"),
                                    ("sweep-a2a8", "all_to_all", "8")):
        runs.append(out / name)
        subprocess.run([sys.executable, "-m", "genie.cli.main", "bench", "--testbed", TESTBED, "--collective",
                        collective, "--ranks", ranks, "-b", "1M", "-e", "64M", "-f", "4", "-n", "5", "-w", "1",
                        "--out", str(runs[-1])], check=True, cwd=ROOT)
    return tuple(runs)


def placement_order(rows: list[dict], key: str) -> dict[str, list[str]]:
    """Per scenario with several placements: its placements by their jobs' mean ``key`` (a slowdown), least
    first (a missing value counts 0)."""
    out = {}
    for scenario in sorted({r["scenario"] for r in rows}):
        mine = [r for r in rows if r["scenario"] == scenario]
        placements = sorted({r["placement"] for r in mine})
        if len(placements) < 2:
            continue

        def mean(p: str) -> float:
            values = [r[key] or 0.0 for r in mine if r["placement"] == p]
            return sum(values) / len(values)

        out[scenario] = sorted(placements, key=mean)
    return out


def _ranking(rows: list[dict]) -> None:
    meas = placement_order(rows, "measured_slowdown_pct")
    for key in ("estimated_slowdown_pct", "draws_slowdown_pct"):
        for scenario, est in placement_order(rows, key).items():
            print(f"scenario {scenario}: ranking by {key} {est}, measured {meas[scenario]}: "
                  f"{'equal' if est == meas[scenario] else 'DIFFERENT'}")


def run_scale(out: Path, standing_queues: bool = True, workers: int | None = None, htb_credit: bool = True) -> None:
    """4 jobs x 64 ranks on 256 hosts through the fabric model alone, three placements ranked; ``workers``
    processes estimate the placements at once (as `genie estimate --placements` does; default the CPUs, 1: one
    after the other, each timed)."""
    import resource

    from astra_adapter.fabric.flows import FabricParams
    from astra_adapter.fabric.mix import estimate_mix, estimate_mixes, format_ranking, rank_placements
    from genie.core.topology import LinkShape
    from genie.services.mix import parse_placements, place_mix, read_mix
    from genie.topology.builders import leaf_spine

    out.mkdir(parents=True, exist_ok=True)
    _gen({**BASE, "dp": 64}, out / "ddp64.json")
    _gen({**BASE, "tp": 4, "dp": 16}, out / "tp4dp16.json")
    _gen({**BASE, "tp": 2, "dp": 32}, out / "tp2dp32.json")
    _gen({**BASE, "dp": 64, "ep": 8, "experts": 8, "top_k": 2, "moe_every": 1}, out / "moe-ep8.json")
    (out / "mix.yaml").write_text("jobs:\n" + "".join(f"  - {{name: {n}, trace: {n}.json, iterations: 2}}\n"
                                                      for n in ("ddp64", "tp4dp16", "tp2dp32", "moe-ep8")))
    topology = leaf_spine(16, 16, 8, shape=LinkShape(rate_bps=100_000_000_000),
                          fabric_shape=LinkShape(rate_bps=100_000_000_000), name="leaf-spine-16x16-8")
    mix, traces = read_mix(out / "mix.yaml")
    started, cpu = time.perf_counter(), time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    calls = []
    for placement in parse_placements(("packed,spread,random:1",)):
        placed = place_mix(mix, traces, topology, placement)
        calls.append(((list(traces), placed.names, placed.slots, placed.offsets_ns, placed.iterations, topology,
                       FabricParams(htb_credit=htb_credit)),
                      {"placement": placed.placement, "ecmp_samples": 0, "standing_queues": standing_queues}))
    if workers == 1:
        estimates = []
        for args, kwargs in calls:
            t0 = time.perf_counter()
            estimates.append(estimate_mix(*args, **kwargs))
            print(f"# {kwargs['placement']}: {time.perf_counter() - t0:.1f} s", flush=True)
    else:
        estimates = estimate_mixes(calls, workers=workers)
    total = time.perf_counter() - started
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = done.ru_utime + done.ru_stime - children.ru_utime - children.ru_stime
    print(format_ranking(rank_placements(estimates)))
    print(f"# 4 jobs x 64 ranks on 256 hosts, 3 placements, standing queues {'on' if standing_queues else 'off'}, "
          f"{workers or 'the CPUs as'} worker(s): {total:.1f} s wall, {time.process_time() - cpu + child_cpu:.1f} s "
          f"CPU (load {'/'.join(f'{x:.1f}' for x in os.getloadavg())})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    acc = sub.add_parser("accuracy")
    acc.add_argument("--out", type=Path, default=Path("/tmp/job-mix-accuracy"))
    acc.add_argument("--iterations", type=int, default=1, help="timed iterations of the merged mix replay "
                     "(after 1 warmup; the estimate plays the merged trace once)")
    acc.add_argument("--job-iterations", type=int, default=JOB_ITERATIONS, help="every job's iterations: in the "
                     "mix files (default %(default)s): its timed iterations alone, and the longest job's "
                     "repetitions in the mix - replay and estimate alike")
    acc.add_argument("--time-dilation", type=float, default=1.0, help="bring the testbed up N times slower")
    acc.add_argument("--testbed", default=TESTBED, help="the temporary testbed's name (default %(default)s)")
    ev = sub.add_parser("evaluate")
    ev.add_argument("out", type=Path)
    ev.add_argument("--calibration", type=Path, required=True)
    ev.add_argument("--no-standing-queues", action="store_true", help="the rates alone")
    ev.add_argument("--no-htb-credit", action="store_true", help="the links' HTB buckets not played (default: "
                    "played where the topology's testbed has bucket links, as genie estimate --jobs)")
    fit = sub.add_parser("fit")
    fit.add_argument("out", type=Path)
    fit.add_argument("sweeps", type=Path, nargs="+")
    ops = sub.add_parser("ops", help="one job's ops in a saved run: the model's spans against the replay's "
                         "(benchmarks/job_mix_ops.py), alone and in the mix")
    ops.add_argument("out", type=Path)
    ops.add_argument("scenario", choices=("a", "b"))
    ops.add_argument("placement", choices=("packed", "spread"))
    ops.add_argument("job")
    ops.add_argument("--flow-contention", type=float, default=None, help="the model with this flow contention "
                     "(a mix's estimate plays with none)")
    ops.add_argument("--no-htb-credit", action="store_true", help="the links' HTB buckets not played "
                     "(fabric/credit.py; a mix's estimate plays them on bucket links)")
    scale = sub.add_parser("scale")
    scale.add_argument("--out", type=Path, default=Path("/tmp/job-mix-scale"))
    scale.add_argument("--no-standing-queues", action="store_true", help="the rates alone (genie estimate --jobs "
                       "--no-standing-queues)")
    scale.add_argument("--workers", type=int, default=None, help="processes estimating the placements at once "
                       "(default: the CPUs; 1: one after the other, each timed)")
    scale.add_argument("--no-htb-credit", action="store_true", help="the links' HTB buckets not played "
                       "(fabric/credit.py; its 100 Gbit/s links have none either way)")
    args = parser.parse_args()
    if args.what == "accuracy":
        globals()["TESTBED"] = args.testbed  # the name every part of the run uses
        run_accuracy(args.out, args.iterations, args.time_dilation, args.job_iterations)
    elif args.what == "evaluate":
        run_evaluate(args.out, args.calibration, not args.no_standing_queues, False if args.no_htb_credit else None)
    elif args.what == "ops":
        from benchmarks.job_mix_ops import format_job_ops, job_ops

        for part in job_ops(args.out, args.scenario, args.placement, args.job, args.flow_contention, not args.no_htb_credit):
            print(format_job_ops(part))
    elif args.what == "fit":
        _calibrate(tuple(args.sweeps), args.out)
    else:
        run_scale(args.out, not args.no_standing_queues, args.workers, not args.no_htb_credit)


if __name__ == "__main__":
    main()
