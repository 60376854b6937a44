"""`genie ARGS` run inside the test process: `genie.cli.main.main(argv)` with stdout/stderr captured, in a given
working directory and with given environment variables, all restored afterwards.

Tests of a real process stay on subprocess: signals (SIGINT/SIGTERM/SIGKILL), exit codes of a killed or
interrupted process, concurrent Popen-based runs, isolation from import side effects, stdin."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Result:
    """What a `genie` process would have left: its exit code and its whole stdout and stderr."""

    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _environment(env: Mapping[str, str | None]) -> Iterator[None]:
    """os.environ with `env` set on top (a None value unsets the variable), restored exactly afterwards."""
    saved = {name: os.environ.get(name) for name in env}
    try:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _command_line(argv: list[str]) -> Iterator[None]:
    """sys.argv as the `genie` process would see it (run manifests record it), restored afterwards."""
    saved = sys.argv
    sys.argv = ["genie", *argv]
    try:
        yield
    finally:
        sys.argv = saved


def run_genie(*args: object, cwd: str | Path | None = None, env: Mapping[str, str | None] | None = None) -> Result:
    """`genie ARGS` (each argument through str) in this process. `cwd`: the working directory for the call;
    `env`: variables set for the call on top of os.environ (a whole environment works too). An exception that
    escapes `main` ends the "process" like the interpreter would: its traceback on stderr and exit code 1."""
    from genie.cli.main import main

    argv = [str(arg) for arg in args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_command_line(argv))
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        if env is not None:
            stack.enter_context(_environment(env))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            code = main(argv)
        except Exception:  # noqa: BLE001 - what an uncaught exception does to a real process
            traceback.print_exc()
            code = 1
    return Result(code, out.getvalue(), err.getvalue())
