#!/usr/bin/env bash
# Installs everything genie needs on a fresh Debian/Ubuntu machine, as root: system packages (only those
# missing), then a virtual environment in ./.venv with genie and its test tools. Safe to run again.
#   --test   also the tools the test suite uses: vagrant (validates rendered labs), shellcheck, ssh-keygen, and
#            Slurm's daemons and clients (a private single-node cluster runs --launcher slurm for real; ~13 MB,
#            ~15 s), and torch==2.13.0 (CPU) for `genie trace capture`
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
if [ "${1:-}" = "--test" ]; then
    command -v vagrant >/dev/null 2>&1 || missing+=(vagrant)
    command -v ssh-keygen >/dev/null 2>&1 || missing+=(openssh-client)
    command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)  # checks the lab's provisioning scripts
    command -v srun >/dev/null 2>&1 || missing+=(slurm-client)
    PATH="$PATH:/usr/sbin" command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
    PATH="$PATH:/usr/sbin" command -v slurmd >/dev/null 2>&1 || missing+=(slurmd)
fi
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv python3-pip)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v tc >/dev/null 2>&1 || missing+=(iproute2)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)  # NFQUEUE rules of the userspace link emulator
# a C compiler and Python's headers build the congestion-aware backend's compiled loop (astra_adapter/aware_core.pyx;
# without them pip skips it and the pure Python reference runs, ~15x slower) and the bench's compiled step loop
# (genie/engine/step_loop.pyx; without it the Python step path runs)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
python3 -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    >/dev/null 2>&1 || missing+=(python3-dev)
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing system packages: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python3 - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"setup: genie needs Python >= 3.11, found {sys.version.split()[0]}")
PY

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,mpi]'
if [ "${1:-}" = "--test" ]; then
    # `genie trace capture` and its tests: torch, pinned to the CPU build (a local wheel here, ~35 s with its
    # dependencies); never let pip resolve plain `torch`: that is a multi-GB CUDA build
    .venv/bin/python -m pip install --quiet --disable-pip-version-check 'torch==2.13.0'
fi
echo "setup: genie installed in $(pwd)/.venv ($(.venv/bin/genie --version))" >&2
