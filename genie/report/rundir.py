"""Run directories: runs/<UTC time>-<name>/, unique, with the user's umask."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from genie.core.errors import InputError


def _unusable(out: Path, why: str) -> InputError:
    return InputError(f"cannot use {str(out)[:200]} as the run directory: {why}", path="out")


def check_run_dir(out: Path | None, *, force: bool = False) -> None:
    """Refuse a run directory (`--out`) genie could not write, or one that already holds files (unless
    `force`), before anything starts. Nothing is created."""
    if out is None:
        return
    out = Path(out)
    if out.exists():
        if not out.is_dir():
            raise _unusable(out, "it exists and is not a directory")
        if not os.access(out, os.W_OK | os.X_OK):
            raise _unusable(out, "it is not writable")
        if not force and any(out.iterdir()):
            raise _unusable(out, "it is not empty (give `force` to write into it anyway)")
        return
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise _unusable(out, f"{str(parent)[:200]} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _unusable(out, f"{str(parent)[:200]} is not writable")


def new_run_dir(name: str, *, out: Path | None = None, root: Path = Path("runs")) -> Path:
    """`out` if given, else runs/<UTC timestamp>-<name>/ (a suffix keeps it unique). A directory that cannot
    be made is an InputError about `out`, not a traceback."""
    if out is not None:
        out = Path(out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _unusable(out, exc.strerror or str(exc)) from None
        return out
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "run"
    base = root / f"{stamp}-{slug}"
    candidate, n = base, 1
    while True:
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            n += 1
            candidate = base.with_name(f"{base.name}-{n}")
        except OSError as exc:
            raise InputError(f"cannot make the run directory {candidate}: {exc.strerror or exc}") from None
