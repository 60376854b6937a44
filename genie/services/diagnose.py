"""`genie diagnose` as a service: a pairwise latency / bandwidth matrix measured with real p2p transfers between
the first rank of every host of a live testbed (through the bench path), judged by genie.measure.diagnose, in
a run directory with its manifest."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, ContextManager, Optional

from genie.core.collective import Algorithm, Collective
from genie.core.dilation import DilationChoice, TimeDilation
from genie.core.errors import InputError
from genie.core.schedule import CollectiveOp
from genie.core.sizes import DEFAULT_DTYPE_BYTES
from genie.core.units import format_size
from genie.core.testbed import TestbedInfo
from genie.core.placement import RankPlacement
from genie.engine.session import SessionFactory
from genie.measure.diagnose import Diagnosis, PairMeasurement, diagnose
from genie.services.cases import GroupCase, run_cases
from genie.services.dilation import running_dilation
from genie.services.options import check_timeout
from genie.services.placement import placements_for

#: The bandwidth test's message when none is asked for; under time dilation the largest power of two up to it whose
#: transfer lasts at most DILATED_TRANSFER_REAL_S of real time on the slowest pair's path (its wire's least time,
#: `genie.testbed.dilation_rules.message_us`), and not under MIN_DILATED_BANDWIDTH_BYTES: 8 MiB at 1 Gbit/s / 400
#: is 28 s real per transfer, 105 min for the 224 transfers of an 8-host star. The host's own costs per transfer
#: (ms, real) are divided by N too, so a smaller message measures the rate as well as 8 MiB does undilated.
DEFAULT_BANDWIDTH_BYTES = 8 << 20
DILATED_TRANSFER_REAL_S = 0.5
MIN_DILATED_BANDWIDTH_BYTES = 64 << 10
LATENCY_WARMUP, BANDWIDTH_WARMUP = 2, 1
#: under time dilation an op times out after this long in real time plus SLOW_LINK_FACTOR x its transfer's least
#: time (a link that many times slower than stated is still measured and flagged, not timed out), not after N x
#: its emulated seconds (the rule of a dilated run: 60 s x 400 is 6.7 h real)
DILATED_OP_TIMEOUT_REAL_S = 60.0
SLOW_LINK_FACTOR = 100

#: How many times pairs still flagged are measured again (keeping each pair's best) before they are reported: a
#: stall of this shared machine can span one re-measurement (a healthy 8-host star once flagged two pairs).
CONFIRM_ROUNDS = 2

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class DiagnoseRequest:
    latency_bytes: int = 1024
    bandwidth_bytes: Optional[int] = None  # None: DEFAULT_BANDWIDTH_BYTES, smaller under dilation (`plan_diagnose`)
    latency_iterations: int = 20
    bandwidth_iterations: int = 3
    timeout_s: float = 60.0


@dataclass(frozen=True)
class DiagnoseCommand:
    testbed: str
    request: DiagnoseRequest = DiagnoseRequest()
    out: Optional[Path] = None
    time_dilation: DilationChoice = DilationChoice()  # checked against the testbed's own


@dataclass(frozen=True)
class DiagnosePlan:
    """What a diagnosis of a testbed will send, and how long that takes at least in real time (the wires' least
    time, `message_us`, x N; the host's own costs come on top)."""

    bandwidth_bytes: int
    transfer_real_s: float  # one bandwidth transfer on the slowest pair's path
    wire_real_s: float  # every pair's cases of the first pass (flagged pairs are measured again, up to twice)
    pairs: int
    op_timeout_s: float  # each op's timeout, in the run's (emulated) seconds
    why: str = ""

    def describe(self, dilation: TimeDilation) -> str:
        return (f"diagnose at time dilation {dilation.factor:g}: {self.pairs} pairs, bandwidth test "
                f"{format_size(self.bandwidth_bytes)} ({self.transfer_real_s:.2f} s real per transfer){self.why}; "
                f"at least {_minutes(self.wire_real_s)} real on the wires, more for the host's own costs and "
                f"for flagged pairs measured again; each op times out after "
                f"{_minutes(dilation.real_s(self.op_timeout_s))} real")


@dataclass(frozen=True)
class DiagnoseResult:
    run_dir: Path
    diagnosis: Diagnosis
    plan: Optional[DiagnosePlan] = None


def check_request(request: DiagnoseRequest) -> None:
    check_timeout(request.timeout_s)
    if request.bandwidth_bytes is not None and request.bandwidth_bytes < DEFAULT_DTYPE_BYTES:
        raise InputError("must be at least 4 bytes", path="bandwidth_bytes")
    if request.latency_bytes < DEFAULT_DTYPE_BYTES:
        raise InputError("must be at least 4 bytes", path="latency_bytes")
    if request.bandwidth_iterations < 1:
        raise InputError("must be >= 1", path="bandwidth_iterations")
    if request.latency_iterations < 1:
        raise InputError("must be >= 1", path="latency_iterations")


def _first_ranks(info: TestbedInfo) -> tuple[list[RankPlacement], dict[str, RankPlacement]]:
    placements = placements_for(info, None)
    first: dict[str, RankPlacement] = {}
    for p in placements:
        first.setdefault(p.host, p)
    if len(first) < 2:
        raise InputError(f"testbed {info.name} has {len(first)} host(s): diagnosis needs at least 2")
    return placements, first


def plan_diagnose(info: TestbedInfo, request: DiagnoseRequest = DiagnoseRequest()) -> DiagnosePlan:
    """The bandwidth test's size (the one asked for; else DEFAULT_BANDWIDTH_BYTES, under dilation capped so that
    a transfer lasts at most DILATED_TRANSFER_REAL_S real), the least real time of the diagnosis and its op
    timeout (module constants). Pure: the testbed's topology and factor only."""
    from genie.testbed.dilation_rules import host_paths, message_us

    check_request(request)
    _, first = _first_ranks(info)
    dilation = info.dilation
    floors = dict(host_paths(info.topology))
    paths = [floors[f"{src}->{dst}"] for src, dst in itertools.permutations(first, 2)]

    def real_s(size: int) -> float:  # one transfer on the slowest pair's path
        return max(dilation.real_s(message_us(floor, size) / 1e6) for floor in paths)

    size, why = request.bandwidth_bytes, ""
    if size is None:
        size = DEFAULT_BANDWIDTH_BYTES
        if dilation.active:
            while size > MIN_DILATED_BANDWIDTH_BYTES and real_s(size) > DILATED_TRANSFER_REAL_S:
                size //= 2
            if size != DEFAULT_BANDWIDTH_BYTES:
                why = (f", not {format_size(DEFAULT_BANDWIDTH_BYTES)}: that takes {real_s(DEFAULT_BANDWIDTH_BYTES):.1f}"
                       f" s real per transfer at this factor (--size sets it)")
    latency = request.latency_bytes
    wire_s = sum(dilation.real_s(((BANDWIDTH_WARMUP + request.bandwidth_iterations) * message_us(floor, size)
                                  + (LATENCY_WARMUP + request.latency_iterations) * message_us(floor, latency)) / 1e6)
                 for floor in paths)
    timeout_s = request.timeout_s
    if dilation.active:  # a minute plus 100 x the op's own transfer, real: not N x a minute
        timeout_s = min(timeout_s, (DILATED_OP_TIMEOUT_REAL_S + SLOW_LINK_FACTOR * real_s(size)) / dilation.factor)
    return DiagnosePlan(size, real_s(size), wire_s, len(paths), timeout_s, why)


def run_diagnose(info: TestbedInfo, request: DiagnoseRequest = DiagnoseRequest(), *,
                 sessions: SessionFactory | None = None, on_pids: Callable[[list[int]], None] | None = None,
                 progress: Progress | None = None, plan: DiagnosePlan | None = None) -> Diagnosis:
    plan = plan or plan_diagnose(info, request)
    request = replace(request, bandwidth_bytes=plan.bandwidth_bytes, timeout_s=plan.op_timeout_s)
    placements, first = _first_ranks(info)
    pairs = list(itertools.permutations(first, 2))
    measurements = _measure(pairs, first, placements, request, sessions, on_pids, progress, info.dilation)
    result = diagnose(info.topology, measurements)
    for _ in range(CONFIRM_ROUNDS):
        suspect = [(v.measurement.src, v.measurement.dst) for v in result.pairs if v.flagged]
        if not suspect:
            break
        # confirm: measure the flagged pairs again and keep each pair's better result, so a stall of the
        # machine during one pair's test is not reported as a network fault (a real fault shows every time)
        again = _measure(suspect, first, placements, request, sessions, on_pids, None, info.dilation)
        for pair, m in again.items():
            old = measurements[pair]
            measurements[pair] = PairMeasurement(m.src, m.dst, min(old.latency_us, m.latency_us),
                                                 max(old.bandwidth_GBps, m.bandwidth_GBps))
        result = diagnose(info.topology, measurements)
    return result


def _measure(pairs: list[tuple[str, str]], first: dict[str, RankPlacement], placements: list[RankPlacement],
             request: DiagnoseRequest, sessions: SessionFactory | None,
             on_pids: Callable[[list[int]], None] | None, progress: Progress | None, dilation: TimeDilation,
             ) -> dict[tuple[str, str], PairMeasurement]:
    """One session: per pair a latency case and a bandwidth case, run on every rank of the testbed."""
    cases = []
    dtype = DEFAULT_DTYPE_BYTES
    for src, dst in pairs:
        group = tuple(sorted((first[src].rank, first[dst].rank)))
        # latency: a 2-rank exchange (each iteration waits for the peer's previous message, so back-to-back
        # iterations measure the one-way latency of the slower direction, not the message rate)
        size = request.latency_bytes // dtype * dtype
        cases.append(GroupCase((CollectiveOp(Collective.ALL_REDUCE, size, group, Algorithm.RECURSIVE_DOUBLING,
                                             dtype_bytes=dtype),), LATENCY_WARMUP, request.latency_iterations))
        # bandwidth: one direction, src -> dst
        assert request.bandwidth_bytes is not None  # set by run_diagnose's plan
        size = request.bandwidth_bytes // dtype * dtype
        cases.append(GroupCase((CollectiveOp(Collective.SEND_RECV, size, group, Algorithm.P2P, root=first[src].rank,
                                             peer=first[dst].rank, dtype_bytes=dtype),),
                               BANDWIDTH_WARMUP, request.bandwidth_iterations))
    outcome = run_cases(cases, placements, timeout_s=request.timeout_s, on_pids=on_pids, sessions=sessions,
                        dilation=dilation, progress=(lambda done, total, _stats: progress(done, total)) if progress else None)
    measurements = {}
    for k, (src, dst) in enumerate(pairs):
        latency_us, bulk_us = outcome.stats[2 * k].time_median_us, outcome.stats[2 * k + 1].time_median_us
        size = cases[2 * k + 1].op.size_bytes
        measurements[(src, dst)] = PairMeasurement(src, dst, latency_us, size / (bulk_us * 1e3))
    return measurements


def run_diagnose_command(cmd: DiagnoseCommand, progress: Callable[[], ContextManager[Progress]],
                         notice: Callable[[str], None] | None = None) -> DiagnoseResult:
    """Diagnose the live testbed `cmd.testbed` into a run directory (diagnose.csv, the heatmap, a manifest);
    under time dilation `notice` is told the plan (sizes, least real time, op timeout) before anything runs."""
    from genie.report.diagnose import diagnosis_files
    from genie.report.manifest import InputDigest, RunRecorder, topology_summary
    from genie.testbed import service
    from genie.testbed.state import load_record, run_lock

    check_request(cmd.request)
    info = service.load_info(cmd.testbed)
    running_dilation(info, cmd.time_dilation)
    record = load_record(cmd.testbed)
    plan = plan_diagnose(info, cmd.request)
    if notice is not None and info.dilation.active:
        notice(plan.describe(info.dilation))
    inputs = (InputDigest("topology", record.source or f"testbed {info.name}", record.source_digest, 1),)
    params = {"latency_bytes": cmd.request.latency_bytes, "bandwidth_bytes": plan.bandwidth_bytes,
              "latency_iterations": cmd.request.latency_iterations,
              "bandwidth_iterations": cmd.request.bandwidth_iterations}
    with run_lock(info.name), RunRecorder("diagnose", out=cmd.out, inputs=inputs, params=params) as run:
        run.describe(target=info.name, shaper=info.shaper, topology=topology_summary(info.topology),
                     time_dilation=info.dilation.to_dict())
        with progress() as bar:
            result = run_diagnose(info, cmd.request, on_pids=lambda pids: service.register_pids(info.name, pids),
                                  progress=bar, plan=plan)
        for name, data in diagnosis_files(result).items():
            run.write(name, data)
        run.set_summary({"pairs": len(result.pairs), "flagged": sum(1 for v in result.pairs if v.flagged)})
    return DiagnoseResult(run.run_dir, result, plan)


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
