"""`RankWatch`: which local rank went first when several die at once (real processes and sockets, no MPI)."""

from __future__ import annotations

import os
import resource
import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path

from genie.engine.mpi.session import MpiSession, _Run
from genie.engine.session import SessionOptions
from genie.engine.mpi.watch import RankWatch

_HOLDER = """
import fcntl, os, sys, time
from genie.engine.mpi.watch import hold_watch
fd = hold_watch(sys.argv[1], int(sys.argv[2]))
cloexec = bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)
print(fd, int(cloexec), flush=True)
for line in sys.stdin:  # "close": give up the connection and live on, as a slow exit does
    os.close(fd)
    print("closed", flush=True)
time.sleep(60)
"""


def _holder(path: Path, rank: int, **kwargs) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), str(rank)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, **kwargs)
    try:
        fd, cloexec = proc.stdout.readline().split()
        assert cloexec == "1"
    except BaseException:
        _stop([proc])
        raise
    return proc, int(fd)


def _events(watch: RankWatch, count: int, timeout_s: float = 10.0) -> list[int]:
    """The ranks the watch says are going, in order, until `count` of them (or the timeout)."""
    seen: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(seen) < count and time.monotonic() < deadline:
        for key, _ in watch.selector.select(timeout=0.05):
            seen += watch.on_ready(key)
    return seen


def _accept_all(watch: RankWatch, seconds: float = 0.5) -> None:
    assert _events(watch, 1, timeout_s=seconds) == []  # connections accepted and their ranks read; none gone


def _stop(procs) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            stream.close()


def test_the_rank_whose_connection_closed_first_is_named_though_its_process_is_still_there(tmp_path):
    """A slow exit: rank 2's connection is gone while its process lives on (its pidfd says nothing yet); rank 1,
    killed after that, goes with connection and pidfd. The first rank going is rank 2."""
    watch = RankWatch(selectors.DefaultSelector(), tmp_path / "watch.sock")
    procs = {}
    try:
        for rank in (1, 2):
            procs[rank] = _holder(watch.path, rank)[0]
        _accept_all(watch)
        watch.watch_pids({procs[1].pid: 1, procs[2].pid: 2})
        procs[2].stdin.write("close\n")
        procs[2].stdin.flush()
        assert procs[2].stdout.readline() == "closed\n"
        procs[1].kill()
        procs[1].wait()
        going = _events(watch, 3)
        assert going == [2, 1, 1]  # rank 2's connection, then rank 1's connection and pidfd
        state = _Run(watch=watch, started=True)
        MpiSession._ranks_going(state, going)
        assert (state.first_dead, state.dead) == (2, {1, 2})
        assert procs[2].poll() is None
    finally:
        _stop(procs.values())
        watch.close()
        watch.selector.close()
    assert not watch.path.exists()


def test_a_killed_process_releases_its_watch_connection_before_its_inherited_pipes(tmp_path):
    """The premise: hydra's proxy acts on the rank's pipes closing; the watch connection, on a descriptor above
    them, is released first, so its close is seen first."""
    watch = RankWatch(selectors.DefaultSelector(), tmp_path / "watch.sock")
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    proc, fd = _holder(watch.path, 0, pass_fds=(write_end,))
    os.close(write_end)
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert fd == min(soft, 1024) - 1 and fd > write_end
        _accept_all(watch)
        watch.selector.register(read_end, selectors.EVENT_READ)  # not the watch's: a pipe, as the proxy's
        proc.kill()
        proc.wait()
        order: list[str] = []
        deadline = time.monotonic() + 10
        while len(order) < 2 and time.monotonic() < deadline:
            for key, _ in watch.selector.select(timeout=0.05):
                if watch.owns(key):
                    if watch.on_ready(key) == [0]:
                        order.append("watch")
                else:
                    assert os.read(read_end, 64) == b""
                    watch.selector.unregister(read_end)
                    order.append("pipe")
        assert order == ["watch", "pipe"]
    finally:
        _stop([proc])
        os.close(read_end)
        watch.close()
        watch.selector.close()


def test_ranks_going_after_the_end_are_not_counted():
    state = _Run(started=True)
    MpiSession._ranks_going(state, [1, 0, 1])
    assert (state.first_dead, state.dead) == (1, {0, 1})
    state.done = True
    MpiSession._ranks_going(state, [2])
    assert state.dead == {0, 1}


def test_a_rank_gone_before_the_started_line_was_read_is_counted_first_when_it_is():
    """STARTED travels through hydra's proxy and mpiexec, a watch connection's close straight to the session:
    a rank that died in between is the first dead once STARTED is read, not a rank hydra killed after it."""
    state = _Run()
    MpiSession._ranks_going(state, [2])
    assert state.first_dead is None and state.dead == set()  # not yet: the run may never start
    state.started = True
    MpiSession._count_early(state)
    MpiSession._ranks_going(state, [1, 0])
    assert (state.first_dead, state.dead) == (2, {0, 1, 2})


def test_a_watch_without_a_socket_still_watches_pids(tmp_path):
    watch = RankWatch(selectors.DefaultSelector(), tmp_path / "missing-dir" / "watch.sock")
    assert not watch.listening
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        watch.watch_pids({proc.pid: 5})
        proc.kill()
        proc.wait()
        assert _events(watch, 1) == [5]
    finally:
        watch.close()
        watch.selector.close()


def test_a_rank_line_and_the_close_behind_it_are_one_event(tmp_path):
    """A rank that died before its line was read: the line and the close are reported together, not the close
    a select later (behind the closes of ranks killed after it)."""
    watch = RankWatch(selectors.DefaultSelector(), tmp_path / "watch.sock")
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(str(watch.path))
        client.sendall(b"4\n")
        client.close()
        (key, _), = watch.selector.select(timeout=5)  # the listener
        assert watch.on_ready(key) == []
        (key, _), = watch.selector.select(timeout=5)  # the connection: its line, then its end
        assert watch.on_ready(key) == [4]
    finally:
        client.close()
        watch.close()
        watch.selector.close()


def test_after_done_a_rank_seen_going_did_not_die_during_the_run():
    """Ranks leave as soon as the run is done; their connections may close before rank 0's DONE line is read.
    If mpiexec then exits non-zero, the message is mpiexec's, after the run - no rank 'died during the run'."""
    from genie.engine.mpi import MpiLaunch
    from genie.services.target import loopback_placements

    session = MpiSession(loopback_placements(2), SessionOptions(), MpiLaunch(mpiexec=Path("/usr/bin/mpiexec")))
    session.ranks = [{"rank": 0, "host": "localhost", "pid": 1}, {"rank": 1, "host": "localhost", "pid": 2}]
    state = _Run(started=True)
    MpiSession._ranks_going(state, [1])
    assert session._exit_message(1, state).startswith("rank 1 on host localhost died during the run")
    state.done = True
    assert session._exit_message(1, state) == "mpiexec exited with code 1 after the run"


_NO_DESCRIPTORS = """
import os, resource, selectors, socket, sys
from pathlib import Path
from genie.engine.mpi.watch import RankWatch
sel = selectors.DefaultSelector()
watch = RankWatch(sel, Path(sys.argv[1]))
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.connect(sys.argv[1])  # waiting in the backlog
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
try:
    while True:
        held.append(os.dup(0))
except OSError:
    pass  # every descriptor taken: accept fails with EMFILE
rounds = 0
while rounds < 5 and (ready := sel.select(0)):
    for key, _ in ready:
        watch.on_ready(key)
    rounds += 1
print(rounds, watch.listening, os.path.exists(sys.argv[1]))
"""


def test_a_watch_that_cannot_accept_stops_listening_instead_of_spinning(tmp_path):
    """Out of descriptors, accept fails with EMFILE and the listener stays ready: the watch must stop listening
    (the pidfds still tell), or the session's loop would spin on it at full CPU."""
    done = subprocess.run([sys.executable, "-c", _NO_DESCRIPTORS, str(tmp_path / "w.sock")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "False", "False"]
