"""The fabric model's benchmark (run by hand; the testbed parts as root; not a test).

1. ``accuracy``: runs experiments (default: the two on the oversubscribed leaf-spine) with `genie experiment`'s
   service and prints every mode's error against the replay, with the load average (target for the fabric row:
   within 5%).
2. ``evaluate RUN_DIR EXPERIMENT``: re-fits the fabric model on an experiment run directory's sweep and compares
   with its replay (no testbed): for runs made before the fabric row existed, or to try model changes; with the
   run's ``paths.json``, fitted and estimated both on hash draws and on the paths the run's sessions took.
3. ``scale``: calibrate on one run directory (an 8-host leaf-spine), estimate a bigger topology with the same link
   classes, compare with the replay in another run directory (target: within 10%).
4. ``draws EXPERIMENT.yaml``: how much ECMP hashing alone moves the experiment (no testbed): per hash draw - one
   testbed session - the trace's iteration and every sweep op on its groups at nominal rates, and how far the
   mean of ``--rounds`` sweep sessions and that of as many replay sessions fall apart.
5. ``speed``: times the fabric model on 1024 ranks (256 hosts x 4 ranks) on a 3-tier fabric (16 leaves, 4 pods
   of 2 aggregation routers, 2 core routers), the DP ring workload of the ASTRA-sim speed anchor: 96 forward +
   96 backward compute nodes and 24 all-reduces of 25 MiB per rank, ECMP as the expected share (one run; the
   default 8 hash draws cost 8 plays; ``--ecmp-samples 8`` times those) (target: < 60 s); with ``--cli DIR`` it
   also writes the trace (Chakra ET) and the topology (YAML) to DIR and times ``genie estimate`` on them as a
   user runs it (fabric mode, 8 hash draws).

    sudo python3 benchmarks/fabric_accuracy.py accuracy [--experiments FILE ...] [--out DIR]
    python3 benchmarks/fabric_accuracy.py evaluate RUN_DIR EXPERIMENT.yaml
    python3 benchmarks/fabric_accuracy.py scale --calibration RUN_DIR --topology BIG.yaml --trace TRACE --replay RUN_DIR
    python3 benchmarks/fabric_accuracy.py draws EXPERIMENT.yaml [--draws 64] [--rounds 4]
    python3 benchmarks/fabric_accuracy.py speed [--ecmp-samples N] [--cli DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_EXPERIMENTS = ("tp2dp4-gpt3-leafspine-oversub.yaml", "moe-ep8-gpt3-leafspine-oversub.yaml")


def run_accuracy(files: list[Path], out: Path) -> None:
    from astra_adapter.experiment_spec import load_experiment
    from genie.services.experiment import ExperimentCommand, run_experiment_command
    from genie.services.options import RunOptions

    for path in files:
        spec = load_experiment(path)
        started = time.perf_counter()
        result = run_experiment_command(ExperimentCommand(spec, RunOptions(out=out / spec.name)))
        load = "/".join(f"{x:.1f}" for x in result.load_average)
        for row in result.accuracy:
            print(f"{spec.name:<34} {row.mode:<11} {row.estimated_s:>9.4f} s vs {row.measured_s:>9.4f} s "
                  f"{row.error_pct:>+7.2f}%  load {load}  ({time.perf_counter() - started:.0f} s)")


def run_evaluate(run_dir: Path, experiment: Path) -> None:
    """Re-fit the fabric model on a run's sweep and compare with its replay; with the run's ``paths.json`` (the
    paths its connections took), every way: fitted on 8 hash draws or on the sweep's paths, estimated over 8
    draws (the experiment's row) or on each replay session's paths."""
    from astra_adapter.experiment import load_workload
    from astra_adapter.experiment_spec import load_experiment
    from astra_adapter.fabric.calibrate import calibrate_fabric, summary_lines
    from astra_adapter.fabric.estimate import estimate_fabric
    from astra_adapter.fabric.network import FabricNetwork
    from astra_adapter.measurements import read_measurements, read_run_paths
    from genie.topology import load_topology_file

    spec = load_experiment(experiment)
    topology = load_topology_file(spec.topology_path)
    trace = load_workload(spec)
    doc = json.loads((run_dir / "experiment.json").read_text())
    replay = median(doc["replay_iteration_ns"])
    (traced,) = read_run_paths([run_dir])
    sweep, sessions = (traced.sweep, traced.replay) if traced is not None else ((), ())
    measurements = read_measurements([run_dir])
    for fit_name, fit_paths in (("8 draws", ()), *((("sweep's paths", sweep),) if sweep else ())):
        started = time.perf_counter()
        cal = calibrate_fabric(measurements, FabricNetwork(topology), paths=fit_paths)
        fitted = time.perf_counter()
        print(f"# fitted on {fit_name}")
        print("\n".join(summary_lines(cal)))
        for est_name, est_paths in (("8 draws", ()), *((("replay sessions' paths", sessions),) if sessions else ())):
            est = estimate_fabric(trace, topology, cal.params, paths=est_paths)
            per_session = (" (per session " + ", ".join(f"{d / 1e6:.1f}" for d in est.draw_iterations_ns) + " ms)"
                           if est_paths else "")
            print(f"{spec.name}: fit on {fit_name}, estimate over {est_name}: {est.iteration_ns / 1e6:.1f} ms vs "
                  f"replay {replay / 1e6:.1f} ms {(est.iteration_ns - replay) / replay * 100:+.2f}%{per_session}  "
                  f"(fit {fitted - started:.1f} s; load during the run {doc.get('load_average')})")
    from astra_adapter.experiment import prepare
    from astra_adapter.fabric.experiment import evaluate_fabric

    _, est, row = evaluate_fabric(prepare(spec), tuple(measurements), tuple(doc["replay_iteration_ns"]),
                                  sweep_paths=sweep, replay_paths=sessions)
    print(f"{spec.name}: the experiment's fabric row (final code): {row.estimated_s * 1e3:.1f} ms vs replay "
          f"{row.measured_s * 1e3:.1f} ms {row.error_pct:+.2f}%")
    print("\n".join(f"# {n}" for n in est.notes if n.startswith("on each replay session")))
    for session in sessions:  # connections that left their leaf; a connection's ACKs take the path its other
        # end reported (every rank reports each of its connections in its own sending direction)
        by_channel = session.by_channel()
        print(f"# {session.label}: " + "; ".join(
            f"{p.src_rank}->{p.dst_rank} ch{p.channel} {'>'.join(p.nodes[1:-1])} (back "
            f"{'>'.join(by_channel.get((p.dst_rank, p.src_rank, p.channel), ('?', '?', '?'))[1:-1])})"
            for p in session.paths if len(p.nodes) > 3))


def run_scale(calibration: Path, topology: Path, trace: Path, replay: Path | None) -> None:
    from astra_adapter.fabric.estimate import estimate_fabric_from_runs
    from genie.topology import load_topology_file
    from genie.workloads.loader import load_trace

    from astra_adapter.experiment_spec import DEFAULT_ALGORITHMS, pin_algorithms

    started = time.perf_counter()
    est, _ = estimate_fabric_from_runs(pin_algorithms(load_trace(trace), DEFAULT_ALGORITHMS),
                                       load_topology_file(topology), calibration_dir=calibration,
                                       source=str(topology))
    took = time.perf_counter() - started
    line = f"scale: {trace.name} on {topology.name}: fabric estimate {est.iteration_ns / 1e6:.1f} ms ({took:.1f} s)"
    if replay is not None:  # an experiment's run directory, or a genie replay's (replay.json)
        if (replay / "experiment.json").is_file():
            measured = median(json.loads((replay / "experiment.json").read_text())["replay_iteration_ns"])
        else:
            measured = json.loads((replay / "replay.json").read_text())["iteration_median_ns"]
        line += f" vs replay {measured / 1e6:.1f} ms: {(est.iteration_ns - measured) / measured * 100:+.2f}%"
    print(line)


def run_draws(experiment: Path, draws: int, rounds: int) -> None:
    """How much ECMP hashing alone moves an experiment: per hash draw (one testbed session), the trace's iteration
    and each op of the sweep on its groups (nominal rates), and how far the mean of `rounds` sweep sessions and
    that of `rounds` replay sessions fall apart (resampled)."""
    import numpy as np

    from astra_adapter.experiment import prepare
    from astra_adapter.experiment_spec import load_experiment
    from astra_adapter.fabric.estimate import estimate_fabric
    from astra_adapter.fabric.flows import FlowEngine, run_concurrently
    from astra_adapter.fabric.network import FabricNetwork

    prepared = prepare(load_experiment(experiment))
    rng = np.random.default_rng(0)

    def spread(name: str, t: np.ndarray) -> None:
        apart = [rng.choice(t, rounds).mean() / rng.choice(t, rounds).mean() - 1 for _ in range(20_000)]
        print(f"{name}: {t.mean() / 1e6:.1f} ms mean over {len(t)} draws, sd {t.std() / t.mean() * 100:.1f}% "
              f"({t.min() / 1e6:.1f}-{t.max() / 1e6:.1f} ms); {rounds} sessions vs {rounds} sessions: sd "
              f"{np.std(apart) * 100:.1f}%, |difference| > 5% in {np.mean(np.abs(apart) > 0.05) * 100:.0f}%")

    est = estimate_fabric(prepared.trace, prepared.topology, ecmp_samples=draws)
    spread(f"{prepared.spec.name} iteration", np.array(est.draw_iterations_ns, dtype=float))
    network = FabricNetwork(prepared.topology)
    for case in prepared.sweep:
        for size in case.sizes:
            op = case.op(size)
            t = [max(run_concurrently(FlowEngine(network.with_hash_seed(k)), [(op, g) for g in case.groups]))
                 for k in range(draws)]
            spread(f"  {op.describe()} on {len(case.groups)} group(s)", np.array(t))


def three_tier(hosts_per_leaf: int = 16, leaves_per_pod: int = 4, pods: int = 4, aggs_per_pod: int = 2,
               cores: int = 2, ranks_per_host: int = 4):
    from genie.core.topology import Host, Link, LinkShape, Switch, SwitchKind, Topology

    host_link, fabric_link = LinkShape(rate_bps=100_000_000_000), LinkShape(rate_bps=100_000_000_000)
    hosts, switches, links = [], [], []
    for c in range(cores):
        switches.append(Switch(f"core{c}", SwitchKind.ROUTER))
    for p in range(pods):
        for a in range(aggs_per_pod):
            agg = f"agg{p}_{a}"
            switches.append(Switch(agg, SwitchKind.ROUTER))
            links += [Link(agg, f"core{c}", fabric_link) for c in range(cores)]
        for lf in range(leaves_per_pod):
            leaf = f"leaf{p}_{lf}"
            switches.append(Switch(leaf, SwitchKind.ROUTER))
            links += [Link(leaf, f"agg{p}_{a}", fabric_link) for a in range(aggs_per_pod)]
            for h in range(hosts_per_leaf):
                name = f"h{len(hosts)}"
                hosts.append(Host(name, ranks_per_host))
                links.append(Link(name, leaf, host_link))
    return Topology("three-tier", tuple(hosts), tuple(switches), tuple(links))


def dp_ring_trace(ranks: int = 1024, layers: int = 96, all_reduces: int = 24, size_bytes: int = 25 << 20,
                  compute_ns: int = 1_000_000):
    from genie.core.collective import Algorithm
    from genie.core.trace import CommType, collective_node, compute_node, make_trace

    nodes = []
    for _ in range(ranks):
        rank, nid = [], 0
        for i in range(layers):
            rank.append(compute_node(nid, f"fwd{i}", duration_ns=compute_ns, data_deps=(nid - 1,) if nid else ()))
            nid += 1
        every = layers // all_reduces
        for i in range(layers):
            rank.append(compute_node(nid, f"bwd{i}", duration_ns=compute_ns, data_deps=(nid - 1,)))
            nid += 1
            if (i + 1) % every == 0:
                rank.append(collective_node(10_000 + i, f"ar{i}", comm_type=CommType.ALL_REDUCE, size_bytes=size_bytes,
                                            data_deps=(nid - 1,), algorithm=Algorithm.RING))
        nodes.append(rank)
    return make_trace(nodes)


def run_speed(ecmp_samples: int, cli: Path | None) -> None:
    from astra_adapter.fabric.estimate import estimate_fabric

    topology = three_tier()
    started = time.perf_counter()
    trace = dp_ring_trace(topology.world_size)
    built = time.perf_counter()
    ecmp = "ECMP expected share" if ecmp_samples == 0 else f"{ecmp_samples} ECMP hash draws"
    load = os.getloadavg()[0]
    cpu = time.process_time()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)  # the draws' worker processes
    est = estimate_fabric(trace, topology, ecmp_samples=ecmp_samples)
    done = time.perf_counter()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = time.process_time() - cpu + sum(getattr(children, f) - getattr(children_before, f)
                                            for f in ("ru_utime", "ru_stime"))
    print(f"speed: {trace.num_ranks} ranks on {len(topology.hosts)} hosts, {len(topology.switches)} routers "
          f"(3 tiers), {sum(len(r.nodes) for r in trace.ranks)} nodes, {ecmp}: fabric model "
          f"{done - built:.1f} s wall, {cpu_s:.1f} s CPU with its draw workers (trace built in "
          f"{built - started:.1f} s),"
          f" iteration {est.iteration_ns} ns; load {load:.1f}/{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if cli is not None:
        run_cli(trace, topology, cli)


def run_cli(trace, topology, out: Path) -> None:
    """The same estimate as a user runs it: the trace written as a Chakra ET set, the topology as YAML, then
    `genie estimate TRACE --topology FILE` in a child process (defaults: fabric mode, 8 ECMP hash draws)."""
    import subprocess

    from genie.topology.writer import dump_topology
    from genie.workloads.chakra_et import write_et_set

    write_et_set(trace, out / "dp_ring" / "dp_ring")
    (out / "three-tier.yaml").write_text(dump_topology(topology))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "genie.cli.main", "estimate", str(out / "dp_ring"), "--topology",
                           str(out / "three-tier.yaml"), "--out", str(out / f"estimate-{time.time_ns()}")],
                          capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    first = (done.stdout.splitlines() or [done.stderr.strip()])[0]
    print(f"cli: genie estimate {out / 'dp_ring'} --topology {out / 'three-tier.yaml'}: exit {done.returncode}, "
          f"{wall:.1f} s wall, {cpu:.1f} s CPU; load {load:.1f}/{os.getloadavg()[0]:.1f}; {first}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    acc = sub.add_parser("accuracy")
    acc.add_argument("--experiments", nargs="*", type=Path)
    acc.add_argument("--out", type=Path, default=Path("/tmp/fabric-accuracy"))
    ev = sub.add_parser("evaluate")
    ev.add_argument("run_dir", type=Path)
    ev.add_argument("experiment", type=Path)
    sc = sub.add_parser("scale")
    sc.add_argument("--calibration", type=Path, required=True)
    sc.add_argument("--topology", type=Path, required=True)
    sc.add_argument("--trace", type=Path, required=True)
    sc.add_argument("--replay", type=Path)
    dr = sub.add_parser("draws")
    dr.add_argument("experiment", type=Path)
    dr.add_argument("--draws", type=int, default=64)
    dr.add_argument("--rounds", type=int, default=4)
    sp = sub.add_parser("speed")
    sp.add_argument("--ecmp-samples", type=int, default=0, help="ECMP hash draws to average (0: expected share)")
    sp.add_argument("--cli", type=Path, help="also write the trace and topology here and time `genie estimate`")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.what == "accuracy":
        run_accuracy(args.experiments or [ROOT / "experiments" / n for n in DEFAULT_EXPERIMENTS], args.out)
    elif args.what == "evaluate":
        run_evaluate(args.run_dir, args.experiment)
    elif args.what == "draws":
        run_draws(args.experiment, args.draws, args.rounds)
    elif args.what == "scale":
        run_scale(args.calibration, args.topology, args.trace, args.replay)
    else:
        run_speed(args.ecmp_samples, args.cli)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
