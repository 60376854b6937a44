"""`terminate_pids` never sends its SIGKILL to a PID that names another process by then (review s34)."""

from __future__ import annotations

import signal
import subprocess
import sys

from genie.testbed import lifecycle


def test_a_pid_reused_during_the_grace_period_is_not_killed(monkeypatch) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, "
                             "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        real = lifecycle.process_start_ticks
        seen = []

        def ticks(pid: int) -> int | None:  # from the SIGKILL on, the PID names a newer process
            seen.append(pid)
            start = real(pid)
            return start if len(seen) <= 2 or start is None else start + 1

        monkeypatch.setattr(lifecycle, "process_start_ticks", ticks)
        assert lifecycle.terminate_pids([proc.pid], grace_s=0.2) == [proc.pid]
        assert proc.poll() is None  # SIGTERM ignored, and the SIGKILL withheld
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
