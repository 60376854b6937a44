"""Time dilation on a topology (pure): whether a factor can hold, and which factor ``auto`` takes.

Dilation makes links N times slower and longer in real time. Two things stop it from holding:
* a link whose real rate is so low that one MTU-sized packet takes longer than TCP's minimum retransmission
  timeout (200 ms on Linux): TCP would resend packets still on the wire, so the link no longer behaves like
  one (and each such resend is traffic the stated fabric never carries);
* a real delay beyond what a link can hold (10 s per hop, the topology format's own bound) — the emulator's
  delay line and the kernel's queues are sized for that.
Anything else (a factor too small for this host's limits) is a question of accuracy, not possibility: the run
goes ahead and the manifest's dilation says what the host's limits cost (``auto`` chooses so that they do not).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from genie.core.dilation import HostLimit, IterationSteps, TimeDilation, WeighedStep
from genie.core.errors import InputError
from genie.core.topology import Topology
from genie.core.units import describe_rate
from genie.linkemu.line import TCP_IP_HEADER_BYTES, message_wire_bytes
from genie.topology.link_properties import MAX_DELAY_US

TCP_MIN_RTO_S = 0.2  # Linux's TCP_RTO_MIN
ETHERNET_HEADER_BYTES = 14


def slowest_rate_bps(topology: Topology) -> int | None:
    rates = [link.shape.rate_bps for link in topology.links if link.shape.rate_bps is not None]
    return min(rates) if rates else None


def max_factor(topology: Topology) -> float:
    """The largest factor every link of `topology` holds at (see the module docstring); inf without shaped
    or delayed links."""
    limit = float("inf")
    for link in topology.links:
        shape = link.shape
        if shape.rate_bps is not None:
            packet_bits = 8 * (shape.mtu_bytes + ETHERNET_HEADER_BYTES)
            limit = min(limit, shape.rate_bps * TCP_MIN_RTO_S / packet_bits)
        longest_us = shape.delay_us + shape.jitter_us
        if longest_us > 0:
            limit = min(limit, MAX_DELAY_US / longest_us)
    return limit


def check_dilation_holds(topology: Topology, dilation: TimeDilation, *, source: str | None = None) -> None:
    """InputError naming the first link where `dilation` cannot hold (module docstring), with the largest
    factor that would."""
    if not dilation.active:
        return
    n = dilation.factor
    for index, link in enumerate(topology.links):
        shape = link.shape
        real = dilation.real_shape(shape)
        if real.rate_bps is not None:
            packet_s = 8 * (shape.mtu_bytes + ETHERNET_HEADER_BYTES) / real.rate_bps
            if packet_s > TCP_MIN_RTO_S:
                raise InputError(
                    f"time dilation {n:g} cannot hold: {describe_rate(shape.rate_bps)} / {n:g} = "
                    f"{describe_rate(real.rate_bps)} takes {packet_s * 1e3:.0f} ms per {shape.mtu_bytes}-byte packet, "
                    f"longer than TCP's minimum retransmission timeout ({TCP_MIN_RTO_S * 1e3:.0f} ms); the largest "
                    f"factor this topology holds is {max_factor(topology):.4g}", source=source,
                    path=f"links[{index}].bandwidth")
        if real.delay_us + real.jitter_us > MAX_DELAY_US:
            raise InputError(
                f"time dilation {n:g} cannot hold: delay x {n:g} = {(real.delay_us + real.jitter_us) / 1e6:g} s "
                f"per hop, more than a link holds ({MAX_DELAY_US / 1e6:g} s); the largest factor this topology "
                f"holds is {max_factor(topology):.4g}", source=source, path=f"links[{index}].delay")


# ---- auto: the smallest factor that keeps this host's limits out of every figure -------------------------------
TARGET_SHARE = 0.02  # what the host's own limits may cost any reported figure
REFERENCE_MESSAGE_BYTES = 1024  # the smallest figure `auto` protects: one such message between two hosts


@dataclass(frozen=True)
class HostFigures:
    """What `genie.services.host_probe` measured on this host, in real time: the software time of one step of
    a collective among `ranks` ranks (interpreter, sockets, kernel and link emulator: everything but the wire),
    the largest aggregate rate at which shaped links still delivered their rate with every host sending
    (`aggregate_bps`), the link emulator's median release lateness (None when no emulator was in the
    path), and what a wake-up from a timed sleep costs the slowest rank beyond its steps' per-step cost — at
    an iteration's common start and at a compute node's end, until the collective after it ends (`wake_us`,
    mean; None when not measured): a cost of every iteration start and compute node of a replay, not of a
    step."""

    ranks: int
    step_us: float
    aggregate_bps: float
    emulator_late_us: float | None = None
    wake_us: float | None = None


#: a path between two hosts as what bounds a message on it from below: its hops' delays summed (us) and its
#: rate-shaped hops in order, each (rate_bps, mtu_bytes)
PathFloor = tuple[float, tuple[tuple[int, int], ...]]


def host_paths(topology: Topology) -> list[tuple[str, PathFloor]]:
    """Every pair of hosts' path ("src->dst") as a `PathFloor`, in the hosts' order."""
    from genie.testbed.layout import plan_layout
    from genie.testbed.paths import PathFinder

    finder = PathFinder(plan_layout(topology, "auto"))
    names = [h.name for h in topology.hosts]
    out = []
    for src in names:
        for path in finder.paths_from(src, [n for n in names if n != src]):
            shapes = [topology.links[hop.link_index].shape for hop in path.hops]
            out.append((f"{src}->{path.dst}", (sum(shape.delay_us for shape in shapes),
                                                tuple((shape.rate_bps, shape.mtu_bytes) for shape in shapes
                                                      if shape.rate_bps is not None))))
    return out


def path_floors(topology: Topology) -> frozenset[PathFloor]:
    """Every pair of hosts' path (`host_paths`), distinct."""
    return frozenset(floor for _, floor in host_paths(topology))


def last_packet_bytes(size_bytes: int, mtu_bytes: int) -> int:
    """The payload of the last (smallest) packet a message of `size_bytes` is cut into at `mtu_bytes`."""
    mss = mtu_bytes - TCP_IP_HEADER_BYTES
    return size_bytes - (max(1, -(-size_bytes // mss)) - 1) * mss


def message_us(floor: PathFloor, size_bytes: int) -> float:
    """The least time a message of `size_bytes` takes on a path (`PathFloor`): the path's delays, the message
    serialized at its slowest hop and one packet of it (its smallest) at every other hop. A message crosses a
    path packet by packet and each hop stores and forwards a packet, not the message: the hops serialize at
    once but for one packet each (the link emulator's chain of wires passes a message so, `genie.linkemu.line`:
    a one-packet message is serialized at every hop, a large one about once)."""
    delay_us, hops = floor
    if not hops:
        return delay_us
    whole = [8 * message_wire_bytes(size_bytes, mtu) / rate * 1e6 for rate, mtu in hops]
    slowest = whole.index(max(whole))
    packets = sum(8 * message_wire_bytes(last_packet_bytes(size_bytes, mtu), mtu) / rate * 1e6
                  for i, (rate, mtu) in enumerate(hops) if i != slowest)
    return delay_us + whole[slowest] + packets


def smallest_step_us(topology: Topology, reference_bytes: int = REFERENCE_MESSAGE_BYTES) -> tuple[float, str]:
    """The shortest time one message of `reference_bytes` (the smallest a run sends) takes between two hosts
    of the stated fabric (`message_us`), with the pair: the smallest figure that run can report (inf when no
    path has a delay or a rate)."""
    best, pair = float("inf"), ""
    for name, floor in host_paths(topology):
        time_us = message_us(floor, reference_bytes)
        if 0 < time_us < best:
            best, pair = time_us, name
    return best, pair


def message_floor_us(floors: frozenset[PathFloor], size_bytes: int) -> float:
    """The least time a message of `size_bytes` takes between any two hosts (`path_floors`, `message_us`)."""
    return min((message_us(floor, size_bytes) for floor in floors), default=0.0)


def host_egress(topology: Topology) -> tuple[int, int] | None:
    """The most any one host can send at once: its shaped links' rates summed, with their largest MTU, for the
    host where that sum is largest; None when a host has an unshaped link (nothing bounds what it sends)."""
    best: tuple[int, int] | None = None
    for host in topology.hosts:
        shapes = [link.shape for link in topology.links if host.name in link.endpoints]
        if not shapes or any(shape.rate_bps is None for shape in shapes):
            return None
        egress = (sum(shape.rate_bps for shape in shapes), max(shape.mtu_bytes for shape in shapes))
        best = egress if best is None or egress[0] > best[0] else best
    return best


def step_floor_us(floors: frozenset[PathFloor], egress: tuple[int, int] | None, size_bytes: int,
                  leaving: tuple[int, ...] = ()) -> float:
    """The least time one step of a rank takes: its largest message (`size_bytes`) between the two closest
    hosts (`message_floor_us`), and at least the messages it sends to ranks on other hosts (`leaving`: their
    sizes) leaving its host at once, each serialized at that host's links' summed rate (`host_egress`: an
    all-to-all's 7 sends per rank on a star share the host's one link; a ring's one send per step is its
    message's time)."""
    one = message_floor_us(floors, size_bytes)
    if len(leaving) <= 1 or egress is None:
        return one
    rate_bps, mtu = egress
    return max(one, sum(8 * message_wire_bytes(size, mtu) for size in leaving) / rate_bps * 1e6)


@dataclass(frozen=True)
class IterationFloor:
    """One rank of a replay as the host's costs weigh on it: its `steps` (each pays the host's per-step cost
    once), its `wakes` (each pays the host's wake-up cost once: the iteration's start, and each compute
    node that hands over to communication or ends the iteration — a compute node followed only by compute
    is made up by the next one's deadline, `genie.engine.walker`) and the least time its iteration takes on
    the stated fabric (`floor_us`: its longest chain of dependent nodes, compute at its duration and each
    message step at its `step_floor_us`), with that chain's compute (`compute_us`)."""

    rank: int
    steps: int
    floor_us: float
    compute_us: float
    wakes: int = 1


def rank_floors(topology: Topology, iteration: IterationSteps) -> list[IterationFloor]:
    """Every rank of `iteration` that sends a message, as an `IterationFloor`."""
    floors, egress = path_floors(topology), host_egress(topology)
    hosts = topology.rank_hosts()  # global ranks numbered host by host (`genie.services.placement`)
    wire = functools.lru_cache(maxsize=None)(lambda size, leaving: step_floor_us(floors, egress, size, leaving))
    out = []
    for rank, nodes in enumerate(iteration.ranks):
        host = hosts[rank] if rank < len(hosts) else None

        def away(peer: int) -> bool:
            """A rank on another host than this one (a rank past the topology's: another)."""
            return host is None or peer >= len(hosts) or hosts[peer] != host

        def step_us(step: WeighedStep) -> float:
            """The step's least wire time: none when no message it sends or receives leaves this host (ranks of
            one host talk over loopback, not the stated fabric), else `step_floor_us` of its largest message to
            or from another host, with its sends to other hosts leaving at once."""
            crossing = [size for peer, size in (*step.sends, *step.recvs) if away(peer)]
            if not crossing:
                return 0.0
            return wire(max(crossing), tuple(size for peer, size in step.sends if away(peer)))

        ends: list[tuple[float, float]] = []  # per node: (the chain's end, its compute), in microseconds
        steps = 0
        handed_over = [False] * len(nodes)  # a node with a dependent that is not compute (or none at all)
        followed = [False] * len(nodes)
        for node in nodes:
            start, compute = max((ends[d] for d in node.deps if d < len(ends)), default=(0.0, 0.0))
            took = node.compute_ns / 1e3 + sum(step_us(step) for step in node.steps)
            ends.append((start + took, compute + node.compute_ns / 1e3))
            steps += sum(step.messages for step in node.steps)
            for d in node.deps:
                if d < len(nodes):
                    followed[d] = True
                    handed_over[d] = handed_over[d] or node.compute_ns == 0 or bool(node.steps)
        if not steps:
            continue
        wakes = 1 + sum(1 for i, node in enumerate(nodes)
                        if node.compute_ns > 0 and (handed_over[i] or not followed[i]))
        end, compute = max(ends)
        if end > 0:
            out.append(IterationFloor(rank, steps, end, compute, wakes))
    return out


def iteration_floor(topology: Topology, iteration: IterationSteps) -> IterationFloor | None:
    """The rank of `iteration` with the most steps per microsecond of its floor (`rank_floors`); None when
    no rank sends a message."""
    return max(rank_floors(topology, iteration), key=lambda f: f.steps / f.floor_us, default=None)


def wake_floor(topology: Topology, iteration: IterationSteps) -> IterationFloor | None:
    """The rank of `iteration` with the most wake-ups per microsecond of its floor (`rank_floors`)."""
    return max(rank_floors(topology, iteration), key=lambda f: f.wakes / f.floor_us, default=None)


def demanded_bps(topology: Topology) -> float:
    """What the stated fabric's hosts can send at once: every host's shaped links at their rates (a host with
    an unshaped link asks for nothing the dilation could lower)."""
    hosts = {h.name for h in topology.hosts}
    total = 0.0
    for link in topology.links:
        if link.shape.rate_bps is not None:
            total += link.shape.rate_bps * sum(1 for end in link.endpoints if end in hosts)
    return total


def nice_factor(factor: float) -> float:
    """`factor` rounded up to 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten (a factor people can read)."""
    if factor <= 1:
        return 1.0
    exponent = math.floor(math.log10(factor))
    for step in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        value = step * 10**exponent
        if value >= factor * (1 - 1e-12):
            return float(value)
    return float(10 ** (exponent + 1))


def choose_dilation(topology: Topology, figures: HostFigures, *, source: str | None = None,
                    reference_bytes: int = REFERENCE_MESSAGE_BYTES,
                    iteration: IterationSteps | None = None) -> TimeDilation:
    """The smallest (rounded) factor at which each measured limit of this host costs under TARGET_SHARE of the
    smallest figure a run on `topology` reports, and whose summed link rates stay within what the host
    delivered through shaped links; InputError when the topology cannot hold it (`check_dilation_holds`).
    The smallest figure: one message of `reference_bytes` (a sweep's size, a bench's smallest; 1 KiB when the
    run is not known yet); for a replay (`iteration`: one clock over the whole trace) its iteration — every
    step of its busiest rank pays the host's per-step cost once, against the least time that iteration takes
    (`iteration_floor`), and every wake-up of a rank (its iteration's start, its compute nodes' ends that hand
    over) the measured wake-up cost once, against its least time (`wake_floor`), each limit on its own as the
    software's and the emulator's (their costs add up in an iteration: at most ~3 x 2 %, within the 5 % a
    replay is held to, and a throughput-bound trace keeps its factor)."""
    floor = iteration_floor(topology, iteration) if iteration is not None else None
    if floor is not None:
        per_us = floor.steps / floor.floor_us  # the per-step costs' share of the iteration is cost x per_us / N
        what = (f"rank {floor.rank}'s {iteration.label} ({floor.steps} steps in at least "
                f"{floor.floor_us / 1e3:.4g} ms, {floor.compute_us / 1e3:.4g} ms of it compute)")
        driver_text = f"for the {iteration.label}"
    else:
        step_us, pair = smallest_step_us(topology, reference_bytes)
        per_us = 1 / step_us if math.isfinite(step_us) else None
        what = f"a {reference_bytes}-byte message ({step_us:.3g} us, {pair})"
        driver_text = f"for a {reference_bytes}-byte message"
    limits = []
    if per_us is not None:
        need = figures.step_us * per_us / TARGET_SHARE
        limits.append(HostLimit("software", figures.step_us, "us per step", need,
                                f"{figures.step_us:.1f} us of software per step with {figures.ranks} ranks must be "
                                f"under {TARGET_SHARE:.0%} of {what}: N >= {need:.4g}"))
    demand = demanded_bps(topology)
    if demand and 0 < figures.aggregate_bps < float("inf"):
        need = demand / figures.aggregate_bps
        limits.append(HostLimit("throughput", figures.aggregate_bps, "bit/s", need,
                                f"the hosts' links ask {describe_rate(round(demand))} at once; shaped links on this "
                                f"host delivered their rate up to {describe_rate(round(figures.aggregate_bps))} "
                                f"in all: N >= {need:.4g}"))
    if figures.emulator_late_us is not None and per_us is not None:
        need = figures.emulator_late_us * per_us / TARGET_SHARE
        limits.append(HostLimit("emulator", figures.emulator_late_us, "us late", need,
                                f"the link emulator releases packets {figures.emulator_late_us:.1f} us late (median), "
                                f"per step to be under {TARGET_SHARE:.0%} of {what}: N >= {need:.4g}"))
    woken = wake_floor(topology, iteration) if iteration is not None and figures.wake_us else None
    if woken is not None:
        need = figures.wake_us * woken.wakes / woken.floor_us / TARGET_SHARE
        limits.append(HostLimit("wake-up", figures.wake_us, "us per wake-up", need,
                                f"a wake-up costs the slowest of {figures.ranks} ranks {figures.wake_us:.0f} us (mean, "
                                f"at an iteration's start or a compute node's end, to the end of the collective "
                                f"after it beyond its steps); rank {woken.rank}'s {woken.wakes} wake-ups per "
                                f"iteration must be under {TARGET_SHARE:.0%} of its least time "
                                f"({woken.floor_us / 1e3:.4g} ms): N >= {need:.4g}"))
    need = max([1.0] + [limit.needed_factor for limit in limits])
    factor = nice_factor(need)
    binding = max(limits, key=lambda limit: limit.needed_factor).name if limits and need > 1 else None
    driver = f" {driver_text}" if binding in ("software", "emulator", "wake-up") else ""  # what decides
    reason = (f"auto: {binding} needs N >= {need:.4g}{driver}, rounded up" if binding
              else "auto: this host's limits cost under 2% without dilation")
    holds = max_factor(topology)
    if factor > holds:
        raise InputError(f"auto dilation needs N >= {need:.4g} on this host ({binding}), but the topology holds "
                         f"only up to {holds:.4g} (its slowest link would no longer be a wire); give a smaller "
                         "factor and accept the host's limits in the figures, or a faster topology",
                         source=source, path="time_dilation")
    return TimeDilation(factor, reason, tuple(limits))
