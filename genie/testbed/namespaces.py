"""Network namespaces as the filesystem shows them (no netlink): a named namespace's path, whether it exists,
and the processes inside it."""

from __future__ import annotations

import os

from genie.testbed.layout import NETNS_DIR


def netns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def netns_exists(name: str) -> bool:
    return os.path.exists(netns_path(name))


def namespace_pids(name: str) -> list[int]:
    """PIDs of the processes whose network namespace is `name` (compared by device and inode)."""
    try:
        target = os.stat(netns_path(name))
    except FileNotFoundError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            pids.append(int(entry))
    return sorted(pids)
