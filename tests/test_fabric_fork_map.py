"""`fork_map`'s pool never waits on a worker that will not end (no live testbed, no root)."""

from __future__ import annotations

import subprocess
import sys

_PROGRAM = """
import os, signal
from astra_adapter.fabric.estimate import fork_map

def square(state, k):
    return state * k * k

signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the parent's disposition: what a wedged child inherits
print(fork_map(square, 1, 3, 2))  # registers fork_map's own fork hook first

forks = []
never_written, _keep = os.pipe()
os.register_at_fork(before=lambda: forks.append(1),
                    after_in_child=lambda: len(forks) == 2 and os.read(never_written, 1))  # 2nd worker: wedged
print(fork_map(square, 1, 6, 2))
"""


def test_a_worker_wedged_as_it_starts_does_not_hang_the_pool():
    """A forked worker can wedge before it takes a task - in C, on a lock another thread of the parent held when
    it forked (pytest-xdist's threads; clean-clone CI, 2026-12-05): it runs no signal handler, the other worker
    answers the map, and leaving the pool SIGTERMs and joins every worker. The wedged one must die of it (the
    kernel's default action), or the join waits forever."""
    done = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[0, 1, 4]", "[0, 1, 4, 9, 16, 25]"]
