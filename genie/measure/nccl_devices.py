"""What nccl-tests prints about the ranks before its table (pure): the `# Using devices` lines (rank, process,
host, device, GPU) and the header's ``nThread T nGpus G`` - how many GPUs one host thread drives (``-g G``)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_DEVICE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+-?\d+\s+)?Pid\s+(\d+)\s+on\s+(?:(\S+)\s+)?device\s+(\d+)"
                     r"\s*(?:\[[^\]]*\])?\s*(.*)$")
_THREADS = re.compile(r"^#\s*nThread\s+\d+\s+nGpus\s+(\d+)")


@dataclass(frozen=True)
class NcclDevice:
    rank: int
    host: str
    device: int
    gpu: str  # the GPU's name as printed ('' if absent)
    pid: int = -1  # the process that drove the rank (-1: not printed)


def device_line(line: str) -> re.Match[str] | None:
    """A `#  Rank r [Group g] Pid p on host device d [bus] GPU` line's match (read by :func:`device`)."""
    return _DEVICE.match(line)


def device(m: re.Match[str]) -> NcclDevice:
    return NcclDevice(int(m[1]), m[3] or "", int(m[4]), m[5].strip(), int(m[2]))


def header_gpus_per_thread(line: str) -> int:
    """The header's ``nGpus`` (the GPUs each thread drives), 0 when ``line`` is not that header."""
    m = _THREADS.match(line)
    return int(m[1]) if m else 0


def gpus_per_thread(header_gpus: int, devices: list[NcclDevice] | tuple[NcclDevice, ...]) -> int:
    """The GPUs one host thread launched each call on in turn: the header's ``nGpus``; else the most ranks that
    share a process on a host (one thread each); 1 when neither is printed."""
    if header_gpus:
        return header_gpus
    if not devices or any(d.pid < 0 for d in devices):
        return 1
    return max(Counter((d.host, d.pid) for d in devices).values())
