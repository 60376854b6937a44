"""`--time-dilation auto`: measure what this host sustains, then choose the factor
(`genie.testbed.dilation_rules.choose_dilation`).

The probe runs on scratch testbeds built by the same planner and shapers as the real one: stars of up to
`PROBE_HOSTS` hosts, through the ordinary bench path, torn down whatever happens.
* Software: a star whose links are shaped far above anything this host carries (so the shaping machinery —
  HTB, and the link emulator's wire and delay stages when the real testbed has them — is in the path without
  limiting it), with as many ranks as the topology has (up to `PROBE_RANKS`: the per-step time grows with the
  ranks sharing the CPUs): a ring all-gather of tiny messages, its median iteration divided by its steps, is
  the software time of one step (interpreter, sockets, kernel, emulator: everything but the wire). The link
  emulator's median release lateness comes from its own statistics.
* Wake-ups, on the same star and ranks: a replay of `WAKE_PROGRAM` (a tiny all-reduce, `WAKE_COMPUTE_US` of
  compute, a tiny all-reduce), `WAKE_ITERATIONS` times: how much later than its steps at the software
  probe's cost the first all-reduce ends after the iteration's common start (the ranks' wake-up from the
  barrier) and the second after the compute's deadline (their wake-up from the compute timer) — a host cost
  of every iteration start and compute node, not of a step (`wake_cost_us`): the slowest rank's lateness,
  and a replay's steps right after a wake-up costing more than the bench's back-to-back ones.
* Throughput, shaped: what the topology's hosts ask for at once at factor N (the sum of their links' rates / N)
  is put on a star of one rank per host, the links shaped at that share, every host streaming one long message
  to the next at once (nccl-tests' sendrecv ring shift: one step per iteration, so per-step software costs do
  not pass for a lack of throughput); the factor is raised (x2.5, from a first guess) until the links deliver
  at least `GOOD_EFFICIENCY` of their payload limit. The aggregate that held is what `choose_dilation` weighs.
  When the topology's own rates fall short, the star is first tried at `CHECK_RATE_BPS` per host: slow links
  deliver less than their payload limit whatever the host (`_shaped_throughput`).
It takes 10-60 s.
"""

from __future__ import annotations

import json
import math
from typing import Optional

from genie.core.collective import Algorithm, Collective
from genie.core.dilation import IterationSteps, TimeDilation
from genie.core.schedule import CollectiveOp
from genie.core.sizes import DEFAULT_DTYPE_BYTES
from genie.core.testbed import LinkModel
from genie.core.topology import LinkShape, Topology

PROBE_HOSTS = 8
PROBE_RANKS = 256
PROBE_RATE_BPS = 100 * 10**9  # far above what a 2-core host carries: the machinery is in the path, not the limit
PROBE_DELAY_US = 1.0  # puts the link emulator in the path when the real testbed will delay its links
STEP_BYTES = 64  # per rank, per step of the software probe
STEP_ITERATIONS = 20
FIRST_GUESS_BPS = 4 * 10**9  # the aggregate the throughput probe tries first (a 2-core VM carries a few Gbit/s)
GOOD_EFFICIENCY = 0.98  # of the links' payload limit, with every host sending at once
BULK_SECONDS = 1.0  # real time one bulk iteration should take at the rate under test
MAX_ROUNDS = 5
#: per host, where a shortfall at the topology's own (slow) rates is checked against this host's throughput: one
#: 1-s message per host at 100 Mbit/s delivered 0.988 of the payload limit on a 4-host wire star here
CHECK_RATE_BPS = 100 * 10**6
CHECK_SECONDS = 3.0  # its message: 3 s of the rate (0.993-0.996 there against 0.990-0.993 for 1 s, measured)
WAKE_COMPUTE_US = 5000  # real: a dilated compute node lasts milliseconds
WAKE_ITERATIONS = 20
WAKE_PROGRAM = """format: genie-trace
version: 1
name: wake-probe
ranks: {ranks}
program:
  - {{id: 0, type: all_reduce, size: 256}}
  - {{id: 1, type: compute, duration: {compute_us}us, deps: [0]}}
  - {{id: 2, type: all_reduce, size: 256, deps: [1]}}
"""


def _emulated(topology: Topology, links: LinkModel) -> bool:
    return any(link.shape.needs_delay_emulation for link in topology.links) or links is LinkModel.WIRE


def probe_topology(topology: Topology, links: LinkModel, *, rate_bps: int = PROBE_RATE_BPS,
                   ranks_per_host: int | None = None) -> Topology:
    """A scratch star like the testbed's machinery (see the module docstring), its links at `rate_bps`."""
    from genie.topology.builders import star

    hosts = _probe_hosts(topology)
    if ranks_per_host is None:
        ranks_per_host = math.ceil(min(PROBE_RANKS, topology.world_size) / hosts)
    shape = LinkShape(rate_bps=rate_bps, delay_us=PROBE_DELAY_US if _emulated(topology, links) else 0.0,
                      mtu_bytes=_probe_mtu(topology))
    return star(hosts, shape=shape, ranks_per_host=ranks_per_host, name="probe")


def _probe_hosts(topology: Topology) -> int:
    return max(2, min(PROBE_HOSTS, len(topology.hosts)))


def _probe_mtu(topology: Topology) -> int:
    return max((link.shape.mtu_bytes for link in topology.links), default=1500)


def measure_host(topology: Topology, links: LinkModel, *, wakes: bool = False):
    """This host's `HostFigures` for a testbed of `topology` with `links` (needs root: scratch testbeds); the
    wake-ups' cost only with `wakes` (a replay's: a sweep's sizes do not weigh it)."""
    from genie.testbed.dilation_rules import HostFigures, demanded_bps

    ranks, step_us, late_us, wake_us = _software(topology, links, wakes)
    demand = demanded_bps(topology)
    aggregate = _shaped_throughput(topology, links, demand) if demand else float("inf")
    return HostFigures(ranks, step_us, aggregate, late_us, wake_us)


def _software(topology: Topology, links: LinkModel,
              wakes: bool = False) -> tuple[int, float, float | None, float | None]:
    from genie.services.cases import GroupCase, run_cases
    from genie.services.placement import placements_for
    from genie.testbed import service
    from genie.testbed.emulators import stats_path

    scratch = probe_topology(topology, links)
    ranks = min(PROBE_RANKS, topology.world_size, scratch.world_size)
    with service.temporary_testbed(scratch, links=links) as info:
        placements = placements_for(info, ranks)
        world = tuple(p.rank for p in placements)
        small = CollectiveOp(Collective.ALL_GATHER, STEP_BYTES * len(world), world, Algorithm.RING,
                             dtype_bytes=DEFAULT_DTYPE_BYTES)
        outcome = run_cases([GroupCase((small,), 3, STEP_ITERATIONS)], placements,
                            on_pids=lambda pids: service.register_pids(info.name, pids))
        step_us = outcome.stats[0].time_median_us / (len(world) - 1)
        lateness = [_emulator_late_us(stats_path(info.name, ns)) for ns in {h.netns for h in info.hosts}]
        known = [late for late in lateness if late is not None]
        wake_us = _wake_us(placements, info.name, step_us) if wakes else None
    return ranks, step_us, max(known) if known else None, wake_us


def _wake_us(placements, testbed: str, step_us: float) -> float | None:
    """Replay `WAKE_PROGRAM` on `placements` (see the module docstring); `wake_cost_us` of its iterations, the
    all-reduce after a wake-up at `step_us` per step of its slowest rank's schedule."""
    from genie.core.protocol import ReplayJob
    from genie.core.records import IterationRecords, RankRecords
    from genie.engine.clock import DEFAULT_SPIN_NS
    from genie.engine.program import build_programs, cached_schedule
    from genie.engine.session import SessionOptions, local_sessions
    from genie.testbed import service
    from genie.workloads.native import read_native

    trace = read_native(WAKE_PROGRAM.format(ranks=len(placements), compute_us=WAKE_COMPUTE_US), source="wake-probe")
    programs = {p.rank: p for p in build_programs(trace, source="wake-probe")}
    steps = max(len(cached_schedule(node.op).for_rank(rank).steps)
                for rank, program in programs.items() for node in program.nodes if node.id == 0)
    iterations: list[IterationRecords] = []

    def on_case(index: int, per_rank) -> None:
        iterations.append(IterationRecords(index, tuple(RankRecords(rank, m.t0_ns, tuple(m.records))
                                                        for rank, m in sorted(per_rank.items()))))

    options = SessionOptions(on_pids=lambda pids: service.register_pids(testbed, pids))
    session = local_sessions()(placements, options)
    session.run(lambda rank: ReplayJob(program=programs[rank], iterations=WAKE_ITERATIONS, warmup=1, timeout_s=60.0,
                                       spin_ns=DEFAULT_SPIN_NS), on_case=on_case)
    return wake_cost_us(iterations, WAKE_COMPUTE_US, steps * step_us)


def wake_cost_us(iterations, compute_us: float, follow_us: float) -> float | None:
    """What a wake-up costs the slowest rank beyond the per-step costs, the mean over `iterations` of
    `WAKE_PROGRAM`'s records (real us, >= 0): per iteration two samples, the latest end of node 0 (the first
    all-reduce) after the iteration's start and the latest end of node 2 (the second) after the latest
    deadline of node 1 (compute: node 0's end + `compute_us`), each less `follow_us` (what that all-reduce's
    steps cost at the software probe's per-step time). The mean, not the median: on a loaded host most
    wake-ups are on time and some a scheduler slice late (milliseconds), and an iteration pays the sum of its
    wake-ups. None without records."""
    samples = []
    for iteration in iterations:
        started, computed, ended = [], [], []
        for rank in iteration.ranks:
            nodes = {node: (start, end) for node, start, end in rank.records}
            if {0, 1, 2} <= nodes.keys():
                started.append(nodes[0][1] - rank.t0_ns)
                computed.append(nodes[0][1] + compute_us * 1e3)
                ended.append(nodes[2][1])
        if started:
            samples += [max(started) / 1e3 - follow_us, (max(ended) - max(computed)) / 1e3 - follow_us]
    return max(0.0, sum(samples) / len(samples)) if samples else None


def _shaped_throughput(topology: Topology, links: LinkModel, demand_bps: float) -> float:
    """The largest real aggregate (bit/s) at which the probe's shaped links delivered GOOD_EFFICIENCY with every
    host sending: the topology's demand / N for the smallest N tried that held (see the module docstring).
    A host that carries an aggregate carries every smaller one; slow links do not: on a 4-host star at
    0.8 Mbit/s (wire) the links delivered 0.86-0.90 of their payload limit with 1-s messages, 0.99 at 2 Mbit/s
    and at 100 Mbit/s (measured, docs/dilation.md) - a cost per message that weighs more the slower the link,
    and that dilating (slower links still) only makes worse. So when the topology's own rates (N = 1) fall
    short, the same star is tried at `CHECK_RATE_BPS` per host (or 10 x the rate, when more) first: if this
    host carries that, the shortfall was the slow links', not its throughput, and that aggregate counts as
    carried. Otherwise the rates are lowered (N x 2.5 per round) until the links deliver."""
    from genie.testbed.dilation_rules import nice_factor

    hosts = _probe_hosts(topology)
    factor = nice_factor(max(1.0, demand_bps / FIRST_GUESS_BPS))
    for _ in range(MAX_ROUNDS):
        aggregate = demand_bps / factor
        rate_bps = max(8, round(aggregate / hosts))
        if _efficiency(topology, links, hosts, rate_bps) >= GOOD_EFFICIENCY:
            return aggregate
        if factor == 1.0:  # the topology's own rates fell short: this host's throughput, or slow links?
            check_bps = max(CHECK_RATE_BPS, 10 * rate_bps)
            if _efficiency(topology, links, hosts, check_bps, seconds=CHECK_SECONDS) >= GOOD_EFFICIENCY:
                return float(check_bps * hosts)
        factor = nice_factor(factor * 2.5)
    return demand_bps / factor  # not reached in MAX_ROUNDS: the aggregate of the next factor, not tried


def _efficiency(topology: Topology, links: LinkModel, hosts: int, rate_bps: int,
                seconds: float = BULK_SECONDS) -> float:
    """Every host of a star shaped at `rate_bps` streams to the next at once, a message of `seconds` of the
    rate each: delivered / payload limit."""
    from genie.services.cases import GroupCase, run_cases
    from genie.services.placement import placements_for
    from genie.testbed import service

    from genie.testbed.verify import goodput_bps

    scratch = probe_topology(topology, links, rate_bps=rate_bps, ranks_per_host=1)
    limit_bps = goodput_bps(rate_bps, _probe_mtu(topology))  # the links' payload limit
    size = max(64 << 10, round(limit_bps / 8 * seconds)) // 4 * 4
    with service.temporary_testbed(scratch, links=links) as info:
        placements = placements_for(info, hosts)
        shift = CollectiveOp(Collective.SEND_RECV, size, tuple(range(hosts)), Algorithm.RING, root=0,
                             peer=hosts - 1, dtype_bytes=DEFAULT_DTYPE_BYTES)
        outcome = run_cases([GroupCase((shift,), 1, 2)], placements,
                            on_pids=lambda pids: service.register_pids(info.name, pids))
    # the ring shift's bus bandwidth is what each host sends per second, all of them at once
    return outcome.stats[0].busbw_GBps * 8e9 / limit_bps


def _emulator_late_us(path) -> Optional[float]:
    try:
        value = json.loads(path.read_text()).get("late_median_us")
    except (OSError, ValueError):
        return None
    return None if value is None else max(0.0, float(value))


def auto_dilation(topology: Topology, *, links: LinkModel, source: str | None = None,
                  reference_bytes: int | None = None, iteration: IterationSteps | None = None) -> TimeDilation:
    """Measure this host for `topology` and choose the factor for a run whose smallest message is
    `reference_bytes` (None: not known, 1 KiB), or for a replay's `iteration`; InputError when the topology
    cannot hold it."""
    from genie.testbed.dilation_rules import REFERENCE_MESSAGE_BYTES, choose_dilation

    return choose_dilation(topology, measure_host(topology, links, wakes=iteration is not None), source=source,
                           reference_bytes=reference_bytes or REFERENCE_MESSAGE_BYTES, iteration=iteration)
