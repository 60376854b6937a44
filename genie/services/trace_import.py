"""Import a job's PyTorch traces (execution traces + Kineto traces) as a genie trace, and write it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from genie.workloads.analysis import check
from genie.workloads.loader import OutputFormat, save_trace
from genie.workloads.pytorch_files import read_pytorch_set
from genie.workloads.pytorch_import import ImportResult


@dataclass(frozen=True)
class ImportRequest:
    sources: tuple[str, ...]  # directories and/or files
    out: str  # an ET prefix (writes OUT.<rank>.et) or a JSON/YAML file
    to: OutputFormat = OutputFormat.ET


@dataclass(frozen=True)
class CommLine:
    """Collectives of one kind on one group over all ranks: ``count`` ops of ``size_bytes`` each."""

    kind: str  # all_reduce, send, ...
    size_bytes: int
    group: str  # "world" or the pg_name
    count: int


@dataclass(frozen=True)
class ImportOutcome:
    paths: tuple[Path, ...]
    result: ImportResult
    comms: tuple[CommLine, ...]


def comm_lines(result: ImportResult) -> tuple[CommLine, ...]:
    seen: Counter = Counter()
    for r in result.trace.ranks:
        for n in r.nodes:
            if n.kind.is_comm:
                kind = n.comm_type.name.lower() if n.comm_type is not None else n.kind.value
                seen[(kind, n.size_bytes or 0, n.process_group or "world")] += 1
    return tuple(CommLine(k, s, g, c) for (k, s, g), c in sorted(seen.items()))


def import_traces(request: ImportRequest) -> ImportOutcome:
    """Read, check (a trace that would deadlock is refused before anything is written), write."""
    result = read_pytorch_set(list(request.sources))
    check(result.trace, source=", ".join(request.sources))
    paths = save_trace(result.trace, request.out, to=request.to)
    return ImportOutcome(tuple(paths), result, comm_lines(result))
