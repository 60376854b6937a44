"""Starting rank processes: the one place that spawns them, inside a testbed namespace or in the current one."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Protocol

from genie.core.placement import RankPlacement
from genie.core.process import die_with_parent


class Launcher(Protocol):
    def start(self, placement: RankPlacement, argv: list[str], log_path: Path) -> subprocess.Popen: ...


class NamespaceLauncher:
    """Runs argv inside the placement's network namespace through `ip netns exec` (argv, never a shell).

    Each rank is a session of its own (setsid), as Hydra starts MPI ranks: with the kernel's autogroup
    scheduling (``kernel.sched_autogroup_enabled``, on by default) a session is one scheduling group, and the
    CPU is shared between groups before the tasks of a group share theirs. In the command's session the whole
    emulated cluster - every rank of every host - got one group's share, as much as a single compiler or test
    process beside it: on the shared 2-core VM ranks that needed 3 % of a CPU waited runnable 69-82 % of the
    time, and a ring step was late by what its sending rank waited (benchmarks/README.md, "Slow iterations").
    A rank of its own session competes as the host it stands for would. The ranks still die with the command
    (`die_with_parent`) and are stopped by PID (`stop_processes`); a terminal's Ctrl-C reaches the command,
    which stops them."""

    def start(self, placement: RankPlacement, argv: list[str], log_path: Path) -> subprocess.Popen:
        full = argv if placement.netns is None else ["ip", "netns", "exec", placement.netns, *argv]
        with open(log_path, "wb") as log:
            return subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=die_with_parent, close_fds=True, start_new_session=True)


def stop_processes(procs: list[subprocess.Popen], grace_s: float = 2.0) -> None:
    """Terminate the given processes by PID: SIGTERM, a grace period, then SIGKILL; always reaps them."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        try:
            os.kill(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    for p in alive:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])
