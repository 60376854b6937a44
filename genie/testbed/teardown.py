"""Taking testbeds down: `down` (one testbed), `down_all` (every testbed, then the leftovers of killed runs).

`down` ends every process inside the testbed's namespaces (by PID), undoes the applied steps in reverse and
removes the namespaces, with signals deferred so it always runs to the end. It acts only on the namespaces that
are still the ones its `up` made (`owned_namespaces`): two testbeds' names can map to one namespace name
(``a`` with node ``b-h0``, ``a-b`` with node ``h0``: ``genie-a-b-h0``), and a record is trusted with its own
namespaces only. `down_all` also removes ``genie-*`` namespaces that no state record claims, except the
scratch namespace of a kernel probe whose process still runs.

Everything that touches the machine goes through a `TestbedEnvironment` (`genie.testbed.environment`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from enum import Enum

from genie.core.errors import EnvironmentProblem, GenieError, InputError
from genie.testbed.backend import undo_steps
from genie.testbed.emulators import EmulatorProcess, remove_emulator_files
from genie.testbed.environment import KERNEL, TestbedEnvironment
from genie.testbed.layout import NETNS_PREFIX, check_testbed_name, probe_owner
from genie.testbed.lifecycle import process_alive, process_start_ticks, same_process, signals_deferred
from genie.testbed.namespaces import SharedNamespace
from genie.testbed.state import (TestbedRecord, delete_record, load_record, outside_prefix, record_names,
                                 record_path, state_dir, step_namespaces, teardown_lock)
from genie.testbed.steps import CreateNetns


class LeftUpReason(Enum):
    RUN_HOLDS = "a run holds it"  # `run_lock`: a replay, bench, shared run or verify on it
    MAKER_RUNS = "the process that made it still runs"  # an `up` under way, or a live run's temporary testbed


@dataclass(frozen=True)
class LeftUp:
    """A testbed `down --all` left up, and why."""

    name: str
    reason: LeftUpReason
    pid: int | None = None  # the maker's PID (MAKER_RUNS)

    def describe(self) -> str:
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        return f"{self.reason.value}{pid}"


@dataclass(frozen=True)
class DownReport:
    testbeds: tuple[str, ...]  # testbeds torn down
    orphan_namespaces: tuple[str, ...] = ()  # genie-* namespaces without a state record, removed
    pids_ended: tuple[int, ...] = ()
    left_up: tuple[LeftUp, ...] = ()  # testbeds left up: a run holds them, or the process that made them still runs
    shared_namespaces: tuple[str, ...] = ()  # genie-* names bound to this machine's own namespace: left alone
    not_owned: tuple[str, ...] = ()  # namespaces a record names that are no longer the ones its `up` made

    @property
    def in_use(self) -> tuple[str, ...]:
        return tuple(left.name for left in self.left_up)

    @property
    def complete(self) -> bool:
        """Did it take down everything it was asked to (nothing left up)?"""
        return not self.left_up


def require_net_admin(environment: TestbedEnvironment = KERNEL) -> None:
    if not environment.has_net_admin():
        raise EnvironmentProblem("needs CAP_NET_ADMIN: run as root")


def down(name: str, *, force: bool = False, environment: TestbedEnvironment = KERNEL) -> DownReport:
    """End the testbed's processes, undo its steps, remove its namespaces and its state record. A record
    that cannot be read, or that names anything outside ``genie-<name>-*``, is refused; with `force` genie
    forgets it and removes only the ``genie-<name>-*`` namespaces no other testbed claims or could have made
    (and what runs in them), whatever the record says."""
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
        pids, not_owned = _teardown(record, environment)
        delete_record(name)
    return DownReport((name,), (), tuple(pids), not_owned=tuple(not_owned))


def _remove_prefixed(name: str, environment: TestbedEnvironment) -> tuple[list[int], list[str], list[str]]:
    """End what runs in the ``genie-<name>-*`` namespaces no readable record of another testbed claims, and
    that no other recorded testbed could have made (``genie-<name>-x-*`` when a testbed ``<name>-x`` is
    recorded, even unreadably), and remove them (`_remove_unclaimed`)."""
    prefix = f"{NETNS_PREFIX}{name}-"
    others = [f"{NETNS_PREFIX}{other}-" for other in record_names() if other != name]
    listed = [ns for ns in environment.list_genie_namespaces()
              if ns.startswith(prefix) and not any(ns.startswith(p) for p in others)]
    return _remove_unclaimed(listed, claimed_namespaces(skip={name}), environment)


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
    killed run) but the probe namespace of a live process (`live_probe`). A testbed a run holds (`run_lock`: a
    shared run's and a verify's too) or whose maker still runs (an `up` under way, the temporary testbed of a
    live run) is left up and named in ``left_up`` with the reason, unless `force`. Records are read again after
    the namespaces are listed: an `up` records its testbed before its first namespace, so one running meanwhile
    keeps what it made. Unreadable records are dropped once their namespaces are gone."""
    require_net_admin(environment)
    torn: list[str] = []
    pids: list[int] = []
    unreadable: list[str] = []
    left_up: list[LeftUp] = []
    not_owned: list[str] = []
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
                    left = LeftUp(name, LeftUpReason.MAKER_RUNS, record.owner_pid) if _maker_running(record) else None
                except InputError:
                    left = LeftUp(name, LeftUpReason.RUN_HOLDS)
                if left is not None and not force:
                    left_up.append(left)
                    continue
                ended, foreign = _teardown(record, environment)
                pids += ended
                not_owned += foreign
                delete_record(name)
            torn.append(name)
        listed = [ns for ns in environment.list_genie_namespaces() if not live_probe(ns)]
        claimed = claimed_namespaces(skip=set(unreadable))  # read after listing (see above)
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
    return DownReport(tuple(torn), tuple(orphans), tuple(pids), tuple(left_up), tuple(shared), tuple(not_owned))


def live_probe(netns: str) -> bool:
    """Is `netns` the scratch namespace of a kernel probe whose process still runs (an `up` of any state
    directory probing for sch_netem, `genie.testbed.layout.probe_netns_name`)? Its PID with its start time."""
    owner = probe_owner(netns)
    return owner is not None and same_process(*owner)


def claimed_namespaces(*, skip: set[str]) -> set[str]:
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


def owned_namespaces(record: TestbedRecord, environment: TestbedEnvironment) -> tuple[list[str], list[str]]:
    """The namespaces the record's applied steps made that are still the testbed's, and those that are not
    (existing, but no longer the ones its `up` made). One the record noted (`TestbedRecord.namespace_ids`) is the
    testbed's while its identity is the noted one; one not noted (a record of older genie, or an `up` killed
    right after making it) while no other readable record names it."""
    created = [step.netns for step in record.steps[:record.applied_count] if isinstance(step, CreateNetns)]
    elsewhere: set[str] | None = None
    owned: list[str] = []
    foreign: list[str] = []
    for netns in created:
        current = environment.namespace_identity(netns)
        if current is None:
            owned.append(netns)  # gone already: nothing of anyone's to touch
            continue
        noted = record.namespace_identity(netns)
        if noted is None:
            if elsewhere is None:
                elsewhere = claimed_namespaces(skip={record.name})
            mine = netns not in elsewhere
        else:
            mine = noted == current
        (owned if mine else foreign).append(netns)
    return owned, foreign


def _teardown(record: TestbedRecord, environment: TestbedEnvironment) -> tuple[list[int], list[str]]:
    """End the testbed's processes, undo its steps and remove its namespaces: only those it owns
    (`owned_namespaces`), and only the steps inside them. Returns (PIDs ended, namespaces left alone)."""
    owned, foreign = owned_namespaces(record, environment)
    registered = [pid for pid, start in record.registered_pids
                  if start is not None and process_start_ticks(pid) == start]
    emulators = [p.pid for p in (EmulatorProcess(*e) for e in record.emulators) if environment.emulator_running(p)]
    inside = [pid for netns in owned for pid in environment.namespace_pids(netns)]
    ended = environment.end_processes(registered + emulators + inside)
    mine = set(owned)
    steps = [step for step in record.steps[:record.applied_count] if step_namespaces(step) <= mine]
    with environment.backend(record.name) as backend:
        undo_steps(backend, steps)
    for netns in owned:
        environment.remove_namespace(netns)
    remove_emulator_files(record.name)
    left = [netns for netns in owned if environment.netns_exists(netns)]
    if left:
        raise EnvironmentProblem(f"testbed {record.name!r}: could not remove namespace {left[0]}")
    return ended, foreign
