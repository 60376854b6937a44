"""Running each system on a live testbed, ranks in the hosts' namespaces (root): genie (`genie bench`), gloo
(torch.distributed, one process per host through ``ip netns exec``), MPI (mpi4py under MPICH's mpiexec with
genie's trampoline and launch environment) and the per-flow TCP limit (one bulk flow per host, i -> i+1).

Every process is started from an argv list, registered with the testbed (so `genie testbed down` ends it
too) and stopped by PID in a `finally`: SIGTERM, a grace period, SIGKILL (mpiexec: its whole tree, read
from /proc). Children die with the harness (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from genie.core.collective import Collective
from genie.core.process import die_with_parent
from genie.core.testbed import TestbedInfo
from genie.services.target import placements_for
from genie.engine.launch import log_tail, stop_processes
from genie.engine.mpi.discover import find_mpiexec
from genie.engine.mpi.plan import launch_env, launch_map, mpiexec_argv, trampoline_argv
from genie.engine.mpi.processes import descendants, stop_tree
from genie.report.sweep import read_sweep_csv
from genie.testbed import service

from benchmarks.peers import report
from benchmarks.peers.explain import steps_from_csv
from benchmarks.peers.plan import Case, Iterations, bands
from benchmarks.peers.results import rows_from_results

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
GLOO_PORT = 29500
FLOW_PORT = 5201
_PR_SET_PDEATHSIG = 1

Log = Callable[[str], None]


class RunError(Exception):
    """A system failed: one line naming it (what it measured so far is kept)."""


@dataclass
class SystemRun:
    """What one system measured on one shape; a runner given one fills it as it goes, so an interrupted run
    keeps its rows."""
    system: str
    shaped: bool
    rows: list[report.Row] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    steps: dict = field(default_factory=dict)  # genie with step records: (collective, size) -> GenieSteps


def host_interface(info: TestbedInfo, host: str) -> str:
    """The interface of `host`'s first link (its ranks' address lives there: eth0)."""
    ends = sorted((e for e in info.link_ends if e.node == host), key=lambda e: e.link_index)
    if not ends:
        raise RunError(f"testbed {info.name}: host {host} has no link")
    return ends[0].ifname


def _term_with_parent() -> None:  # mpiexec, between fork and exec: SIGTERM lets hydra stop its ranks
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _spawn(argv: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None,
           preexec: Callable[[], None] = die_with_parent, stdout_path: Path | None = None) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        out = open(stdout_path, "wb") if stdout_path is not None else log
        try:
            return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT if stdout_path is None else log,
                                    env=env, cwd=REPO, preexec_fn=preexec, close_fds=True)
        finally:
            if stdout_path is not None:
                out.close()


def _wait_all(procs: Sequence[subprocess.Popen], logs: Sequence[Path], what: str, timeout_s: float,
              tick: Callable[[], None] | None = None) -> None:
    """Until every process has exited 0; RunError naming the first that failed, or on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        for i, code in enumerate(codes):
            if code not in (None, 0):
                raise RunError(f"{what} rank {i} exited with code {code}: {log_tail(logs[i], 3)}")
        if tick is not None:
            tick()
        if all(c == 0 for c in codes):
            return
        if time.monotonic() > deadline:
            running = [i for i, c in enumerate(codes) if c is None]
            raise RunError(f"{what} timed out after {timeout_s:.0f} s (ranks {running} still running)")
        time.sleep(0.1)


def _progress(results: Path, label: str, log: Log) -> Callable[[], None]:
    """A tick that logs every case the results file gained."""
    seen = [0]

    def tick() -> None:
        try:
            lines = results.read_text().splitlines()
        except OSError:
            return
        for line in lines[seen[0]:]:
            try:
                doc = json.loads(line)
            except ValueError:
                return  # half-written: next tick
            log(f"  {label} {doc['collective']} {report.format_size(doc['size_bytes'])}")
            seen[0] += 1
    return tick


def _job_file(path: Path, cases: Sequence[Case]) -> Path:
    path.write_text(json.dumps({"cases": [c.to_json() for c in cases]}))
    return path


def genie_command() -> list[str]:
    beside = Path(PYTHON).with_name("genie")
    return [str(beside)] if beside.exists() else [PYTHON, "-m", "genie.cli.main"]


def genie_bench_argv(testbed: str, collectives: Sequence[Collective], band, out: Path, *,
                     sample_ms: int = 0, op_timeout_s: float | None = None, algorithm: str = "auto",
                     steps: bool = False) -> list[str]:
    """`op_timeout_s`: genie's per-op --timeout; genie bench also gives up after max(120 s, 2 x that) without
    a control message, and a case's timed loop sends none, so slow big cases need a larger one."""
    # as before genie bench validated and measured the in-place pass by default: neither (-c 0, --no-in-place)
    argv = [*genie_command(), "bench", "--testbed", testbed, "--collective", ",".join(c.value for c in collectives),
            "-b", str(band.min_bytes), "-e", str(band.max_bytes), "-f", str(band.factor),
            "-w", str(band.warmup), "-n", str(band.iterations), "-c", "0", "--no-in-place", "--out", str(out),
            "--sample-ms", str(sample_ms), *(("--algorithm", algorithm) if algorithm != "auto" else ()),
            *(("--steps",) if steps else ())]
    return argv if op_timeout_s is None else [*argv, "--timeout", f"{op_timeout_s:g}"]


def _sweep_rows(run_dir: Path, shaped: bool) -> list[report.Row]:
    path = run_dir / "sweep.csv"
    if not path.exists():
        return []
    return [report.Row(system=report.GENIE, shaped=shaped, collective=Collective.parse(r.collective),
                       # the time algbw was computed from: the mean (older sweep.csv files: the median)
                       size_bytes=r.size_bytes, time_us=r.time_median_us if r.time_us is None else r.time_us,
                       algbw=r.algbw_GBps,
                       busbw=r.busbw_GBps, iterations=r.iterations)
            for r in read_sweep_csv(path.read_bytes(), source=str(path))]


@dataclass(frozen=True)
class GeniePass:
    """One `genie bench` of a band: `timed` passes give the report's rows; a `record_steps` pass gives only the
    step records the explanation reads. Never both: `--steps` takes the ranks out of the compiled back-to-back
    loop into a Python loop per iteration that stamps every step, which is the op plus the recording (at 1 KiB
    on star-8 it read 1.2-1.6x the op; benchmarks/README.md), and MPI and gloo time their op alone."""
    out: Path
    log: Path
    timed: bool
    record_steps: bool


def genie_passes(workdir: Path, band_index: int, algorithm: str, steps: bool) -> list[GeniePass]:
    """The timed pass of a band, then (with `steps`) its untimed step-record pass."""
    tag = "" if algorithm == "auto" else f"-{algorithm}"
    name = f"genie{tag}-{band_index}"
    passes = [GeniePass(workdir / name, workdir / "logs" / f"{name}.log", timed=True, record_steps=False)]
    if steps:
        passes.append(GeniePass(workdir / f"genie{tag}-steps-{band_index}",
                                workdir / "logs" / f"genie{tag}-steps-{band_index}.log", timed=False,
                                record_steps=True))
    return passes


def run_genie(info: TestbedInfo, collectives: Sequence[Collective], sizes: Sequence[int],
              policy: Sequence[tuple[int, Iterations]], workdir: Path, shaped: bool, timeout_s: float,
              log: Log, on_started: Callable[[int], None] | None = None, run: SystemRun | None = None,
              op_timeout_s: float | None = None, algorithm: str = "auto", steps: bool = False) -> SystemRun:
    """`genie bench --testbed` once per band of sizes sharing warmup/iterations (``--algorithm algorithm``);
    rows from each sweep.csv; with ``steps`` a second `genie bench --steps` of the band gives each case's step
    records (`run.steps`) and nothing else (`GeniePass`)."""
    run = run or SystemRun(report.GENIE, shaped)
    start = time.monotonic()
    try:
        for k, band in enumerate(bands(sizes, policy)):
            for p in genie_passes(workdir, k, algorithm, steps):
                proc = _spawn(genie_bench_argv(info.name, collectives, band, p.out, op_timeout_s=op_timeout_s,
                                               algorithm=algorithm, steps=p.record_steps), p.log,
                              preexec=_term_with_parent)
                service.register_pids(info.name, [proc.pid])
                if on_started is not None:
                    on_started(proc.pid)
                try:
                    _wait_all([proc], [p.log], f"genie bench ({report.format_size(band.min_bytes)}-"
                              f"{report.format_size(band.max_bytes)}{'' if p.timed else ', --steps'})", timeout_s)
                finally:
                    stop_processes([proc], grace_s=5.0)
                    if p.timed:
                        run.rows += _sweep_rows(p.out, shaped)
                    if p.record_steps and (p.out / "steps.csv").exists():
                        run.steps.update(steps_from_csv((p.out / "steps.csv").read_text()))
            log(f"  genie {report.format_size(band.min_bytes)}-{report.format_size(band.max_bytes)}: "
                f"{len(collectives)} collectives done")
    except RunError as exc:
        run.error = str(exc)
    run.seconds = time.monotonic() - start
    return run


def run_gloo(info: TestbedInfo, cases: Sequence[Case], workdir: Path, shaped: bool, timeout_s: float,
             log: Log, threads: int = 1, run: SystemRun | None = None) -> SystemRun:
    """One gloo process per host, started in its namespace, rendezvous at rank 0's testbed address."""
    run = run or SystemRun(report.GLOO, shaped)
    start = time.monotonic()
    placements = placements_for(info, None)
    job = _job_file(workdir / "gloo-job.json", cases)
    results = workdir / "gloo-results.jsonl"
    init = f"tcp://{placements[0].address}:{GLOO_PORT}"
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    try:
        for p in placements:
            env = {**os.environ, "GLOO_SOCKET_IFNAME": host_interface(info, p.host)}
            argv = ["ip", "netns", "exec", p.netns, PYTHON, "-m", "benchmarks.peers.gloo_rank",
                    "--rank", str(p.rank), "--world", str(len(placements)), "--init", init, "--job", str(job),
                    "--out", str(results), "--threads", str(threads)]
            logs.append(workdir / "logs" / f"gloo-{p.rank}.log")
            procs.append(_spawn(argv, logs[-1], env=env))
        service.register_pids(info.name, [p.pid for p in procs])
        _wait_all(procs, logs, "gloo", timeout_s, _progress(results, "gloo", log))
    except RunError as exc:
        run.error = str(exc)
    finally:
        stop_processes(procs)
        if results.exists():
            run.rows = rows_from_results(results.read_text(), report.GLOO, shaped, len(placements))
    run.seconds = time.monotonic() - start
    return run


def run_mpi(info: TestbedInfo, cases: Sequence[Case], workdir: Path, shaped: bool, timeout_s: float,
            log: Log, run: SystemRun | None = None) -> SystemRun:
    """mpiexec (hydra, root namespace) -> genie's trampoline -> ``ip netns exec <ns> python -m
    benchmarks.peers.mpi_rank``, with genie's MPI launch environment (TCP over the testbed, no shared memory)."""
    run = run or SystemRun(report.MPI, shaped)
    start = time.monotonic()
    placements = placements_for(info, None)
    launch = launch_map(placements)
    map_path = workdir / "mpi-map.json"
    map_path.write_text(launch.dumps())
    job = _job_file(workdir / "mpi-job.json", cases)
    results = workdir / "mpi-results.jsonl"
    rank_cmd = [PYTHON, "-m", "benchmarks.peers.mpi_rank", "--map", str(map_path), "--job", str(job),
                "--out", str(results)]
    proc: subprocess.Popen | None = None
    log_path = workdir / "logs" / "mpi.log"
    try:
        argv = mpiexec_argv(find_mpiexec(), launch.world, trampoline_argv(PYTHON, map_path, rank_cmd))
        proc = _spawn(argv, log_path, env=launch_env(os.environ), preexec=_term_with_parent)
        service.register_pids(info.name, [proc.pid])
        _wait_all([proc], [log_path], "mpiexec", timeout_s, _progress(results, "mpi", log))
    except RunError as exc:
        run.error = str(exc)
    except Exception as exc:  # find_mpiexec's InputError and the like: one line
        run.error = f"mpi: {exc}"
    finally:
        if proc is not None:
            stop_tree(proc, descendants(proc.pid))
        if results.exists():
            run.rows = rows_from_results(results.read_text(), report.MPI, shaped, len(placements))
    run.seconds = time.monotonic() - start
    return run


def run_flows(info: TestbedInfo, workdir: Path, shaped: bool, log: Log, *, warmup_s: float = 1.0,
              duration_s: float = 3.0, setup_timeout_s: float = 60.0) -> tuple[report.FlowLimit | None, str | None]:
    """One bulk TCP flow per host to the next host (ring), all at once; what each reaches, per flow."""
    placements = placements_for(info, None)
    n = len(placements)
    label = "shaped" if shaped else "unshaped"
    sync = workdir / f"flows-{label}"
    sync.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    outs: list[Path] = []
    try:
        for p in placements:
            peer = placements[(p.rank + 1) % n]
            argv = ["ip", "netns", "exec", p.netns, PYTHON, "-m", "benchmarks.peers.flow_rank",
                    "--listen", f"{p.address}:{FLOW_PORT}", "--connect", f"{peer.address}:{FLOW_PORT}",
                    "--sync-dir", str(sync), "--rank", str(p.rank), "--warmup-s", str(warmup_s),
                    "--duration-s", str(duration_s), "--setup-timeout-s", str(setup_timeout_s)]
            logs.append(workdir / "logs" / f"flow-{label}-{p.rank}.log")
            outs.append(workdir / "logs" / f"flow-{label}-{p.rank}.json")
            procs.append(_spawn(argv, logs[-1], stdout_path=outs[-1]))
        service.register_pids(info.name, [p.pid for p in procs])
        deadline = time.monotonic() + setup_timeout_s
        while not all((sync / f"ready-{r}").exists() for r in range(n)):
            for i, proc in enumerate(procs):
                if proc.poll() is not None:
                    raise RunError(f"flows rank {i} exited with code {proc.returncode}: {log_tail(logs[i], 3)}")
            if time.monotonic() > deadline:
                raise RunError(f"flows: not every flow connected within {setup_timeout_s:.0f} s")
            time.sleep(0.02)
        tmp = sync / ".start"
        tmp.write_text(str(time.monotonic_ns() + 200_000_000))
        os.replace(tmp, sync / "start")
        _wait_all(procs, logs, "flows", timeout_s=warmup_s + duration_s + 30)
    except RunError as exc:
        return None, str(exc)
    finally:
        stop_processes(procs)
    per_flow = []
    retrans: int | None = 0
    for path in outs:
        doc = json.loads(path.read_text().strip().splitlines()[-1])
        if "GBps" not in doc:
            return None, f"flows: {path.name}: {doc.get('error', doc)}"
        per_flow.append(float(doc["GBps"]))
        retrans = None if retrans is None or doc.get("retrans_segs") is None else retrans + doc["retrans_segs"]
    limit = report.FlowLimit(shaped=shaped, per_flow_GBps=tuple(per_flow), retrans_segs=retrans)
    log(report.format_flow_limit(limit))
    return limit, None
