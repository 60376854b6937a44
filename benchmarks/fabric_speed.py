"""The fabric model's speed on an asymmetric trace (issue #36, item 6; run by hand, not a test).

Generates, into a temporary directory (or ``--out``), an MoE trace with genie's own generator - expert
parallelism 8 at 1024 ranks, uneven (skewed) expert routing, so the all-to-alls differ per rank and no rank
mirrors another - and a 3-tier fabric with one host per rank (leaves, pods of aggregation routers, cores;
:func:`benchmarks.fabric_accuracy.three_tier`), then times ``genie estimate TRACE --topology FILE --mode
fabric`` as a user runs it (a child process: the Chakra ET read, the model's default ECMP hash draws, the
report). It prints the wall time, the CPU time with the draws' workers, the load average before and after, and
the problem's size: ranks, trace nodes, the flows the model plays per draw, link directions (target: < 60 s).

    python3 benchmarks/fabric_speed.py [--ranks 1024] [--ep 8] [--routing-skew 1.0] [--layers N]
                                       [--out DIR] [--repeat 1] [--in-process [--ecmp-samples N]]

``--in-process`` also runs the estimate in this process with the trace read and the model timed apart, and
counts the flows (one play's worth: every op's schedule steps).

``--play flat,flat-levels,flat-rounds,flat-scratchadd,flat-pyloop,flat-unlisted,flat-rebuilt,flat-scan,flat-walk,flat-one,flat-numpy,reference``
instead plays one draw (``--draw K`` of the ECMP hash, -1: the expected share) in this process on each engine in turn, side
by side, each under a CPU-time cap (``--cpu-cap S``): the ET read and the trace's compile timed apart, then per engine its CPU and wall time, the
load average, the events and max-min solves it ran, and the iteration - or, stopped at the cap, how many of the
trace's nodes it had done.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
MODEL = "mixtral-8x7b"


def topology_for(ranks: int):
    """A 3-tier fabric with ``ranks`` hosts of one rank each: 32 hosts per leaf, 8 leaves and 4 aggregation
    routers per pod, 4 cores (1024 ranks: 4 pods, 32 leaves, 16 aggregation routers)."""
    from benchmarks.fabric_accuracy import three_tier

    hosts_per_leaf, leaves_per_pod = 32, 8
    per_pod = hosts_per_leaf * leaves_per_pod
    if ranks % per_pod:
        raise SystemExit(f"--ranks must be a multiple of {per_pod} (hosts per pod), got {ranks}")
    return three_tier(hosts_per_leaf=hosts_per_leaf, leaves_per_pod=leaves_per_pod, pods=ranks // per_pod,
                      aggs_per_pod=4, cores=4, ranks_per_host=1)


def genie_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "genie.cli.main", *args]


def _run(argv: list[str]) -> tuple[subprocess.CompletedProcess, float, float]:
    """(process, wall s, CPU s of it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def generate(out: Path, ranks: int, ep: int, skew: float, layers: int | None) -> Path:
    prefix = out / "moe" / "moe"
    argv = genie_argv("trace", "gen", "--model", MODEL, "--dp", str(ranks), "--ep", str(ep), "--routing-skew",
                      f"{skew:g}", "--out", str(prefix), "--to", "et", *(("--layers", str(layers)) if layers else ()))
    done, wall, _ = _run(argv)
    if done.returncode:
        raise SystemExit(f"genie trace gen failed: {done.stderr.strip() or done.stdout.strip()}")
    print(f"# trace: {' '.join(argv[3:])}: {wall:.1f} s; " + " / ".join(done.stdout.strip().splitlines()[1:2]))
    return prefix.parent


def in_process(trace_dir: Path, topology, ecmp_samples: int | None) -> str:
    """The same estimate in this process, the trace read and the model timed apart (CPU includes the draws'
    workers), then the problem's size."""
    from astra_adapter.fabric.estimate import estimate_fabric
    from astra_adapter.fabric.flows import ECMP_SAMPLES
    from genie.workloads.loader import load_trace

    c0, w0 = time.process_time(), time.perf_counter()
    trace = load_trace(trace_dir)
    c1, w1 = time.process_time(), time.perf_counter()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    est = estimate_fabric(trace, topology, ecmp_samples=ECMP_SAMPLES if ecmp_samples is None else ecmp_samples)
    w2, after = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() - c1 + after.ru_utime - children.ru_utime + after.ru_stime - children.ru_stime
    line = (f"in process: trace read {w1 - w0:.1f} s wall / {c1 - c0:.1f} s CPU; fabric model {w2 - w1:.1f} s "
            f"wall / {cpu:.1f} s CPU "
            f"(ECMP: {len(est.draw_iterations_ns) or 1} play(s)); iteration {est.iteration_ns} ns")
    return line + "\nsize: " + count_size(trace, topology)


def play_side_by_side(trace_dir: Path, topology, engines: list[str], draw: int, cpu_cap_s: float,
                      end_precision: float = 0.0, ring_model: str = "lockstep") -> None:
    """One play of draw ``draw`` on each engine (``flat``: the estimate's, ``reference``: FlowEngine), each
    stopped at ``cpu_cap_s`` of CPU; prints what it did."""
    import signal

    from astra_adapter.fabric.coflow import RingModel
    from astra_adapter.fabric.flat_flows import FlatFlowEngine
    from astra_adapter.fabric.flows import FabricParams, FlowEngine
    from astra_adapter.fabric.network import FabricNetwork, sample_networks
    from astra_adapter.fabric.player import FabricPlayer
    from astra_adapter.timeline import CompiledTrace, timeline_of
    from genie.workloads.loader import load_trace

    c0, w0 = time.process_time(), time.perf_counter()
    trace = load_trace(trace_dir)
    c1 = time.process_time()
    compiled = CompiledTrace(trace)
    print(f"ET read {c1 - c0:.1f} s CPU, compile {time.process_time() - c1:.1f} s CPU "
          f"({time.perf_counter() - w0:.1f} s wall)", flush=True)
    network = FabricNetwork(topology)
    net = network if draw < 0 else sample_networks(network, draw + 1)[draw]

    class NumpyFlatFlowEngine(FlatFlowEngine):
        compiled_solve = False  # the flat engine with its rate solve in numpy, not fairshare_core

    class WalkFlatFlowEngine(FlatFlowEngine):
        incremental = False  # the compiled per-component solve walking every moving flow at each solve (MovingRates)

    class RebuiltFlatFlowEngine(FlatFlowEngine):
        slots = False  # every flowing op's arrays concatenated again at each lay-out (before the slots)

    class PyLoopFlatFlowEngine(FlatFlowEngine):
        compiled_loop = False  # every event through the player's Python loop (before the compiled event loop)

    class UnlistedFlatFlowEngine(FlatFlowEngine):
        listed = False  # the sweeps over every flow of each slot with a flow moving (before the moving flows' lists)

    class OneSolveFlatFlowEngine(FlatFlowEngine):
        by_component = False  # the compiled solve of every moving flow at once (before the per-component solve)

    class LevelsFlatFlowEngine(FlatFlowEngine):
        level_fill = True  # filled by levels: after flows end, only the region above the first ended one's level

    class ScratchAddsFlatFlowEngine(FlatFlowEngine):
        add_fill = False  # by levels, the components flows start in filled from scratch (before the additions' refill)

    class RoundsFlatFlowEngine(FlatFlowEngine):
        level_fill = False  # filled by rounds, each changed component from scratch (before the fill by levels)

    params = FabricParams(ring_model=RingModel.parse(ring_model))  # (the end precision: ``flat`` only, below)

    def scanning(net, params):  # the flat engine with session 21's solve: qsort, each round scanning every entry
        engine = RoundsFlatFlowEngine(net, params)
        if engine._live is not None:
            engine._live.scan_entries = True
        return engine

    class Stop(Exception):
        pass

    def stop(*_):
        raise Stop()

    signal.signal(signal.SIGXCPU, stop)
    for name in engines:
        engine = {"flat": FlatFlowEngine, "flat-pyloop": PyLoopFlatFlowEngine, "flat-rebuilt": RebuiltFlatFlowEngine,
                  "flat-unlisted": UnlistedFlatFlowEngine,
                  "flat-walk": WalkFlatFlowEngine,
                  "flat-one": OneSolveFlatFlowEngine, "flat-levels": LevelsFlatFlowEngine,
                  "flat-rounds": RoundsFlatFlowEngine, "flat-scratchadd": ScratchAddsFlatFlowEngine,
                  "flat-scan": scanning, "flat-numpy": NumpyFlatFlowEngine, "reference": FlowEngine}[name](
            net, replace(params, end_precision=end_precision) if name == "flat" else params)
        player = FabricPlayer(trace, engine, compiled)
        events = [0]
        advance = player.advance

        def counted(dt_ns: float, advance=advance, events=events) -> None:
            events[0] += 1
            advance(dt_ns)

        player.advance = counted  # type: ignore[method-assign]
        used = resource.getrusage(resource.RUSAGE_SELF)
        resource.setrlimit(resource.RLIMIT_CPU, (int(used.ru_utime + used.ru_stime + cpu_cap_s) + 1,
                                                 resource.RLIM_INFINITY))
        load, c, w = os.getloadavg()[0], time.process_time(), time.perf_counter()
        try:
            status = f"iteration {timeline_of(player).iteration_ns} ns"
        except Stop:
            status = (f"stopped at the {cpu_cap_s:.0f} s CPU cap with {player.done}/{player.total} trace nodes done "
                      f"({100 * player.done / player.total:.1f}%)")
        finally:
            resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        solve = getattr(engine, "_compiled", None)
        parts = ""
        if solve is not None and getattr(engine, "_live", None) is not None:  # LiveRates: only components solved
            parts = f" ({solve.components_solved} components solved" + \
                (f", {solve.refills} regions refilled ({solve.add_refills} with flows started), "
                 f"{solve.routes_filled} routes filled, {solve.routes_refilled} of them in regions "
                 f"({solve.routes_add_refilled} with flows started))" if solve.levels else ")")
        elif solve is not None and solve.by_component:
            parts = f" ({solve.components_solved} components solved, {solve.components_kept} kept)"
        cpu = time.process_time() - c
        events[0] = getattr(engine, "events", events[0])  # the engine's count: events played in C too
        print(f"{name}: {cpu:.1f} s CPU, {time.perf_counter() - w:.1f} s wall, load "
              f"{load:.1f}/{os.getloadavg()[0]:.1f}; {events[0]} events ({1e3 * cpu / max(events[0], 1):.3f} ms CPU "
              f"an event), {getattr(engine, 'solves', len(engine._rates))} max-min solves{parts}; "
              f"{status}", flush=True)


def count_size(trace, topology) -> str:
    """Ranks, nodes, link directions and the flows one play runs (every op's schedule, step by step)."""
    from astra_adapter.fabric.flows import StepSends
    from astra_adapter.fabric.network import FabricNetwork
    from astra_adapter.timeline import CompiledTrace

    compiled = CompiledTrace(trace)
    sends = StepSends()
    flows = steps = 0
    for members, _sides, op in compiled.ops.values():
        for step in sends.of(op, members):
            flows += len(step.src)
            steps += 1
    nodes = sum(len(r.nodes) for r in trace.ranks)
    network = FabricNetwork(topology)
    return (f"{trace.num_ranks} ranks, {nodes} trace nodes, {len(compiled.ops)} communication ops, {steps} "
            f"op steps, {flows} flows per play; {len(topology.hosts)} hosts, {len(topology.switches)} routers, "
            f"{len(network.resources)} link directions")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--ep", type=int, default=8)
    parser.add_argument("--routing-skew", type=float, default=1.0, help="Zipf exponent of expert popularity")
    parser.add_argument("--layers", type=int, help="transformer layers (default: the model's)")
    parser.add_argument("--out", type=Path, help="keep the trace, topology and estimates here (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=1, help="time the estimate this many times (median)")
    parser.add_argument("--in-process", action="store_true",
                        help="also time the trace read and the model apart in this process, and count the flows")
    parser.add_argument("--ecmp-samples", type=int, help="in process: ECMP hash draws (default: the CLI's)")
    parser.add_argument("--play", help="instead: one play in process on these engines, side by side "
                        "(comma-separated: flat, flat-pyloop: every event through the Python loop, "
                        "flat-unlisted: its sweeps over every flow of a slot, "
                        "flat-rebuilt: its arrays concatenated again at each lay-out, "
                        "flat-scan: its filling scanning every entry each round, "
                        "flat-walk: its solve walking every moving flow, "
                        "flat-one: its compiled solve not per component, "
                        "flat-levels: its solve filling by levels (the default), "
                        "flat-rounds: its solve filling by rounds (before), "
                        "flat-scratchadd: by levels, its components with flows started filled from scratch "
                        "(before), "
                        "flat-numpy: its solve not compiled, reference)")
    parser.add_argument("--draw", type=int, default=0, help="--play: the ECMP hash draw (-1: the expected share)")
    parser.add_argument("--cpu-cap", type=float, default=600.0, help="--play: CPU seconds per engine at most")
    parser.add_argument("--end-precision", type=float, help="flow ends within this share of their step's time as "
                        "one event (genie estimate --end-precision; --play: the flat engine's FabricParams.end_precision; "
                        "default: the estimate's, exact in --play)")
    parser.add_argument("--ring-model", choices=("lockstep", "coflow"), help="a ring step's connections each a "
                        "flow, or one at the ring's bottleneck rate (genie estimate --ring-model; --play: "
                        "FabricParams.ring_model; default: the estimate's (coflow), lockstep in --play)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from genie.topology.writer import dump_topology

    with tempfile.TemporaryDirectory(prefix="fabric-speed-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        topology = topology_for(args.ranks)
        topo_path = out / "three-tier.yaml"
        topo_path.write_text(dump_topology(topology))
        trace_dir = out / "moe" if (out / "moe" / "moe.0.et").exists() else \
            generate(out, args.ranks, args.ep, args.routing_skew, args.layers)
        if args.play:
            play_side_by_side(trace_dir, topology, args.play.split(","), args.draw, args.cpu_cap,
                              args.end_precision or 0.0, args.ring_model or "lockstep")
            return 0
        walls, cpus = [], []
        for k in range(args.repeat):
            load = os.getloadavg()[0]
            done, wall, cpu = _run(genie_argv("estimate", str(trace_dir), "--topology", str(topo_path), "--mode",
                                              "fabric", "--out", str(out / f"estimate-{k}"),
                                              *(("--end-precision", f"{args.end_precision:g}")
                                                if args.end_precision is not None else ()),
                                              *(("--ring-model", args.ring_model) if args.ring_model else ())))
            if done.returncode:
                print(f"genie estimate failed (exit {done.returncode}): {done.stderr.strip()[-400:]}")
                return 1
            walls.append(wall)
            cpus.append(cpu)
            first = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
            print(f"estimate {k}: {wall:.1f} s wall, {cpu:.1f} s CPU (with its draw workers); load "
                  f"{load:.1f}/{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {first}")
        print(f"fabric model, MoE EP{args.ep} (routing skew {args.routing_skew:g}) at {args.ranks} ranks on 3 "
              f"tiers: `genie estimate --mode fabric` median {median(walls):.1f} s wall, {median(cpus):.1f} s CPU "
              f"over {len(walls)} run(s) (target < 60 s)")
        if args.in_process:
            print(in_process(trace_dir, topology, args.ecmp_samples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
