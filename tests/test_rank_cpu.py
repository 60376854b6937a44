"""The ranks' CPU per case (genie.measure.sched, services.cases.RankCpuReader): how long each rank process ran and
how long it waited, runnable, for a CPU — what tells a CPU-starved measurement from a slow network."""

import csv
import io
import json
import os
from dataclasses import replace

import pytest

from cli_support import run_genie
from genie.core.collective import Algorithm, Collective
from genie.core.placement import RankPlacement
from genie.core.protocol import Barrier, CasePhase
from genie.core.schedule import CollectiveOp
from genie.engine.inprocess import ThreadSession
from genie.measure.sched import (STARVED_WAIT_FRACTION, CaseCpu, RankCpu, SchedCounters, case_cpu, parse_schedstat,
                                 rank_cpu_csv, rank_cpu_summary, starved_note)
from genie.services.bench import BenchRequest, run_bench
from genie.services.cases import GroupCase, RankCpuReader, read_schedstat, run_cases
from genie.services.target import loopback_placements


def test_parse_schedstat_reads_the_three_numbers():
    assert parse_schedstat("123456 7890 42\n") == SchedCounters(123456, 7890, 42)
    with pytest.raises(ValueError):
        parse_schedstat("1 2")
    with pytest.raises(ValueError):
        parse_schedstat("a b c")


def test_own_schedstat_is_readable_and_counts_cpu():
    own = read_schedstat(os.getpid())
    if own is None:
        pytest.skip("kernel without schedstats")
    assert own.cpu_ns > 0 and own.wait_ns >= 0 and own.slices > 0
    assert read_schedstat(2**22 + 12345) is None  # no such process: None, not an error


def test_case_cpu_takes_differences_of_ranks_read_both_times():
    before = {0: SchedCounters(100, 10, 1), 1: SchedCounters(200, 20, 2), 2: SchedCounters(5, 5, 5)}
    after = {0: SchedCounters(400, 70, 3), 1: SchedCounters(260, 20, 4)}  # rank 2 gone
    c = case_cpu(3, 4096, 1000, before, after)
    assert c == CaseCpu(3, 4096, 1000, (RankCpu(0, 300, 60), RankCpu(1, 60, 0)))
    assert c.wait_fractions() == [0.0, 0.06]
    assert c.median_wait_fraction == 0.06


def test_csv_summary_and_note():
    calm = CaseCpu(0, 1024, 1_000_000, (RankCpu(0, 500, 100), RankCpu(1, 500, 200), RankCpu(2, 500, 300)))
    starved = CaseCpu(1, 2048, 1_000_000, (RankCpu(0, 500, 400_000), RankCpu(1, 500, 500_000),
                                          RankCpu(2, 500, 10)))
    rows = list(csv.DictReader(io.StringIO(rank_cpu_csv([calm, starved]))))
    assert len(rows) == 6 and rows[0].keys() == {"case", "size_bytes", "rank", "wall_ms", "cpu_ms", "wait_ms",
                                                 "wait_pct"}
    assert rows[4] == {"case": "1", "size_bytes": "2048", "rank": "1", "wall_ms": "1.000", "cpu_ms": "0.001",
                       "wait_ms": "0.500", "wait_pct": "50.00"}
    assert rank_cpu_summary([calm, starved]) == {"rank_cpu_wait_pct": {"cases": 2, "median": 40.0, "max": 40.0}}
    assert rank_cpu_summary([]) == {}
    assert starved_note([calm]) is None
    note = starved_note([calm, starved])
    assert note is not None and "40%" in note and "2048 B" in note
    just = CaseCpu(0, 1, 1000, (RankCpu(0, 1, int(1000 * STARVED_WAIT_FRACTION)),))
    assert starved_note([just]) is not None


def _placements(n):
    return [RankPlacement(r, f"h{r}", None, "127.0.0.1") for r in range(n)]


def _timed(case):
    return Barrier(case=case, phase=CasePhase.TIMED)


def _end(case):
    return Barrier(case=case, phase=CasePhase.END)


def test_reader_uses_one_pid_per_placement_only():
    readings = {11: [SchedCounters(0, 0, 0), SchedCounters(50, 5, 1), SchedCounters(60, 5, 1),
                     SchedCounters(100, 25, 2)],
                12: [SchedCounters(0, 0, 0), SchedCounters(30, 0, 1), SchedCounters(30, 0, 1),
                     SchedCounters(60, 10, 2)]}
    ticks = iter([0, 100, 150, 350])
    reader = RankCpuReader(_placements(2), read=lambda pid: readings[pid].pop(0), clock=lambda: next(ticks))
    reader.started([99])  # an MPI session's mpiexec: not the ranks
    reader.barrier(_timed(0))
    reader.barrier(_end(0))
    reader.case_done(0, 8)
    assert reader.cases == []
    reader.started([11, 12])
    reader.started([12, 11])  # a second report changes nothing
    for case, size in ((0, 8), (1, 16)):
        reader.barrier(Barrier(case=case, phase=CasePhase.WARMUP))  # no reading: the warmup is not the times
        reader.barrier(_timed(case))
        reader.barrier(Barrier())  # untagged (a replay's, a fault point's): no reading
        reader.barrier(_end(case))
        reader.case_done(case, size)
    assert reader.cases == [CaseCpu(0, 8, 100, (RankCpu(0, 50, 5), RankCpu(1, 30, 0))),
                            CaseCpu(1, 16, 200, (RankCpu(0, 40, 20), RankCpu(1, 30, 10)))]


def test_reader_skips_a_rank_it_cannot_read_and_a_case_without_its_window():
    reader = RankCpuReader(_placements(2), read=lambda pid: SchedCounters(pid, 0, 0) if pid == 11 else None,
                           clock=iter([0, 10]).__next__)
    reader.started([11, 12])
    reader.barrier(_timed(0))
    reader.barrier(_end(0))
    reader.case_done(0, 8)
    assert [r.rank for r in reader.cases[0].ranks] == [0]
    reader.barrier(_end(1))  # a case ended by a fault before its timed barrier, or an MPI session: no figure
    reader.case_done(1, 16)
    assert len(reader.cases) == 1


def test_a_check_barrier_closes_the_timed_window_before_the_check_iteration_runs():
    """With -c the check iteration (real data) runs after the timed loop, between a CHECK and the END barrier:
    its CPU is not the timed iterations'."""
    ticks = iter([0, 100, 900])
    readings = {11: [SchedCounters(0, 0, 0), SchedCounters(50, 5, 1), SchedCounters(800, 300, 9)]}
    reader = RankCpuReader(_placements(1), read=lambda pid: readings[pid].pop(0), clock=lambda: next(ticks))
    reader.started([11])
    reader.barrier(_timed(0))
    reader.barrier(Barrier(case=0, phase=CasePhase.CHECK))
    reader.barrier(_end(0))  # no second reading: the window closed at the check
    reader.case_done(0, 8)
    assert reader.cases == [CaseCpu(0, 8, 100, (RankCpu(0, 50, 5),))]
    assert readings[11] == [SchedCounters(800, 300, 9)]


class _Kernel:
    """A fake /proc/PID/schedstat and monotonic clock: time and every process's counters move only when told."""

    def __init__(self) -> None:
        self.now_ns, self.cpu_ns, self.wait_ns = 0, 0, 0

    def passes(self, wall_ms: int, cpu_ms: int, wait_ms: int) -> None:
        self.now_ns += wall_ms * 1_000_000
        self.cpu_ns += cpu_ms * 1_000_000
        self.wait_ns += wait_ms * 1_000_000

    def read(self, pid: int) -> SchedCounters:
        return SchedCounters(self.cpu_ns + pid, self.wait_ns, 0)

    def clock(self) -> int:
        return self.now_ns


def test_each_case_is_measured_over_its_own_timed_iterations_not_the_start_up_or_warmup():
    # rank threads run a real bench job through the real orchestrator; a fake kernel says what the ranks' CPU did:
    # a start-up (launch, imports, connections) and every warmup that mostly waited for a CPU, timed iterations
    # that waited 10 % of the time. Measured from the ranks' start (the old baseline) the first case waited 58 %.
    kernel = _Kernel()
    placements = loopback_placements(2)

    def sessions(placements, options):
        def on_barrier(barrier):
            if barrier.phase is CasePhase.TIMED:
                kernel.passes(wall_ms=50, cpu_ms=20, wait_ms=30)  # the warmup that just ended
            elif barrier.phase is CasePhase.END:
                kernel.passes(wall_ms=20, cpu_ms=15, wait_ms=2)  # the timed iterations that just ended
            options.on_barrier(barrier)

        class StartingSession:
            def run(self, job, on_case=None):
                options.on_pids([101, 102])
                kernel.passes(wall_ms=500, cpu_ms=100, wait_ms=300)  # the ranks' start-up
                return ThreadSession(placements, replace(options, on_barrier=on_barrier)).run(job, on_case)

        return StartingSession()

    op = CollectiveOp(Collective.ALL_REDUCE, 1024, (0, 1), Algorithm.RING, dtype_bytes=4)
    cases = [GroupCase((op,), warmup=2, iterations=3), GroupCase((replace(op, size_bytes=4096),), 2, 3)]
    outcome = run_cases(cases, placements, sessions=sessions,
                        cpu=RankCpuReader(placements, read=kernel.read, clock=kernel.clock))
    assert [(c.case, c.size_bytes) for c in outcome.cpu] == [(0, 1024), (1, 4096)]
    for c in outcome.cpu:
        assert c.wall_ns == 20_000_000
        assert c.ranks == (RankCpu(0, 15_000_000, 2_000_000), RankCpu(1, 15_000_000, 2_000_000))
        assert c.median_wait_fraction == pytest.approx(0.10)
    assert starved_note(outcome.cpu) is not None and "10%" in starved_note(outcome.cpu)


def test_local_rank_processes_report_their_cpu_per_case():
    if read_schedstat(os.getpid()) is None:
        pytest.skip("kernel without schedstats")
    request = BenchRequest(collectives=(Collective.ALL_REDUCE,), min_bytes=1024, max_bytes=4096, factor=4,
                           iterations=2, warmup=1, verify=False, in_place=False)
    outcome = run_bench(request, loopback_placements(2))
    assert [(c.case, c.size_bytes) for c in outcome.cpu] == [(0, 1024), (1, 4096)]
    for c in outcome.cpu:
        assert c.wall_ns > 0 and [r.rank for r in c.ranks] == [0, 1]
        assert all(r.cpu_ns > 0 and r.wait_ns >= 0 for r in c.ranks)
    assert sum(r.cpu_ns for r in outcome.cpu[0].ranks) > 0


def test_cli_bench_writes_rank_cpu_csv_and_summary(tmp_path):
    if read_schedstat(os.getpid()) is None:
        pytest.skip("kernel without schedstats")
    out = tmp_path / "run"
    proc = run_genie("bench", "--loopback", "--ranks", "2", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2", "-w", "0",
                     "--no-in-place", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader((out / "rank_cpu.csv").open()))
    assert [(r["case"], r["size_bytes"], r["rank"]) for r in rows] == [
        ("0", "1024", "0"), ("0", "1024", "1"), ("1", "4096", "0"), ("1", "4096", "1")]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["summary"]["rank_cpu_wait_pct"]["cases"] == 2
    assert "rank_cpu.csv" in {f["name"] for f in manifest["files"]}


def test_cli_bench_over_mpi_writes_no_rank_cpu_and_succeeds(tmp_path):
    """Ranks started by MPI are not read (their barriers are MPI's): the run has no CPU rows and still completes
    (it failed with UnboundLocalError when no case had a reading - found by the Slurm root test)."""
    from mpi_support import mpiexec_or_skip

    mpiexec_or_skip()
    out = tmp_path / "run"
    proc = run_genie("bench", "--loopback", "--ranks", "2", "--launcher", "mpi", "-b", "1K", "-e", "1K", "-n", "2",
                     "-w", "0", "--no-in-place", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert not (out / "rank_cpu.csv").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert "rank_cpu_wait_pct" not in manifest["summary"]
