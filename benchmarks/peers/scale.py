"""--scale: genie alone on a 64-host star at 100 Mbit/s (all-reduce 1K-16M), with the resident set size of
every rank process sampled from /proc/<pid>/status (VmRSS) while it runs."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Sequence

from genie.core.collective import Collective
from genie.engine.mpi.processes import descendants
from genie.testbed import service
from genie.topology import load_topology_file

from benchmarks.peers import report
from benchmarks.peers.plan import Iterations
from benchmarks.peers.systems import Log, run_genie

RANK_MODULE = b"genie.engine.rank"
# genie bench's per-op timeout here: its orchestrator stops a run after max(120 s, 2 x this) without a control
# message, and 64 ranks on 2 busy cores can spend more than 120 s in one case's timed loop at 16 MiB
OP_TIMEOUT_S = 150.0


def vm_rss_kib(status_text: str) -> int | None:
    """VmRSS of a /proc/<pid>/status text, in KiB (None for a kernel thread or a zombie)."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


class RssSampler:
    """Samples, every `interval_s`, the VmRSS of every rank process (cmdline has `genie.engine.rank`) under
    the watched PIDs; keeps the maximum per PID."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.roots: list[int] = []
        self.max_kib: dict[int, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def watch(self, pid: int) -> None:
        self.roots.append(pid)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            for root in list(self.roots):
                for pid, _ in descendants(root):
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as f:
                            if RANK_MODULE not in f.read():
                                continue
                        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
                            kib = vm_rss_kib(f.read())
                    except OSError:
                        continue
                    if kib is not None:
                        self.max_kib[pid] = max(kib, self.max_kib.get(pid, 0))
                        self.samples += 1


def run_scale(topology_path: Path, sizes: Sequence[int], policy: Sequence[tuple[int, Iterations]], workdir: Path,
              timeout_s: float, log: Log) -> report.ScaleResult:
    topology = load_topology_file(topology_path)
    rate = topology.links[0].shape.rate_bps or 0
    ranks = len(topology.rank_hosts())
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"# scale: bringing up {topology_path} ({ranks} hosts)")
    with service.temporary_testbed(topology, name=f"peers{os.getpid()}s", source=str(topology_path)) as info, \
            RssSampler() as sampler:
        run = run_genie(info, (Collective.ALL_REDUCE,), sizes, policy, workdir, True, timeout_s, log,
                        on_started=sampler.watch, op_timeout_s=OP_TIMEOUT_S)
    expected = {(Collective.ALL_REDUCE, s) for s in sizes}
    done = {(r.collective, r.size_bytes) for r in run.rows}
    completed = run.error is None and expected <= done
    return report.ScaleResult(ranks=ranks, rate_bps=rate, rows=tuple(run.rows), completed=completed,
                              max_rss_kib=max(sampler.max_kib.values(), default=0), rss_samples=sampler.samples,
                              error=run.error)
