"""`genie bench` as a service — genie's nccl-tests: sweep collectives over sizes on the chosen target, with its
run directory, link observation, capture and live faults.

Every bench-like measurement runs through `genie.services.cases.run_cases`. A plain sweep is one group of
every rank; `genie experiment` measures the trace's own groups side by side; diagnose
measures host pairs."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, ContextManager, Optional

from genie.collectives.registry import build_schedule, choose_algorithm
from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError
from genie.core.schedule import CollectiveOp
from genie.core.sizes import DEFAULT_DTYPE_BYTES, aligned_size
from genie.core.placement import RankPlacement
from genie.core.protocol import BenchJob
from genie.measure.metrics import CaseStats, rank_memory_summary
from genie.services.cases import BenchOutcome, GroupCase, rank_job, run_cases, run_cases_per_size
from genie.services.options import RunOptions, check_counts, check_ranks, check_timeout

BenchProgress = Callable[[], ContextManager[Callable[[int, int, Any], None]]]
#: called when a size is done: (its out-of-place stats, its in-place stats or None)
RowCallback = Callable[[CaseStats, Optional[CaseStats]], None]


@dataclass(frozen=True)
class BenchRequest:
    """What to sweep: collectives x sizes from `min_bytes` to `max_bytes` (x `factor`), each `warmup` untimed and
    `iterations` timed iterations, on the first `ranks` ranks of the target (default: all). With `in_place`
    every size is measured twice, out-of-place then in-place, as nccl-tests does (genie's CPU ranks move the same
    bytes either way: the second pass is an independent measurement of the same op). `root` is broadcast's."""

    collectives: tuple[Collective, ...] = (Collective.ALL_REDUCE,)
    algorithm: Algorithm = Algorithm.AUTO
    min_bytes: int = 1024
    max_bytes: int = 1 << 20
    factor: int = 2
    step_bytes: int = 0  # a linear step instead of `factor` (nccl-tests' -i); 0: the factor
    iterations: int = 20
    warmup: int = 5
    ranks: int | None = None
    verify: bool = False
    timeout_s: float = 60.0
    record_steps: bool = False
    chunks: int = 1
    spin_us: int = 0
    socket_buffer_bytes: int | None = None
    in_place: bool = False
    root: int = 0
    cputime: bool = False  # nccl-tests' -C 1: the JSON calls the time cpu_time (genie's times are CPU clocks)
    #: send_recv on `pairs` disjoint pairs (i, i + pairs) at once (OSU's mbw_mr); None: one group of all ranks
    pairs: int | None = None


@dataclass(frozen=True)
class BenchCommand:
    request: BenchRequest
    options: RunOptions


@dataclass(frozen=True)
class BenchResult:
    run_dir: Any  # pathlib.Path of the run directory
    status: Any  # genie.report.manifest.RunStatus
    duration_s: Optional[float]
    outcome: BenchOutcome
    doc: dict[str, Any]  # sweep.json's document
    links: Optional[dict[str, Any]]  # link/TCP counter summary (None for loopback)
    capture: Any  # genie.report.capture result, or None
    link_rate_bps: Optional[int]
    nccl_documents: dict[str, str] = field(default_factory=dict)  # nccl-tests JSON: file name -> text
    burst: Any = None  # genie.testbed.shaping.BucketBurst: sizes the bucket links can carry faster than a wire
    cpu_starved: str | None = None  # genie.measure.sched.starved_note: the ranks waited for a CPU that much
    dilation_plan: Any = None  # genie.testbed.dilation_plan.DilationPlan when sizes ran at their own factors
    dilation: Any = None  # genie.core.dilation.TimeDilation the run (or, per size, its testbed) came up at


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int, step_bytes: int = 0) -> list[int]:
    """From `min_bytes` to `max_bytes`, each size `factor` times the last, or `step_bytes` more (nccl-tests' -i:
    a linear step instead of -f's factor)."""
    if min_bytes <= 0:
        raise InputError("must be a positive size", path="min_bytes")
    if max_bytes < min_bytes:
        raise InputError(f"must be >= `min_bytes` ({min_bytes})", path="max_bytes")
    if step_bytes < 0:
        raise InputError("must be a size >= 0 (0: step by `factor`)", path="step_bytes")
    if not step_bytes and factor < 2:
        raise InputError("must be an integer >= 2", path="factor")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s = s + step_bytes if step_bytes else s * factor
    return sizes


def check_request(request: BenchRequest) -> None:
    """Everything about the sweep that does not depend on the target, before it is up."""
    check_counts(request.iterations, request.warmup)
    check_timeout(request.timeout_s)
    check_ranks(request.ranks)
    if not request.collectives:
        raise InputError("names no collective; expected at least one (such as all_reduce)", path="collectives")
    if Collective.BARRIER in request.collectives:
        raise InputError("barrier has no size to sweep (it is replayed from traces)", path="collectives")


def ranks_per_node(placements: Sequence[RankPlacement]) -> int:
    """The most ranks any one host runs (NCCL's PAT needs 1: one rank per node)."""
    per_host: dict[str, int] = {}
    for p in placements:
        per_host[p.host] = per_host.get(p.host, 0) + 1
    return max(per_host.values(), default=1)


def sweep_cases(request: BenchRequest, ranks: int, *, per_node: int | None = None,
                link_rate_bps: int | None = None) -> list[GroupCase]:
    """The plain sweep: every collective x size on one group of `ranks` ranks. ``per_node`` (ranks per host;
    None: not known) and ``link_rate_bps`` (the hosts' link rate; None: not known) inform AUTO's choice."""
    check_counts(request.iterations, request.warmup)
    if ranks < 2:
        raise InputError(f"a collective needs at least 2 ranks, got {ranks} (busbw of 1 rank is 0)", path="ranks")
    if request.pairs and (request.collectives != (Collective.SEND_RECV,) or 2 * request.pairs > ranks):
        raise InputError(f"{request.pairs} pairs need send_recv and {2 * request.pairs} ranks, got {ranks}",
                         path="ranks")
    if not 0 <= request.root < ranks:
        raise InputError(f"must be a rank of the group (0..{ranks - 1}), got {request.root}", path="root")
    cases = []
    for collective in request.collectives:
        for size in sweep_sizes(request.min_bytes, request.max_bytes, request.factor, request.step_bytes):
            ops = case_ops(request, collective, size, ranks, per_node=per_node, link_rate_bps=link_rate_bps)
            cases += [GroupCase(ops, request.warmup, request.iterations)] * (2 if request.in_place else 1)
    return cases


def case_ops(request: BenchRequest, collective: Collective, size: int, ranks: int, *, per_node: int | None = None,
             link_rate_bps: int | None = None) -> tuple[CollectiveOp, ...]:
    """The ops of one case of the sweep (`sweep_cases`): `collective` at the sweep's `size` (aligned for it) on
    `ranks` ranks, AUTO's algorithm resolved, or the disjoint pairs of `request.pairs`."""
    size = aligned_size(collective, size, ranks)
    algorithm = request.algorithm
    if algorithm is Algorithm.AUTO and collective is Collective.SEND_RECV:
        algorithm = Algorithm.RING  # nccl-tests' sendrecv: the ring shift (p2p: --algorithm p2p)
    elif algorithm is Algorithm.AUTO:
        algorithm = choose_algorithm(collective, size, ranks, ranks_per_node=per_node,
                                     net_GBps=link_rate_bps / 8e9 if link_rate_bps else None)
    root, peer = (0, ranks - 1) if collective is Collective.SEND_RECV else (request.root, None)
    op = CollectiveOp(collective=collective, size_bytes=size, group=tuple(range(ranks)), algorithm=algorithm,
                      root=root, peer=peer, chunks=request.chunks, dtype_bytes=DEFAULT_DTYPE_BYTES)
    check_schedule(op, field="algorithm")
    if request.pairs:
        return tuple(replace(op, group=(i, i + request.pairs), root=i, peer=i + request.pairs)
                     for i in range(request.pairs))
    return (op,)


def size_steps(request: BenchRequest, topology: Any) -> dict[int, tuple[Any, ...]]:
    """What each size of the sweep runs on a testbed of `topology` (`genie.core.topology.Topology`), as ``auto``
    weighs a size (`genie.services.dilation.collective_steps`, one per collective): the ranks the run takes,
    ranks per host and link rate as the run's algorithm choice has them. Empty when the topology has too few
    ranks (the run refuses that itself) or fewer than 2 are asked for."""
    from genie.report.manifest import topology_summary
    from genie.services.dilation import collective_steps

    hosts = topology.rank_hosts()
    ranks = request.ranks or len(hosts)
    if not 2 <= ranks <= len(hosts) or (request.pairs and 2 * request.pairs > ranks):
        return {}
    per_node = max(hosts[:ranks].count(host) for host in set(hosts[:ranks]))
    rate = topology_summary(topology).get("link_rate_bps")
    return {size: tuple(collective_steps(case_ops(request, collective, size, ranks, per_node=per_node,
                                                  link_rate_bps=rate)) for collective in request.collectives)
            for size in sweep_sizes(request.min_bytes, request.max_bytes, request.factor, request.step_bytes)}


def check_schedule(op: CollectiveOp, *, field: str, what: str = "") -> None:
    """The op's schedule can be built (else an InputError naming `field`)."""
    try:
        build_schedule(op)
    except ValueError as exc:
        raise InputError(f"{what}{exc}", path=field) from None


def build_job(request: BenchRequest, ranks: int) -> BenchJob:
    """The plain sweep's job (the same on every rank): validates the request."""
    return rank_job(sweep_cases(request, ranks), 0, verify=request.verify, timeout_s=request.timeout_s,
                    record_steps=request.record_steps)


def run_bench(request: BenchRequest, placements: list[RankPlacement], *,
              progress: Callable[[int, int, CaseStats], None] | None = None, on_row: RowCallback | None = None,
              link_rate_bps: int | None = None, dilation_plan: Any = None, dilator: Any = None,
              **kwargs: Any) -> BenchOutcome:
    """The plain sweep of `request` on `placements` (keyword arguments as `run_cases`). `progress` and `on_row`
    are called when a size is done (both its passes with `request.in_place`). AUTO chooses with the
    placements' ranks per host and `link_rate_bps` (the testbed's link rate, if it has one). With a
    `dilation_plan` of more than one factor (`genie.testbed.dilation_plan`) each run of sizes at one factor is
    its own rank session, the testbed reshaped before it by `dilator` (`genie.services.dilation.SizeDilator`)."""
    passes = 2 if request.in_place else 1
    done: list[CaseStats] = []

    def on_case(_done: int, total: int, stats: CaseStats) -> None:
        done.append(stats)
        if len(done) % passes == 0:
            if progress:
                progress(len(done) // passes, total // passes, done[-passes])
            if on_row:
                on_row(done[-passes], done[-1] if passes == 2 else None)

    cases = sweep_cases(request, len(placements), per_node=ranks_per_node(placements),
                        link_rate_bps=link_rate_bps)
    run = lambda part, **more: run_cases(  # noqa: E731
        part, placements, verify=request.verify, timeout_s=request.timeout_s, record_steps=request.record_steps,
        spin_us=request.spin_us, socket_buffer_bytes=request.socket_buffer_bytes, **{**kwargs, **more})
    if dilator is None or dilation_plan is None or not dilation_plan.per_size:
        outcome = run(cases, progress=on_case)
    else:
        outcome = run_cases_per_size(cases, dilation_plan, dilator, run, on_case)
    if passes == 1:
        return outcome
    return replace(outcome, stats=outcome.stats[0::2], in_place_stats=outcome.stats[1::2],
                   job=replace(outcome.job, cases=outcome.job.cases[0::2]),
                   steps={i // 2: rows for i, rows in outcome.steps.items() if i % 2 == 0})


def run_bench_command(cmd: BenchCommand, progress: BenchProgress, *, on_start: Callable[[list[dict]], None] | None
                      = None, on_row: RowCallback | None = None, interval_s: float = 0.0,
                      on_interval: Callable[[Any], None] | None = None) -> BenchResult:
    """Validate everything first (InputError: nothing started), then run the sweep in a run directory.
    `progress()` is entered around the sweep and yields a callback(done, total, case stats). `on_start` gets
    the devices (rank, host, netns, pid) once the ranks are started, before the first size; `on_row` each size
    as soon as it is done (the CLI prints and flushes it); `on_interval` the links' IntervalReport every
    `interval_s` on a testbed (genie.report.observe)."""
    from genie.faults.service import bench_bounds
    from genie.report.sweep_recorder import SweepRecorder
    from genie.services.connection_paths import PathRecorder
    from genie.services.stage import staged

    request, opts = cmd.request, cmd.options
    check_request(request)  # what does not depend on the target, before it is up
    sizes = sweep_sizes(request.min_bytes, request.max_bytes, request.factor, request.step_bytes)
    check_per_size(request, opts)
    config = {"min_bytes": request.min_bytes, "max_bytes": request.max_bytes, "step_factor": request.factor,
              "warmup_iters": request.warmup, "iterations": request.iterations, "verify": request.verify,
              "root": request.root, "cputime": request.cputime}
    params = {**config, "algorithm": request.algorithm.value, "chunks": request.chunks,
              "steps": request.record_steps, "in_place": request.in_place}
    with staged("bench", opts, ranks=request.ranks, loopback_ranks=request.ranks, params=params,
                bounds=lambda n, _faults: bench_bounds(build_job(request, request.ranks or n)),
                smallest_message_bytes=request.min_bytes, sweep_sizes_bytes=tuple(sizes),
                size_steps=lambda topology: size_steps(request, topology)) as stage:
        target = stage.target
        meta = {"target": target.name, "ranks": len(stage.placements), "verify": request.verify,
                "iterations": request.iterations, "warmup": request.warmup}
        plan = target.dilation_plan
        dilator = None
        if plan is not None and target.info is not None:
            from genie.services.dilation import SizeDilator

            dilator = SizeDilator(target.info, scratch=opts.topology is not None)
            meta["time_dilation_per_size"] = plan.to_dict()
        files = SweepRecorder(stage.run, meta)
        devices = target.devices()
        started: list[bool] = []

        def start(pids: list[int] | None = None) -> None:
            if pids:
                for device, pid in zip(devices, pids):
                    device["pid"] = pid
            if not started:
                started.append(True)
                if on_start:
                    on_start(devices)

        def pids_known(pids: list[int]) -> None:
            if target.on_pids:
                target.on_pids(pids)
            start(pids)

        def row(out_of_place: CaseStats, in_place: CaseStats | None) -> None:
            start()
            if on_row:
                on_row(out_of_place, in_place)

        with stage.watching(report_s=interval_s, on_interval=on_interval) as watch, progress() as bar:
            outcome = run_bench(request, stage.placements, on_pids=pids_known, on_row=row,
                                link_rate_bps=(target.topology or {}).get("link_rate_bps"),
                                progress=lambda d, t, s: (bar(d, t, s), files.add(d, t, s)),
                                sessions=stage.sessions, fault_hooks=watch.injector,
                                fault_points=stage.fault_plan.fault_points(), dilation=stage.dilation,
                                dilation_plan=plan, dilator=dilator)
        start()
        traced = PathRecorder(target.info)  # while the testbed is up
        traced.sweep("sweep", outcome.flows)
        traced.write(stage.run)
        doc = files.finish(outcome, config=config, devices=devices, steps=request.record_steps)
        burst = None
        if target.info is not None:
            from genie.testbed.shaping import bucket_burst

            burst = bucket_burst(target.info.topology, target.info.links, target.info.dilation,
                                 sorted({s.size_bytes for s in outcome.stats}))
            if burst is not None:
                stage.run.warn(burst.describe())
        from genie.measure.sched import rank_cpu_csv, rank_cpu_summary, starved_note

        starved = None
        if outcome.cpu:
            stage.run.write("rank_cpu.csv", rank_cpu_csv(outcome.cpu))
            starved = starved_note(outcome.cpu)
            if starved is not None:
                stage.run.warn(starved)
        stage.run.set_summary({"cases": len(outcome.stats), **rank_memory_summary(outcome.peak_rss_kb),
                               **rank_cpu_summary(outcome.cpu), **stage.summary()})
    run = stage.run
    return BenchResult(run.run_dir, run.status, run.manifest.duration_s, outcome, doc, watch.links(),
                       watch.capture, (target.topology or {}).get("link_rate_bps"), files.nccl_documents, burst,
                       starved, plan, stage.dilation)


def check_per_size(request: BenchRequest, opts: RunOptions) -> None:
    """A sweep of several sizes under ``auto`` runs each size at its own factor (docs/dilation.md); faults and
    stragglers are timed on one clock for the whole run, so they need one factor: refused before anything
    is up."""
    from genie.core.dilation import DilationMode

    several = len(set(sweep_sizes(request.min_bytes, request.max_bytes, request.factor, request.step_bytes))) > 1
    if (opts.time_dilation.mode is DilationMode.AUTO and several and opts.topology is not None
            and (opts.faults or opts.faults_file)):
        raise InputError("a sweep under auto runs each size at its own time dilation, and faults are timed on "
                         "one clock: give a fixed factor (--time-dilation N) or one size", path=opts.faults_field)


def plan_bench_dilation(cmd: BenchCommand) -> tuple[Any, Any]:
    """`genie bench --dry-run`: the sweep's dilation per size (`genie.testbed.dilation_plan.DilationPlan`) on
    its topology, and the topology; nothing of the run is brought up (``auto`` measures this host on scratch
    testbeds, as it does before a run)."""
    from genie.services.dilation_choice import resolve_dilation_plan
    from genie.topology import load_topology_file

    request, opts = cmd.request, cmd.options
    check_request(request)
    sizes = sweep_sizes(request.min_bytes, request.max_bytes, request.factor, request.step_bytes)
    check_per_size(request, opts)
    if opts.topology is None:
        raise InputError("a dry run plans the testbed of a topology: give one", path="topology")
    topology = load_topology_file(opts.topology)
    plan, _ = resolve_dilation_plan(opts.time_dilation, topology, sizes, source=str(opts.topology),
                                    size_steps=lambda topo: size_steps(request, topo))
    return plan, topology
