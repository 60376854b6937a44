"""Finding a job's PyTorch traces on disk: execution traces and Kineto traces, per rank.

A directory (or a list of files and directories) holds, per rank, one execution trace and optionally one
Kineto trace, as ``.json`` or ``.json.gz`` files, told apart by their content. A file's rank is the Kineto
trace's ``distributedInfo.rank`` when it has one, else the last number in its name (``host.3.json``,
``rank3.json.gz``, ``et_3.json``).
"""

from __future__ import annotations

import re
from pathlib import Path

from genie.core.errors import InputError
from genie.workloads.pytorch_et import (is_execution_trace, is_kineto_trace, load_json, read_execution_trace,
                                        read_kineto)
from genie.workloads.pytorch_import import ImportResult, RankInput, build_trace

_JSON = re.compile(r"\.json(\.gz)?$")
_NUMBER = re.compile(r"(\d+)(?!.*\d)")


def sniff_execution_trace(head: bytes) -> bool:
    """Do these first bytes of a file (gzip allowed) look like a PyTorch execution trace?"""
    if head[:2] == b"\x1f\x8b":
        import zlib
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 8192)
        except zlib.error:
            return False
    text = head.decode("utf-8", errors="replace").lstrip()
    return text.startswith("{") and '"schema"' in text[:4096] and '"nodes"' in text


def _candidates(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(f for f in p.iterdir() if f.is_file() and _JSON.search(f.name))
        elif p.is_file():
            files.append(p)
        else:
            raise InputError("no such file or directory", source=str(p))
    return files


def _rank_from_name(path: Path) -> int | None:
    m = _NUMBER.search(_JSON.sub("", path.name))
    return int(m.group(1)) if m else None


def read_pytorch_set(paths: list[str | Path] | tuple[str | Path, ...]) -> ImportResult:
    """Read every rank's traces under ``paths`` and build the genie Trace (InputError naming file and field)."""
    files = _candidates([Path(p) for p in paths])
    hosts: dict[int, tuple[Path, object]] = {}
    kinetos: dict[int, tuple[Path, object]] = {}
    for f in files:
        doc = load_json(f.read_bytes(), source=str(f))
        if is_execution_trace(doc):
            rank = _rank_from_name(f)
            if rank is None:
                raise InputError("cannot tell the rank of this execution trace: name it <name>.<rank>.json",
                                 source=str(f))
            if rank in hosts:
                raise InputError(f"a second execution trace of rank {rank} (the first: {hosts[rank][0]})",
                                 source=str(f))
            hosts[rank] = (f, doc)
        elif is_kineto_trace(doc):
            info = doc.get("distributedInfo") if isinstance(doc, dict) else None
            rank = info.get("rank") if isinstance(info, dict) and isinstance(info.get("rank"), int) else None
            rank = _rank_from_name(f) if rank is None else rank
            if rank is None:
                raise InputError("cannot tell the rank of this Kineto trace (no distributedInfo.rank and no number "
                                 "in its name)", source=str(f))
            if rank in kinetos:
                raise InputError(f"a second Kineto trace of rank {rank} (the first: {kinetos[rank][0]})",
                                 source=str(f))
            kinetos[rank] = (f, doc)
        elif len(files) == 1 or not any(p.is_dir() for p in map(Path, paths)):
            raise InputError("neither a PyTorch execution trace (schema, nodes) nor a Kineto trace (traceEvents)",
                             source=str(f))
    if not hosts:
        raise InputError("no PyTorch execution trace here", source=", ".join(str(p) for p in paths))
    stray = sorted(set(kinetos) - set(hosts))
    if stray:
        raise InputError(f"Kineto trace of rank {stray[0]} has no execution trace beside it",
                         source=str(kinetos[stray[0]][0]))
    world = len(hosts)
    inputs = []
    for rank, (f, doc) in sorted(hosts.items()):
        host = read_execution_trace(doc, source=str(f), world_size=world)
        kineto = None
        if rank in kinetos:
            kf, kdoc = kinetos[rank]
            kineto = read_kineto(kdoc, source=str(kf))
        inputs.append(RankInput(rank, host, kineto))
    return build_trace(inputs)
