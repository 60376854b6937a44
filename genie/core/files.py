"""Atomic file writes: a reader (or a crash) never sees a half-written file."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from genie.core.errors import InputError


def read_input(path: str | os.PathLike[str], what: str = "") -> bytes:
    """The bytes of an input file; a file that cannot be read is an InputError naming it (exit code 2), e.g.
    ``topology.yaml: cannot read topology file: No such file or directory``."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        label = f"cannot read {what}" if what else "cannot read"
        raise InputError(f"{label}: {exc.strerror or exc}", source=os.fspath(path)) from None


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
