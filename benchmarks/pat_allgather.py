"""Small all-gather (or reduce-scatter for genie alone): genie's PAT, ring and auto against MPI (MPICH), side by
side on one testbed per shape (issue #36 item 4). Root; MPI from the peers harness (`benchmarks/peers`).

    sudo .venv/bin/python -m benchmarks.pat_allgather [--shapes shaped,unshaped] [--sizes 1K,4K,16K,64K]
        [--iterations 5/30] [--out DIR]

Per shape: bring up the peers harness's 8-host star (shaped: topologies/star-8.yaml, 1 Gbit/s; unshaped:
benchmarks/peers/star-8-unshaped.yaml), run `genie bench --algorithm auto|pat|ring` and the harness's MPI ranks
on it in turn, and print each size's median iteration time (us) and genie/MPI ratios (> 1: genie slower).
Medians of timed iterations, every system timed like genie (the harness's `timing.timed_loop`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from genie.core.collective import Collective
from genie.report.sweep import read_sweep_csv

from benchmarks.peers import plan, report
from benchmarks.peers.systems import REPO, SystemRun, run_genie, run_mpi

ALGORITHMS = ("auto", "pat", "ring")
TOPOLOGIES = {"shaped": REPO / "topologies" / "star-8.yaml",
              "unshaped": REPO / "benchmarks" / "peers" / "star-8-unshaped.yaml"}


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _genie_medians(workdir: Path, algorithm: str) -> dict[int, tuple[float, str]]:
    """size -> (median us, resolved algorithm) from the sweep.csv files of one algorithm's runs."""
    tag = "" if algorithm == "auto" else f"-{algorithm}"
    out: dict[int, tuple[float, str]] = {}
    for path in sorted(workdir.glob(f"genie{tag}-[0-9]*/sweep.csv")):
        for r in read_sweep_csv(path.read_bytes(), source=str(path)):
            out[r.size_bytes] = (r.time_median_us, r.algorithm or "")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.pat_allgather")
    p.add_argument("--shapes", default="shaped,unshaped")
    p.add_argument("--sizes", default="1K,4K,16K,64K")
    p.add_argument("--collective", default="all_gather")
    p.add_argument("--iterations", default="5/30", help="WARMUP/ITERS for every size")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    from genie.testbed import service
    from genie.topology import load_topology_file

    collective = Collective.parse(args.collective)
    sizes = plan.parse_sizes(args.sizes, 4)
    policy = plan.parse_policy(f"{max(sizes)}:{args.iterations}")
    cases = plan.cases([collective], sizes, policy)
    out = args.out or REPO / "runs" / f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-pat"
    lines = [f"# {collective.value}, 8 ranks, medians (us); load average before: {os.getloadavg()}"]
    for shape in args.shapes.split(","):
        workdir = out / shape
        workdir.mkdir(parents=True, exist_ok=True)
        topology = load_topology_file(TOPOLOGIES[shape])
        with service.temporary_testbed(topology, name=f"pat{os.getpid()}{shape[0]}",
                                       source=str(TOPOLOGIES[shape])) as info:
            genie: dict[str, dict[int, tuple[float, str]]] = {}
            for algorithm in ALGORITHMS:
                log(f"# {shape}: genie --algorithm {algorithm}")
                run = run_genie(info, [collective], sizes, policy, workdir, shape == "shaped", 600.0, log,
                                algorithm=algorithm)
                if run.error:
                    log(f"genie {algorithm} failed: {run.error}")
                genie[algorithm] = _genie_medians(workdir, algorithm)
            mpi: dict[int, float] = {}
            if collective is not Collective.REDUCE_SCATTER:
                log(f"# {shape}: mpi")
                run = run_mpi(info, cases, workdir, shape == "shaped", 600.0, log, run=SystemRun(report.MPI, True))
                mpi = {r.size_bytes: r.time_us for r in run.rows}
                if run.error:
                    log(f"mpi failed: {run.error}")
        lines.append(f"## {shape} (load average after: {os.getloadavg()})")
        lines.append("size | auto (picked) | pat | ring | mpi | pat/mpi | ring/mpi | auto/mpi")
        for size in sizes:
            auto, picked = genie["auto"].get(size, (float("nan"), "?"))
            pat = genie["pat"].get(size, (float("nan"), ""))[0]
            ring = genie["ring"].get(size, (float("nan"), ""))[0]
            m = mpi.get(size, float("nan"))
            lines.append(f"{report.format_size(size)} | {auto:.1f} ({picked}) | {pat:.1f} | {ring:.1f} | {m:.1f} | "
                         f"{pat / m:.2f} | {ring / m:.2f} | {auto / m:.2f}")
    text = "\n".join(lines) + "\n"
    (out / "pat.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
