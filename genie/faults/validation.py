"""Checking faults against the testbed and the run before anything starts (pure): unknown links, ranks or
hosts, shapes out of range, ops or times past the end of the run. Every problem is an `InputError` naming the
fault's field (``faults[2].link``), with a did-you-mean where a name is close.

The end of a run is not known up front. An op index must be below the run's number of timed ops (exact). A
time must be within the longest the run can last before its timeouts end it (`RunBounds.max_duration_s`:
bench, every op including warmups taking its whole ``--timeout``; replay, every iteration's communication
nodes taking their whole timeout plus the slowest rank's compute): a time past that can never be reached.
A time within it that the run still does not reach is recorded as ``not_reached`` in faults.csv.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from genie.core.errors import InputError, shown
from genie.core.testbed import TestbedInfo
from genie.faults.model import Fault, FaultKind, FaultPlan, LinkTarget, PlannedFault
from genie.topology.link_properties import shape_problems
from genie.topology.validation import did_you_mean

_SHAPE_KEYS = {"bandwidth": "rate", "delay": "delay", "jitter": "jitter", "loss": "loss"}


@dataclass(frozen=True)
class RunBounds:
    """What the run will be: its number of timed ops, the longest it can last, its ranks, and whether its ops
    have compute (replay) for stragglers to stretch."""

    timed_ops: int
    max_duration_s: float
    ranks: int
    has_compute: bool
    command: str  # bench, replay (for messages)


def link_names(info: TestbedInfo) -> list[str]:
    """One name per link (its first end's view: ``h0-s0``)."""
    first = {}
    for e in info.link_ends:
        first.setdefault(e.link_index, f"{e.node}-{e.peer}")
    return list(first.values())


def resolve_link(info: TestbedInfo, text: str, *, source: str | None, path: str) -> LinkTarget:
    """``A-B`` / ``A:B`` (both directions) or ``A->B`` (A's egress only), A and B the link's endpoints; node
    names may contain ``-``, so every split point is tried. The first link between A and B wins."""
    ends = {}
    for e in info.link_ends:
        ends.setdefault((e.node, e.peer), e)
    spec = text.strip()
    directed = "->" in spec
    candidates = [tuple(spec.split("->", 1))] if directed else \
        [(spec[:i], spec[i + 1:]) for i, ch in enumerate(spec) if ch in "-:"]
    for a, b in candidates:
        end = ends.get((a.strip(), b.strip()))
        if end is not None:
            pair = (end.node, end.peer)
            both = (pair, (end.peer, end.node))
            return LinkTarget(end.link_index, f"{end.node}->{end.peer}" if directed else f"{end.node}-{end.peer}",
                              (pair,) if directed else both)
    names = link_names(info)
    hint = did_you_mean(spec.replace("->", "-").replace(":", "-"),
                        names + [f"{e.node}-{e.peer}" for e in info.link_ends])
    raise InputError(f"no link {shown(spec)} in testbed {info.name}{hint} (links: {', '.join(names)})",
                     source=source, path=path)


def _check_host(info: TestbedInfo, host: str, fault: Fault, key: str) -> None:
    hosts = [h.host for h in info.hosts]
    if host not in hosts:
        raise InputError(f"no host {shown(host)} in testbed {info.name}{did_you_mean(host, hosts)} "
                         f"(hosts: {', '.join(hosts)})", source=fault.source, path=f"{fault.path}.{key}")


def _check_trigger(fault: Fault, bounds: RunBounds) -> None:
    trigger = fault.trigger
    if trigger.at_op is not None and trigger.at_op >= bounds.timed_ops:
        raise InputError(f"op {trigger.at_op} is past the end of the run: it has {bounds.timed_ops} timed ops "
                         f"(0..{bounds.timed_ops - 1})", source=fault.source, path=f"{fault.path}.at_op")
    if trigger.at_s is not None and trigger.at_s > bounds.max_duration_s:
        raise InputError(f"{trigger.at_s:g} s is past the end of the run: it cannot last longer than "
                         f"{bounds.max_duration_s:.6g} s (its ops and --timeout)", source=fault.source,
                         path=f"{fault.path}.at")


DelayCheck = Callable[[LinkTarget], "str | None"]


def _check_shape(info: TestbedInfo, fault: Fault, target: LinkTarget, delay_check: DelayCheck | None) -> None:
    change = fault.change
    problem = delay_check(target) if change.needs_delay_emulation and delay_check is not None else None
    if problem:
        key = next(k for k, v in (("delay", change.delay_us), ("jitter", change.jitter_us),
                                  ("loss", change.loss_pct)) if v is not None)
        raise InputError(problem, source=fault.source, path=f"{fault.path}.{key}")
    shape = info.topology.links[target.link_index].shape
    updates = {k: v for k, v in dataclasses.asdict(change).items() if v is not None}
    new_shape = dataclasses.replace(shape, **updates)
    for key, message in shape_problems(new_shape):
        if key in _SHAPE_KEYS:
            raise InputError(message, source=fault.source, path=f"{fault.path}.{_SHAPE_KEYS[key]}")


def plan_faults(faults: Sequence[Fault], info: TestbedInfo | None, bounds: RunBounds, *,
                delay_check: DelayCheck | None = None) -> FaultPlan:
    """Check every fault; `delay_check(link)` says why this testbed cannot change that link's delay, jitter
    or loss live (None: it can). Raises InputError at the first problem."""
    planned = []
    for index, fault in enumerate(faults):
        _check_trigger(fault, bounds)
        link = None
        if fault.kind is FaultKind.STRAGGLER:
            if not bounds.has_compute:
                raise InputError(f"a straggler slows compute, and {bounds.command} has none (collectives back to "
                                 "back); use it with genie replay", source=fault.source, path=f"{fault.path}.kind")
            assert fault.rank is not None
            if fault.rank >= bounds.ranks:
                raise InputError(f"no rank {fault.rank}: the run has ranks 0..{bounds.ranks - 1}",
                                 source=fault.source, path=f"{fault.path}.rank")
        elif info is None:
            raise InputError(f"a {fault.kind.value} fault needs a testbed (--topology or --testbed), not "
                             "--loopback", source=fault.source, path=f"{fault.path}.kind")
        elif fault.kind is FaultKind.CROSS_TRAFFIC:
            assert fault.src is not None and fault.dst is not None
            _check_host(info, fault.src, fault, "src")
            _check_host(info, fault.dst, fault, "dst")
            if fault.src == fault.dst:
                raise InputError("src and dst are the same host", source=fault.source, path=f"{fault.path}.dst")
        else:
            assert fault.link is not None
            link = resolve_link(info, fault.link, source=fault.source, path=f"{fault.path}.link")
            if fault.kind is FaultKind.DEGRADE:
                _check_shape(info, fault, link, delay_check)
            elif len(link.ends) == 1:
                raise InputError(f"a {fault.kind.value} fault takes the whole link down: name it A-B, not A->B",
                                 source=fault.source, path=f"{fault.path}.link")
        planned.append(PlannedFault(index, fault, link))
    return FaultPlan(tuple(planned))
