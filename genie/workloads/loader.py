"""Load any supported trace by sniffing its format; save as Chakra ET or genie JSON/YAML.

What a path may name:
- a Chakra ET prefix (``dir/workload`` for ``dir/workload.<rank>.et``), one of its files (``workload.3.et``:
  the whole set is loaded), or a directory holding one such set (directly or in ``workload/``);
- a directory of PARAM basic traces (``rank<N>.json``) or one of those files (the whole set is loaded);
- a genie trace (``.json``/``.yaml``/``.yml`` with ``format: genie-trace``);
- an ASTRA-sim 1.0 text workload (needs ``npus``);
- PyTorch execution traces (+ Kineto traces), ``.json`` or ``.json.gz``: a directory holding one per rank, or
  one of them (the whole directory is imported; see genie.workloads.pytorch_import).
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path

from genie.core.errors import InputError, shown
from genie.core.files import InputKind, read_input, write_atomic
from genie.core.trace import RankTrace, Trace


class TraceFormat(Enum):
    CHAKRA_ET = "et"
    NATIVE = "json"
    PARAM_BASIC = "param"
    ASTRA_TEXT = "astra"
    PYTORCH_ET = "pytorch"


class OutputFormat(Enum):
    ET = "et"
    JSON = "json"
    YAML = "yaml"


_ET_FILE = re.compile(r"^(?P<prefix>.+)\.(\d+)\.et(\.gz)?$")


def _et_prefixes(directory: Path) -> list[Path]:
    prefixes = {m.group("prefix") for p in directory.iterdir() if (m := _ET_FILE.match(p.name))}
    return [directory / p for p in sorted(prefixes)]


def _sniff_file(path: Path, head: bytes) -> TraceFormat:
    from genie.workloads import astra_text, pytorch_files  # each format's reader, when needed

    if pytorch_files.sniff_execution_trace(head):
        return TraceFormat.PYTORCH_ET
    if _ET_FILE.match(path.name) or path.name.endswith((".et", ".et.gz")) or head[:2] == b"\x1f\x8b":
        return TraceFormat.CHAKRA_ET
    text = head.decode("utf-8", errors="replace").lstrip()
    if text.startswith("["):
        return TraceFormat.PARAM_BASIC
    if "genie-trace" in text[:2000]:
        return TraceFormat.NATIVE
    first = text.split(maxsplit=1)[0] if text.split() else ""
    if first in {p.value for p in astra_text.Policy}:
        return TraceFormat.ASTRA_TEXT
    raise InputError("cannot tell the trace format (expected Chakra ET, PARAM basic JSON, a genie trace, an "
                     "ASTRA-sim text workload or PyTorch execution traces)", source=str(path))


_JSON_NAMES = (".json", ".json.gz")


def _head_is_pytorch(path: Path) -> bool:
    from genie.workloads import pytorch_files  # each format's reader, when needed

    with path.open("rb") as f:
        return pytorch_files.sniff_execution_trace(f.read(4096))


def detect_format(path_or_prefix: str | Path) -> tuple[TraceFormat, Path]:
    """The format and the path to load it from (an ET prefix, a PARAM directory, or the file)."""
    from genie.workloads import param_comms  # each format's reader, when needed
    from genie.workloads.et_files import rank_files

    path = Path(path_or_prefix)
    if path.is_dir():
        for directory in (path, path / "workload"):
            if directory.is_dir():
                prefixes = _et_prefixes(directory)
                if len(prefixes) == 1:
                    return TraceFormat.CHAKRA_ET, prefixes[0]
                if len(prefixes) > 1:
                    names = ", ".join(p.name for p in prefixes)
                    raise InputError(f"several ET sets here ({names}): name one prefix", source=str(directory))
        if param_comms.param_rank_files(path):
            return TraceFormat.PARAM_BASIC, path
        if any(_head_is_pytorch(f) for f in sorted(path.iterdir()) if f.is_file() and f.name.endswith(_JSON_NAMES)):
            return TraceFormat.PYTORCH_ET, path
        raise InputError("no trace found in this directory", source=str(path))
    if path.exists():  # read_input refuses what is not a regular file (a FIFO, /dev/zero)
        fmt = _sniff_file(path, read_input(path, InputKind.TRACE, head_bytes=4096))
        if fmt is TraceFormat.CHAKRA_ET:
            m = _ET_FILE.match(path.name)
            return fmt, (path.with_name(m.group("prefix")) if m else path)
        if fmt is TraceFormat.PARAM_BASIC and param_comms.RANK_FILE.search(path.name):
            return fmt, path.parent
        if fmt is TraceFormat.PYTORCH_ET:
            return fmt, path.parent
        return fmt, path
    if rank_files(path):
        return TraceFormat.CHAKRA_ET, path
    raise InputError("no such file, directory or ET prefix", source=str(path))


def load_trace(path_or_prefix: str | Path, *, npus: int | None = None, dim0_npus: int | None = None) -> Trace:
    fmt, path = detect_format(path_or_prefix)  # before any reader loads: a missing file is refused cheaply
    if fmt is TraceFormat.CHAKRA_ET:
        from genie.workloads import chakra_et

        if path.is_file():  # a single ET file not named <prefix>.<rank>.et: one rank
            meta, nodes = chakra_et.read_et(read_input(path, InputKind.TRACE), source=str(path))
            return Trace((RankTrace(0, tuple(nodes), meta),), (), (("format", "chakra_et"),))
        return chakra_et.read_et_set(path)
    if fmt is TraceFormat.PYTORCH_ET:
        from genie.workloads import pytorch_files

        return pytorch_files.read_pytorch_set([path]).trace
    if fmt is TraceFormat.PARAM_BASIC:
        from genie.workloads import param_comms

        if path.is_dir():
            return param_comms.read_param_set(path)
        return param_comms.read_param_traces([read_input(path, InputKind.TRACE)], sources=[str(path)])
    text = read_input(path, InputKind.TRACE)
    if fmt is TraceFormat.NATIVE:
        from genie.workloads import native

        return native.read_native(text, source=str(path))
    if npus is None:
        raise InputError("an ASTRA-sim text workload needs the number of NPUs (--npus)", source=str(path))
    from genie.workloads import astra_text

    return astra_text.read_astra_text(text.decode("utf-8", errors="replace"), npus=npus, source=str(path),
                                      dim0_npus=dim0_npus)


def save_trace(trace: Trace, out: str | Path, *, to: OutputFormat) -> list[Path]:
    """Write ``trace``; ``out`` is a prefix for ET (``out.<rank>.et``), a file path otherwise."""
    from genie.workloads import chakra_et, native  # each format's reader, when needed

    out = Path(out)
    try:
        if to is OutputFormat.ET:
            return chakra_et.write_et_set(trace, out)
        data = native.write_native_yaml(trace) if to is OutputFormat.YAML else native.write_native_json(trace)
        write_atomic(out, data)
    except OSError as exc:  # an unwritable output is the user's to fix: one line, not a traceback
        raise InputError(f"cannot write {str(out)[:200]}: {exc.strerror or exc}", path="out") from None
    return [out]


def output_format(to: str, out: str | Path) -> OutputFormat:
    """An output format name (`genie trace convert --to`) to the format; ``json`` writes YAML when ``out`` ends in .yaml/.yml."""
    try:
        fmt = OutputFormat(to.strip().lower())
    except ValueError:
        raise InputError(f"unknown output format {shown(to)} (expected et, json or yaml)", path="to") from None
    if fmt is OutputFormat.JSON and Path(out).suffix in (".yaml", ".yml"):
        return OutputFormat.YAML
    return fmt

