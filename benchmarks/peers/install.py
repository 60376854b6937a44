"""The peers install themselves into the Python running the harness (the project's venv): torch 2.13.0 (CPU
wheel) for gloo, mpi4py and the mpich wheel (which puts hydra's mpiexec beside python) for MPI. pip runs as
an argv list."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable

from benchmarks.peers import report

TORCH = "torch==2.13.0"
TORCH_VERSION = "2.13.0"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def missing_packages(systems: Iterable[str], python: str = sys.executable) -> list[str]:
    need: list[str] = []
    systems = set(systems)
    if report.GLOO in systems:
        version = _version("torch")
        if version is None or version.split("+")[0] != TORCH_VERSION:
            need.append(TORCH)
    if report.MPI in systems:
        if _version("mpi4py") is None:
            need.append("mpi4py")
        if not (Path(python).parent / "mpiexec").exists():
            need.append("mpich")
    return need


def ensure_peers(systems: Iterable[str], log: Callable[[str], None], python: str = sys.executable) -> None:
    need = missing_packages(systems, python)
    if not need:
        return
    log(f"# installing {' '.join(need)} into {Path(python).parent.parent}")
    subprocess.run([python, "-m", "pip", "install", "-q", *need], check=True)
    importlib.invalidate_caches()


def versions() -> dict[str, str]:
    return {name: _version(name) or "-" for name in ("torch", "mpi4py", "mpich", "numpy")}
