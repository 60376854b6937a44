"""Running genie on hostile input without risking the machine: in-process where the input cannot hang or grow
(`run_cli`), in a subprocess under an address-space cap and a timeout where it could (`run_capped`)."""

from __future__ import annotations

import contextlib
import io
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MEMORY_CAP_BYTES = 1536 * 1024 * 1024  # a regression fails with MemoryError here, never takes the machine down
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str
    elapsed_s: float

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def run_cli(argv: list[str]) -> Outcome:
    """`genie argv` in this process (stdout and stderr captured)."""
    from genie.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except BaseException as exc:  # a traceback is a finding: keep it in stderr for the assertion
            import traceback
            err.write("Traceback (most recent call last):\n" + "".join(traceback.format_exception(exc)))
            code = 1
    return Outcome(code, out.getvalue(), err.getvalue(), time.monotonic() - start)


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))


def run_capped(argv: list[str], *, cwd: Path | None = None, timeout_s: float = TIMEOUT_S) -> Outcome:
    """`genie argv` in a subprocess limited to MEMORY_CAP_BYTES of address space, killed after `timeout_s`."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "genie.cli.main", *argv], capture_output=True, text=True,
                              cwd=cwd, env=env, preexec_fn=_cap, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"genie {' '.join(argv)} still running after {timeout_s} s "
                             f"(stderr: {exc.stderr!r})") from None
    return Outcome(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def assert_refused(outcome: Outcome, *needles: str, max_lines: int = 3) -> None:
    """Exit 2, no traceback, at most `max_lines` lines on stderr, each of `needles` in them."""
    assert "Traceback" not in outcome.stderr, outcome.stderr[-3000:]
    assert outcome.code == 2, (outcome.code, outcome.stderr[-3000:])
    lines = outcome.error_lines
    assert 1 <= len(lines) <= max_lines, outcome.stderr[-3000:]
    assert all(len(line) <= 400 for line in lines), [line[:500] for line in lines]
    for needle in needles:
        assert needle in outcome.stderr, (needle, outcome.stderr)


def tree(path: Path) -> set[str]:
    """Every path under `path` (what a refused command must not have added to)."""
    return {str(p.relative_to(path)) for p in path.rglob("*")}
