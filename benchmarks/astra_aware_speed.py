"""Speed of genie's ASTRA-sim backends on the 1024-rank data-parallel ring workload (issue #13, item 6).

The workload (per rank, every rank alike): 96 forward compute nodes (100 us each), then 96 backward compute
nodes (200 us each) with an all-reduce of 25 MiB (a DDP bucket) after every 4th backward node: 216 nodes, 24
all-reduces, on a 1-D Ring (``--topology``) of N NPUs (50 GB/s, 500 ns), ring all-reduce, endpoint-delay 10 ns,
local-mem-bw 1600 GB/s, ``--splits`` chunks per collective (1).

    python -m benchmarks.astra_aware_speed                       # genie, both backends, 1024 ranks
    python -m benchmarks.astra_aware_speed --ranks 256 --repeat 3 [--no-symmetry]   # every rank simulated
    python -m benchmarks.astra_aware_speed --write-et DIR        # also the ASTRA-sim input set (DIR/cmd.sh)
    python -m benchmarks.astra_aware_speed --astra-aware BIN --astra-unaware BIN   # and the real binaries

genie runs in process (the trace built in memory, not read from ET files); each run is timed with
``time.perf_counter`` (wall) and ``time.process_time`` (CPU) and the medians of ``--repeat`` runs printed. With
ASTRA-sim binaries the input set is written to a temporary directory (or ``--write-et``) and each binary is run
once from it (wall clock of the process, and its CPU time from ``getrusage``); the finish cycles of every run
are printed so that identical results can be checked. On a shared machine the CPU-time ratio is the steadier
one (the wall clock of a long binary run sees the load change).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from astra_adapter.config import CollectiveImpl, ImplKind, NetworkBackend, NetworkConfig, NetworkDim, \
    SystemConfig, TopologyKind
from astra_adapter.estimate import estimate
from astra_adapter.export import network_yml, remote_memory_json, system_json
from astra_adapter.output import parse_astra_output
from genie.core.trace import CommType, Trace, collective_node, compute_node, make_trace
from genie.workloads.chakra_et import write_et_set

LAYERS, BUCKET_EVERY, BUCKET_BYTES = 96, 4, 25 << 20


def dp_ring_trace(ranks: int) -> Trace:
    nodes, prev = [], None
    for i in range(LAYERS):
        nodes.append(compute_node(len(nodes), f"fwd{i}", duration_ns=100_000,
                                  data_deps=() if prev is None else (prev,)))
        prev = len(nodes) - 1
    for i in range(LAYERS):
        nodes.append(compute_node(len(nodes), f"bwd{i}", duration_ns=200_000, data_deps=(prev,)))
        prev = len(nodes) - 1
        if i % BUCKET_EVERY == BUCKET_EVERY - 1:
            nodes.append(collective_node(len(nodes), f"allreduce.bucket{i // BUCKET_EVERY}",
                                         comm_type=CommType.ALL_REDUCE, size_bytes=BUCKET_BYTES, data_deps=(prev,)))
    return make_trace([list(nodes) for _ in range(ranks)])


def configs(ranks: int, splits: int, topology: TopologyKind = TopologyKind.RING) -> tuple[SystemConfig, NetworkConfig]:
    ring = (CollectiveImpl(ImplKind.RING),)
    system = SystemConfig(endpoint_delay_ns=10, active_chunks_per_dimension=1, preferred_dataset_splits=splits,
                          all_reduce_impl=ring, all_gather_impl=ring, reduce_scatter_impl=ring, all_to_all_impl=ring,
                          local_mem_bw_gb_per_s=1600.0)
    return system, NetworkConfig((NetworkDim(topology, ranks, 50.0, 500.0),))


def time_genie(trace: Trace, system: SystemConfig, network: NetworkConfig, backend: NetworkBackend,
               repeat: int, symmetry: bool | None) -> tuple[float, float, int, int]:
    """(median wall s, median CPU s, finish cycles, simulated ranks)."""
    times, cpu, finish, simulated = [], [], 0, 0
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        est = estimate(trace, system, network, backend=backend, symmetry=symmetry)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        finish, simulated = est.result.max_finish_cycles, est.simulated_ranks
    return statistics.median(times), statistics.median(cpu), finish, simulated


def write_set(trace: Trace, system: SystemConfig, network: NetworkConfig, out: Path) -> None:
    (out / "workload").mkdir(parents=True, exist_ok=True)
    write_et_set(trace, out / "workload" / "workload")
    (out / "system.json").write_text(system_json(system))
    (out / "network.yml").write_text(network_yml(network))
    (out / "remote_memory.json").write_text(remote_memory_json())


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_binary(binary: Path, folder: Path) -> tuple[float, float, int]:
    """(wall s, CPU s, finish cycles) of one run of ``binary``."""
    argv = [str(binary), "--workload-configuration=workload/workload", "--system-configuration=system.json",
            "--network-configuration=network.yml", "--remote-memory-configuration=remote_memory.json"]
    t0, c0 = time.perf_counter(), _children_cpu_s()
    done = subprocess.run(argv, cwd=folder, capture_output=True, check=True)
    elapsed, cpu = time.perf_counter() - t0, _children_cpu_s() - c0
    return elapsed, cpu, parse_astra_output(done.stdout, source=str(binary)).max_finish_cycles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--splits", type=int, default=1, help="preferred-dataset-splits")
    parser.add_argument("--repeat", type=int, default=1, help="genie runs per backend (median printed)")
    parser.add_argument("--topology", default="Ring", choices=[k.value for k in TopologyKind],
                        help="the 1-D network (Ring)")
    parser.add_argument("--no-symmetry", action="store_true", help="simulate every rank")
    parser.add_argument("--write-et", type=Path, help="also write the ASTRA-sim input set here")
    parser.add_argument("--astra-aware", type=Path, help="AstraSim_Analytical_Congestion_Aware binary")
    parser.add_argument("--astra-unaware", type=Path, help="AstraSim_Analytical_Congestion_Unaware binary")
    args = parser.parse_args()
    trace = dp_ring_trace(args.ranks)
    system, network = configs(args.ranks, args.splits, TopologyKind(args.topology))
    print(f"# DP ring workload: {args.ranks} ranks x {len(trace.ranks[0].nodes)} nodes, "
          f"{LAYERS // BUCKET_EVERY} all-reduces of {BUCKET_BYTES >> 20} MiB, splits {args.splits}")
    genie_s = {}
    for backend in NetworkBackend:
        seconds, cpu, finish, simulated = time_genie(trace, system, network, backend, args.repeat,
                                                     False if args.no_symmetry else None)
        genie_s[backend] = (seconds, cpu, finish)
        print(f"genie {backend.value:20s} {seconds:8.2f} s  (CPU {cpu:7.2f} s)  finish {finish} cycles  "
              f"({simulated} rank(s) simulated)")
    binaries = {NetworkBackend.CONGESTION_AWARE: args.astra_aware,
                NetworkBackend.CONGESTION_UNAWARE: args.astra_unaware}
    if not any(binaries.values()) and args.write_et is None:
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.write_et or Path(tmp)
        write_set(trace, system, network, folder)
        for backend, binary in binaries.items():
            if binary is None:
                continue
            seconds, cpu, finish = time_binary(binary, folder)
            ours_s, ours_cpu, ours_finish = genie_s[backend]
            same = "identical cycles" if finish == ours_finish else f"DIFFERENT cycles (genie {ours_finish})"
            print(f"ASTRA-sim {backend.value:16s} {seconds:8.2f} s  (CPU {cpu:7.2f} s)  finish {finish} cycles  "
                  f"{same};  genie is {seconds / ours_s:.1f}x faster (CPU {cpu / ours_cpu:.1f}x)")


if __name__ == "__main__":
    main()
