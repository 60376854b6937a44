"""The bench service — genie's nccl-tests: sweep collectives over sizes on a testbed and measure them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from genie.collectives.registry import build_schedule, choose_algorithm
from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError, RunFailure
from genie.core.placement import RankPlacement
from genie.core.protocol import Barrier, BenchCase, BenchJob, CaseResult
from genie.core.schedule import CollectiveOp
from genie.core.sizes import DEFAULT_DTYPE_BYTES, aligned_size
from genie.core.testbed import TestbedInfo
from genie.engine.launch import Launcher
from genie.engine.session import FaultHooks, SessionFactory, SessionOptions, local_sessions
from genie.measure.metrics import CaseStats, case_stats, iteration_times_ns

DTYPE_BYTES = DEFAULT_DTYPE_BYTES  # float32, as nccl-tests' default


@dataclass(frozen=True)
class BenchRequest:
    collectives: tuple[Collective, ...] = (Collective.ALL_REDUCE,)
    algorithm: Algorithm = Algorithm.AUTO
    min_bytes: int = 1024
    max_bytes: int = 1 << 20
    factor: int = 2
    iterations: int = 20
    warmup: int = 5
    ranks: int | None = None
    verify: bool = False
    timeout_s: float = 60.0
    record_steps: bool = False
    chunks: int = 1
    spin_us: int = 0
    socket_buffer_bytes: int | None = None


@dataclass(frozen=True)
class BenchOutcome:
    stats: tuple[CaseStats, ...]
    job: BenchJob
    placements: tuple[RankPlacement, ...]
    steps: dict[int, dict[int, list]] = field(default_factory=dict)  # case -> rank -> step rows


class _PartialCase:
    """Forwards fault hooks, remembering what the ranks reported at the last fault point (the case it was in
    and each rank's timed iterations so far)."""

    def __init__(self, inner: FaultHooks) -> None:
        self.inner = inner
        self.case: int | None = None
        self.reports: dict[int, Barrier] = {}

    def timed_start(self, start_ns: int) -> None:
        self.inner.timed_start(start_ns)

    def fault_point(self, op_index: int, reports: dict[int, Barrier] | None = None) -> None:
        if reports:
            case = next(iter(reports.values())).case
            self.case = -1 if case is None else case
            self.reports = reports
        self.inner.fault_point(op_index, reports)


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    if min_bytes <= 0:
        raise InputError("must be a positive size", path="--minbytes")
    if max_bytes < min_bytes:
        raise InputError(f"must be >= --minbytes ({min_bytes})", path="--maxbytes")
    if factor < 2:
        raise InputError("must be an integer >= 2", path="--stepfactor")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    return sizes


def placements_for(testbed: TestbedInfo, ranks: int | None) -> list[RankPlacement]:
    """Global ranks are numbered host by host in topology order; `ranks` takes the first N."""
    hosts = testbed.topology.rank_hosts()
    n = len(hosts) if ranks is None else ranks
    if n < 1 or n > len(hosts):
        raise InputError(f"testbed {testbed.name} has {len(hosts)} ranks, asked for {n}", path="--ranks")
    out = []
    for rank, host in enumerate(hosts[:n]):
        ep = testbed.endpoint(host)
        out.append(RankPlacement(rank=rank, host=host, netns=ep.netns, address=ep.address))
    return out


def loopback_placements(ranks: int) -> list[RankPlacement]:
    """All ranks in the current namespace on 127.0.0.1: no root needed (tests, quick checks)."""
    if ranks < 1:
        raise InputError("must be >= 1", path="--ranks")
    return [RankPlacement(rank=r, host="localhost", netns=None, address="127.0.0.1") for r in range(ranks)]


def build_job(request: BenchRequest, ranks: int) -> BenchJob:
    if request.iterations < 1:
        raise InputError("must be >= 1", path="--iters")
    if request.warmup < 0:
        raise InputError("must be >= 0", path="--warmup_iters")
    group = tuple(range(ranks))
    cases = []
    for collective in request.collectives:
        for size in sweep_sizes(request.min_bytes, request.max_bytes, request.factor):
            size = aligned_size(collective, size, ranks)
            algorithm = request.algorithm
            if algorithm is Algorithm.AUTO:
                algorithm = choose_algorithm(collective, size, ranks)
            root, peer = (0, ranks - 1) if collective is Collective.SEND_RECV else (0, None)
            op = CollectiveOp(collective=collective, size_bytes=size, group=group, algorithm=algorithm,
                              root=root, peer=peer, chunks=request.chunks, dtype_bytes=DTYPE_BYTES)
            try:
                build_schedule(op)
            except ValueError as exc:
                raise InputError(str(exc), path="--algorithm") from None
            cases.append(BenchCase(op=op, warmup=request.warmup, iterations=request.iterations))
    return BenchJob(cases=tuple(cases), verify=request.verify, timeout_s=request.timeout_s,
                    record_steps=request.record_steps)


def run_bench(request: BenchRequest, placements: list[RankPlacement], *, launcher: Launcher | None = None,
              on_pids: Callable[[list[int]], None] | None = None,
              progress: Callable[[int, int, CaseStats], None] | None = None,
              sessions: SessionFactory | None = None, fault_hooks: FaultHooks | None = None,
              fault_points: tuple[int, ...] = ()) -> BenchOutcome:
    """Run the sweep; `sessions` chooses how ranks are started (default: local processes via `launcher`).
    `fault_hooks` (genie.faults) inject faults live, pausing the ranks before the timed ops `fault_points`."""
    job = build_job(request, len(placements))
    if fault_hooks is not None:
        job = dataclasses.replace(job, fault_points=tuple(fault_points), faults=True)
    stats: dict[int, CaseStats] = {}
    steps: dict[int, dict[int, list]] = {}

    def on_case(index: int, per_rank: dict[int, CaseResult]) -> None:
        op = job.cases[index].op
        restarts = next((m.restarts for m in per_rank.values() if m.restarts), ())
        times = iteration_times_ns({r: m.iterations for r, m in per_rank.items()}, restarts)
        stats[index] = case_stats(op.collective, op.algorithm, len(op.group), op.size_bytes, op.dtype_bytes, times)
        if job.record_steps:
            steps[index] = {r: list(m.steps) for r, m in per_rank.items()}
        if progress:
            progress(len(stats), len(job.cases), stats[index])

    # a case reports only when all its ops are done, each op bounded by the op timeout: the orchestrator's
    # no-progress backstop must outlast the longest legitimate case (a 64-rank 16 MiB sweep at 100 Mbit/s
    # is minutes), while a silent peer is still named by the op timeout itself
    longest_case = max((c.warmup + c.iterations for c in job.cases), default=1) + 1
    partial = _PartialCase(fault_hooks) if fault_hooks is not None else None
    options = SessionOptions(idle_timeout_s=max(120.0, job.timeout_s * longest_case), spin_s=request.spin_us / 1e6,
                             socket_buffer_bytes=request.socket_buffer_bytes, on_pids=on_pids,
                             fault_hooks=partial)
    session = (sessions or local_sessions(launcher))(placements, options)
    try:
        session.run(job, on_case=on_case)
    except RunFailure:
        # a fault ended the run inside a size: keep its iterations measured before its last fault point
        if partial is not None and partial.case is not None and partial.case not in stats and partial.reports:
            if all(m.iterations for m in partial.reports.values()):
                on_case(partial.case, {r: CaseResult(partial.case, r, iterations=m.iterations, restarts=m.restarts)
                                       for r, m in partial.reports.items()})
        raise
    return BenchOutcome(stats=tuple(stats[i] for i in sorted(stats)), job=job, placements=tuple(placements),
                        steps=steps)
