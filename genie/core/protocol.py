"""The control protocol between an orchestrator and its rank programs (pure): what a rank is asked to do (a
job) and every message either side sends, as frozen dataclasses, with their JSON form.

No sockets here: `genie.engine.control` frames these messages on a stream socket, the MPI control plane
gathers them through MPI. A JSON document is tagged with its kind (``{"kind": "barrier", ...}``); decoding an
unknown kind or a malformed document raises `ProtocolError` naming the kind and the field.

Life of a run: rank → `Hello` (its data port); orchestrator → `Setup` (address book and job); then, as often
as the job says, rank → `Barrier` and orchestrator → `Go` (a common start time), rank → `CaseResult` per case;
rank → `Done`; orchestrator → `Exit`. A failing rank sends `Error` instead.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from enum import Enum
from typing import Any, Callable, ClassVar

from genie.core.collective import Algorithm, Collective
from genie.core.congestion import CongestionControl
from genie.core.errors import RunFailure
from genie.core.flowpath import FlowTuple
from genie.core.program import Lane, ProgramNode, RankProgram
from genie.core.schedule import CollectiveOp


class ProtocolError(RunFailure):
    """A control message or job that cannot be decoded (unknown kind, missing or malformed field)."""


# ---- jobs -------------------------------------------------------------------------------------------------


class JobKind(Enum):
    BENCH = "bench"
    REPLAY = "replay"


@dataclass(frozen=True)
class BenchCase:
    """Run `op` `warmup` times untimed, then `iterations` times back to back, timing each iteration."""

    op: CollectiveOp
    warmup: int
    iterations: int


@dataclass(frozen=True)
class BenchJob:
    kind: ClassVar[JobKind] = JobKind.BENCH
    cases: tuple[BenchCase, ...]
    verify: bool = False
    timeout_s: float = 60.0
    record_steps: bool = False
    fault_points: tuple[int, ...] = ()  # timed ops (over the whole sweep) before which faults are injected
    faults: bool = False  # tag barriers for the orchestrator's fault injector (timed starts, fault points)


@dataclass(frozen=True)
class Straggler:
    """This rank's compute lasts `factor` times longer from timed op `at_op` on, or from `at_s` seconds of the
    run clock on (exactly one of the two is set)."""

    factor: float
    at_op: int | None = None
    at_s: float | None = None


@dataclass(frozen=True)
class ReplayJob:
    """Walk `program` `warmup` times untimed, then `iterations` times timed, each after a barrier. With
    `faults`, timed barriers are tagged (timed iteration k is op k; `fault_points` pause before theirs)."""

    kind: ClassVar[JobKind] = JobKind.REPLAY
    program: RankProgram
    iterations: int
    warmup: int
    timeout_s: float
    spin_ns: int
    faults: bool = False
    fault_points: tuple[int, ...] = ()
    stragglers: tuple[Straggler, ...] = ()


Job = BenchJob | ReplayJob


def op_to_json(op: CollectiveOp) -> dict[str, Any]:
    return {"collective": op.collective.value, "size_bytes": op.size_bytes, "group": list(op.group),
            "algorithm": op.algorithm.value, "root": op.root, "peer": op.peer, "chunks": op.chunks,
            "dtype_bytes": op.dtype_bytes, "split_bytes": [list(row) for row in op.split_bytes]}


def op_from_json(d: dict[str, Any]) -> CollectiveOp:
    return CollectiveOp(collective=Collective(d["collective"]), size_bytes=int(d["size_bytes"]),
                        group=tuple(int(r) for r in d["group"]), algorithm=Algorithm(d["algorithm"]),
                        root=int(d["root"]), peer=None if d["peer"] is None else int(d["peer"]),
                        chunks=int(d["chunks"]), dtype_bytes=int(d["dtype_bytes"]),
                        split_bytes=tuple(tuple(int(b) for b in row) for row in d.get("split_bytes") or ()))


def program_to_json(program: RankProgram) -> dict[str, Any]:
    return {"rank": program.rank, "links": sorted(program.links),
            "nodes": [[n.id, n.name, n.lane.value, list(n.deps), n.duration_ns,
                       op_to_json(n.op) if n.op else None, n.channel, n.peer, n.size_bytes, n.group]
                      for n in program.nodes]}


def program_from_json(d: dict[str, Any]) -> RankProgram:
    nodes = tuple(ProgramNode(id=int(i), name=name, lane=Lane(lane), deps=tuple(deps), duration_ns=int(dur),
                              op=op_from_json(op) if op else None, channel=int(ch), peer=peer,
                              size_bytes=int(size), group=group)
                  for i, name, lane, deps, dur, op, ch, peer, size, group in d["nodes"])
    return RankProgram(int(d["rank"]), nodes, frozenset(tuple(link) for link in d["links"]))


def _bench_to_json(job: BenchJob) -> dict[str, Any]:
    return {"verify": job.verify, "timeout_s": job.timeout_s, "record_steps": job.record_steps,
            "fault_points": list(job.fault_points), "faults": job.faults,
            "cases": [{"op": op_to_json(c.op), "warmup": c.warmup, "iterations": c.iterations} for c in job.cases]}


def _bench_from_json(d: dict[str, Any]) -> BenchJob:
    return BenchJob(cases=tuple(BenchCase(op_from_json(c["op"]), int(c["warmup"]), int(c["iterations"]))
                                for c in d["cases"]),
                    verify=bool(d["verify"]), timeout_s=float(d["timeout_s"]), record_steps=bool(d["record_steps"]),
                    fault_points=tuple(int(k) for k in d.get("fault_points") or ()), faults=bool(d.get("faults")))


def _straggler_from_json(d: dict[str, Any]) -> Straggler:
    return Straggler(factor=float(d["factor"]), at_op=None if d.get("at_op") is None else int(d["at_op"]),
                     at_s=None if d.get("at_s") is None else float(d["at_s"]))


def _replay_to_json(job: ReplayJob) -> dict[str, Any]:
    return {"program": program_to_json(job.program), "iterations": job.iterations, "warmup": job.warmup,
            "timeout_s": job.timeout_s, "spin_ns": job.spin_ns, "faults": job.faults,
            "fault_points": list(job.fault_points),
            "stragglers": [{"factor": s.factor, "at_op": s.at_op, "at_s": s.at_s} for s in job.stragglers]}


def _replay_from_json(d: dict[str, Any]) -> ReplayJob:
    return ReplayJob(program=program_from_json(d["program"]), iterations=int(d["iterations"]),
                     warmup=int(d["warmup"]), timeout_s=float(d["timeout_s"]), spin_ns=int(d["spin_ns"]),
                     faults=bool(d.get("faults")), fault_points=tuple(int(k) for k in d.get("fault_points") or ()),
                     stragglers=tuple(_straggler_from_json(s) for s in d.get("stragglers") or ()))


_JOB_CODECS: dict[JobKind, tuple[Callable[[Any], dict[str, Any]], Callable[[dict[str, Any]], Job]]] = {
    JobKind.BENCH: (_bench_to_json, _bench_from_json),
    JobKind.REPLAY: (_replay_to_json, _replay_from_json),
}


def job_to_json(job: Job) -> dict[str, Any]:
    encode, _ = _JOB_CODECS[job.kind]
    return {"kind": job.kind.value, **encode(job)}


def job_from_json(d: Any) -> Job:
    if not isinstance(d, dict):
        raise ProtocolError(f"a job must be a JSON object, not {type(d).__name__}")
    raw = d.get("kind")
    try:
        kind = JobKind(raw)
    except ValueError:
        raise ProtocolError(f"unknown job kind {raw!r} (known: {', '.join(k.value for k in JobKind)})") from None
    try:
        return _JOB_CODECS[kind][1](d)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProtocolError(f"malformed {kind.value} job: {type(exc).__name__}: {exc}") from None


# ---- messages ---------------------------------------------------------------------------------------------


class MessageKind(Enum):
    HELLO = "hello"  # rank → orchestrator: listening on `port`
    SETUP = "setup"  # orchestrator → rank: the address book and the job
    GO = "go"  # orchestrator → rank: a barrier is released, start at `start_ns`
    BARRIER = "barrier"  # rank → orchestrator: waiting at a barrier (tags for the fault injector)
    CASE_RESULT = "case_result"  # rank → orchestrator: the records of one case (bench size, replay iteration)
    DONE = "done"  # rank → orchestrator: the job is complete
    ERROR = "error"  # rank → orchestrator: the job failed (the message names the rank)
    EXIT = "exit"  # orchestrator → rank: every rank is done, close the connections


@dataclass(frozen=True)
class Hello:
    kind: ClassVar[MessageKind] = MessageKind.HELLO
    rank: int
    port: int
    pid: int


@dataclass(frozen=True)
class Setup:
    kind: ClassVar[MessageKind] = MessageKind.SETUP
    addresses: dict[int, tuple[str, int]]  # rank -> (address, port) of its listener
    job: Job
    socket_buffer_bytes: int | None = None
    spin_s: float = 0.0
    connect_timeout_s: float | None = None  # None: the job's op timeout
    congestion_control: CongestionControl = CongestionControl.CUBIC  # every data connection's (genie.core.congestion)


@dataclass(frozen=True)
class Go:
    kind: ClassVar[MessageKind] = MessageKind.GO
    start_ns: int


class CasePhase(Enum):
    """Where in a bench case a barrier stands: what follows it (the orchestrator reads the ranks' CPU counters
    at a case's `TIMED` barrier and at its `CHECK` barrier, or its `END` one without -c:
    `genie.services.cases.RankCpuReader`)."""

    WARMUP = "warmup"  # the case's warmup iterations follow
    TIMED = "timed"  # its timed iterations follow
    CHECK = "check"  # its timed iterations are over: its check iteration follows (with -c)
    END = "end"  # its timed iterations (and check) are over: its result follows


@dataclass(frozen=True)
class Barrier:
    """``timed``: timed ops follow; ``fault_point=k``: timed op k follows (its faults are injected before the
    ranks are released); a bench rank also reports its `case` and its timed `iterations` so far (and the
    iterations that followed an earlier fault point, `restarts`). A bench rank tags the three barriers of
    every case with their `phase` and the `case`."""

    kind: ClassVar[MessageKind] = MessageKind.BARRIER
    timed: bool = False
    fault_point: int | None = None
    case: int | None = None
    iterations: tuple[tuple[int, int], ...] = ()
    restarts: tuple[int, ...] = ()
    phase: CasePhase | None = None


@dataclass(frozen=True)
class CaseResult:
    """One rank's records of one case. Bench: `iterations` (start_ns, end_ns), `steps` rows (iteration, step,
    start_ns, end_ns, sent_bytes, received_bytes, peers) and `restarts`; replay: `t0_ns` and `records`
    (node id, start_ns, end_ns)."""

    kind: ClassVar[MessageKind] = MessageKind.CASE_RESULT
    case: int
    rank: int
    iterations: tuple[tuple[int, int], ...] = ()
    steps: tuple[tuple, ...] = ()
    restarts: tuple[int, ...] = ()
    t0_ns: int = 0
    records: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class Done:
    kind: ClassVar[MessageKind] = MessageKind.DONE
    rank: int
    peak_rss_kb: int = 0  # the rank process's peak resident memory (VmHWM)
    flows: tuple[FlowTuple, ...] = ()  # the 5-tuple of every TCP connection this rank sent on


@dataclass(frozen=True)
class Error:
    kind: ClassVar[MessageKind] = MessageKind.ERROR
    rank: int | None
    message: str


@dataclass(frozen=True)
class Exit:
    kind: ClassVar[MessageKind] = MessageKind.EXIT


Message = Hello | Setup | Go | Barrier | CaseResult | Done | Error | Exit

_MESSAGE_TYPES: dict[MessageKind, type] = {cls.kind: cls for cls in (Hello, Setup, Go, Barrier, CaseResult, Done,
                                                                      Error, Exit)}


def _optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else convert(v)


def _ints(v: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in v)


def _pairs(v: Any) -> tuple[tuple[int, int], ...]:
    return tuple((int(a), int(b)) for a, b in v)


def _triples(v: Any) -> tuple[tuple[int, int, int], ...]:
    return tuple((int(a), int(b), int(c)) for a, b, c in v)


def _rows(v: Any) -> tuple[tuple, ...]:
    return tuple(tuple(tuple(x) if isinstance(x, list) else x for x in row) for row in v)


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


def _flag(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"expected true or false, got {v!r}")
    return v


def _addresses(v: Any) -> dict[int, tuple[str, int]]:
    return {int(rank): (_text(address), int(port)) for rank, (address, port) in v.items()}


#: per message kind, how each field's JSON value becomes its typed value (fields absent here are plain ints)
_FIELD_DECODERS: dict[MessageKind, dict[str, Callable[[Any], Any]]] = {
    MessageKind.SETUP: {"addresses": _addresses, "job": job_from_json, "socket_buffer_bytes": _optional(int),
                        "spin_s": float, "connect_timeout_s": _optional(float),
                        "congestion_control": CongestionControl},
    MessageKind.BARRIER: {"timed": _flag, "fault_point": _optional(int), "case": _optional(int),
                          "iterations": _pairs, "restarts": _ints, "phase": _optional(CasePhase)},
    MessageKind.CASE_RESULT: {"iterations": _pairs, "steps": _rows, "restarts": _ints, "records": _triples},
    MessageKind.DONE: {"flows": lambda v: tuple(FlowTuple.from_json(f) for f in v)},
    MessageKind.ERROR: {"rank": _optional(int), "message": _text},
}

#: per message kind, the fields whose JSON form is not the value itself (tuples become lists on their own)
_FIELD_ENCODERS: dict[MessageKind, dict[str, Callable[[Any], Any]]] = {
    MessageKind.SETUP: {"addresses": lambda a: {str(r): [addr, port] for r, (addr, port) in a.items()},
                        "job": job_to_json, "congestion_control": lambda c: c.value},
    MessageKind.BARRIER: {"phase": lambda p: None if p is None else p.value},
    MessageKind.DONE: {"flows": lambda fs: [f.to_json() for f in fs]},
}


def encode_message(message: Message) -> dict[str, Any]:
    """The JSON document of `message`, tagged with its kind."""
    encoders = _FIELD_ENCODERS.get(message.kind, {})
    out: dict[str, Any] = {"kind": message.kind.value}
    for f in fields(message):
        value = getattr(message, f.name)
        out[f.name] = encoders[f.name](value) if f.name in encoders else value
    return out


def decode_message(doc: Any) -> Message:
    """The typed message of a JSON document; `ProtocolError` naming the kind and field if it is not one."""
    if not isinstance(doc, dict):
        raise ProtocolError(f"a control message must be a JSON object, not {type(doc).__name__}")
    raw = doc.get("kind")
    try:
        kind = MessageKind(raw)
    except ValueError:
        raise ProtocolError(f"unknown control message kind {raw!r} "
                            f"(known: {', '.join(k.value for k in MessageKind)})") from None
    cls = _MESSAGE_TYPES[kind]
    decoders = _FIELD_DECODERS.get(kind, {})
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in doc:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ProtocolError(f"malformed {kind.value} message: missing field {f.name!r}")
            continue
        try:
            values[f.name] = decoders.get(f.name, int)(doc[f.name])
        except ProtocolError as exc:
            raise ProtocolError(f"malformed {kind.value} message: field {f.name!r}: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"malformed {kind.value} message: field {f.name!r}: "
                                f"{type(exc).__name__}: {exc}") from None
    unknown = sorted(set(doc) - {"kind"} - {f.name for f in fields(cls)})
    if unknown:
        raise ProtocolError(f"malformed {kind.value} message: unknown field(s) {', '.join(map(repr, unknown))}")
    return cls(**values)
