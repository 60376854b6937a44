"""Slurm's compact lists, parsed without Slurm (pure): host lists such as ``node[01-04,07],gpu-a[1-2]-ib`` (what
``scontrol show hostnames`` expands) and count lists such as ``2(x3),1`` (SLURM_TASKS_PER_NODE,
SLURM_JOB_CPUS_PER_NODE). Every problem is a ValueError saying what was expected."""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
MAX_HOSTS = 1_000_000


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested '[' in host list {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise ValueError(f"unclosed '[' in host list {text!r}")
    parts.append("".join(current))
    return parts


def _expand_ranges(body: str, text: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise ValueError(f"expected numbers or ranges such as 01-04 inside brackets, got {item!r} in {text!r}")
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        low, high = int(low_text), int(high_text)
        if high < low:
            raise ValueError(f"range {item!r} runs backwards in {text!r}")
        if high - low + 1 + len(out) > MAX_HOSTS:
            raise ValueError(f"host list {text!r} expands to more than {MAX_HOSTS} hosts")
        width = len(low_text) if low_text.startswith("0") or len(low_text) == len(high_text) else 0
        out += [str(i).zfill(width) for i in range(low, high + 1)]
    return out


def expand_hostlist(text: str) -> list[str]:
    """``"node[01-03,07],login"`` -> ``["node01", "node02", "node03", "node07", "login"]`` (Slurm's order; a
    name may hold several bracket groups: ``rack[1-2]-n[1-2]`` -> rack1-n1, rack1-n2, rack2-n1, rack2-n2)."""
    hosts: list[str] = []
    for part in _split_top((text or "").strip()):
        part = part.strip()
        if not part:
            raise ValueError(f"empty entry in host list {text!r}")
        names = [""]
        for piece in re.split(r"(\[[^\]]*\])", part):
            if piece.startswith("["):
                suffixes = _expand_ranges(piece[1:-1], text)
                names = [n + s for n in names for s in suffixes]
            elif piece:
                if any(c in piece for c in "[]"):
                    raise ValueError(f"unbalanced brackets in host list {text!r}")
                names = [n + piece for n in names]
        hosts += names
        if len(hosts) > MAX_HOSTS:
            raise ValueError(f"host list {text!r} expands to more than {MAX_HOSTS} hosts")
    return hosts


def expand_counts(text: str) -> list[int]:
    """``"2(x3),1"`` -> ``[2, 2, 2, 1]`` (Slurm's per-node counts)."""
    out: list[int] = []
    for item in (text or "").split(","):
        match = _COUNT.match(item.strip())
        if not match:
            raise ValueError(f"expected counts such as 2(x3),1, got {text!r}")
        repeat = int(match.group(2) or 1)
        if repeat < 1 or len(out) + repeat > MAX_HOSTS:
            raise ValueError(f"bad repeat count in {text!r}")
        out += [int(match.group(1))] * repeat
    return out
