"""The state directory: one JSON record per testbed, written before anything is built and kept up to date.

``/run/genie/<name>.json`` (directory overridable with ``GENIE_STATE_DIR``) holds the TestbedInfo, the source
file and its digest, the planned steps and how many of them may have been applied (write-ahead: the count is
raised *before* a step is applied), the shaper and the PIDs registered to the testbed. Records are created
exclusively (a second `up` of the same name loses the race cleanly) and replaced atomically.
"""

from __future__ import annotations

import dataclasses
import contextlib
import fcntl
import json
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Iterator

from genie.core.dilation import TimeDilation
from genie.core.errors import GenieError, InputError
from genie.core.files import write_atomic
from genie.core.testbed import HostEndpoint, LinkEnd, LinkModel, Shaping, TestbedInfo
from genie.core.topology import Host, Link, LinkRole, Switch, SwitchKind, Topology
from genie.linkemu.config import EmulatorConfig
from genie.testbed.layout import NETNS_PREFIX
from genie.testbed.steps import (STEP_TYPES, AddHtb, AddRoute, CreateNetns, NextHop, PlanStep, QdiscParent, Shaper,
                                 StartEmulator)
from genie.topology.link_properties import make_shape

STATE_DIR_ENV = "GENIE_STATE_DIR"
DEFAULT_STATE_DIR = "/run/genie"
RECORD_FORMAT = 1
_STEP_BY_NAME = {cls.__name__: cls for cls in STEP_TYPES}


@dataclass(frozen=True)
class TestbedRecord:
    __test__ = False  # not a pytest test class

    info: TestbedInfo
    steps: tuple[PlanStep, ...]
    applied_count: int  # steps [0, applied_count) may exist
    complete: bool
    shaper: Shaper
    owner_pid: int  # the process that brought it up
    source: str | None = None
    source_digest: str | None = None  # sha256 of the topology file
    registered_pids: tuple[tuple[int, int | None], ...] = ()  # (pid, start ticks) of processes to end on down
    emulators: tuple[tuple[str, int, int | None], ...] = ()  # (netns, pid, start ticks) of link emulators
    owner_start_ticks: int | None = None  # owner_pid's start time (None: not known - records before 2026-12-06)
    #: (netns, device, inode) of each namespace `up` made, noted once made (`genie.testbed.namespaces.identity`):
    #: teardown removes a namespace only while it is still that one (records before 2026-12-06: none)
    namespace_ids: tuple[tuple[str, int, int], ...] = ()

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(step.netns for step in self.steps if isinstance(step, CreateNetns))

    def namespace_identity(self, netns: str) -> tuple[int, int] | None:
        """(device, inode) of namespace `netns` as `up` made it, None if not noted."""
        for name, device, inode in self.namespace_ids:
            if name == netns:
                return device, inode
        return None


def step_namespaces(step: PlanStep) -> set[object]:
    """The namespaces a step names (its ``netns*`` fields; None would be the root namespace)."""
    return {getattr(step, f.name) for f in dataclasses.fields(step) if f.name.startswith("netns")}


def state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


def record_path(name: str) -> Path:
    return state_dir() / f"{name}.json"


def record_names() -> list[str]:
    directory = state_dir()
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.json"))


def create_record(record: TestbedRecord) -> None:
    """Write a new record; GenieError if one with that name exists (checked atomically)."""
    path = record_path(record.name)
    try:
        write_atomic(path, _record_json(record), exclusive=True)
    except FileExistsError:
        raise GenieError(f"testbed {record.name!r} is already up (state in {path}); choose another --name or "
                         f"run `genie testbed down {record.name}`") from None


def save_record(record: TestbedRecord) -> None:
    write_atomic(record_path(record.name), _record_json(record))


def load_record(name: str) -> TestbedRecord:
    path = record_path(name)
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise GenieError(f"no testbed named {name!r} (state directory {state_dir()}); see `genie testbed list`")\
            from None
    except (OSError, ValueError) as exc:
        raise InputError(f"unreadable testbed state: {exc}; `genie testbed down {name} --force` removes it",
                         source=str(path)) from None
    try:
        record = record_from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"unreadable testbed state: missing or bad field {exc}; `genie testbed down {name} "
                         "--force` removes it", source=str(path)) from None
    if record.name != name or data.get("name") != name:  # a copied or renamed record: another testbed's
        raise InputError(f"testbed state of {record.name!r}, not of {name!r}; `genie testbed down {name} --force` "
                         "removes it", source=str(path))
    return record


def outside_prefix(record: TestbedRecord) -> list[str]:
    """The namespaces a record names that are not ``genie-<its name>-*`` (a hand-written or damaged record): in
    its steps and emulators, and where its hosts and link ends run (None there: the root namespace)."""
    prefix = f"{NETNS_PREFIX}{record.name}-"
    named = {netns for step in record.steps for netns in step_namespaces(step)}
    named |= {netns for netns, _pid, _start in record.emulators}
    outside = {n for n in named if n is not None and not (isinstance(n, str) and n.startswith(prefix))}
    runs_in = {h.netns for h in record.info.hosts} | {e.netns for e in record.info.link_ends}
    outside |= {n for n in runs_in if not (isinstance(n, str) and n.startswith(prefix))}
    return sorted(str(n) for n in outside)


def load_trusted_record(name: str) -> TestbedRecord:
    """`load_record`, refused when it names anything outside ``genie-<name>-*`` (`outside_prefix`): how every
    run, live change and cross-traffic reads a testbed (`genie.testbed.service.load_info`,
    `genie.faults.live.LiveTestbed.of`), so none acts on what the record does not own."""
    record = load_record(name)
    if outside := outside_prefix(record):
        raise InputError(f"testbed {name!r}: its state record names {outside[0]!r}, outside {NETNS_PREFIX}{name}-*",
                         source=str(record_path(name)))
    return record


def delete_record(name: str) -> None:
    try:
        record_path(name).unlink()
    except FileNotFoundError:
        pass
    live_changes_path(name).unlink(missing_ok=True)  # the testbed's links are gone with it
    for suffix in ("lock", "use"):  # and so is what a run could hold
        (state_dir() / f"{name}.{suffix}").unlink(missing_ok=True)


_STEPS_JSON: list[tuple[tuple[PlanStep, ...], str]] = []  # the last plan written, as JSON


def _record_json(record: TestbedRecord) -> str:
    """The record as JSON. `up` saves it before every namespace and emulator it creates, and only the small
    fields change between saves, so the steps (thousands on a large fabric: ~1 s to encode) are encoded once
    per plan and spliced in."""
    if not _STEPS_JSON or _STEPS_JSON[0][0] is not record.steps:
        text = json.dumps([step_to_dict(step) for step in record.steps], indent=1, default=_json_default)
        _STEPS_JSON[:] = [(record.steps, text)]
    doc = record_to_dict(record, steps=False)
    head = json.dumps(doc, indent=1, default=_json_default)
    return head[:-2] + ',\n "steps": ' + _STEPS_JSON[0][1].replace("\n", "\n ") + "\n}\n"


def _json_default(value: object) -> object:
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"cannot store {value!r}")


# --- dict <-> dataclasses -------------------------------------------------------------------------------------

def record_to_dict(record: TestbedRecord, *, steps: bool = True) -> dict[str, Any]:
    doc = {
        "format": RECORD_FORMAT,
        "name": record.name,
        "source": record.source,
        "source_digest": record.source_digest,
        "shaper": record.shaper.value,
        "owner_pid": record.owner_pid,
        "owner_start_ticks": record.owner_start_ticks,
        "complete": record.complete,
        "applied_count": record.applied_count,
        "registered_pids": [list(p) for p in record.registered_pids],
        "emulators": [list(e) for e in record.emulators],
        "namespace_ids": [list(n) for n in record.namespace_ids],
        "info": info_to_dict(record.info),
    }
    if steps:
        doc["steps"] = [step_to_dict(step) for step in record.steps]
    return doc


def record_from_dict(data: dict[str, Any]) -> TestbedRecord:
    if data.get("format") != RECORD_FORMAT:
        raise ValueError(f"format {data.get('format')!r}, expected {RECORD_FORMAT}")
    return TestbedRecord(
        info=info_from_dict(data["info"]),
        steps=tuple(step_from_dict(s) for s in data["steps"]),
        applied_count=int(data["applied_count"]),
        complete=bool(data["complete"]),
        shaper=Shaper(data["shaper"]),
        owner_pid=int(data["owner_pid"]),
        owner_start_ticks=None if data.get("owner_start_ticks") is None else int(data["owner_start_ticks"]),
        source=data.get("source"),
        source_digest=data.get("source_digest"),
        registered_pids=tuple((int(p), None if s is None else int(s)) for p, s in data.get("registered_pids", [])),
        emulators=tuple((str(n), int(p), None if s is None else int(s)) for n, p, s in data.get("emulators", [])),
        namespace_ids=tuple((str(n), int(d), int(i)) for n, d, i in data.get("namespace_ids", [])),
    )


def step_to_dict(step: PlanStep) -> dict[str, Any]:
    return {"step": type(step).__name__, **dataclasses.asdict(step)}


def step_from_dict(data: dict[str, Any]) -> PlanStep:
    fields = dict(data)
    cls = _STEP_BY_NAME[fields.pop("step")]
    if cls is AddRoute:
        fields["nexthops"] = tuple(NextHop(**hop) for hop in fields["nexthops"])
    if "parent" in fields:
        fields["parent"] = QdiscParent(fields["parent"])
    if cls is StartEmulator:
        fields["config"] = EmulatorConfig.from_dict(fields["config"])
    if cls is AddHtb:  # records of genie before the ceil bucket: one bucket at the rate
        fields.setdefault("ceil_bps", fields.get("rate_bps"))
        fields.setdefault("cburst_bytes", fields.get("burst_bytes"))
    return cls(**fields)  # type: ignore[no-any-return]


def info_to_dict(info: TestbedInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "prefix": info.prefix,
        "shaper": info.shaper.label,
        "topology": topology_to_dict(info.topology),
        "hosts": [dataclasses.asdict(h) for h in info.hosts],
        "link_ends": [dataclasses.asdict(e) for e in info.link_ends],
        "dilation": info.dilation.to_dict(),
        "links": info.links.value,
    }


def info_from_dict(data: dict[str, Any]) -> TestbedInfo:
    return TestbedInfo(
        name=data["name"],
        prefix=data["prefix"],
        topology=topology_from_dict(data["topology"]),
        hosts=tuple(HostEndpoint(**h) for h in data["hosts"]),
        link_ends=tuple(LinkEnd(**e) for e in data["link_ends"]),
        shaper=Shaping.from_label(data["shaper"]),
        dilation=TimeDilation.from_dict(data.get("dilation")),
        links=LinkModel(data.get("links", LinkModel.BUCKET.value)),
    )


def topology_to_dict(topology: Topology) -> dict[str, Any]:
    return {
        "name": topology.name,
        "subnet": topology.subnet,
        "hosts": [dataclasses.asdict(h) for h in topology.hosts],
        "switches": [{"name": s.name, "kind": s.kind.value} for s in topology.switches],
        "links": [{"a": link.a, "b": link.b, "shape": dataclasses.asdict(link.shape), "role": link.role.value}
                  for link in topology.links],
    }


def topology_from_dict(data: dict[str, Any]) -> Topology:
    return Topology(
        name=data["name"],
        hosts=tuple(Host(**h) for h in data["hosts"]),
        switches=tuple(Switch(s["name"], SwitchKind(s["kind"])) for s in data["switches"]),
        links=tuple(Link(link["a"], link["b"], make_shape(**link["shape"]),
                         LinkRole(link.get("role", LinkRole.NETWORK.value))) for link in data["links"]),
        subnet=data["subnet"],
    )


def _lock_fd(name: str, suffix: str) -> int:
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return os.open(directory / f"{name}.{suffix}", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)


@contextlib.contextmanager
def run_lock(name: str, *, shared: bool = False) -> Iterator[None]:
    """Hold testbed `name` for one run: a second run on it at once is refused (its numbers and link counters
    would mix with this one's). An flock on ``<state dir>/<name>.lock``: the kernel releases it when the run
    ends, however it ends (also SIGKILL), so a stale lock cannot outlive its run. A `shared` run (beside
    others: both runs' numbers disturbed) takes no such lock; every run, shared or not, holds ``<name>.use``
    shared, so that `down --all` (`teardown_lock`) sees it."""
    use = _lock_fd(name, "use")
    try:
        try:
            fcntl.flock(use, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"testbed {name!r} is being torn down", path="testbed") from None
        if shared:
            yield
            return
        fd = _lock_fd(name, "lock")
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
                raise InputError(f"testbed {name!r} is in use by another run (pid {holder}); wait for it to end, "
                                 "or give `shared` to run beside it (both runs' numbers will be disturbed)",
                                 path="testbed") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock
    finally:
        os.close(use)


@contextlib.contextmanager
def teardown_lock(name: str) -> Iterator[None]:
    """Hold testbed `name` against every run while it is torn down: InputError if any run uses it (shared or
    not, `run_lock`); while held, no run starts on it."""
    fds = [_lock_fd(name, "lock"), _lock_fd(name, "use")]
    try:
        for fd in fds:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise InputError(f"testbed {name!r} is in use by a run", path="testbed") from None
        yield
    finally:
        for fd in fds:
            os.close(fd)


# ---- live changes: links a fault run changed, until it restores them -------------------------------------
def live_changes_path(name: str) -> Path:
    return state_dir() / f"{name}.live"


def record_live_change(name: str, link_index: int, change: str | None) -> None:
    """Remember that this process left link `link_index` of testbed `name` changed (`change`: "degraded",
    "down"; None: restored). A run killed before it restores its links leaves the file behind, naming itself."""
    from genie.testbed.lifecycle import process_start_ticks

    if not record_path(name).exists():
        return  # not a recorded testbed (nothing would read the note)
    path = live_changes_path(name)
    try:
        doc = json.loads(path.read_bytes())
        ours = doc.get("pid") == os.getpid()
        links = {str(k): str(v) for k, v in doc.get("links", {}).items()} if ours else {}
    except (OSError, ValueError, AttributeError):
        links = {}
    # what a killed run left changed stays changed (and noted) until `down`
    links = {**{str(k): v for k, v in abandoned_live_changes(name).items()}, **links}
    if change is None:
        links.pop(str(link_index), None)
    else:
        links[str(link_index)] = change
    if not links:
        path.unlink(missing_ok=True)
        return
    doc = {"pid": os.getpid(), "start": process_start_ticks(os.getpid()), "links": links}
    write_atomic(path, json.dumps(doc))


def abandoned_live_changes(name: str) -> dict[int, str]:
    """Links of testbed `name` a run that is gone left changed ({link index: "degraded" or "down"})."""
    from genie.testbed.lifecycle import process_start_ticks

    try:
        doc = json.loads(live_changes_path(name).read_bytes())
        pid, start = int(doc["pid"]), doc.get("start")
        links = {int(k): str(v) for k, v in doc["links"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    if start is not None and process_start_ticks(pid) == start:
        return {}  # that run is still going (a --shared run beside it)
    return links
