"""A rank's CPU time slice (genie.engine.time_slice): each rank process asks the fair scheduler for the shortest
slice, keeping its policy, nice value and reset-on-fork flag; where the kernel cannot, nothing changes."""

import os
import platform
import socket
import subprocess
import sys
import textwrap

import pytest

from genie.engine import time_slice
from genie.engine.time_slice import RANK_SLICE_US, request_time_slice


def slice_ns(pid: int | str = "self") -> int | None:
    """A process's slice as the scheduler reports it (``se.slice`` of /proc/PID/sched); None where it does not."""
    try:
        with open(f"/proc/{pid}/sched") as sched:
            for line in sched:
                if line.startswith("se.slice"):
                    return int(line.split(":")[1])
    except (OSError, ValueError):
        pass
    return None


def _custom_slices() -> bool:
    """Custom slices need Linux >= 6.12 (EEVDF's `sched_runtime` for fair tasks) and a kernel that reports them."""
    try:
        major, minor = (int(x) for x in platform.release().split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (6, 12) and slice_ns() is not None and platform.machine() in ("x86_64",
                                                                                                     "aarch64")


needs_custom_slices = pytest.mark.skipif(not _custom_slices(), reason="kernel without custom fair slices (< 6.12)")


def _in_child(code: str) -> list[str]:
    """Run `code` in a fresh interpreter (the slice and policy it changes are its own); its printed words."""
    path = os.pathsep.join([os.path.dirname(__file__), *sys.path])  # this module too, for `slice_ns`
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": path}, timeout=60)
    return out.stdout.split()


@needs_custom_slices
def test_the_slice_is_set_and_policy_nice_and_reset_on_fork_are_kept():
    words = _in_child("""
        import os
        from genie.engine.time_slice import request_time_slice
        from test_time_slice import slice_ns
        os.nice(3)
        os.sched_setscheduler(0, os.SCHED_BATCH | os.SCHED_RESET_ON_FORK, os.sched_param(0))
        before = slice_ns()
        ok = request_time_slice(250)
        print(before, ok, slice_ns(), os.sched_getscheduler(0), os.nice(0))
    """)
    before, ok, after, policy, nice = words
    assert ok == "True"
    assert int(after) == 250_000 != int(before)
    assert int(policy) == os.SCHED_BATCH | os.SCHED_RESET_ON_FORK
    assert int(nice) == 3


@needs_custom_slices
def test_the_kernel_clamps_a_slice_below_its_least():
    ok, after = _in_child("""
        from genie.engine.time_slice import request_time_slice
        from test_time_slice import slice_ns
        print(request_time_slice(10), slice_ns())
    """)
    assert ok == "True" and int(after) == RANK_SLICE_US * 1000  # 0.1 ms: the least the kernel gives


@pytest.mark.skipif(os.geteuid() != 0, reason="a real-time policy needs root")
def test_a_real_time_rank_is_left_alone():
    ok, policy = _in_child("""
        import os
        from genie.engine.time_slice import request_time_slice
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        ok = request_time_slice()
        print(ok, os.sched_getscheduler(0))
    """)
    assert ok == "False" and int(policy) == os.SCHED_FIFO


def test_another_architecture_changes_nothing(monkeypatch):
    monkeypatch.setattr(time_slice.platform, "machine", lambda: "riscv64")
    before = slice_ns()
    assert request_time_slice() is False
    assert slice_ns() == before


@needs_custom_slices
def test_a_rank_process_asks_for_the_slice_as_it_starts(tmp_path):
    """The rank program (`python -m genie.engine.rank`) has the short slice by the time it says Hello."""
    path = str(tmp_path / "control.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    server.settimeout(30)
    rank = subprocess.Popen([sys.executable, "-m", "genie.engine.rank", "--control", path, "--rank", "0",
                             "--address", "127.0.0.1"], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        conn, _ = server.accept()
        conn.settimeout(30)
        assert conn.recv(1)  # its Hello: past start-up
        assert slice_ns(rank.pid) == RANK_SLICE_US * 1000
        conn.close()
    finally:
        server.close()
        if rank.poll() is None:
            rank.terminate()
        rank.wait(30)
