"""Network namespaces as the filesystem shows them (no netlink): a named namespace's path, whether it exists,
and the processes inside it."""

from __future__ import annotations

import os

from genie.core.errors import EnvironmentProblem
from genie.testbed.layout import NETNS_DIR


class SharedNamespace(EnvironmentProblem):
    """A ``genie-*`` name bound to a namespace genie never makes for a testbed: this machine's own (the one
    genie runs in, or init's). Its processes are the machine's: genie neither ends them nor removes the name."""


def _own_namespaces() -> set[tuple[int, int]]:
    """(device, inode) of this process's network namespace and of init's (when readable)."""
    own = set()
    for path in ("/proc/self/ns/net", "/proc/1/ns/net"):
        try:
            st = os.stat(path)
        except OSError:
            continue
        own.add((st.st_dev, st.st_ino))
    return own


def netns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def netns_exists(name: str) -> bool:
    return os.path.exists(netns_path(name))


def identity(name: str) -> tuple[int, int] | None:
    """(device, inode) of the namespace the name `name` is bound to, None if there is none: one namespace, as long
    as it exists (a namespace removed and made again under the same name - by another testbed - is another)."""
    try:
        st = os.stat(netns_path(name))
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def namespace_pids(name: str) -> list[int]:
    """PIDs of the processes whose network namespace is `name` (compared by device and inode). SharedNamespace
    when `name` is bound to this process's or init's namespace (``ip netns attach genie-x 1`` makes one): every
    process of the machine would be "inside" it."""
    try:
        target = os.stat(netns_path(name))
    except FileNotFoundError:
        return []
    if (target.st_dev, target.st_ino) in _own_namespaces():
        raise SharedNamespace(f"namespace {name} is this machine's own network namespace, not one genie made: "
                              f"genie leaves it alone (remove the name with `ip netns delete {name}`)")
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
