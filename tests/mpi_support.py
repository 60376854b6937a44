"""Shared by the MPI tests: skip cleanly without MPICH/mpi4py, find mpiexec, check nothing is left running."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from genie.core.errors import InputError

SKIP_REASON = "needs MPICH and mpi4py: pip install mpi4py mpich (or pip install -e '.[mpi]')"
FAKE_SSH = Path(__file__).resolve().parent / "mpi_fake_ssh.py"


def mpiexec_or_skip() -> Path:
    pytest.importorskip("mpi4py", reason=SKIP_REASON)
    from genie.engine.mpi import find_mpiexec

    try:
        return find_mpiexec()
    except InputError as exc:
        pytest.skip(f"{SKIP_REASON} ({exc})")


def our_descendants() -> list[tuple[int, int]]:
    from genie.engine.mpi.processes import descendants

    return descendants(os.getpid())


def fake_ssh(tmp_path: Path) -> Path:
    """An executable for hydra's -launcher-exec (one path, no arguments): runs tests/mpi_fake_ssh.py."""
    path = tmp_path / "fake-ssh"
    path.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {str(FAKE_SSH)!r}\n"
                    f"runpy.run_path({str(FAKE_SSH)!r}, run_name='__main__')\n")
    path.chmod(0o755)
    return path


def resolve_launch(launcher: str, transport: str, *args, other_target: str | None = None, **kwargs):
    """`genie.services.launch.resolve_launch` given the launch options as `genie bench` takes them (strings, a
    flag as `other_target`), its errors naming the flags as `genie bench` prints them."""
    from genie.cli.bench_cmd import BENCH_FLAGS
    from genie.cli.flags import flag_names
    from genie.core.launch import DataPath, LauncherKind
    from genie.services import launch

    with flag_names(BENCH_FLAGS):
        return launch.resolve_launch(launch.parse_kind(LauncherKind, launcher, "launcher", LauncherKind.LOCAL),
                                     launch.parse_kind(DataPath, transport, "transport", DataPath.TCP), *args,
                                     other_target=other_target.lstrip("-") if other_target else None, **kwargs)
