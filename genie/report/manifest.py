"""manifest.json: what a run was (command, versions, kernel, inputs and their digests), how it ended, and what it
produced. `RunRecorder` keeps it current while a command runs, so an interrupted run still says what finished.

Life of a manifest: written at the start with status ``running``; rewritten (atomically) each time the
command adds a file; on exit marked ``complete``, ``failed`` (an exception, its message in ``error``) or
``interrupted`` (Ctrl-C, or SIGTERM/SIGHUP which genie raises as `Terminated`, a KeyboardInterrupt).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from genie import __version__
from genie.core.errors import InputError
from genie.core.files import InputKind, read_input
from genie.core.jsondoc import decode_json
from genie.core.testbed import Shaping
from genie.core.topology import Topology
from genie.core.files import write_atomic
from genie.report.rundir import check_run_dir, new_run_dir

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "genie-run"
MANIFEST_VERSION = 1


class RunStatus(Enum):
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class InputDigest:
    """An input named on the command line: a file, a directory (every file under it) or a prefix (its
    siblings ``prefix.*``, e.g. a Chakra ET set). sha256 over the sorted (relative name, file sha256) pairs,
    or of the bytes for a single file; None if nothing was readable."""

    role: str  # topology, trace, testbed, run...
    path: str
    sha256: str | None
    files: int = 0
    size_bytes: int = 0


@dataclass(frozen=True)
class RunFile:
    name: str  # relative to the run directory
    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    kind: str  # bench, replay, compare, estimate, experiment, diagnose
    name: str
    argv: tuple[str, ...]
    started_at: str  # ISO 8601, UTC
    status: RunStatus = RunStatus.RUNNING
    genie_version: str = __version__
    python_version: str = field(default_factory=lambda: platform.python_version())
    kernel: Mapping[str, str] = field(default_factory=dict)
    target: str | None = None  # loopback, a testbed name, an inventory...
    shaper: Shaping | None = None  # written as its label: htb, htb+netem, htb+userspace, none...
    topology: Mapping[str, Any] | None = None  # name, hosts, links, link_rate_bps
    #: factor, reason (and the host limits `auto` measured): every time and rate of the run is emulated
    time_dilation: Mapping[str, Any] | None = None
    inputs: tuple[InputDigest, ...] = ()
    seed: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    ended_at: str | None = None
    duration_s: float | None = None
    error: str | None = None
    files: tuple[RunFile, ...] = ()
    summary: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    pid: int | None = None  # the process writing the run, with its start time: a `running` manifest whose
    pid_start: int | None = None  # process is gone was killed (`mark_abandoned_runs`)

    def file_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.files)


def kernel_facts() -> dict[str, str]:
    u = os.uname()
    return {"sysname": u.sysname, "release": u.release, "version": u.version, "machine": u.machine}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def input_digest(path: str | os.PathLike[str], role: str) -> InputDigest:
    """Digest of an input file, directory or prefix (see `InputDigest`)."""
    p = Path(path)
    if p.is_file():
        files = [p]
        if re.match(r"^.+\.\d+\.et(\.gz)?$", p.name):  # one file of a Chakra ET set: digest the whole set
            prefix = re.sub(r"\.\d+\.et(\.gz)?$", "", p.name)
            files = sorted(q for q in p.parent.glob(f"{prefix}.*") if q.is_file())
        base = p.parent
    elif p.is_dir():
        files, base = sorted(q for q in p.rglob("*") if q.is_file()), p
    else:
        files, base = sorted(q for q in p.parent.glob(f"{p.name}.*") if q.is_file()), p.parent
    if not files:
        return InputDigest(role, str(path), None)
    if len(files) == 1 and files[0] == p:
        return InputDigest(role, str(path), _sha256_file(p), 1, p.stat().st_size)
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(base).as_posix()}\0{_sha256_file(f)}\n".encode())
    return InputDigest(role, str(path), h.hexdigest(), len(files), sum(f.stat().st_size for f in files))


def topology_summary(topology: Topology) -> dict[str, Any]:
    """name, counts, and ``link_rate_bps``: the slowest shaped rate of a host's link (the line rate a busbw
    curve is held against), None when a host link is unshaped."""
    hosts = {h.name for h in topology.hosts}
    host_rates = [link.shape.rate_bps for link in topology.links if hosts & set(link.endpoints)]
    rate = min(host_rates) if host_rates and all(host_rates) else None  # type: ignore[type-var]
    return {"name": topology.name, "hosts": len(topology.hosts), "ranks": topology.world_size,
            "switches": len(topology.switches), "links": len(topology.links), "link_rate_bps": rate}


# ---- JSON ------------------------------------------------------------------------------------------------
def manifest_to_json(m: Manifest) -> str:
    doc = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, **dataclasses.asdict(m)}
    doc["status"] = m.status.value
    doc["shaper"] = m.shaper.label if m.shaper is not None else None
    return json.dumps(doc, indent=2, default=str) + "\n"


def manifest_from_json(data: bytes | str, *, source: str = MANIFEST_NAME) -> Manifest:
    doc = decode_json(data, source=source, allow_nan=True)  # genie wrote it: a NaN summary figure reads back
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise InputError(f"not a genie run manifest (format is not {MANIFEST_FORMAT!r})", source=source, path="format")
    for key in ("kind", "name", "argv", "started_at", "status"):
        if key not in doc:
            raise InputError("missing field", source=source, path=key)
    try:
        status = RunStatus(doc["status"])
    except ValueError:
        raise InputError(f"unknown status {doc['status']!r}", source=source, path="status") from None
    try:
        inputs = tuple(InputDigest(**i) for i in doc.get("inputs") or ())
        files = tuple(RunFile(**f) for f in doc.get("files") or ())
    except TypeError as exc:
        raise InputError(f"malformed entry ({exc})", source=source, path="inputs/files") from None
    try:
        shaper = Shaping.from_label(doc["shaper"]) if doc.get("shaper") is not None else None
    except (ValueError, AttributeError) as exc:
        raise InputError(f"unknown shaper {doc['shaper']!r} ({exc})", source=source, path="shaper") from None
    known = {f.name for f in dataclasses.fields(Manifest)} - {"status", "inputs", "files", "argv", "shaper"}
    rest = {k: v for k, v in doc.items() if k in known}
    rest["warnings"] = tuple(rest.get("warnings") or ())
    return Manifest(**rest, argv=tuple(doc["argv"]), status=status, shaper=shaper, inputs=inputs, files=files)


def read_manifest(run_dir: Path) -> Manifest:
    path = Path(run_dir) / MANIFEST_NAME
    return manifest_from_json(read_input(path, InputKind.RUN_FILE), source=str(path))


def add_run_files(run_dir: Path, written: Iterable[str]) -> None:
    """Record files added to a finished run (e.g. report.html) in its manifest, if it has one."""
    run_dir = Path(run_dir)
    if not (run_dir / MANIFEST_NAME).exists():
        return
    m = read_manifest(run_dir)
    files = {f.name: f for f in m.files}
    for name in written:
        path = run_dir / name
        files[name] = RunFile(name, path.stat().st_size, _sha256_file(path))
    write_atomic(run_dir / MANIFEST_NAME, manifest_to_json(dataclasses.replace(m, files=tuple(files.values()))))


def mark_abandoned_runs(root: Path) -> list[Path]:
    """Mark `interrupted` every run directory under `root` whose manifest still says `running` although the
    process writing it is gone (a SIGKILLed run cannot say so itself); its finished files stay listed."""
    from genie.testbed.lifecycle import process_start_ticks

    marked = []
    for path in sorted(Path(root).glob(f"*/{MANIFEST_NAME}")) if Path(root).is_dir() else []:
        try:
            m = manifest_from_json(read_input(path, InputKind.RUN_FILE), source=str(path))
        except InputError:
            continue
        if m.status is not RunStatus.RUNNING or m.pid is None or m.pid_start is None:
            continue
        if process_start_ticks(m.pid) == m.pid_start:
            continue  # still running
        done = dataclasses.replace(m, status=RunStatus.INTERRUPTED, ended_at=m.ended_at or utc_now(),
                                   error=f"the run's process (pid {m.pid}) ended without finishing it (killed?)")
        write_atomic(path, manifest_to_json(done))
        marked.append(path.parent)
    return marked


# ---- the recorder ----------------------------------------------------------------------------------------
class RunRecorder:
    """Context manager around one command's run directory and manifest::

        with RunRecorder("bench", out=args.out, inputs=[input_digest(topo, "topology")]) as run:
            run.describe(target="tb1", shaper=Shaping.HTB)
            run.write("sweep.csv", text)          # atomic; listed in the manifest at once
            run.set_summary({"cases": 6})
    """

    def __init__(self, kind: str, *, name: str | None = None, out: Path | None = None, root: Path = Path("runs"),
                 argv: Iterable[str] | None = None, inputs: Iterable[InputDigest] = (), seed: int | None = None,
                 params: Mapping[str, Any] | None = None, clock: Callable[[], float] = time.monotonic,
                 force: bool = False) -> None:
        self._kind, self._name, self._out, self._root = kind, name or kind, out, root
        self._force = force
        self._argv = tuple(sys.argv if argv is None else argv)
        self._inputs, self._seed, self._params = tuple(inputs), seed, dict(params or {})
        self._clock = clock
        self._t0 = 0.0
        self._created = False
        self.run_dir: Path = Path()
        self.manifest: Manifest | None = None
        self._writing: RunFile | None = None  # the file `write` is putting in place, until the manifest lists it

    def __enter__(self) -> RunRecorder:
        check_run_dir(self._out, force=self._force)
        if self._out is None:  # runs/ is genie's: an --out's parent may hold anything
            mark_abandoned_runs(self._root)
        self._created = self._out is None or not Path(self._out).exists()
        self.run_dir = new_run_dir(self._name, out=self._out, root=self._root)
        self._t0 = self._clock()
        from genie.testbed.lifecycle import process_start_ticks

        self.manifest = Manifest(kind=self._kind, name=self._name, argv=self._argv, started_at=utc_now(),
                                 kernel=kernel_facts(), inputs=self._inputs, seed=self._seed, params=self._params,
                                 pid=os.getpid(), pid_start=process_start_ticks(os.getpid()))
        self._save()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, _tb: object) -> None:
        assert self.manifest is not None
        self._list_written()
        if isinstance(exc, InputError) and not self.manifest.files:
            self._discard()  # bad input found before anything was measured: leave nothing half-built
            return
        if exc is None:
            status, error = RunStatus.COMPLETE, None
        elif isinstance(exc, KeyboardInterrupt):  # Ctrl-C, and Terminated (SIGTERM/SIGHUP) which subclasses it
            status, error = RunStatus.INTERRUPTED, str(exc) or "interrupted"
        elif isinstance(exc, SystemExit) and not exc.code:
            status, error = RunStatus.COMPLETE, None
        else:
            status, error = RunStatus.FAILED, str(exc) or type(exc).__name__
        self._update(status=status, error=error, ended_at=utc_now(),
                     duration_s=round(self._clock() - self._t0, 6))

    # -- during the run
    def describe(self, **fields: Any) -> None:
        """Set manifest fields known only once the target is up: target, shaper, topology, params, seed."""
        self._update(**fields)

    def set_summary(self, summary: Mapping[str, Any]) -> None:
        self._update(summary=dict(summary))

    def write(self, name: str, data: bytes | str) -> Path:
        """Write run_dir/name atomically and list it in the manifest."""
        payload = data.encode() if isinstance(data, str) else data
        path = self.run_dir / name
        self._writing = RunFile(name, len(payload), hashlib.sha256(payload).hexdigest())
        write_atomic(path, payload)
        self._add(self._writing)
        self._writing = None
        return path

    def _list_written(self) -> None:
        """A file `write` put in place whose listing an exception (Ctrl-C) cut off: listed now, if the run
        directory holds it whole (an interrupted `write_atomic` leaves the name as it was)."""
        assert self.manifest is not None
        entry, self._writing = self._writing, None
        if entry is None or entry in self.manifest.files:
            return
        path = self.run_dir / entry.name
        if path.is_file() and path.stat().st_size == entry.size_bytes and _sha256_file(path) == entry.sha256:
            self.manifest = dataclasses.replace(self.manifest, files=tuple(
                f for f in self.manifest.files if f.name != entry.name) + (entry,))

    def record(self, name: str) -> None:
        """List a file some other writer already put into the run directory."""
        path = self.run_dir / name
        self._add(RunFile(name, path.stat().st_size, _sha256_file(path)))

    @property
    def status(self) -> RunStatus:
        assert self.manifest is not None
        return self.manifest.status

    def warn(self, message: str) -> None:
        assert self.manifest is not None
        self._update(warnings=self.manifest.warnings + (message,))

    # -- internals
    def _discard(self) -> None:
        (self.run_dir / MANIFEST_NAME).unlink(missing_ok=True)
        if self._created:
            try:
                self.run_dir.rmdir()
            except OSError:
                pass

    def _add(self, entry: RunFile) -> None:
        assert self.manifest is not None, "use RunRecorder as a context manager"
        files = [f for f in self.manifest.files if f.name != entry.name] + [entry]
        self._update(files=tuple(files))

    def _update(self, **fields: Any) -> None:
        assert self.manifest is not None, "use RunRecorder as a context manager"
        self.manifest = dataclasses.replace(self.manifest, **fields)
        self._save()

    def _save(self) -> None:
        assert self.manifest is not None
        write_atomic(self.run_dir / MANIFEST_NAME, manifest_to_json(self.manifest))
