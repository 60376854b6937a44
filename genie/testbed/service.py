"""Bringing testbeds up, and inspecting them: checks, write-ahead state, apply with rollback.

Every check runs before anything is created. `up` records the testbed in the state directory before the first
step and rolls back on any failure, Ctrl-C or SIGTERM; it notes each namespace's identity once made, so that
teardown (`genie.testbed.teardown`: `down`, `down_all`, re-exported here) removes only what it made.

Everything that touches the machine goes through a `TestbedEnvironment` (``environment=``; the default `KERNEL`
is pyroute2 plus the userspace emulator backend, `FakeEnvironment` an in-memory model of the same).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from genie.core.dilation import NO_DILATION, TimeDilation
from genie.core.errors import EnvironmentProblem, GenieError
from genie.core.testbed import LinkModel, Shaping, TestbedInfo
from genie.core.topology import Topology
from genie.testbed.backend import apply_plan, undo_steps
from genie.testbed.emulators import EmulatorProcess, remove_emulator_files, stats_path
from genie.testbed.environment import KERNEL, TestbedEnvironment
from genie.testbed.layout import check_testbed_name
from genie.testbed.lifecycle import process_alive, process_start_ticks, signals_deferred, signals_raise
from genie.testbed.observed import EmulatorStatus, NamespaceStatus
from genie.testbed.plan import build_plan
from genie.testbed.shaping import default_link_model, needs_emulation
from genie.testbed.state import (TestbedRecord, create_record, delete_record, load_record, load_trusted_record,
                                 record_names, save_record)
from genie.testbed.steps import CreateNetns, PlanStep, Shaper, ShaperChoice
from genie.testbed.teardown import DownReport, LeftUp, LeftUpReason, down, down_all, require_net_admin

__all__ = ["CreateNetns", "DownReport", "LeftUp", "LeftUpReason", "TestbedStatus", "TestbedSummary", "down",
           "down_all", "list_testbeds", "load_info", "process_alive", "process_start_ticks", "register_pids",
           "require_net_admin", "resolve_shaper", "status", "temporary_testbed", "up"]

_temporary_numbers = itertools.count()


@dataclass(frozen=True)
class TestbedSummary:
    name: str
    source: str | None
    hosts: int
    links: int
    shaper: Shaping
    complete: bool
    namespaces_present: int
    namespaces_planned: int


@dataclass(frozen=True)
class TestbedStatus:
    info: TestbedInfo
    source: str | None
    complete: bool
    namespaces: tuple[NamespaceStatus, ...]
    shaper: Shaper = Shaper.KERNEL
    emulators: tuple[EmulatorStatus, ...] = ()


def resolve_shaper(topology: Topology, choice: ShaperChoice | Shaper, *,
                   netem_available: Callable[[], bool], links: LinkModel = LinkModel.BUCKET) -> Shaper:
    """The shaper a testbed of `topology` uses. AUTO takes netem when `netem_available()` (probed only when a
    link needs delay emulation or a wire), otherwise the userspace emulator; a topology without
    delay/jitter/loss or wires needs neither (KERNEL, unless USERSPACE was asked for)."""
    if isinstance(choice, Shaper):
        choice = ShaperChoice.NETEM if choice is Shaper.KERNEL else ShaperChoice.USERSPACE
    if choice is ShaperChoice.USERSPACE:
        return Shaper.USERSPACE
    emulated = any(needs_emulation(link.shape, links) for link in topology.links)
    if choice is ShaperChoice.NETEM or not emulated:
        return Shaper.KERNEL
    return Shaper.KERNEL if netem_available() else Shaper.USERSPACE


def up(topology: Topology, *, name: str, source: str | os.PathLike[str] | None = None, dry_run: bool = False,
       shaper: ShaperChoice | Shaper = ShaperChoice.AUTO,
       refuse_same_source: bool = True, dilation: TimeDilation = NO_DILATION,
       links: LinkModel | None = None,
       environment: TestbedEnvironment = KERNEL) -> TestbedInfo | list[PlanStep]:
    """Build `topology` as testbed `name` and return its TestbedInfo; with `dry_run` return the plan instead,
    changing nothing (sch_netem from the kernel's module lists, assumed present when they cannot be read). `shaper` picks how delay/jitter/loss are made: netem,
    the userspace emulator, or AUTO (netem where the kernel has it). `source` is the topology file: a second
    `up` of the same file is refused unless `refuse_same_source` is False (temporary testbeds). Under `dilation`
    the links are shaped at rate / N with delay x N (`genie.core.dilation`); `links` says whether rate-shaped
    links are wires or token buckets (`genie.core.testbed.LinkModel`; None: the default for the topology and
    dilation, `genie.testbed.shaping.default_link_model`)."""
    check_testbed_name(name)
    links = links or default_link_model(topology, dilation)
    source_text = str(source) if source is not None else None
    needs_netem = any(needs_emulation(link.shape, links) for link in topology.links)
    if dry_run:  # changes nothing, as root too: the kernel's module list, not a probe in a scratch namespace
        resolved = resolve_shaper(topology, shaper, netem_available=environment.netem_listed, links=links)
        netem = environment.netem_listed() if needs_netem and resolved is Shaper.KERNEL else True
        return list(build_plan(topology, name, netem_available=netem, shaper=resolved, source=source_text,
                               dilation=dilation, links=links).steps)
    require_net_admin(environment)
    source_path = str(Path(source).resolve()) if source is not None else None
    _refuse_duplicate(name, source_path if refuse_same_source else None)
    resolved = resolve_shaper(topology, shaper, netem_available=environment.probe_netem, links=links)
    if resolved is Shaper.USERSPACE and needs_netem and (problem := environment.userspace_problem()):
        raise EnvironmentProblem(problem)
    netem = environment.probe_netem() if needs_netem and resolved is Shaper.KERNEL else True
    plan = build_plan(topology, name, netem_available=netem, shaper=resolved, source=source_text,
                      dilation=dilation, links=links)
    record = TestbedRecord(plan.info, plan.steps, applied_count=0, complete=False, shaper=resolved,
                           owner_pid=os.getpid(), owner_start_ticks=process_start_ticks(os.getpid()),
                           source=source_path, source_digest=_digest(source_path))
    _refuse_taken_namespaces(record, environment)
    progress = {"applied": 0}
    emulators: list[tuple[str, int, int | None]] = []
    identities: list[tuple[str, int, int]] = []

    def current(**changes: object) -> TestbedRecord:
        return dataclasses.replace(record, applied_count=progress["applied"], emulators=tuple(emulators),
                                   namespace_ids=tuple(identities), **changes)  # type: ignore[arg-type]

    def before_step(index: int) -> None:
        progress["applied"] = index + 1
        made = plan.steps[index - 1] if index else None  # applied just now
        if isinstance(made, CreateNetns) and (identity := environment.namespace_identity(made.netns)):
            identities.append((made.netns, *identity))  # noted before anything else happens in it
        if isinstance(plan.steps[index], CreateNetns) or isinstance(made, CreateNetns):
            save_record(current())  # all else lives inside namespaces recorded (and noted) here

    def on_started(process: EmulatorProcess) -> None:  # recorded before the emulator is waited for
        emulators.append((process.netns, process.pid, process.start_ticks))
        save_record(current())

    created = False
    leaked: list[tuple[PlanStep, Exception]] = []  # steps the rollback could not undo
    try:
        with signals_raise() as guard, environment.backend(name, on_started) as backend:
            with signals_deferred():
                create_record(record)  # exclusive: loses cleanly against a concurrent `up` of the same name
                created = True
            apply_plan(backend, plan.steps, before_step=before_step, check_interrupt=guard.check,
                       rollback_failures=leaked)
            try:
                with signals_deferred():
                    progress["applied"] = len(plan.steps)
                    save_record(current(complete=True))
            except BaseException:  # interrupted at the very end: nothing may stay half-recorded
                with signals_deferred():
                    undo_steps(backend, plan.steps)
                raise
    except BaseException:
        if created:
            with signals_deferred():
                environment.end_emulators([EmulatorProcess(*e) for e in emulators])
                left = tuple(s for s, _ in leaked if isinstance(s, CreateNetns) and environment.netns_exists(s.netns))
                if left:  # kept, naming only what is left: `genie testbed down NAME` removes it
                    save_record(dataclasses.replace(current(), steps=left, applied_count=len(left), emulators=()))
                else:
                    delete_record(name)
                    remove_emulator_files(name)
        raise
    return plan.info


def status(name: str, *, environment: TestbedEnvironment = KERNEL) -> TestbedStatus:
    check_testbed_name(name)
    record = load_record(name)
    require_net_admin(environment)
    namespaces = tuple(environment.inspect_namespace(ns) for ns in record.namespaces)
    emulators = tuple(_emulator_status(record.name, EmulatorProcess(*e), environment) for e in record.emulators)
    return TestbedStatus(record.info, record.source, record.complete, namespaces, record.shaper, emulators)


def _emulator_status(testbed: str, process: EmulatorProcess, environment: TestbedEnvironment) -> EmulatorStatus:
    try:
        stats = json.loads(stats_path(testbed, process.netns).read_text())
    except (OSError, ValueError):
        stats = None
    return EmulatorStatus(process.netns, process.pid, environment.emulator_running(process), stats)


def dead_emulators(name: str, *, environment: TestbedEnvironment = KERNEL) -> list[EmulatorProcess]:
    """The link emulators of testbed `name` that are no longer running (its delay-shaped links are then
    down: every run on it would time out)."""
    try:
        record = load_record(name)
    except GenieError:
        return []
    return [p for p in (EmulatorProcess(*e) for e in record.emulators) if not environment.emulator_running(p)]


def broken_message(name: str, dead: list[EmulatorProcess]) -> str:
    first = dead[0]
    more = f" (and {len(dead) - 1} more)" if len(dead) > 1 else ""
    return (f"testbed {name!r} is broken: its link emulator in {first.netns} (pid {first.pid}) is not "
            f"running{more}; run `genie testbed down {name}` and bring it up again")


def corrupt_testbeds() -> list[str]:
    """Names of the testbeds whose state record cannot be read (`genie testbed down NAME --force` removes one)."""
    names = []
    for name in record_names():
        try:
            load_record(name)
        except GenieError:
            names.append(name)
    return names


def list_testbeds(*, environment: TestbedEnvironment = KERNEL) -> list[TestbedSummary]:
    """Every testbed with a readable record (`corrupt_testbeds` names the others)."""
    summaries = []
    for name in record_names():
        try:
            record = load_record(name)
        except GenieError:
            continue
        present = sum(environment.netns_exists(ns) for ns in record.namespaces)
        summaries.append(TestbedSummary(name, record.source, len(record.info.hosts), len(record.info.topology.links),
                                        record.info.shaper, record.complete, present, len(record.namespaces)))
    return summaries


def load_info(name: str) -> TestbedInfo:
    """The TestbedInfo of a testbed that is fully up (for the engine and measurements)."""
    check_testbed_name(name)
    record = load_trusted_record(name)
    if not record.complete:
        raise GenieError(f"testbed {name!r} is not completely up (its `up` failed or is still running); "
                         f"run `genie testbed down {name}`")
    return record.info


def register_pids(name: str, pids: Iterable[int]) -> None:
    """Remember processes started for testbed `name` (e.g. rank launchers outside its namespaces) so that
    `down` ends them too. Each PID is stored with its start time, so a reused PID is never signalled."""
    record = load_record(name)
    alive = tuple((pid, start) for pid, start in record.registered_pids  # ended runs' PIDs are dropped: the list
                  if start is not None and process_start_ticks(pid) == start)  # holds live processes only
    known = {pid for pid, _ in alive}
    added = tuple((pid, process_start_ticks(pid)) for pid in pids if pid not in known)
    save_record(dataclasses.replace(record, registered_pids=alive + added))


@contextmanager
def temporary_testbed(topology: Topology, name: str | None = None, *,
                      source: str | os.PathLike[str] | None = None,
                      shaper: ShaperChoice | Shaper = ShaperChoice.AUTO, dilation: TimeDilation = NO_DILATION,
                      links: LinkModel | None = None,
                      environment: TestbedEnvironment = KERNEL) -> Iterator[TestbedInfo]:
    """Bring a testbed up for the duration of the block and always tear it down (SIGTERM included).
    The default name is ``tmp<pid>-<n>``; the same file may be up elsewhere at the same time."""
    name = name or f"tmp{os.getpid()}-{next(_temporary_numbers)}"
    info = up(topology, name=name, source=source, refuse_same_source=False, shaper=shaper, dilation=dilation,
              links=links, environment=environment)
    assert isinstance(info, TestbedInfo)
    try:
        with signals_raise():
            yield info
    finally:
        with signals_deferred():
            down(name, environment=environment)


def _refuse_taken_namespaces(record: TestbedRecord, environment: TestbedEnvironment) -> None:
    """Refuse a plan one of whose namespaces exists or another testbed's record names (two testbeds' names can
    map to one namespace: ``a`` with node ``b-h0`` and ``a-b`` with node ``h0`` are both ``genie-a-b-h0``)."""
    busy = [ns for ns in record.namespaces if environment.netns_exists(ns)]
    if busy:
        raise GenieError(f"namespace {busy[0]} already exists (another testbed?); choose another --name or run "
                         "`genie testbed down --all`")
    mine = set(record.namespaces)
    for other in record_names():
        if other == record.name:
            continue
        try:
            clash = sorted(mine & set(load_record(other).namespaces))
        except GenieError:
            continue
        if clash:
            raise GenieError(f"namespace {clash[0]} of testbed {record.name!r} is named by testbed {other!r} too "
                             "(the two names map nodes to one namespace); choose another --name")


def _refuse_duplicate(name: str, source_path: str | None) -> None:
    for other in record_names():
        if other == name:
            raise GenieError(f"testbed {name!r} is already up; choose another --name or run "
                             f"`genie testbed down {name}`")
        if source_path is None:
            continue
        try:
            record = load_record(other)
        except GenieError:
            continue
        if record.source == source_path:
            raise GenieError(f"{source_path} is already up as testbed {other!r}; run `genie testbed down {other}` "
                             "first")


def _digest(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None
