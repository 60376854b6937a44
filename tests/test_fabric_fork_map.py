"""`fork_map`'s pool never waits on a worker that will not end (no live testbed, no root)."""

from __future__ import annotations

import subprocess
import sys

_PROGRAM = """
import os, signal
from astra_adapter.fabric.estimate import fork_map
from genie.core.process import die_with_parent

def square(state, k):
    return state * k * k

signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the parent's disposition: what a wedged child inherits
print(fork_map(square, 1, 3, 2))  # registers fork_map's own fork hook first

forks = []
never_written, _keep = os.pipe()
os.register_at_fork(before=lambda: forks.append(1),  # 2nd worker: wedged (SIGKILLed if this program is)
                    after_in_child=lambda: len(forks) == 2 and (die_with_parent(), os.read(never_written, 1)))
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


_OTHER_THREAD = """
import signal, subprocess, sys
from astra_adapter.fabric import estimate

def square(state, k):
    return state * k * k

# Python's own handler, so an exec'd child starts with SIGINT at the default, whatever this program inherited (a
# job started with `&` by a non-interactive shell, as CI may be, has SIGINT ignored, and exec keeps that)
signal.signal(signal.SIGINT, signal.default_int_handler)
estimate.fork_map(square, 1, 2, 2)  # its fork hook registered
estimate._forking.add(-1)  # another thread's fork_map is forking its pool right now
probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
print(subprocess.run([sys.executable, "-c", probe], preexec_fn=lambda: None,  # at-fork hooks run for it
                     capture_output=True, text=True, check=True).stdout.strip())
"""


def test_a_fork_of_another_thread_keeps_its_signals():
    """The hook acts in the workers of the thread that forks them only: a program another thread starts at that
    moment (a preexec_fn runs the hooks) must not inherit an ignored SIGINT, which outlives exec."""
    done = subprocess.run([sys.executable, "-c", _OTHER_THREAD], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True"]


_CRASH = """
import os, signal
from astra_adapter.fabric.estimate import fork_map
from genie.core.errors import RunFailure

def square_or_die(state, k):
    if k == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does to a worker
    return state * k * k

try:
    fork_map(square_or_die, 1, 6, 2)
except RunFailure as exc:
    print(exc)
"""


def test_a_worker_that_dies_fails_the_map_instead_of_hanging_it():
    done = subprocess.run([sys.executable, "-c", _CRASH], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("a worker process of the fabric model (pid ")
    assert done.stdout.rstrip().endswith("died during its plays (signal SIGKILL)")
