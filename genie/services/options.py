"""What every rank-running service (bench, replay, experiment) shares: where the ranks run, how they start, and
what the run records."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from genie.core.errors import InputError
from genie.core.launch import DataPath, LauncherKind


@dataclass(frozen=True)
class RunOptions:
    """The target (exactly one of `topology`, `testbed`, `loopback`, or real hosts through `inventory` or a
    Slurm allocation), the launcher and data path, and the run directory's extras (link samples every
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

    def check(self) -> None:
        if self.sample_ms < 0:
            raise InputError("must be >= 0", path="sample_ms")

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
                **({"capture": self.capture} if self.capture else {})}
