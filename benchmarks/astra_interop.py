"""ASTRA-sim interop corner cases (issue #35 item 8): genie's built-in engine against the real binaries.

Small input sets, each built here from a recipe (:data:`CASES`: collectives on 1-D networks, in process groups
smaller than the world or not, with direct / halvingDoubling / doubleBinaryTree, 0-byte messages, an uneven
all-to-all, more than one queue per dimension), plus two sets exported from generated traces (:data:`EXPORTS`).
With ``--write`` the binaries' stdout and exit status are recorded per case and backend in
``tests/data/astra-interop/<case>/`` (``stdout_<backend>.txt``, ``case.json``), which
``tests/test_astra_interop.py`` checks genie against (CI has no binary).

    python -m benchmarks.astra_interop --astra-unaware BIN --astra-aware BIN [--write] [--work DIR]

The binaries: astra-sim 518bd51 + astra-network-analytical 599a047, built from source in Release mode
(``assert`` compiled out), as its own build script does. What they do here, besides the results: with a
comm-group file both abort at exit (SIGABRT) after printing; doubleBinaryTree in a group smaller than the world
segfaults before printing anything; an all-to-all whose members give different sizes never finishes ("has
unreleased nodes", exit 0).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "astra-interop"
BACKENDS = ("congestion_unaware", "congestion_aware")
PREFIX = "workload/w"


@dataclass(frozen=True)
class Case:
    """``npus`` NPUs on one ``topology`` dimension; every collective in groups of ``group_size`` consecutive
    ranks (the world when equal to ``npus``); ``uneven``: (rank, size) giving one rank another size."""

    name: str
    npus: int
    topology: str
    impl: str
    collectives: tuple[tuple[str, int], ...]
    group_size: int = 0
    splits: int = 1
    queues: int = 1
    active_chunks: int = 1
    uneven: tuple[int, int] | None = None


CASES = (
    Case("a2a_3MiB_g4_direct_sw8", 8, "Switch", "direct", (("all_to_all", 3 << 20),), group_size=4),
    Case("ar_1MiB_g4_hd_ring8", 8, "Ring", "halvingDoubling", (("all_reduce", 1 << 20),), group_size=4, splits=4),
    Case("mixed_1MiB_g4_direct_fc8", 8, "FullyConnected", "direct",
         (("all_gather", 1 << 20), ("reduce_scatter", 1 << 20), ("all_reduce", 1 << 20)), group_size=4, splits=2),
    Case("ar_rs_1MiB_g2_hd_sw8", 8, "Switch", "halvingDoubling",
         (("all_reduce", 1 << 20), ("reduce_scatter", 1 << 20)), group_size=2),
    Case("ar_1MiB_g4_dbt_sw8", 8, "Switch", "doubleBinaryTree", (("all_reduce", 1 << 20),), group_size=4),
    Case("ar_256B_16splits_ring64", 64, "Ring", "ring", (("all_reduce", 256),), splits=16),
    Case("a2a_512B_16splits_sw64", 64, "Switch", "direct", (("all_to_all", 512),), splits=16),
    Case("a2a_uneven_sw8", 8, "Switch", "direct", (("all_to_all", 1 << 20),), uneven=(7, 19922944)),
    Case("ar_1MiB_g4_hd_ring8_q2", 8, "Ring", "halvingDoubling", (("all_reduce", 1 << 20),), group_size=4,
         splits=4, queues=2, active_chunks=4),
    Case("mixed_1MiB_ring8_q2", 8, "Ring", "ring",
         (("all_reduce", 1 << 20), ("all_to_all", 1 << 20), ("all_gather", 1 << 20)), splits=4, queues=2),
    Case("mixed_1MiB_ring8_q4_a4", 8, "Ring", "ring",
         (("all_reduce", 1 << 20), ("all_to_all", 1 << 20), ("all_gather", 1 << 20)), splits=4, queues=4,
         active_chunks=4),
    Case("mixed_1MiB_g4_direct_sw8_q2", 8, "Switch", "direct",
         (("all_gather", 1 << 20), ("all_to_all", 1 << 20), ("all_reduce", 1 << 20)), group_size=4, splits=4,
         queues=2, active_chunks=2),
)


def _impls(case: Case, comm: str) -> list[str]:
    if comm == "all_to_all" and case.impl in ("halvingDoubling", "doubleBinaryTree"):
        return ["direct"]
    if comm != "all_reduce" and case.impl == "doubleBinaryTree":
        return ["ring"]
    return [case.impl]


def build_case(case: Case, folder: Path) -> None:
    """The input set of ``case`` in ``folder`` (ETs, comm groups, configs, cmd.sh, case.json)."""
    from genie.core.trace import CommType, collective_node
    from genie.workloads.chakra_et import write_et

    (folder / "workload").mkdir(parents=True, exist_ok=True)
    size = case.group_size or case.npus
    groups = {str(g + 1): list(range(g * size, (g + 1) * size)) for g in range(case.npus // size)} \
        if size < case.npus else {}
    for rank in range(case.npus):
        nodes = []
        for i, (comm, size_bytes) in enumerate(case.collectives):
            if case.uneven and case.uneven[0] == rank:
                size_bytes = case.uneven[1]
            nodes.append(collective_node(i, f"{comm}_{i}", comm_type=CommType[comm.upper()], size_bytes=size_bytes,
                                         process_group=str(rank // size + 1) if groups else None,
                                         data_deps=(i - 1,) if i else ()))
        (folder / f"{PREFIX}.{rank}.et").write_bytes(write_et(nodes))
    if groups:
        (folder / f"{PREFIX}.comm_group.json").write_text(json.dumps(groups) + "\n")
    system = {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": case.active_chunks,
              "preferred-dataset-splits": case.splits,
              **{f"{c}-implementation": _impls(case, c.replace("-", "_"))
                 for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")},
              "collective-optimization": "localBWAware", "local-mem-bw": 1600, "boost-mode": 0,
              "roofline-enabled": 0, "peak-perf": 900}
    (folder / "system.json").write_text(json.dumps(system, indent=4) + "\n")
    (folder / "network.yml").write_text(f"topology: [ {case.topology} ]\nnpus_count: [ {case.npus} ]\n"
                                        "bandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    (folder / "remote_memory.json").write_text('{\n    "memory-type": "NO_MEMORY_EXPANSION"\n}\n')
    argv = " ".join(argv_of(folder, "${ASTRA_SIM}", case.queues))
    (folder / "cmd.sh").write_text("#!/bin/sh\n# run inside this directory; ASTRA_SIM = AstraSim_Analytical_"
                                   "Congestion_Unaware or _Aware\n" + argv + "\n")


def argv_of(folder: Path, binary: str, queues: int) -> list[str]:
    argv = [binary, f"--workload-configuration={PREFIX}", "--system-configuration=system.json",
            "--network-configuration=network.yml", "--remote-memory-configuration=remote_memory.json",
            f"--num-queues-per-dim={queues}"]
    if (folder / f"{PREFIX}.comm_group.json").is_file():
        argv.append(f"--comm-group-configuration={PREFIX}.comm_group.json")
    return argv


def run_genie(folder: Path, backend: str, queues: int):
    from astra_adapter.config import NetworkBackend
    from astra_adapter.estimate import estimate_files

    group = folder / f"{PREFIX}.comm_group.json"
    return estimate_files(folder / PREFIX, folder / "system.json", folder / "network.yml",
                          folder / "remote_memory.json", group if group.is_file() else None, queues_per_dim=queues,
                          backend=NetworkBackend(backend))


def main(argv: list[str] | None = None) -> int:
    from astra_adapter.output import parse_astra_output
    from genie.core.errors import GenieError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--astra-unaware", type=Path, required=True)
    parser.add_argument("--astra-aware", type=Path, required=True)
    parser.add_argument("--write", action="store_true", help=f"record the binaries' output in {DATA}")
    parser.add_argument("--work", type=Path, default=Path("/tmp/genie-astra-interop"))
    args = parser.parse_args(argv)
    binaries = {"congestion_unaware": args.astra_unaware, "congestion_aware": args.astra_aware}
    for case in CASES:
        folder = args.work / case.name
        shutil.rmtree(folder, ignore_errors=True)
        build_case(case, folder)
        record = {"command": " ".join(argv_of(folder, "$ASTRA_SIM", case.queues)), "returncode": {}}
        for backend in BACKENDS:
            done = subprocess.run(argv_of(folder, str(binaries[backend]), case.queues), cwd=folder,
                                  capture_output=True, text=True, timeout=600)
            (folder / f"stdout_{backend}.txt").write_text(done.stdout)
            record["returncode"][backend] = done.returncode
            try:
                binary = {r.rank: r.finish_cycles for r in parse_astra_output(done.stdout).ranks}
            except Exception:
                binary = {}
            try:
                ours = {r.rank: r.finish_cycles for r in run_genie(folder, backend, case.queues).result.ranks}
            except GenieError as exc:
                ours = str(exc)
            verdict = "equal" if binary and ours == binary else "DIFFERENT"
            shown = max(binary.values()) if binary else "no result"
            print(f"{case.name:32} {backend:19} rc={done.returncode:4} binary {shown} genie "
                  f"{max(ours.values()) if isinstance(ours, dict) else ours[:90]} {verdict}")
        (folder / "case.json").write_text(json.dumps(record, indent=1) + "\n")
        if args.write:
            target = DATA / case.name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(folder, target, ignore=shutil.ignore_patterns("log"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
