"""The diagnose service: a pairwise latency / bandwidth matrix measured with real p2p transfers between the
first rank of every host, then judged by genie.measure.diagnose."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.placement import RankPlacement
from genie.core.protocol import BenchCase, BenchJob, CaseResult
from genie.core.schedule import CollectiveOp
from genie.core.testbed import TestbedInfo
from genie.engine.bench import DTYPE_BYTES, placements_for
from genie.engine.session import SessionFactory, SessionOptions, local_sessions
from genie.measure.diagnose import Diagnosis, PairMeasurement, diagnose
from genie.measure.metrics import case_stats, iteration_times_ns


@dataclass(frozen=True)
class DiagnoseRequest:
    latency_bytes: int = 1024
    bandwidth_bytes: int = 8 << 20
    latency_iterations: int = 20
    bandwidth_iterations: int = 3
    timeout_s: float = 60.0


#: How many times pairs still flagged are measured again (keeping each pair's best) before they are reported: a
#: stall of this shared machine can span one re-measurement (a healthy 8-host star once flagged two pairs).
CONFIRM_ROUNDS = 2


def run_diagnose(info: TestbedInfo, request: DiagnoseRequest = DiagnoseRequest(), *,
                 sessions: SessionFactory | None = None, on_pids: Callable[[list[int]], None] | None = None,
                 progress: Callable[[int, int], None] | None = None) -> Diagnosis:
    if request.bandwidth_bytes < DTYPE_BYTES or request.latency_bytes < DTYPE_BYTES:
        raise InputError("sizes must be at least 4 bytes", path="--size")
    placements = placements_for(info, None)
    first = {}
    for p in placements:
        first.setdefault(p.host, p)
    if len(first) < 2:
        raise InputError(f"testbed {info.name} has {len(first)} host(s): diagnosis needs at least 2")
    pairs = list(itertools.permutations(first, 2))
    measurements = _measure(pairs, first, placements, request, sessions, on_pids, progress)
    result = diagnose(info.topology, measurements)
    for _ in range(CONFIRM_ROUNDS):
        suspect = [(v.measurement.src, v.measurement.dst) for v in result.pairs if v.flagged]
        if not suspect:
            break
        # confirm: measure the flagged pairs again and keep each pair's better result, so a stall of the
        # machine during one pair's test is not reported as a network fault (a real fault shows every time)
        again = _measure(suspect, first, placements, request, sessions, on_pids, None)
        for pair, m in again.items():
            old = measurements[pair]
            measurements[pair] = PairMeasurement(m.src, m.dst, min(old.latency_us, m.latency_us),
                                                 max(old.bandwidth_GBps, m.bandwidth_GBps))
        result = diagnose(info.topology, measurements)
    return result


def _measure(pairs: list[tuple[str, str]], first: dict[str, RankPlacement], placements: list[RankPlacement],
             request: DiagnoseRequest, sessions: SessionFactory | None,
             on_pids: Callable[[list[int]], None] | None, progress: Callable[[int, int], None] | None,
             ) -> dict[tuple[str, str], PairMeasurement]:
    """One job: per pair a latency case and a bandwidth case, run on every rank of the testbed."""
    cases = []
    for src, dst in pairs:
        group = tuple(sorted((first[src].rank, first[dst].rank)))
        # latency: a 2-rank exchange (each iteration waits for the peer's previous message, so back-to-back
        # iterations measure the one-way latency of the slower direction, not the message rate)
        size = request.latency_bytes // DTYPE_BYTES * DTYPE_BYTES
        cases.append(BenchCase(CollectiveOp(Collective.ALL_REDUCE, size, group, Algorithm.RECURSIVE_DOUBLING,
                                            dtype_bytes=DTYPE_BYTES), 2, request.latency_iterations))
        # bandwidth: one direction, src -> dst
        size = request.bandwidth_bytes // DTYPE_BYTES * DTYPE_BYTES
        cases.append(BenchCase(CollectiveOp(Collective.SEND_RECV, size, group, Algorithm.P2P, root=first[src].rank,
                                            peer=first[dst].rank, dtype_bytes=DTYPE_BYTES),
                               1, request.bandwidth_iterations))
    job = BenchJob(tuple(cases), timeout_s=request.timeout_s)
    medians_us: dict[int, float] = {}

    def on_case(index: int, per_rank: dict[int, CaseResult]) -> None:
        op = job.cases[index].op
        times = iteration_times_ns({r: m.iterations for r, m in per_rank.items() if m.iterations})
        medians_us[index] = case_stats(op.collective, op.algorithm, 2, op.size_bytes, op.dtype_bytes,
                                       times).time_median_us
        if progress:
            progress(len(medians_us), len(job.cases))

    options = SessionOptions(idle_timeout_s=max(120.0, request.timeout_s * 2), on_pids=on_pids)
    (sessions or local_sessions())(placements, options).run(job, on_case=on_case)
    measurements = {}
    for k, (src, dst) in enumerate(pairs):
        latency_us, bulk_us = medians_us[2 * k], medians_us[2 * k + 1]
        size = job.cases[2 * k + 1].op.size_bytes
        measurements[(src, dst)] = PairMeasurement(src, dst, latency_us, size / (bulk_us * 1e3))
    return measurements
