"""The peers harness (issue #8; run by hand as root, not part of the test suite): genie vs torch.distributed gloo
vs MPI (mpi4py over MPICH) side by side on one emulated testbed, all-reduce / all-gather / all-to-all at 8 ranks,
1 KiB to 256 MiB, every link 1 Gbit/s HTB and unshaped; plus the per-flow TCP limit of the machine.

    sudo .venv/bin/python -m benchmarks.peers                 # the full run (< 10 minutes)
    sudo .venv/bin/python -m benchmarks.peers --quick         # fewer sizes and iterations
    sudo .venv/bin/python -m benchmarks.peers --mode scale    # 64 ranks, star, 100 Mbit/s, genie only
    sudo .venv/bin/python -m benchmarks.peers --systems genie,gloo --shapes unshaped --sizes 1K,64M

Writes into --out (default runs/<UTC time>-peers/): report.txt (what is printed), peers.csv (long format),
and raw/ (genie run directories, peer results, every process's log).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from genie.core.collective import Collective

from benchmarks.peers import explain, plan, report
from benchmarks.peers.install import ensure_peers, versions
from benchmarks.peers.systems import REPO

SHAPES = {"shaped": True, "unshaped": False}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("main", "scale", "all"), default="main",
                   help="main: 8 ranks, genie vs gloo vs MPI; scale: 64 ranks at 100 Mbit/s, genie only; all: both")
    p.add_argument("--systems", default="genie,gloo,mpi", help="comma-separated subset of genie,gloo,mpi")
    p.add_argument("--collectives", default="all_reduce,all_gather,all_to_all")
    p.add_argument("--sizes", default=None, help=f"MIN-MAX (by --factor) or a list 1K,64M (default {plan.DEFAULT_SIZES})")
    p.add_argument("--factor", type=int, default=None, help=f"step factor of a MIN-MAX range (default {plan.DEFAULT_FACTOR})")
    p.add_argument("--policy", default=None,
                   help=f"iterations per size, SIZE:WARMUP/ITERS up to SIZE (default {plan.DEFAULT_POLICY})")
    p.add_argument("--shapes", default="shaped,unshaped", help="shaped (1 Gbit/s HTB), unshaped, or both")
    p.add_argument("--quick", action="store_true",
                   help=f"sizes {plan.QUICK_SIZES} by {plan.QUICK_FACTOR}, policy {plan.QUICK_POLICY}")
    p.add_argument("--out", type=Path, default=None, help="output directory (default runs/<UTC time>-peers)")
    p.add_argument("--topology-shaped", type=Path, default=REPO / "topologies" / "star-8.yaml")
    p.add_argument("--topology-unshaped", type=Path, default=REPO / "benchmarks" / "peers" / "star-8-unshaped.yaml")
    p.add_argument("--topology-scale", type=Path, default=REPO / "benchmarks" / "peers" / "star-64-100m.yaml")
    p.add_argument("--scale-policy", default=plan.SCALE_POLICY, help="iterations policy of --mode scale")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per system and shape before it is stopped")
    p.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads per gloo rank")
    p.add_argument("--flow-seconds", type=float, default=3.0, help="measuring window of the per-flow TCP limit")
    p.add_argument("--no-install", action="store_true", help="do not pip-install missing peers")
    p.add_argument("--no-peer-algorithms", action="store_true",
                   help="do not re-run genie with the peer's algorithm where it loses (the report then only "
                        "models what NCCL's choice costs there)")
    args = p.parse_args(argv)
    args.sizes = args.sizes or (plan.QUICK_SIZES if args.quick else plan.DEFAULT_SIZES)
    args.factor = args.factor or (plan.QUICK_FACTOR if args.quick else plan.DEFAULT_FACTOR)
    args.policy = args.policy or (plan.QUICK_POLICY if args.quick else plan.DEFAULT_POLICY)
    return args


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "-"
    except (OSError, subprocess.TimeoutExpired):
        return "-"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "-"


def header_lines(args: argparse.Namespace) -> list[str]:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    v = versions()
    lines = [f"# genie peers harness, {now}, genie {_git_commit()}",
            f"# machine: {socket.gethostname()}, {os.cpu_count()} cores ({_cpu_model()}), {mem_gib:.0f} GiB, "
            f"kernel {platform.release()}, {platform.python_implementation()} {platform.python_version()}",
            f"# peers: torch {v['torch']} (gloo), mpi4py {v['mpi4py']} + mpich {v['mpich']}, numpy {v['numpy']}",
            f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
            "(other jobs on the machine make every number noisy, the shaped ones included)"]
    if args.mode in ("main", "all"):
        lines.append(f"# {args.systems} on {args.shapes}: sizes {args.sizes} (factor {args.factor}), iterations "
                     f"SIZE:WARMUP/ITERS {args.policy}")
    if args.mode in ("scale", "all"):
        lines.append(f"# scale: genie all_reduce {plan.SCALE_SIZES} (factor 4) on {args.topology_scale.name}, "
                     f"iterations {args.scale_policy}")
    lines.append("# time = mean iteration (nccl-tests' time, sweep.csv time_us); iteration i ends when its last rank "
                 "ends it (genie's definition); genie timed without --steps; busbw with nccl-tests' factors")
    return lines


def _parse_list(text: str, allowed: Sequence[str], option: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise SystemExit(f"{option}: expected a comma-separated subset of {','.join(allowed)}, got {text!r}")
    return list(dict.fromkeys(items))


def run_peer_algorithms(info, shaped: bool, workdir: Path, rows, steps, policy, timeout_s: float, peer_like,
                        problems) -> None:
    """Where genie lost a cell of this shape with an algorithm other than the peer's, genie again with the peer's
    (`genie bench --algorithm`, timed as the auto pass): what NCCL's choice cost there (`explain.measured_line`)."""
    from benchmarks.peers.systems import run_genie

    found = explain.shape_losses([r for r in rows if r.shaped == shaped], steps,
                                 shaped_rate_bps=report.SHAPED_RATE_BPS)
    for _, collective, size, algorithm in explain.alternatives_to_run(found):
        cell = f"{collective.value}-{report.format_size(size)}"
        log(f"# {'shaped' if shaped else 'unshaped'}: genie lost {cell}: again with the peer's {algorithm.value}")
        run = run_genie(info, [collective], [size], policy, workdir / "peer-algorithms" / cell, shaped, timeout_s,
                        log, algorithm=algorithm.value)
        for r in run.rows:
            peer_like[(shaped, r.collective, r.size_bytes)] = r.time_us
        if run.error:
            problems.append(f"{'shaped' if shaped else 'unshaped'} genie --algorithm {algorithm.value} {cell}: "
                            f"{run.error}")


def run_main(args, systems, collectives, sizes, policy, raw: Path, out: Path, rows, flow_limits, problems,
             steps, peer_like):
    from genie.testbed import service
    from genie.topology import load_topology_file

    from benchmarks.peers.systems import SystemRun, run_flows, run_genie, run_gloo, run_mpi

    cases = plan.cases(collectives, sizes, policy)
    for shape in _parse_list(args.shapes, list(SHAPES), "--shapes"):
        shaped = SHAPES[shape]
        path = args.topology_shaped if shaped else args.topology_unshaped
        workdir = raw / shape
        workdir.mkdir(parents=True, exist_ok=True)
        log(f"# {shape}: bringing up {path}")
        topology = load_topology_file(path)
        with service.temporary_testbed(topology, name=f"peers{os.getpid()}{shape[0]}", source=str(path)) as info:
            plan.check_sizes(sizes, len(info.hosts))
            measured: list[report.FlowLimit] = []

            def flows(when: str) -> None:
                limit, error = run_flows(info, workdir / when, shaped, log, duration_s=args.flow_seconds)
                if limit is not None:
                    measured.append(limit)
                    flow_limits[shaped] = report.best_flow_limit(measured)
                if error:
                    problems.append(f"{shape} flows ({when}): {error}")

            flows("before")
            for system in systems:
                log(f"# {shape}: {system}")
                run = SystemRun(system, shaped)
                try:
                    if system == report.GENIE:
                        run_genie(info, collectives, sizes, policy, workdir, shaped, args.timeout, log, run=run,
                                  steps=True)
                    elif system == report.GLOO:
                        run_gloo(info, cases, workdir, shaped, args.timeout, log, threads=args.torch_threads,
                                 run=run)
                    else:
                        run_mpi(info, cases, workdir, shaped, args.timeout, log, run=run)
                finally:
                    rows += run.rows
                    steps.update({(shaped, *key): rec for key, rec in run.steps.items()})
                log(f"# {shape}: {system} took {run.seconds:.1f} s, {len(run.rows)} cases"
                    + (f"; FAILED: {run.error}" if run.error else ""))
                if run.error:
                    problems.append(f"{shape} {system}: {run.error}")
                _write_atomic(out / "peers.csv", report.peers_csv(rows))
            if report.GENIE in systems and set(report.PEERS) & set(systems) and not args.no_peer_algorithms:
                run_peer_algorithms(info, shaped, workdir, rows, steps, policy, args.timeout, peer_like, problems)
            flows("after")


def _process_age_s() -> float:
    """Seconds since this process started (interpreter start-up and imports included)."""
    with open("/proc/self/stat", "rb") as f:
        start_ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
    with open("/proc/uptime", encoding="ascii") as f:
        uptime_s = float(f.read().split()[0])
    return uptime_s - start_ticks / os.sysconf("SC_CLK_TCK")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        systems = _parse_list(args.systems, report.SYSTEMS, "--systems")
        collectives = [Collective.parse(c) for c in args.collectives.split(",") if c.strip()]
        sizes = plan.parse_sizes(args.sizes, args.factor)
        policy = plan.parse_policy(args.policy)
        scale_policy = plan.parse_policy(args.scale_policy)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("error: the peers harness builds network namespaces: run it as root", file=sys.stderr)
        return 2
    out = args.out or REPO / "runs" / (datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
                                       + "-peers")
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    # SIGTERM unwinds like Ctrl-C: every `finally` stops its processes by PID and brings its testbed down
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored (`cmd &`)
    rows: list[report.Row] = []
    flow_limits: dict[bool, report.FlowLimit] = {}
    problems: list[str] = []
    steps: dict = {}  # (shaped, collective, size) -> genie's step records (explain.GenieSteps)
    peer_like: dict = {}  # (shaped, collective, size) -> genie's time with the peer's algorithm (lost cells)
    scale = None
    header: list[str] = []
    try:
        if args.mode in ("main", "all") and not args.no_install:
            ensure_peers(systems, log)
        header = header_lines(args)
        for line in header:
            log(line)
        if args.mode in ("main", "all"):
            run_main(args, systems, collectives, sizes, policy, raw, out, rows, flow_limits, problems, steps,
                     peer_like)
        if args.mode in ("scale", "all"):
            from benchmarks.peers.scale import run_scale

            scale = run_scale(args.topology_scale, plan.parse_sizes(plan.SCALE_SIZES, 4), scale_policy,
                              raw / "scale", args.timeout, log)
            rows_scale = list(scale.rows)
            _write_atomic(out / "scale.csv", report.peers_csv(rows_scale))
            if scale.error:
                problems.append(f"scale: {scale.error}")
    except KeyboardInterrupt:
        log("# interrupted: processes stopped, testbeds down; writing what was measured")
        problems.append("interrupted")
    elapsed = _process_age_s()
    text = report.full_report(rows, ranks=8, flow_limits=flow_limits, scale=scale,
                              header=header or header_lines(args), losses=explain.losses_by_shape(
                                  rows, steps, shaped_rate_bps=report.SHAPED_RATE_BPS, peer_like=peer_like,
                                  flow_GBps={s: f.mean_GBps for s, f in flow_limits.items() if f is not None}))
    text += "".join(f"# problem: {p}\n" for p in problems)
    text += f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n"
    text += f"# harness run time {elapsed:.0f} s ({elapsed / 60:.1f} min); results in {out}\n"
    if rows:
        _write_atomic(out / "peers.csv", report.peers_csv(rows))
        _write_atomic(out / "summary.md", report.markdown_summary(rows, flow_limits))
    _write_atomic(out / "report.txt", text)
    print(text, end="")
    return 1 if problems else 0
