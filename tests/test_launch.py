"""Rank processes as the launcher starts them (genie.engine.launch.NamespaceLauncher): each a session of its own
(one autogroup scheduling group per rank, as Hydra starts MPI ranks), still dying with the process that started
them and stopped by PID."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from genie.core.placement import RankPlacement
from genie.engine.launch import NamespaceLauncher, stop_processes

_REPORT = "import os, sys, time; print(os.getsid(0), os.getpgid(0), flush=True); time.sleep(60)"


def _first_line(path: Path, timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.endswith("\n"):
            return text.splitlines()[0]
        time.sleep(0.02)
    raise AssertionError(f"{path} stayed empty")


def _gone(pid: int, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _autogroup(pid: str) -> str | None:
    """The task's autogroup; None on a kernel without autogroups (no CONFIG_SCHED_AUTOGROUP). The kernel prints
    nothing for a task still in the default group (one whose ancestors never called setsid, as in some CI
    containers): that is the root group, named here so it compares unequal to every autogroup."""
    try:
        fields = Path(f"/proc/{pid}/autogroup").read_text().split()
    except OSError:
        return None
    return fields[0] if fields else "(the default group)"


def test_each_rank_is_a_session_and_scheduling_group_of_its_own(tmp_path):
    launcher = NamespaceLauncher()
    procs = [launcher.start(RankPlacement(r, f"h{r}", None, "127.0.0.1"), [sys.executable, "-c", _REPORT],
                            tmp_path / f"rank-{r}.log") for r in range(2)]
    try:
        for r, proc in enumerate(procs):
            sid, pgid = map(int, _first_line(tmp_path / f"rank-{r}.log").split())
            assert sid == pgid == proc.pid != os.getsid(0)
        own = _autogroup("self")
        groups = [_autogroup(str(proc.pid)) for proc in procs]
        if own is not None:
            assert "(the default group)" not in groups, groups  # setsid gives each rank an autogroup
            assert len({own, *groups}) == 3, (own, groups)
    finally:
        stop_processes(procs)
    assert all(p.poll() is not None for p in procs)


def test_a_rank_still_dies_with_the_process_that_started_it(tmp_path):
    parent = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from genie.core.placement import RankPlacement
        from genie.engine.launch import NamespaceLauncher
        proc = NamespaceLauncher().start(RankPlacement(0, "h0", None, "127.0.0.1"),
                                         [sys.executable, "-c", {_REPORT!r}], Path({str(tmp_path / 'rank.log')!r}))
        print(proc.pid, flush=True)
        time.sleep(60)
    """)
    starter = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        rank_pid = int(starter.stdout.readline())
        _first_line(tmp_path / "rank.log")  # the rank runs
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait(10)
        assert _gone(rank_pid), "the rank outlived the process that started it"
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
