"""The replay service: a whole trace on a testbed — compute waited out, communication sent for real."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from genie.core.errors import InputError
from genie.core.placement import RankPlacement
from genie.core.protocol import CaseResult, ReplayJob, Straggler
from genie.core.records import IterationRecords, RankRecords, ReplayOutcome
from genie.core.trace import Trace
from genie.engine.launch import Launcher
from genie.engine.program import build_programs
from genie.engine.session import FaultHooks, SessionFactory, SessionOptions, local_sessions


@dataclass(frozen=True)
class ReplayRequest:
    iterations: int = 1
    warmup: int = 0
    timeout_s: float = 60.0
    spin_us: int = 200


def check_fits(trace: Trace, placements: list[RankPlacement], *, source: str) -> list[RankPlacement]:
    """The first `trace.num_ranks` placements; an error naming the first rank the testbed lacks."""
    if trace.num_ranks > len(placements):
        missing = len(placements)
        users = [g.name for g in trace.groups if any(r >= len(placements) for r in g.ranks)]
        where = f" (used by group {users[0]!r})" if users else ""
        raise InputError(f"the trace has {trace.num_ranks} ranks but the testbed only {len(placements)}: "
                         f"rank {missing}{where} has no host", source=source)
    return placements[:trace.num_ranks]


def run_replay(trace: Trace, placements: list[RankPlacement], request: ReplayRequest = ReplayRequest(), *,
               source: str = "<trace>", launcher: Launcher | None = None,
               on_pids: Callable[[list[int]], None] | None = None,
               progress: Callable[[int, int], None] | None = None,
               sessions: SessionFactory | None = None, fault_hooks: FaultHooks | None = None,
               fault_points: tuple[int, ...] = (),
               stragglers: dict[int, tuple[Straggler, ...]] | None = None) -> ReplayOutcome:
    """Replay `trace` on `placements`. `fault_hooks` (genie.faults) inject faults live, before the timed
    iterations `fault_points`; `stragglers` per rank stretch that rank's compute (see `genie.engine.rank`)."""
    if request.iterations < 1:
        raise InputError("must be >= 1", path="--iterations")
    if request.warmup < 0:
        raise InputError("must be >= 0", path="--warmup")
    placements = check_fits(trace, placements, source=source)
    programs = build_programs(trace, source=source)
    by_rank = {p.rank: p for p in programs}
    common = dict(iterations=request.iterations, warmup=request.warmup, timeout_s=request.timeout_s,
                  spin_ns=request.spin_us * 1000)
    if fault_hooks is not None:
        common.update(faults=True, fault_points=tuple(fault_points))
    stragglers = stragglers or {}
    results: dict[int, IterationRecords] = {}

    def on_case(index: int, per_rank: dict[int, CaseResult]) -> None:
        results[index] = IterationRecords(index, tuple(
            RankRecords(rank, m.t0_ns, tuple(m.records))
            for rank, m in sorted(per_rank.items())))
        if progress:
            progress(len(results), request.iterations)

    options = SessionOptions(idle_timeout_s=max(120.0, request.timeout_s * 2), on_pids=on_pids,
                             fault_hooks=fault_hooks)
    session = (sessions or local_sessions(launcher))(placements, options)
    session.run(lambda rank: ReplayJob(program=by_rank[rank], stragglers=tuple(stragglers.get(rank, ())), **common),
                on_case=on_case)
    return ReplayOutcome(tuple(programs), tuple(results[i] for i in sorted(results)), tuple(placements))
