"""A private single-node Slurm cluster for the Slurm tests (root): slurmctld and slurmd from Debian's packages
(`apt-get install slurmd slurmctld slurm-client`; `scripts/setup.sh --test` installs them), on free ports, with
a config, state and spool in a temporary directory, auth/none (no munge) — this machine is its only node,
under its own host name, with more CPUs than it has (`config_overrides`) so 4 ranks fit on 2 cores. Because
auth/none trusts whoever connects, the daemons live in a network namespace of their own that has only a
loopback interface (`genie-<run>-slurm`, with one non-127 address on lo for getaddrinfo): nothing outside it can reach them, and the clients (salloc, and
genie under it) run in it too — the ranks still enter the testbed's namespaces through the trampoline.
Tests skip with a clear reason where Slurm is not installed. The daemons and the namespace are ours: stopped
by PID and removed afterwards; other clusters on this machine are never touched."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SKIP_REASON = ("needs Slurm (slurmctld, slurmd, srun, salloc): apt-get install --no-install-recommends slurmd "
               "slurmctld slurm-client, or scripts/setup.sh --test")
_PATH = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"


def _tool(name: str) -> str | None:
    return shutil.which(name, path=_PATH)


def slurm_or_skip() -> dict[str, str]:
    tools = {name: _tool(name) for name in ("slurmctld", "slurmd", "srun", "salloc", "sinfo", "scancel")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        pytest.skip(f"{SKIP_REASON} (missing: {', '.join(missing)})")
    return tools  # type: ignore[return-value]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    conf: Path
    node: str
    env: dict[str, str]  # os.environ + SLURM_CONF (clients talk to this cluster only)
    tools: dict[str, str]
    log_dir: Path
    netns: str = ""
    daemon_pids: tuple[int, ...] = ()

    def argv(self, *argv: str) -> list[str]:
        """`argv` run inside the cluster's namespace (where slurmctld is reachable). nsenter, not `ip netns
        exec`, which would remount /sys without the cgroup hierarchy slurmd reads."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", *argv]

    def logs(self) -> str:
        return " | ".join(f"{p.name}: {' / '.join(p.read_text(errors='replace').splitlines()[-3:])}"
                          for p in sorted(self.log_dir.glob("*.log")))


CONF = """ClusterName=genietest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=genietest Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def start_cluster(root: Path, netns: str, *, cpus: int = 8, timeout_s: float = 20.0):
    """A generator for a fixture: yields a running `Cluster` in a new namespace `netns` (loopback only), stops
    it (by PID) and removes the namespace when resumed."""
    tools = slurm_or_skip()
    node = socket.gethostname().split(".")[0]
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    conf.write_text(CONF.format(node=node, root=root, cpus=cpus, ctld_port=_free_port(), d_port=_free_port()))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for var in [v for v in env if v.startswith("SLURM_") and v != "SLURM_CONF"]:
        env.pop(var)  # a test run inside someone's allocation must not leak it into ours
    cluster = Cluster(conf, node, env, tools, root / "log", netns)
    daemons: list[subprocess.Popen] = []
    subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True, capture_output=True)
        # a non-127 address (on lo: still nothing outside reaches it) so getaddrinfo(AI_ADDRCONFIG) answers
        subprocess.run(["ip", "-n", netns, "address", "add", "198.19.255.254/32", "dev", "lo"], check=True,
                       capture_output=True)
        for argv in ([tools["slurmctld"], "-D", "-i", "-f", str(conf)],
                     [tools["slurmd"], "-D", "-f", str(conf), "-N", node]):
            daemons.append(subprocess.Popen(cluster.argv(*argv), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))
        cluster.daemon_pids = tuple(d.pid for d in daemons)
        deadline = time.monotonic() + timeout_s
        while True:
            out = subprocess.run(cluster.argv(tools["sinfo"], "-h", "-o", "%T"), env=env, capture_output=True,
                                 text=True)
            if out.stdout.strip() in ("idle", "mixed", "allocated"):
                break
            if time.monotonic() > deadline or any(d.poll() is not None for d in daemons):
                pytest.fail(f"private Slurm cluster did not come up within {timeout_s:g} s: {cluster.logs()}")
            time.sleep(0.2)
        yield cluster
    finally:
        subprocess.run(cluster.argv(tools["scancel"], "--full", "--quiet", "--partition=genietest"), env=env,
                       capture_output=True)
        for d in reversed(daemons):
            if d.poll() is None:
                d.send_signal(signal.SIGTERM)
            try:
                d.wait(timeout=10)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait()
        subprocess.run(["ip", "netns", "delete", netns], capture_output=True)


_GRANTED = re.compile(r"Granted job allocation (\d+)")


def allocate(cluster: Cluster, ntasks: int) -> str:
    """`salloc --no-shell -n N`: a job id (released with `release`)."""
    out = subprocess.run(cluster.argv(cluster.tools["salloc"], "--no-shell", f"--ntasks={ntasks}",
                                      "--job-name=genie-test", "--immediate=20"), env=cluster.env, capture_output=True, text=True, timeout=60)
    match = _GRANTED.search(out.stderr + out.stdout)
    if not match:
        pytest.fail(f"salloc failed: {out.stderr.strip()} | {cluster.logs()}")
    return match.group(1)


def release(cluster: Cluster, job_id: str) -> None:
    subprocess.run(cluster.argv(cluster.tools["scancel"], job_id), env=cluster.env, capture_output=True)
