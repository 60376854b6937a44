"""What every rank-running service (bench, replay, experiment) shares: where the ranks run, how they start, and
what the run records."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import math

from genie.core.dilation import DilationChoice
from genie.core.errors import InputError
from genie.core.limits import MAX_ITERATIONS, MAX_RANKS, MAX_TIMEOUT_S
from genie.core.launch import DataPath, LauncherKind


@dataclass(frozen=True)
class RunOptions:
    """The target (exactly one of `topology`, `testbed`, `loopback`, or real hosts through `inventory` or a
    Slurm allocation), the launcher and data path, the run directory (`out`, written into although it holds
    files only with `force`) and its extras (link samples every
    `sample_ms`, a packet `capture` of one link end, `faults` from a file and/or compact specs)."""

    topology: Optional[Path] = None
    testbed: Optional[str] = None
    loopback: bool = False
    launcher: LauncherKind = LauncherKind.LOCAL
    transport: DataPath = DataPath.TCP
    inventory: Optional[Path] = None
    mpiexec: Optional[Path] = None
    port_range: Optional[str] = None
    out: Optional[Path] = None
    sample_ms: int = 200
    capture: Optional[str] = None
    faults_file: Optional[Path] = None
    faults: tuple[str, ...] = ()
    force: bool = False  # write into an `out` that already holds files
    shared: bool = False  # run on a `testbed` another run may be using (a warning in the manifest)
    #: run the stated fabric N times slower and report in its time (`genie.core.dilation`); a `testbed` keeps
    #: the dilation it was brought up with
    time_dilation: DilationChoice = DilationChoice()

    @property
    def faults_field(self) -> str:
        """The field of the faults given, for an error refusing them (it names the flag the user typed):
        `faults_file` (``--faults FILE``) when a file was given, else `faults` (``--fault SPEC``)."""
        return "faults_file" if self.faults_file is not None else "faults"

    def check(self) -> None:
        from genie.report.rundir import check_run_dir

        if self.sample_ms < 0:
            raise InputError("must be >= 0", path="sample_ms")
        check_run_dir(self.out, force=self.force)

    def target_option(self) -> str | None:
        """The topology/testbed/loopback field given, if any (it excludes an inventory)."""
        for name, value in (("topology", self.topology), ("testbed", self.testbed),
                            ("loopback", self.loopback or None)):
            if value is not None:
                return name
        return None

    def extra_params(self) -> dict:
        """The manifest parameters every run records."""
        return {"launcher": self.launcher.value, "transport": self.transport.value,
                **({"capture": self.capture} if self.capture else {}),
                **({"time_dilation": self.time_dilation.describe()} if not self.time_dilation.is_none else {})}


def check_counts(iterations: int, warmup: int, *, iterations_field: str = "iterations",
                 warmup_field: str = "warmup") -> None:
    """Timed iterations 1..MAX_ITERATIONS, warmup 0..MAX_ITERATIONS (checked before anything starts)."""
    if iterations < 1:
        raise InputError("must be >= 1", path=iterations_field)
    if warmup < 0:
        raise InputError("must be >= 0", path=warmup_field)
    for value, field in ((iterations, iterations_field), (warmup, warmup_field)):
        if value > MAX_ITERATIONS:
            raise InputError(f"must be at most {MAX_ITERATIONS}, got {value}", path=field)


def check_timeout(timeout_s: float, field: str = "timeout_s") -> None:
    """A per-op timeout: a finite number of seconds above 0 and at most MAX_TIMEOUT_S (nan, 0 and negative
    values would start the run and fail later, or never time out)."""
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and 0 < timeout_s <= MAX_TIMEOUT_S):
        raise InputError(f"must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:.0f}, got {timeout_s}",
                         path=field)


def check_ranks(ranks: int | None, field: str = "ranks") -> None:
    """A rank count asked for (None: all of the target's): 1..MAX_RANKS."""
    if ranks is not None and not 1 <= ranks <= MAX_RANKS:
        raise InputError(f"must be between 1 and {MAX_RANKS} (genie runs at most {MAX_RANKS} ranks), got {ranks}",
                         path=field)
