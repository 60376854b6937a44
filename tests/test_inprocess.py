"""In-process sessions (genie.engine.inprocess): every rank a thread running the real rank code. A bench sweep
and a full-trace replay give what rank processes give; a failing rank is named; no thread outlives a run."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from genie.core.collective import Algorithm, Collective
from genie.core.errors import RunFailure
from genie.core.placement import RankPlacement
from genie.core.protocol import BenchCase, BenchJob
from genie.core.schedule import CollectiveOp
from genie.services.bench import BenchRequest, run_bench
from genie.services.target import loopback_placements
from genie.engine.inprocess import ThreadSession, thread_sessions
from genie.services.replay import ReplayRequest, run_replay
from genie.engine.session import SessionOptions
from genie.workloads.native import read_native

ROOT = Path(__file__).resolve().parents[1]


def _rank_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("genie-rank-")]


def _ops(outcome) -> list[tuple]:
    return [(s.collective, s.algorithm, s.ranks, s.size_bytes, s.iterations) for s in outcome.stats]


def test_bench_sweep_in_threads_matches_rank_processes():
    request = BenchRequest(collectives=(Collective.ALL_REDUCE, Collective.ALL_GATHER), min_bytes=1024,
                           max_bytes=16384, factor=4, iterations=3, warmup=1, verify=True, record_steps=True)
    threads = run_bench(request, loopback_placements(3), sessions=thread_sessions())
    processes = run_bench(request, loopback_placements(3))
    assert len(threads.stats) == len(processes.stats) == 2 * 3
    assert _ops(threads) == _ops(processes)
    assert {i: sorted(per_rank) for i, per_rank in threads.steps.items()} == \
        {i: sorted(per_rank) for i, per_rank in processes.steps.items()}
    assert [len(rows) for per_rank in threads.steps.values() for rows in per_rank.values()] == \
        [len(rows) for per_rank in processes.steps.values() for rows in per_rank.values()]
    assert not _rank_threads()


def _records(outcome) -> list[list[tuple[int, list[int]]]]:
    return [[(rr.rank, sorted(nid for nid, _, _ in rr.records)) for rr in it.ranks] for it in outcome.iterations]


def test_replay_of_a_trace_in_threads_matches_rank_processes():
    trace = read_native((ROOT / "traces" / "tp2_dp2_step.yaml").read_bytes())
    request = ReplayRequest(iterations=2, warmup=1)
    threads = run_replay(trace, loopback_placements(trace.num_ranks), request, sessions=thread_sessions())
    processes = run_replay(trace, loopback_placements(trace.num_ranks), request)
    assert len(threads.iterations) == len(processes.iterations) == 2
    assert _records(threads) == _records(processes)
    assert threads.programs == processes.programs
    assert not _rank_threads()


def test_a_rank_that_raises_fails_the_run_naming_it_and_no_thread_is_left():
    good = CollectiveOp(Collective.ALL_REDUCE, 1 << 16, (0, 1, 2), Algorithm.RING, dtype_bytes=4)
    bad = CollectiveOp(Collective.ALL_REDUCE, 1 << 16, (0, 1, 2), Algorithm.P2P, dtype_bytes=4)  # no such schedule

    def job(rank: int) -> BenchJob:
        return BenchJob(cases=(BenchCase(bad if rank == 1 else good, 1, 3),), timeout_s=20.0)

    with pytest.raises(RunFailure, match=r"^rank 1: UnsupportedAlgorithm: algorithm .p2p. is not available"):
        ThreadSession(loopback_placements(3), SessionOptions(idle_timeout_s=30.0)).run(job)
    assert not _rank_threads()


def test_placements_in_testbed_namespaces_are_refused():
    with pytest.raises(RunFailure, match=r"ranks \[1\] are placed in testbed namespaces"):
        ThreadSession([RankPlacement(0, "h0", None, "127.0.0.1"), RankPlacement(1, "h1", "genie-x-h1", "198.18.0.2")])


def test_a_rank_failing_mid_op_wakes_the_ranks_waiting_on_it_in_data_transfers():
    op = CollectiveOp(Collective.ALL_REDUCE, 1 << 16, (0, 1, 2), Algorithm.RING, dtype_bytes=4)

    # only rank 1 checks the data: its peers send content-free bytes. The check is an untimed iteration after
    # the timed loop (nccl-tests' -c) behind one more barrier, which the peers meet with a fault point's barrier
    # before their third timed op; so rank 1's check pairs with that op, fails, and the peers' next op waits on
    # rank 1, which has failed by then
    def job(rank: int) -> BenchJob:
        if rank == 1:
            return BenchJob(cases=(BenchCase(op, 1, 2),), verify=True, timeout_s=30.0)
        return BenchJob(cases=(BenchCase(op, 1, 50),), fault_points=(2,), timeout_s=30.0)

    # rank 1's error and its peers' (its connections closed or reset after it) race to the orchestrator, as with
    # processes; a peer that was never woken would instead fail with "op timed out" after 30 s
    with pytest.raises(RunFailure, match=r"^(--verify failed for all_reduce|rank \d: rank \d closed the connection"
                                         r"|rank \d: connection to rank 1 lost while sending)"):
        ThreadSession(loopback_placements(3), SessionOptions(idle_timeout_s=60.0)).run(job)
    assert not _rank_threads()


def test_the_reported_error_is_the_cause_not_a_peers_consequence():
    from genie.engine.session import root_cause

    errors = ["rank 1: rank 0 closed the connection (0 of 131072 bytes received)",
              "rank 0: op timed out after 2 s receiving from rank 3 (0/131072 bytes)"]
    assert root_cause(errors) == errors[1]
    assert root_cause(errors[:1]) == errors[0]  # only consequences: the first
