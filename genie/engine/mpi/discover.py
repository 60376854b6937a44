"""Finding the MPI runtime: MPICH's mpiexec (hydra) and mpi4py for the Python that runs the ranks."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from genie.core.errors import InputError

INSTALL_HINT = "install MPICH and mpi4py with: pip install mpi4py mpich (or pip install -e '.[mpi]')"


def mpi4py_available() -> bool:
    return importlib.util.find_spec("mpi4py") is not None


def find_mpiexec(explicit: str | os.PathLike[str] | None = None, *, python: str = sys.executable) -> Path:
    """`explicit` (--mpiexec) if given, else ``mpiexec`` beside `python` (the `mpich` wheel puts it in the
    venv's bin), else the first on PATH. InputError naming `mpiexec` when there is none, or it is not hydra."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise InputError(f"no such file {str(path)!r}; expected the path of MPICH's mpiexec", path="mpiexec")
        if not os.access(path, os.X_OK):
            raise InputError(f"{str(path)!r} is not executable; expected the path of MPICH's mpiexec",
                             path="mpiexec")
    else:
        beside = Path(python).parent / "mpiexec"
        found = beside if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("mpiexec")
        if found is None:
            raise InputError(f"no mpiexec beside {python} or on PATH; {INSTALL_HINT}, or pass `mpiexec` PATH",
                             path="mpiexec")
        path = Path(found)
    check_hydra(path)
    return path


def check_hydra(path: Path) -> None:
    """MPICH's hydra is the launcher genie drives (PMI_RANK, PMI_FD across namespaces); Open MPI's mpirun is
    refused with a one-line error rather than failing later in a way that is hard to read."""
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=20,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"cannot run {str(path)!r} ({exc})", path="mpiexec") from None
    text = out.stdout + out.stderr
    if "HYDRA" not in text.upper():
        first = next((line.strip() for line in text.splitlines() if line.strip()), "no output")
        raise InputError(f"{str(path)!r} is not MPICH's mpiexec (hydra) but says {first!r}; genie drives MPICH "
                         f"only (Open MPI cannot reach ranks across namespaces); {INSTALL_HINT}",
                         path="mpiexec")
