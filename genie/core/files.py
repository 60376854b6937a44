"""Atomic file writes: a reader (or a crash) never sees a half-written file."""

from __future__ import annotations

import os
import tempfile
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


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write `data` to a temporary file beside `path`, fsync it, rename it over `path`; creates the parent
    directory. On any failure the temporary file is removed and `path` is untouched."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
