"""Reading inputs within bounds, and atomic file writes: a reader (or a crash) never sees a half-written file.

Every file genie reads from a user goes through `read_input`: regular files only (a FIFO, ``/dev/zero`` or a
directory is refused before a byte is read), at most the size limit of its `InputKind`, read in bounded chunks
so that an input growing while it is read cannot take more memory than the limit either."""

from __future__ import annotations

import codecs
import os
import secrets
import stat
import zlib
from enum import Enum
from pathlib import Path

from genie.core.errors import InputError

_MiB = 1024 * 1024


class InputKind(Enum):
    """What an input file is, with the most genie reads of it (docs/inputs.md lists the limits)."""

    TOPOLOGY = ("topology file", 8 * _MiB)
    INVENTORY = ("inventory file", 8 * _MiB)
    FAULTS = ("faults file", 8 * _MiB)
    EXPERIMENT = ("experiment file", 1 * _MiB)
    TRACE = ("trace file", 512 * _MiB)
    CONFIG = ("ASTRA-sim input file", 64 * _MiB)
    MEASUREMENTS = ("measurements file", 256 * _MiB)
    NCCL_TESTS = ("nccl-tests output", 64 * _MiB)
    RUN_FILE = ("run directory file", 512 * _MiB)

    def __init__(self, label: str, limit_bytes: int) -> None:
        self.label = label
        self.limit_bytes = limit_bytes


def describe_size(size_bytes: int) -> str:
    return f"{size_bytes // _MiB} MiB" if size_bytes >= _MiB and size_bytes % _MiB == 0 else f"{size_bytes} bytes"


def _too_big(kind: InputKind, source: str, what: str = "") -> InputError:
    return InputError(f"{what or kind.label} is larger than the {describe_size(kind.limit_bytes)} genie reads "
                      f"of any {kind.label}", source=source)


def decode_text(data: bytes) -> str:
    """Text as editors and shells save it: UTF-8 (a byte-order mark dropped), or UTF-16 with its byte-order mark
    (Windows PowerShell's ``>`` writes it); bytes that do not decode become U+FFFD."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff")


def read_input(path: str | os.PathLike[str], kind: InputKind, *, head_bytes: int | None = None) -> bytes:
    """The bytes of an input file (only its first `head_bytes` if given); one that cannot be read, is not a
    regular file or is larger than the limit of its kind is an InputError naming it (exit code 2), e.g.
    ``topology.yaml: cannot read topology file: No such file or directory``."""
    source = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it without reading
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"cannot read {kind.label}: {exc.strerror or exc}", source=source) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"cannot read {kind.label}: not a regular file ({_file_type(info.st_mode)})",
                             source=source)
        if info.st_size > kind.limit_bytes:
            raise _too_big(kind, source, f"{kind.label} ({describe_size(info.st_size)})")
        chunks, total = [], 0
        wanted = kind.limit_bytes + 1 if head_bytes is None else min(head_bytes, kind.limit_bytes + 1)
        while True:
            try:
                chunk = os.read(fd, min(_MiB, wanted - total)) if total < wanted else b""
            except OSError as exc:
                raise InputError(f"cannot read {kind.label}: {exc.strerror or exc}", source=source) from None
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > kind.limit_bytes:
                raise _too_big(kind, source)
    finally:
        os.close(fd)


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"


def gunzip_input(data: bytes, kind: InputKind, source: str) -> bytes:
    """The gunzipped `data` (one or more gzip members), at most the limit of `kind`: a small file that
    expands without end (a gzip bomb) is refused once its output passes the limit."""
    out, total = [], 0
    while data:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            while True:
                piece = inflater.decompress(data, kind.limit_bytes + 1 - total)
                out.append(piece)
                total += len(piece)
                if total > kind.limit_bytes:
                    raise _too_big(kind, source, f"the gunzipped {kind.label}")
                data = inflater.unconsumed_tail
                if inflater.eof:
                    break
                if not data and not piece:
                    raise InputError("corrupt gzip data: the compressed stream ends early", source=source)
        except zlib.error as exc:
            raise InputError(f"corrupt gzip data: {exc}", source=source) from None
        data = inflater.unused_data
    return b"".join(out)


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, exclusive: bool = False) -> Path:
    """Write `data` to a temporary file beside `path`, fsync it, rename it over `path` (or, `exclusive`, link it
    to `path`: FileExistsError when `path` exists, decided atomically); creates the parent directory. On any
    failure the temporary file is removed and `path` is untouched.

    The file gets the mode any newly created file gets, ``0o666 & ~umask`` (0644 under the usual umask 022):
    the temporary file is opened with mode 0o666 and the kernel applies the umask to it. So the umask is never
    read, nor set and restored (``os.umask`` races other threads), and ``tempfile.mkstemp``'s fixed 0600 is
    avoided."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = _create_beside(target)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, target)
            finally:
                tmp.unlink()
        else:
            os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _create_beside(target: Path) -> tuple[int, Path]:
    """A new, empty temporary file ``.<name>.<random>.tmp`` in `target`'s directory, opened for writing."""
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")
