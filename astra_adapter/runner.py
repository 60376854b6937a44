"""Run a real ASTRA-sim binary (analytical backend) and parse what it prints.

The command line is ASTRA-sim's own: ``--workload-configuration=<prefix>`` (it opens ``<prefix>.<rank>.et``),
``--system-configuration``, ``--network-configuration``, ``--remote-memory-configuration``, optionally
``--comm-group-configuration``. argv only, never a shell.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from genie.core.errors import EnvironmentProblem, GenieError, InputError

from astra_adapter.output import AstraResult, parse_astra_output

STDERR_TAIL_LINES = 15


@dataclass(frozen=True)
class AstraRun:
    result: AstraResult
    argv: tuple[str, ...]
    stdout: str
    stderr: str
    returncode: int


def astra_argv(binary: str | Path, workload_prefix: str | Path, system: str | Path, network: str | Path,
               remote_memory: str | Path, comm_group: str | Path | None = None,
               extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    argv = [str(binary), f"--workload-configuration={workload_prefix}", f"--system-configuration={system}",
            f"--network-configuration={network}", f"--remote-memory-configuration={remote_memory}"]
    if comm_group is not None:
        argv.append(f"--comm-group-configuration={comm_group}")
    return (*argv, *extra)


def _tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"


def _resolve(binary: str | Path) -> str:
    path = Path(binary)
    if path.parent != Path(".") or str(binary).startswith("."):
        if not path.is_file():
            raise EnvironmentProblem(f"ASTRA-sim binary not found: {binary}")
        if not os.access(path, os.X_OK):
            raise EnvironmentProblem(f"ASTRA-sim binary is not executable: {binary}")
        return str(path.resolve())
    found = shutil.which(str(binary))
    if found is None:
        raise EnvironmentProblem(f"ASTRA-sim binary not found on PATH: {binary}")
    return found


def run_astra_binary(binary: str | Path, workload_prefix: str | Path, system: str | Path, network: str | Path,
                     remote_memory: str | Path, *, comm_group: str | Path | None = None,
                     cwd: str | Path | None = None, timeout_s: float | None = None,
                     extra_args: tuple[str, ...] = ()) -> AstraRun:
    """Run ASTRA-sim and parse its per-rank results.

    Missing binary, a non-zero exit, a timeout or output without any ``sys[N] finished`` line raise a
    :class:`GenieError` that quotes the tail of stderr (or stdout).
    """
    for label, path in (("system", system), ("network", network), ("remote memory", remote_memory)):
        full = Path(cwd or ".") / path
        if not full.is_file():
            raise InputError(f"{label} configuration not found", source=str(path))
    argv = astra_argv(_resolve(binary), workload_prefix, system, network, remote_memory, comm_group, extra_args)
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stderr or exc.stdout or ""
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        raise GenieError(f"ASTRA-sim did not finish within {timeout_s} s: {_tail(out)}") from None
    except OSError as exc:
        raise EnvironmentProblem(f"cannot run ASTRA-sim ({argv[0]}): {exc.strerror or exc}") from None
    if done.returncode != 0:
        raise GenieError(f"ASTRA-sim exited with status {done.returncode}: {_tail(done.stderr or done.stdout)}")
    try:
        result = parse_astra_output(done.stdout, source=f"{argv[0]} stdout")
    except InputError:
        raise GenieError(f"ASTRA-sim printed no 'sys[N] finished' line: {_tail(done.stderr or done.stdout)}") \
            from None
    return AstraRun(result, argv, done.stdout, done.stderr, done.returncode)
