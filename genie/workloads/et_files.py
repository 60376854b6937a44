"""Which files make a Chakra ET set (pure, no protobuf): ``<prefix>.<rank>.et`` or ``.et.gz`` beside each other.
Kept apart from :mod:`genie.workloads.chakra_et` so that finding a trace does not load its reader."""

from __future__ import annotations

import re
from pathlib import Path


def rank_files(prefix_path: str | Path) -> dict[int, Path]:
    """``{rank: path}`` of the files ``<prefix>.<rank>.et`` (also ``.et.gz``) that exist."""
    prefix = Path(prefix_path)
    pattern = re.compile(re.escape(prefix.name) + r"\.(\d+)\.et(\.gz)?$")
    found: dict[int, Path] = {}
    if prefix.parent.is_dir():
        for path in sorted(prefix.parent.iterdir()):
            match = pattern.match(path.name)
            if match and path.is_file():
                found.setdefault(int(match.group(1)), path)
    return found
