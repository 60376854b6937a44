"""Run directories: runs/<UTC time>-<name>/, unique, with the user's umask."""

from __future__ import annotations

import re
import time
from pathlib import Path


def new_run_dir(name: str, *, out: Path | None = None, root: Path = Path("runs")) -> Path:
    """`out` if given, else runs/<UTC timestamp>-<name>/ (a suffix keeps it unique)."""
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
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
