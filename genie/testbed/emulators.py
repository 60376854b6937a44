"""The userspace shaper's backend: NFQUEUE rules (iptables inside testbed namespaces) and link-emulator
processes (``ip netns exec NETNS python -m genie.linkemu``), applied and undone like every other step.

Every command runs inside a testbed namespace through ``ip netns exec``, which fails rather than falling back
to the root namespace when the namespace is gone; the namespace name is checked to carry genie's prefix first.
Emulators are started in their own session (a Ctrl-C in the terminal does not reach them: the testbed ends
them), log to ``<state dir>/emulators/<testbed>/<netns>.log`` and write their counters beside it; they are
ended by PID (matched with its start time).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import genie
from genie.core.errors import EnvironmentProblem
from genie.core.process import first_line
from genie.testbed.layout import NETNS_DIR, NETNS_PREFIX
from genie.testbed.lifecycle import process_start_ticks, terminate_pids
from genie.testbed.state import state_dir
from genie.testbed.steps import AddQueueRule, PlanStep, StartEmulator

READY_TIMEOUT_S = 15.0
COMMAND_TIMEOUT_S = 30.0
IPTABLES = "iptables"
_children: dict[int, subprocess.Popen[bytes]] = {}  # emulators started by this process, reaped after ending


@dataclass(frozen=True)
class EmulatorProcess:
    """A running emulator: its namespace, PID and start time (clock ticks, so a reused PID is never hit)."""

    netns: str
    pid: int
    start_ticks: int | None


def emulator_dir(testbed: str) -> Path:
    return state_dir() / "emulators" / testbed


def log_path(testbed: str, netns: str) -> Path:
    return emulator_dir(testbed) / f"{netns}.log"


def stats_path(testbed: str, netns: str) -> Path:
    return emulator_dir(testbed) / f"{netns}.stats.json"


def remove_emulator_files(testbed: str) -> None:
    shutil.rmtree(emulator_dir(testbed), ignore_errors=True)


def userspace_problem() -> str | None:
    """Why the userspace shaper cannot run here, or None (checked before anything is built)."""
    if shutil.which(IPTABLES) is None:
        return ("the userspace link emulator needs the `iptables` command (Debian: apt-get install iptables) "
                "for its NFQUEUE rules")
    return None


def _check_namespace(netns: str) -> None:
    if not netns.startswith(NETNS_PREFIX):
        raise EnvironmentProblem(f"refusing to act outside genie's namespaces: {netns!r}")


def _in_netns(netns: str, argv: list[str]) -> list[str]:
    _check_namespace(netns)
    return ["ip", "netns", "exec", netns, *argv]


def python_env() -> dict[str, str]:
    """The environment of an emulator: this genie importable even when it is not installed."""
    source_root = str(Path(genie.__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": source_root + (os.pathsep + path if path else "")}


class EmulatorBackend:
    """Applies `AddQueueRule` and `StartEmulator` steps of testbed ``testbed``. ``on_started`` is told of every
    emulator started (so the state record names it before anything else happens). With ``here`` the steps act
    in the namespace this process runs in (a real host standing in for a node: ``genie lab shape``), whatever
    namespace they name."""

    def __init__(self, testbed: str, *, on_started: Callable[[EmulatorProcess], None] | None = None,
                 python: str = sys.executable, here: bool = False) -> None:
        self.testbed = testbed
        self.on_started = on_started
        self.python = python
        self.here = here
        self.started: dict[str, EmulatorProcess] = {}

    def _argv(self, netns: str, argv: list[str]) -> list[str]:
        return argv if self.here else _in_netns(netns, argv)

    def apply(self, step: PlanStep) -> None:
        if isinstance(step, AddQueueRule):
            self._iptables(step, "-A")
        elif isinstance(step, StartEmulator):
            self._start(step)
        else:
            raise TypeError(f"not a userspace step: {step!r}")

    def undo(self, step: PlanStep) -> None:
        if isinstance(step, AddQueueRule):
            if self.here or os.path.exists(os.path.join(NETNS_DIR, step.netns)):
                self._iptables(step, "-D", missing_ok=True)
        elif isinstance(step, StartEmulator):
            process = self.started.pop(step.netns, None)
            if process is not None:
                end_emulators([process])
        else:
            raise TypeError(f"not a userspace step: {step!r}")

    def _iptables(self, step: AddQueueRule, action: str, *, missing_ok: bool = False) -> None:
        argv = self._argv(step.netns, step.iptables_argv(action))
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=COMMAND_TIMEOUT_S, check=False)
        if result.returncode != 0 and not missing_ok:
            reason = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
            raise EnvironmentProblem(f"{step.netns}: iptables NFQUEUE rule failed: {reason}")

    def _start(self, step: StartEmulator) -> None:
        directory = emulator_dir(self.testbed)
        directory.mkdir(parents=True, exist_ok=True)
        log = log_path(self.testbed, step.netns)
        argv = self._argv(step.netns, [self.python, "-m", "genie.linkemu", "--config", step.config.to_json(),
                                       "--stats", str(stats_path(self.testbed, step.netns))])
        with open(log, "ab") as log_file:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_file,
                                    start_new_session=True, cwd="/", env=python_env(), close_fds=True)
        _children[proc.pid] = proc
        process = EmulatorProcess(step.netns, proc.pid, process_start_ticks(proc.pid))
        self.started[step.netns] = process
        if self.on_started is not None:
            self.on_started(process)
        try:
            _wait_ready(proc, step.netns, log)
        except BaseException:
            self.started.pop(step.netns, None)
            end_emulators([process])
            raise
        finally:
            assert proc.stdout is not None
            proc.stdout.close()


def _wait_ready(proc: subprocess.Popen[bytes], netns: str, log: Path) -> None:
    try:
        line = first_line(proc, READY_TIMEOUT_S)
    except TimeoutError:
        raise EnvironmentProblem(f"{netns}: the link emulator did not become ready within "
                                 f"{READY_TIMEOUT_S:g} s (log: {log})") from None
    if not line:
        proc.wait(timeout=5)
        raise EnvironmentProblem(f"{netns}: the link emulator failed to start: {_last_line(log)}")
    if not line.startswith(b"ready"):
        raise EnvironmentProblem(f"{netns}: unexpected answer from the link emulator: {line!r}")


def _last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    return lines[-1].strip() if lines else "no output"


def end_emulators(processes: list[EmulatorProcess]) -> list[int]:
    """End emulators still running (PID and start time must match), and reap those this process started."""
    live = [p.pid for p in processes if p.start_ticks is not None and process_start_ticks(p.pid) == p.start_ticks]
    ended = terminate_pids(live)
    reap_children()
    return ended


def reap_children() -> None:
    for pid, proc in list(_children.items()):
        if proc.poll() is not None:
            del _children[pid]


def is_running(process: EmulatorProcess) -> bool:
    if process.start_ticks is None or process_start_ticks(process.pid) != process.start_ticks:
        return False
    try:
        with open(f"/proc/{process.pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")
