"""Bringing testbeds up and down: checks, write-ahead state, apply with rollback, teardown, inspection.

Every check runs before anything is created. `up` records the testbed in the state directory before the first
step and rolls back on any failure, Ctrl-C or SIGTERM. `down` ends every process inside the testbed's
namespaces (by PID), undoes the applied steps in reverse and removes the namespaces, with signals deferred so
it always runs to the end. `down_all` also removes ``genie-*`` namespaces that no state record claims.

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
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from genie.core.dilation import NO_DILATION, TimeDilation
from genie.core.errors import EnvironmentProblem, GenieError, InputError
from genie.core.testbed import LinkModel, Shaping, TestbedInfo
from genie.core.topology import Topology
from genie.testbed.backend import apply_plan, undo_steps
from genie.testbed.emulators import EmulatorProcess, remove_emulator_files, stats_path
from genie.testbed.environment import KERNEL, TestbedEnvironment
from genie.testbed.layout import NETNS_PREFIX, check_testbed_name
from genie.testbed.lifecycle import (process_alive, process_start_ticks, same_process, signals_deferred,
                                     signals_raise)
from genie.testbed.namespaces import SharedNamespace
from genie.testbed.observed import EmulatorStatus, NamespaceStatus
from genie.testbed.plan import build_plan
from genie.testbed.shaping import default_link_model, needs_emulation
from genie.testbed.state import (TestbedRecord, create_record, delete_record, load_record, load_trusted_record,
                                 outside_prefix, record_names, record_path, save_record, state_dir, teardown_lock)
from genie.testbed.steps import CreateNetns, PlanStep, Shaper, ShaperChoice

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


@dataclass(frozen=True)
class DownReport:
    testbeds: tuple[str, ...]  # testbeds torn down
    orphan_namespaces: tuple[str, ...] = ()  # genie-* namespaces without a state record, removed
    pids_ended: tuple[int, ...] = ()
    in_use: tuple[str, ...] = ()  # testbeds left up: a run holds them, or the process that made them still runs
    shared_namespaces: tuple[str, ...] = ()  # genie-* names bound to this machine's own namespace: left alone


def require_net_admin(environment: TestbedEnvironment = KERNEL) -> None:
    if not environment.has_net_admin():
        raise EnvironmentProblem("needs CAP_NET_ADMIN: run as root")


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
    busy = [ns for ns in record.namespaces if environment.netns_exists(ns)]
    if busy:
        raise GenieError(f"namespace {busy[0]} already exists (another testbed?); choose another --name or run "
                         "`genie testbed down --all`")
    progress = {"applied": 0}
    emulators: list[tuple[str, int, int | None]] = []

    def current(**changes: object) -> TestbedRecord:
        return dataclasses.replace(record, applied_count=progress["applied"], emulators=tuple(emulators),
                                   **changes)  # type: ignore[arg-type]

    def before_step(index: int) -> None:
        progress["applied"] = index + 1
        if isinstance(plan.steps[index], CreateNetns):  # all else lives inside namespaces recorded here
            save_record(current())

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
                    save_record(dataclasses.replace(record, steps=left, applied_count=len(left), emulators=()))
                else:
                    delete_record(name)
                    remove_emulator_files(name)
        raise
    return plan.info


def down(name: str, *, force: bool = False, environment: TestbedEnvironment = KERNEL) -> DownReport:
    """End the testbed's processes, undo its steps, remove its namespaces and its state record. A record
    that cannot be read, or that names anything outside ``genie-<name>-*``, is refused; with `force` genie
    forgets it and removes only the ``genie-<name>-*`` namespaces no other testbed claims (and what runs in
    them), whatever the record says."""
    check_testbed_name(name)
    require_net_admin(environment)
    try:
        record = load_record(name)
        outside = outside_prefix(record)
        if outside:
            raise GenieError(f"testbed {name!r}: its state record names {outside[0]!r}, outside "
                             f"{NETNS_PREFIX}{name}-*; genie touches nothing outside its prefix "
                             f"(`genie testbed down {name} --force` forgets the record)")
    except InputError:  # unreadable
        if not force:
            raise
        record = None
    except GenieError:
        if not force or not record_path(name).exists():
            raise
        record = None
    with signals_deferred():
        if record is None:
            pids, removed, shared = _remove_prefixed(name, environment)
            delete_record(name)
            remove_emulator_files(name)
            return DownReport((name,), tuple(removed), tuple(pids), shared_namespaces=tuple(shared))
        pids = _teardown(record, environment)
        delete_record(name)
    return DownReport((name,), (), tuple(pids))


def _remove_prefixed(name: str, environment: TestbedEnvironment) -> tuple[list[int], list[str], list[str]]:
    """End what runs in the ``genie-<name>-*`` namespaces no readable record of another testbed claims, and
    remove them (`_remove_unclaimed`)."""
    prefix = f"{NETNS_PREFIX}{name}-"
    listed = [ns for ns in environment.list_genie_namespaces() if ns.startswith(prefix)]
    return _remove_unclaimed(listed, _claimed_namespaces(skip={name}), environment)


def _remove_unclaimed(listed: Iterable[str], claimed: set[str], environment: TestbedEnvironment
                      ) -> tuple[list[int], list[str], list[str]]:
    """End what runs in each of `listed` not in `claimed` and remove it; a name bound to this machine's own
    namespace (SharedNamespace) is left alone. Returns (PIDs ended, namespaces removed, names left alone)."""
    pids: list[int] = []
    removed: list[str] = []
    shared: list[str] = []
    for netns in listed:
        if netns in claimed:
            continue
        try:
            pids += environment.end_processes(environment.namespace_pids(netns))
        except SharedNamespace:  # not genie's: neither its processes nor its name
            shared.append(netns)
            continue
        environment.remove_namespace(netns)
        removed.append(netns)
    return pids, removed, shared


def down_all(*, force: bool = False, environment: TestbedEnvironment = KERNEL) -> DownReport:
    """Tear down every recorded testbed, then every ``genie-*`` namespace no record claims (leftovers of a
    killed run). A testbed a run holds (`run_lock`: a shared run's and a verify's too) or whose maker still runs
    (an `up` under way, the temporary testbed of a live run) is left up and named in ``in_use``, unless `force`.
    Records are read again after the namespaces are listed: an `up` records its testbed before its first
    namespace, so one running meanwhile keeps what it made. Unreadable records are dropped once their
    namespaces are gone."""
    require_net_admin(environment)
    torn: list[str] = []
    pids: list[int] = []
    unreadable: list[str] = []
    in_use: list[str] = []
    with signals_deferred():
        for name in record_names():
            try:
                record = load_record(name)
            except GenieError:
                unreadable.append(name)
                continue
            if outside_prefix(record):
                unreadable.append(name)  # touch nothing it names: its genie-* namespaces go with the orphans
                continue
            with ExitStack() as held:
                try:
                    held.enter_context(teardown_lock(name))  # held through the teardown: no run starts on it meanwhile
                    busy = _maker_running(record)
                except InputError:
                    busy = True
                if busy and not force:
                    in_use.append(name)
                    continue
                pids += _teardown(record, environment)
                delete_record(name)
            torn.append(name)
        listed = environment.list_genie_namespaces()
        claimed = _claimed_namespaces(skip=set(unreadable))  # read after listing (see above)
        ended, orphans, shared = _remove_unclaimed(listed, claimed, environment)
        pids += ended
        for name in unreadable:
            delete_record(name)
        leftovers = state_dir() / "emulators"
        directories = sorted(leftovers.iterdir()) if leftovers.is_dir() else []
        recorded = set(record_names())  # read after listing, as for the namespaces: an `up` records first
        for directory in directories:
            if directory.name not in recorded:
                remove_emulator_files(directory.name)
    return DownReport(tuple(torn), tuple(orphans), tuple(pids), tuple(in_use), tuple(shared))


def _claimed_namespaces(*, skip: set[str]) -> set[str]:
    """The namespaces the readable records (other than those in `skip`) name."""
    claimed: set[str] = set()
    for name in record_names():
        if name in skip:
            continue
        try:
            claimed.update(load_record(name).namespaces)
        except GenieError:
            continue
    return claimed


def _maker_running(record: TestbedRecord) -> bool:
    """Is the process that brought the testbed up still running (an `up` under way, or the run a temporary
    testbed belongs to)? Its PID with the recorded start time, so a PID the kernel gave to another process since
    does not count, nor a killed maker its parent has not reaped yet (a zombie); a record without the start
    time (older genie): any live process with the PID counts, the safe side."""
    if record.owner_pid == os.getpid():
        return False
    if record.owner_start_ticks is None:
        return process_alive(record.owner_pid)
    return same_process(record.owner_pid, record.owner_start_ticks)


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


def _teardown(record: TestbedRecord, environment: TestbedEnvironment) -> list[int]:
    created = [step.netns for step in record.steps[:record.applied_count] if isinstance(step, CreateNetns)]
    registered = [pid for pid, start in record.registered_pids
                  if start is not None and process_start_ticks(pid) == start]
    emulators = [p.pid for p in (EmulatorProcess(*e) for e in record.emulators) if environment.emulator_running(p)]
    inside = [pid for netns in created for pid in environment.namespace_pids(netns)]
    ended = environment.end_processes(registered + emulators + inside)
    with environment.backend(record.name) as backend:
        undo_steps(backend, record.steps[:record.applied_count])
    for netns in created:
        environment.remove_namespace(netns)
    remove_emulator_files(record.name)
    left = [netns for netns in created if environment.netns_exists(netns)]
    if left:
        raise EnvironmentProblem(f"testbed {record.name!r}: could not remove namespace {left[0]}")
    return ended


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
