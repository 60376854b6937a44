"""The fault service used by `genie bench` and `genie replay`: read faults (file and ``--fault`` specs), check
them against the testbed and the run before anything starts, and inject them for the duration of the run,
writing faults.csv / faults.json into the run directory whatever happens."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from genie.core.errors import InputError, RunFailure
from genie.core.files import InputKind, read_input
from genie.core.protocol import Straggler
from genie.core.testbed import Shaping, TestbedInfo
from genie.faults.injector import FaultInjector
from genie.faults.model import Fault, FaultKind, FaultPlan
from genie.faults.reader import parse_fault_specs, read_faults_yaml
from genie.faults.record import faults_csv, faults_json
from genie.faults.validation import RunBounds, plan_faults

NO_NETEM_PROBLEM = ("live delay/jitter/loss changes need the qdisc sch_netem, missing from this kernel, or a "
                    "testbed whose links already have delay emulation (--shaper userspace); degrade the rate instead")
NO_STAGE_PROBLEM = ("live delay/jitter/loss changes on a userspace-shaped testbed need the link to have delay "
                    "emulation already (a delay, jitter or loss in its topology); {link} has none")


def read_faults(path: Path | None, specs: Sequence[str]) -> list[Fault]:
    """Faults of ``--faults FILE`` followed by those of each ``--fault SPEC`` (InputError: exit code 2)."""
    faults: list[Fault] = []
    if path is not None:
        faults += read_faults_yaml(read_input(path, InputKind.FAULTS), source=str(path))
    return faults + parse_fault_specs(list(specs))


def check_launcher(faults: Sequence[Fault], local: bool, field: str) -> None:
    """Faults need the local launcher; the error names `field` (`RunOptions.faults_field`)."""
    if faults and not local:
        raise InputError("faults are injected on genie's own testbeds: use `launcher` local", path=field)


def bench_bounds(job: Any) -> RunBounds:
    """A bench job's timed ops (every timed iteration of the sweep) and its longest possible duration."""
    ops = sum(case.warmup + case.iterations for case in job.cases)
    return RunBounds(timed_ops=sum(case.iterations for case in job.cases), max_duration_s=ops * job.timeout_s,
                     ranks=len(job.cases[0].op.group) if job.cases else 0, has_compute=False, command="bench")


def replay_bounds(programs: Sequence[Any], iterations: int, warmup: int, timeout_s: float,
                  faults: Sequence[Fault] = ()) -> RunBounds:
    """A replay's timed ops (its timed iterations) and its longest possible duration: per iteration the
    slowest rank's compute (stretched by every straggler factor) plus every communication node taking its
    whole timeout."""
    from genie.core.program import Lane

    stretch = 1.0
    for fault in faults:
        if fault.kind is FaultKind.STRAGGLER and fault.factor and fault.factor > 1:
            stretch *= fault.factor
    per_iteration = max((p.compute_ns / 1e9 * stretch
                         + timeout_s * sum(1 for n in p.nodes if n.lane not in (Lane.COMPUTE, Lane.NONE))
                         for p in programs), default=0.0)
    return RunBounds(timed_ops=iterations, max_duration_s=(iterations + warmup) * per_iteration,
                     ranks=len(programs), has_compute=any(p.compute_ns for p in programs), command="replay")


def _delay_check(faults: Sequence[Fault], info: TestbedInfo | None) -> Callable[[Any], str | None] | None:
    """Why a link's delay/jitter/loss cannot change live on this testbed (None: it can). Netem testbeds change
    netem; userspace-shaped ones change the link emulators' stages of that link (which must exist)."""
    if info is None or not any(f.kind is FaultKind.DEGRADE and f.change.needs_delay_emulation for f in faults):
        return None
    from genie.testbed.state import load_record
    from genie.testbed.steps import Shaper

    record = load_record(info.name)
    if record.shaper is Shaper.USERSPACE:
        from genie.faults.live import emulator_stages

        stages = emulator_stages(record.steps)
        return lambda link: None if all(f"links[{link.link_index}] {a}>{b}" in stages for a, b in link.ends) \
            else NO_STAGE_PROBLEM.format(link=link.name)
    from genie.testbed import netlink

    problem = None if Shaping.NETEM in info.shaper or netlink.probe_netem() else NO_NETEM_PROBLEM
    return lambda link: problem


def plan(faults: Sequence[Fault], info: TestbedInfo | None, bounds: RunBounds) -> FaultPlan:
    """Check `faults` against the target and the run (InputError naming the field: exit code 2)."""
    if not faults:
        return FaultPlan()
    return plan_faults(faults, info, bounds, delay_check=_delay_check(faults, info))


def precheck_topology(faults: Sequence[Fault], topology_path: Path | None,
                      bounds: Callable[[int], RunBounds]) -> None:
    """With ``--topology``, check the faults against the testbed the file will become *before* it is brought
    up (its plan is pure): a bad link, host or rank starts nothing. `bounds(ranks)` gives the run's bounds for
    the topology's rank count. Delay checks that depend on the live shaper run again after `up`."""
    if not faults or topology_path is None:
        return
    from genie.testbed.plan import build_plan
    from genie.topology import load_topology_file

    topology = load_topology_file(topology_path)
    info = dataclasses.replace(build_plan(topology, "precheck", netem_available=True).info, name=topology.name)
    plan_faults(faults, info, bounds(topology.world_size))


def stragglers_by_rank(fault_plan: FaultPlan) -> dict[int, tuple[Straggler, ...]]:
    """What each rank's replay job carries: its stragglers (factor, at_s or at_op)."""
    out: dict[int, tuple[Straggler, ...]] = {}
    for planned in fault_plan.stragglers():
        f = planned.fault
        assert f.rank is not None and f.factor is not None
        out[f.rank] = (*out.get(f.rank, ()), Straggler(factor=f.factor, at_op=f.trigger.at_op, at_s=f.trigger.at_s))
    return out


@contextlib.contextmanager
def inject_faults(run: Any, fault_plan: FaultPlan, info: TestbedInfo | None,
                  on_pids: Callable[[list[int]], None] | None = None, *,
                  network: Any = None) -> Iterator[FaultInjector | None]:
    """Inject `fault_plan` during the block (the yielded injector is the session's `fault_hooks`); afterwards,
    also on failure or Ctrl-C, restore every link, stop cross-traffic and write faults.csv / faults.json to
    `run` (a RunRecorder). A fault that could not be applied fails the run (RunFailure) once the block
    ended. Yields None without faults."""
    if not fault_plan:
        yield None
        return
    needs_network = any(f.kind is not FaultKind.STRAGGLER for f in fault_plan.faults)
    if network is None and needs_network and info is not None:
        from genie.faults.live import LiveTestbed

        network = LiveTestbed.of(info.name, on_pids=on_pids)
    injector = FaultInjector(fault_plan, network, dilation=info.dilation.factor if info is not None else 1.0)
    completed = False
    try:
        yield injector
        completed = True
    finally:
        from genie.testbed.lifecycle import signals_deferred

        with signals_deferred():  # a second Ctrl-C must not leave a link down or degraded
            try:
                records = injector.close()
            finally:
                if network is not None and hasattr(network, "stop_all"):
                    network.stop_all()
        run.write("faults.csv", faults_csv(records))
        run.write("faults.json", faults_json(records, fault_plan))
        failures = injector.failures()
        for message in failures:
            run.warn(f"fault not applied: {message}")
    if completed and failures:
        raise RunFailure(f"{len(failures)} fault(s) could not be applied: {failures[0]}")
