"""Run a real ASTRA-sim binary (analytical backend) and parse what it prints.

The command line is ASTRA-sim's own: ``--workload-configuration=<prefix>`` (it opens ``<prefix>.<rank>.et``),
``--system-configuration``, ``--network-configuration``, ``--remote-memory-configuration``, optionally
``--comm-group-configuration``. argv only, never a shell.

**Crash at exit.** The binary (518bd51) crashes at exit whenever it read a communicator-group file (SIGABRT
or SIGSEGV, a double free in ``~CollectivePlan``) - after it printed its results, though its asynchronous logger
can lose the last lines. A non-zero exit therefore fails the run only when a rank's ``finished`` line is
missing; with every rank there, the results stand and :attr:`AstraRun.warnings` says the binary crashed. The
ranks expected are the network's NPUs (``npus_count`` of network.yml; when genie cannot read that file, any
non-zero exit fails).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from genie.core.errors import EnvironmentProblem, GenieError, InputError

from astra_adapter.config import parse_network
from astra_adapter.output import AstraResult, parse_astra_output

STDERR_TAIL_LINES = 15


@dataclass(frozen=True)
class AstraRun:
    result: AstraResult
    argv: tuple[str, ...]
    stdout: str
    stderr: str
    returncode: int
    warnings: tuple[str, ...] = ()


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


def _status(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"status {returncode}"


def _network_npus(path: Path) -> int | None:
    """The NPUs the binary runs (network.yml ``npus_count``), or None when genie cannot read the file (the
    binary may still: it is the judge of its own input)."""
    try:
        return parse_network(path.read_bytes(), source=str(path)).npus_count
    except (InputError, OSError):
        return None


def _missing(ranks: set[int], npus: int) -> str:
    missing = [r for r in range(npus) if r not in ranks]
    shown = ", ".join(str(r) for r in missing[:8]) + (" ..." if len(missing) > 8 else "")
    return f"{len(missing)} of {npus} ranks ({shown})"


def run_astra_binary(binary: str | Path, workload_prefix: str | Path, system: str | Path, network: str | Path,
                     remote_memory: str | Path, *, comm_group: str | Path | None = None,
                     cwd: str | Path | None = None, timeout_s: float | None = None,
                     extra_args: tuple[str, ...] = ()) -> AstraRun:
    """Run ASTRA-sim and parse its per-rank results.

    Missing binary, a timeout, or output without a ``sys[N] finished`` line for every NPU of the network raise
    a :class:`GenieError` that quotes the tail of stderr (or stdout). A non-zero exit after every rank finished
    (the binary's crash at exit, see the module doc) keeps the results, with a warning.
    """
    for label, path in (("system", system), ("network", network), ("remote memory", remote_memory)):
        full = Path(cwd or ".") / path
        if not full.is_file():
            raise InputError(f"{label} configuration not found", source=str(path))
    npus = _network_npus(Path(cwd or ".") / network)
    argv = astra_argv(_resolve(binary), workload_prefix, system, network, remote_memory, comm_group, extra_args)
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stderr or exc.stdout or ""
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        raise GenieError(f"ASTRA-sim did not finish within {timeout_s} s: {_tail(out)}") from None
    except OSError as exc:
        raise EnvironmentProblem(f"cannot run ASTRA-sim ({argv[0]}): {exc.strerror or exc}") from None
    try:
        result = parse_astra_output(done.stdout, source=f"{argv[0]} stdout")
    except InputError:
        exited = f" and exited with {_status(done.returncode)}" if done.returncode else ""
        raise GenieError(f"ASTRA-sim printed no 'sys[N] finished' line{exited}: "
                         f"{_tail(done.stderr or done.stdout)}") from None
    finished = {r.rank for r in result.ranks}
    if npus is None and done.returncode != 0:
        raise GenieError(f"ASTRA-sim exited with {_status(done.returncode)} (and its network configuration does "
                         f"not say how many ranks to expect): {_tail(done.stderr or done.stdout)}")
    if npus is not None and any(r not in finished for r in range(npus)):
        exited = f", exited with {_status(done.returncode)}" if done.returncode else ""
        raise GenieError(f"ASTRA-sim printed no 'finished' line for {_missing(finished, npus)}{exited}: "
                         f"{_tail(done.stderr or done.stdout)}")
    warnings: tuple[str, ...] = ()
    if done.returncode != 0:
        warnings = (f"ASTRA-sim exited with {_status(done.returncode)} after every rank finished (with a "
                    "communicator-group file ASTRA-sim 518bd51 crashes at exit, a double free in ~CollectivePlan); "
                    f"its {npus} ranks' results are kept",)
    return AstraRun(result, argv, done.stdout, done.stderr, done.returncode, warnings)
