"""Where a rank-running service (bench, replay, diagnose, experiment) runs: rank placements, the PID registrar,
the testbed (None for loopback), and what the run directory's manifest says about it; plus the link observers,
capture and fault injection that watch it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from genie.core.dilation import NO_DILATION, DilationChoice, IterationSteps, TimeDilation
from genie.core.errors import InputError, RunFailure

from genie.core.testbed import Shaping, TestbedInfo
from genie.core.placement import RankPlacement
from genie.services.placement import loopback_placements, placements_for

if TYPE_CHECKING:
    from genie.report.manifest import InputDigest


@dataclass(frozen=True)
class Target:
    """Where a run happens: rank placements, the PID registrar, the testbed (None for loopback), and what the
    run directory's manifest says about it."""

    placements: list[RankPlacement]
    on_pids: Optional[Callable[[list[int]], None]]
    name: str
    info: Optional[TestbedInfo] = None
    inputs: tuple[InputDigest, ...] = ()  # the topology's digest
    shaper: Optional[Shaping] = None
    topology: Optional[dict[str, Any]] = None
    warnings: tuple[str, ...] = ()  # for the run's manifest
    dilation: TimeDilation = NO_DILATION  # the run reports in the stated fabric's time (genie.core.dilation)
    #: a sweep's dilation per size when its sizes run at different factors (genie.testbed.dilation_plan)
    dilation_plan: Any = None

    def devices(self) -> list[dict]:
        return [{"rank": p.rank, "host": p.host, "netns": p.netns} for p in self.placements]


def check_one_target(topology: Optional[Path], testbed: Optional[str], loopback: bool, *, command: str) -> None:
    """InputError (naming `command`) unless exactly one of a topology, a testbed or loopback is given."""
    chosen = sum(x is not None and x is not False for x in (topology, testbed, loopback or None))
    if chosen != 1:
        raise InputError("give exactly one of `topology` FILE, `testbed` NAME, `loopback` "
                         "(or `inventory` FILE with `launcher` mpi)", path=command)


@contextlib.contextmanager
def open_target(topology: Optional[Path], testbed: Optional[str], loopback: bool,
                ranks: Optional[int], *, command: str, shared: bool = False,
                dilation: DilationChoice = DilationChoice(), reference_bytes: Optional[int] = None,
                sweep_sizes: Sequence[int] = (), iteration: Optional[IterationSteps] = None,
                size_steps: Optional[Callable[[Any], Any]] = None) -> Iterator[Target]:
    """The chosen target; a topology's testbed lives only inside this block. `command` names the service in
    the error when not exactly one target is given. A live testbed is held for this run (a second run on it
    is refused) unless `shared`: then the target carries a warning for the manifest. `dilation`: a topology's
    testbed is brought up so (``auto`` measures this host first, for a run whose smallest message is
    `reference_bytes`, or for a replay's `iteration`); a running testbed keeps its own (a different factor asked for is refused); loopback
    takes a fixed factor (compute and reported times only). A sweep's `sweep_sizes` under ``auto``: each size
    its own factor, and with an `iteration` the experiment's replay beside it its own (the target's
    `dilation_plan`; the testbed comes up at the smallest size's; `size_steps(topology)`: what each size runs,
    as ``auto`` weighs it)."""
    from genie.services.dilation import loopback_dilation, running_dilation
    from genie.services.dilation_choice import resolve_dilation

    from genie.report.manifest import InputDigest, input_digest, topology_summary

    check_one_target(topology, testbed, loopback, command=command)
    if loopback:
        yield Target(loopback_placements(ranks or 2), None, "loopback", dilation=loopback_dilation(dilation))
        return
    from genie.testbed import service
    from genie.testbed.state import abandoned_live_changes, load_record, run_lock

    if testbed is not None:
        info = service.load_info(testbed)
        running_dilation(info, dilation)
        record = load_record(testbed)
        dead = service.dead_emulators(info.name)
        if dead:  # every op across its delay-shaped links would only time out: say so now
            raise RunFailure(service.broken_message(info.name, dead))
        warnings = (f"shared testbed: other runs may have used {info.name} at the same time; their traffic is in "
                    "this run's numbers and link counters",) if shared else ()
        left = abandoned_live_changes(info.name)
        if left:
            links = ", ".join(f"{info.topology.links[i].a}-{info.topology.links[i].b} {how}"
                              for i, how in sorted(left.items()) if i < len(info.topology.links))
            warnings += (f"a killed fault run left links of {info.name} changed ({links}): this run measures "
                         f"them so; `genie testbed down {info.name}` and up again restores them",)
        with run_lock(info.name, shared=shared):
            yield Target(placements_for(info, ranks), (lambda pids: service.register_pids(info.name, pids)),
                         info.name, info, (InputDigest("topology", record.source or f"testbed {info.name}",
                                                       record.source_digest, 1),),
                         info.shaper, topology_summary(info.topology), warnings, info.dilation)
        return
    from genie.topology import load_topology_file

    topo = load_topology_file(topology)
    digest = input_digest(topology, "topology")
    plan = None
    if sweep_sizes:
        from genie.services.dilation_choice import resolve_dilation_plan

        planned, links = resolve_dilation_plan(dilation, topo, sweep_sizes, source=str(topology),
                                               iteration=iteration, size_steps=size_steps)
        chosen, plan = planned.first, (planned if planned.per_size else None)
    else:
        chosen, links = resolve_dilation(dilation, topo, source=str(topology), reference_bytes=reference_bytes,
                                         iteration=iteration)
    with service.temporary_testbed(topo, source=str(topology), dilation=chosen, links=links) as info:
        yield Target(placements_for(info, ranks), (lambda pids: service.register_pids(info.name, pids)),
                     info.name, info, (digest,), info.shaper, topology_summary(info.topology), (), info.dilation,
                     plan)


def observe(run, target: Target, sample_ms: int, *, report_s: float = 0.0, on_interval=None):
    """Link counters, TCP counters and link samples of a testbed run (nothing for loopback); `on_interval`
    gets an `IntervalReport` every `report_s`."""
    from genie.report.observe import observe_links

    if target.info is None:
        return observe_links(run, None, None)
    from genie.testbed import netlink

    return observe_links(run, target.info, netlink, interval_s=sample_ms / 1e3, report_s=report_s,
                         on_interval=on_interval)


def capture_end_for(target: Target, spec: Optional[str]):
    """The capture LINK checked against the target before anything runs (InputError: exit code 2)."""
    from genie.report.capture import capture_end

    return capture_end(target.info, spec)


@dataclass
class Watch:
    """What watches a run while it goes: link observation, packet capture, the fault injector (the session's
    `fault_hooks`); each None when not asked for or not possible on the target."""

    observer: Any = None
    capturing: Any = None
    injector: Any = None

    @property
    def capture(self) -> Any:
        return self.capturing.result if self.capturing else None

    def links(self) -> Optional[dict[str, Any]]:
        return self.observer.observation.summary() if self.observer else None

    def summary(self) -> dict[str, Any]:
        """Link and capture figures for the manifest's summary."""
        return {**(self.links() or {}), **(self.capture.summary() if self.capturing else {})}


@contextlib.contextmanager
def watched(run, target: Target, *, sample_ms: int, capture_end, fault_plan, report_s: float = 0.0,
            on_interval=None) -> Iterator[Watch]:
    """Capture `capture_end`, observe the links every `sample_ms` and inject `fault_plan` for the block; their
    files join `run` (a RunRecorder) also when the block fails or is interrupted."""
    from genie.faults.service import inject_faults
    from genie.report.capture import capture_link

    with capture_link(run, capture_end, target.dilation.factor) as capturing, observe(run, target, sample_ms, report_s=report_s,
                                                                    on_interval=on_interval) as observer, \
            inject_faults(run, fault_plan, target.info, target.on_pids) as injector:
        yield Watch(observer, capturing, injector)
