"""Process trees by PID (never by name): what mpiexec started, so that nothing outlives a run.

Hydra puts its proxy and every rank in sessions of their own, so a process group does not hold them; the
tree is read from /proc (parent links), each process remembered with its start time so that a PID the
kernel has since reused is never signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

Proc = tuple[int, int]  # (pid, start time in clock ticks since boot)


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of `pid`, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> list[Proc]:
    """Every living descendant of `root` (children first), with its start time."""
    children: dict[int, list[Proc]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is not None:
            children.setdefault(st[0], []).append((int(name), st[1]))
    out: list[Proc] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def _state(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return b"X"
    return data[data.rindex(b")") + 2:][:1]


def alive(proc: Proc) -> bool:
    """Still running: a zombie (exited, its parent gone and init not yet reaping) is not."""
    st = _stat(proc[0])
    return st is not None and st[1] == proc[1] and _state(proc[0]) not in (b"Z", b"X")


def identify(pid: int) -> Proc | None:
    st = _stat(pid)
    return None if st is None else (pid, st[1])


def kill_procs(procs: list[Proc], sig: int = signal.SIGKILL) -> None:
    for proc in procs:
        if alive(proc):
            try:
                os.kill(proc[0], sig)
            except ProcessLookupError:
                pass


def stop_tree(proc: subprocess.Popen, known: list[Proc], grace_s: float = 3.0) -> list[Proc]:
    """Stop `proc` (mpiexec) and everything under it: SIGTERM to mpiexec (hydra then stops its proxies and
    ranks), a grace period, SIGKILL to whatever of the tree — as seen now or in `known` — still lives.
    Returns what had to be killed."""
    tree = known + [p for p in descendants(proc.pid) if p not in known]
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            tree += [p for p in descendants(proc.pid) if p not in tree]
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + grace_s
    while any(alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in tree if alive(p)]
    kill_procs(left)
    for p in left:  # reap our own children; others are reaped by init
        try:
            os.waitpid(p[0], os.WNOHANG)
        except ChildProcessError:
            pass
    return left
