"""``--num-queues-per-dim``: genie's built-in ASTRA-sim engine against the real congestion-unaware binary
(issue #13 item 5).

Runs the binary at ``--num-queues-per-dim`` 1..4 on the bundled reference cases (``tests/data/astra-reference``)
and on input sets exported from sample traces (``genie astra export``, 4 splits) with system.json variants
(baseline / localBWAware, active chunks 1-3, halvingDoubling, ring all-to-all, FIFO), and compares genie's
stdout with the binary's: the same lines in the same order (``identical``), the same lines in another order
(``order``: only same-tick finish lines swap places), or different values. With ``--write`` it records the
binary's results - per (case, queues) the statistics columns and a digest of its sorted stdout lines - in
``tests/data/astra-reference/queues.csv``, which ``tests/test_astra_queues.py`` checks genie against.

    python -m benchmarks.astra_queues --astra-unaware BIN [--queues 1,2,3,4] [--write] [--work DIR]

The binary aborts now and then on some inputs (SIGABRT, SIGSEGV for doubleBinaryTree on process groups); each
run is tried up to 4 times; a run that printed its final "Exiting" line and then crashed while tearing down
(``malloc_consolidate(): unaligned fastbin chunk detected``, every time on the exported TP2xDP4 set at 4 queues)
counts with that output; a case that never gets there is reported and left out.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "tests" / "data" / "astra-reference"
EXITING = "[system] [warning] Exiting"  # the binary's last line once every rank finished
QUEUES_CSV = REFERENCE / "queues.csv"
COLUMNS = ("case", "queues", "max_finish_cycles", "min_finish_cycles", "max_exposed_comm_cycles", "max_comm_time",
           "max_gpu_time", "max_overlap", "sorted_lines_sha1")
#: (name, trace, topology) exported with `genie astra export --splits 4`, then each system.json variant
EXPORTS = (("tp2dp4_star8", "gen_tp2_dp4_gpt3", "topologies/star-8.yaml"),
           ("moe_ring8", "gen_moe_ep8_gpt3", "topologies/ring-8.yaml"),
           ("ddp_star8", "gen_ddp_resnet50", "topologies/star-8.yaml"),
           ("tp2dp4_fc2sw4", "gen_tp2_dp4_gpt3", None))  # None: 4 hosts x 2 ranks on one switch (2-D)
VARIANTS = {"base": {}, "lbw": {"collective-optimization": "localBWAware"},
            "a2": {"active-chunks-per-dimension": 2}, "a3": {"active-chunks-per-dimension": 3},
            "hd": {"all-reduce-implementation": "halvingDoubling"}, "a2aring": {"all-to-all-implementation": "ring"},
            "fifo": {"scheduling-policy": "FIFO"}}
STAR_4X2 = """name: star4x2
defaults: {bandwidth: 1gbit, delay: 20us}
hosts:
  - {prefix: h, count: 4, ranks: 2}
switches:
  - {name: s0}
links: [{endpoints: [h0, s0]}, {endpoints: [h1, s0]}, {endpoints: [h2, s0]}, {endpoints: [h3, s0]}]
"""


def lines(text: str) -> list[str]:
    """stdout without the timestamps."""
    return [re.sub(r"^\[[^\]]*\] ", "", line) for line in text.splitlines()]


def digest(stdout_lines: list[str]) -> str:
    return hashlib.sha1("\n".join(sorted(stdout_lines)).encode()).hexdigest()


def summary(est) -> tuple[int, ...]:
    r = est.result
    return (r.max_finish_cycles, r.min_finish_cycles, r.max_exposed_comm_cycles, r.max_comm_time, r.max_gpu_time,
            r.max_overlap)


def export_case(work: Path, name: str, trace: str, topology: str | None, variant: str) -> Path:
    """An exported input set in ``work/<name>__<variant>`` (made once)."""
    folder = work / f"{name}__{variant}"
    if folder.is_dir():
        return folder
    base = work / f"{name}__export"
    if not base.is_dir():
        topo = ROOT / topology if topology else work / "star4x2.yaml"
        if topology is None:
            topo.write_text(STAR_4X2)
        subprocess.run([sys.executable, "-m", "genie.cli.main", "astra", "export", str(ROOT / "traces" / trace),
                        str(base), "--topology", str(topo), "--splits", "4"], check=True, capture_output=True, cwd=ROOT)
    shutil.copytree(base, folder)
    system = json.loads((folder / "system.json").read_text())
    for key, value in VARIANTS[variant].items():
        system[key] = [value] * len(system["all-reduce-implementation"]) if key.endswith("implementation") else value
    (folder / "system.json").write_text(json.dumps(system, indent=1) + "\n")
    return folder


def inputs(folder: Path) -> tuple[str, str | None]:
    """(workload prefix, comm-group file or None) of a case folder."""
    meta = folder / "case.json"
    prefix = json.loads(meta.read_text())["workload_prefix"] if meta.is_file() else "workload/workload"
    group = folder / f"{prefix}.comm_group.json"
    return prefix, (str(group.relative_to(folder)) if group.is_file() else None)


def run_binary(binary: Path, folder: Path, queues: int) -> str | None:
    prefix, group = inputs(folder)
    argv = [str(binary), f"--workload-configuration={prefix}", "--system-configuration=system.json",
            "--network-configuration=network.yml", "--remote-memory-configuration=remote_memory.json",
            "--logging-folder=log", f"--num-queues-per-dim={queues}"]
    if group:
        argv.append(f"--comm-group-configuration={group}")
    finished = None
    for _ in range(4):
        done = subprocess.run(argv, cwd=folder, capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout
        if EXITING in done.stdout:
            finished = done.stdout  # simulated to the end, then crashed tearing down (heap corruption)
    return finished


def run_genie(folder: Path, queues: int):
    from astra_adapter.estimate import estimate_files

    prefix, group = inputs(folder)
    return estimate_files(folder / prefix, folder / "system.json", folder / "network.yml",
                          folder / "remote_memory.json", folder / group if group else None, queues_per_dim=queues)


def main(argv: list[str] | None = None) -> int:
    from astra_adapter.output import parse_astra_output

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--astra-unaware", type=Path, required=True, help="AstraSim_Analytical_Congestion_Unaware")
    parser.add_argument("--queues", default="1,2,3,4")
    parser.add_argument("--work", type=Path, default=Path("/tmp/genie-astra-queues"))
    parser.add_argument("--write", action="store_true", help=f"record the binary's results in {QUEUES_CSV}")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    folders = []
    for case in sorted(p for p in REFERENCE.iterdir() if (p / "case.json").is_file()):
        folder = args.work / case.name
        if not folder.is_dir():
            shutil.copytree(case, folder)
        folders.append(folder)
    folders += [export_case(args.work, name, trace, topo, v) for name, trace, topo in EXPORTS for v in VARIANTS]
    rows, counts = [], {"identical": 0, "order": 0, "values": 0, "binary failed": 0}
    for folder in folders:
        for q in (int(x) for x in args.queues.split(",")):
            theirs = run_binary(args.astra_unaware, folder, q)
            if theirs is None:
                counts["binary failed"] += 1
                print(f"{folder.name} q={q}: the binary never completed")
                continue
            ours = lines(run_genie(folder, q).stdout())
            verdict = "identical" if ours == lines(theirs) else "order" if sorted(ours) == sorted(lines(theirs)) \
                else "values"
            counts[verdict] += 1
            print(f"{folder.name} q={q}: {verdict}")
            result = parse_astra_output(theirs)
            rows.append({"case": folder.name, "queues": q, **dict(zip(COLUMNS[2:8], (
                result.max_finish_cycles, result.min_finish_cycles, result.max_exposed_comm_cycles,
                result.max_comm_time, result.max_gpu_time, result.max_overlap))),
                "sorted_lines_sha1": digest(lines(theirs))})
    print(", ".join(f"{v} {k}" for k, v in counts.items()))
    if args.write:
        with QUEUES_CSV.open("w", newline="") as out:
            writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {QUEUES_CSV} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
