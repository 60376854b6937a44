"""--launcher slurm's pure parts, no Slurm needed: Slurm's host-list and count syntax, the allocation read from
the environment, the inventory built from (or checked against) it, where srun puts every rank, srun's argv,
and the one-line errors (outside an allocation, no srun, too many ranks, a host outside the allocation)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from cli_support import run_genie
from mpi_support import resolve_launch
from genie.cli.flags import RUN_FLAGS, flag_names
from genie.core.errors import InputError
from genie.core.placement import RankPlacement
from genie.engine.mpi.hostlist import expand_counts, expand_hostlist
from genie.engine.mpi.slurm import (SlurmAllocation, SlurmLaunch, allocation_inventory, find_srun, local_node,
                                    match_inventory, resolve_slurm, slurm_hostfile, srun_argv)
from genie.inventory import load_inventory

ALLOC_ENV = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[01-02],gpu-a.b", "SLURM_TASKS_PER_NODE": "2(x2),1",
             "SLURM_NTASKS": "5"}


@pytest.mark.parametrize("text, hosts", [
    ("node01", ["node01"]),
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("a,b[1-2],c", ["a", "b1", "b2", "c"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("gpu[098-101]-ib", ["gpu098-ib", "gpu099-ib", "gpu100-ib", "gpu101-ib"]),  # the padding width stays
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
])
def test_hostlists_expand_like_scontrol_show_hostnames(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["", "node[01-", "node[4-1]", "node[a-b]", "a,,b", "node]1[", "n[1-[2]]"])
def test_bad_hostlists_are_errors(text):
    with pytest.raises(ValueError):
        expand_hostlist(text)


def test_counts_expand():
    assert expand_counts("2(x3),1") == [2, 2, 2, 1]
    assert expand_counts("4") == [4]
    for bad in ("", "2(x)", "x", "2(x0)"):
        with pytest.raises(ValueError):
            expand_counts(bad)


def test_allocation_from_the_environment():
    alloc = SlurmAllocation.from_env(ALLOC_ENV)
    assert alloc.nodes == ("node01", "node02", "gpu-a.b") and alloc.tasks_per_node == (2, 2, 1)
    assert alloc.ntasks == 5 and alloc.slots("node02") == 2
    assert alloc.describe() == "Slurm allocation 4242 (node[01-02],gpu-a.b)"
    cpus = SlurmAllocation.from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]",
                                     "SLURM_JOB_CPUS_PER_NODE": "8(x2)"})
    assert cpus.tasks_per_node == (8, 8) and cpus.ntasks is None


def test_outside_an_allocation_and_bad_slurm_variables_are_one_line_errors():
    with pytest.raises(InputError, match=r"^--launcher: slurm starts the ranks with srun inside a Slurm allocation, "
                                         r"but SLURM_JOB_ID is not set; run genie inside an allocation, e\.g\. salloc"), flag_names(RUN_FLAGS):
        SlurmAllocation.from_env({})
    with pytest.raises(InputError, match=r"^SLURM_JOB_NODELIST: Slurm job 1: unclosed '\['"):
        SlurmAllocation.from_env({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-2"})
    with pytest.raises(InputError, match=r"^SLURM_TASKS_PER_NODE: Slurm job 1: 1 counts for 2 nodes"):
        SlurmAllocation.from_env({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2"})


def test_the_allocation_as_an_inventory_and_an_inventory_checked_against_it():
    alloc = SlurmAllocation.from_env(ALLOC_ENV)
    inv = allocation_inventory(alloc)
    assert [(h.name, h.address, h.ranks) for h in inv.hosts] == \
           [("node01", "node01", 2), ("node02", "node02", 2), ("n2", "gpu-a.b", 1)]  # a dot does not fit a name
    assert match_inventory(inv, alloc, source="<allocation>") == {"node01": "node01", "node02": "node02",
                                                                  "n2": "gpu-a.b"}
    given = load_inventory("hosts: [{name: a, address: node01.cluster.example.org}, {name: node02, address: 10.0.0.2}]")
    assert match_inventory(given, alloc, source="hosts.yaml") == {"a": "node01", "node02": "node02"}
    stray = load_inventory("hosts: [node01, {name: c, address: node09}]")
    with pytest.raises(InputError, match=r"^hosts\.yaml: hosts\[1\]: host 'c' \(node09\) is not a node of Slurm "
                                         r"allocation 4242 \(node\[01-02\],gpu-a\.b\)"):
        match_inventory(stray, alloc, source="hosts.yaml")


def test_this_machine_in_the_allocation():
    alloc = SlurmAllocation.from_env(ALLOC_ENV)
    assert local_node(alloc, {"SLURMD_NODENAME": "node02"}, "login1") == "node02"
    assert local_node(alloc, {}, "NODE01.cluster.example.org") == "node01"
    assert local_node(alloc, {}, "login1") is None


def _placements(n: int, host: str = "h0", netns: str | None = "genie-x-h0") -> list[RankPlacement]:
    return [RankPlacement(r, host, netns, "198.18.0.1") for r in range(n)]


def test_rank_nodes_follow_the_placements_and_fit_the_allocation():
    alloc = SlurmAllocation.from_env(ALLOC_ENV)
    inv = allocation_inventory(alloc)
    launch = SlurmLaunch(alloc, match_inventory(inv, alloc, source="x"), local_node=None)
    real = [RankPlacement(r, h, None, a) for r, (h, a) in enumerate(
        [("node01", "node01"), ("node01", "node01"), ("node02", "node02"), ("n2", "gpu-a.b")])]
    assert launch.rank_nodes(real) == ["node01", "node01", "node02", "gpu-a.b"]
    assert slurm_hostfile(launch.rank_nodes(real)) == "node01\nnode01\nnode02\ngpu-a.b\n"
    with pytest.raises(InputError, match=r"^--launcher: rank 0 \(host h0\) must run on this machine, which is not "
                                         r"a node of Slurm allocation 4242"), flag_names(RUN_FLAGS):
        launch.rank_nodes(_placements(2))
    here = SlurmLaunch(alloc, {}, local_node="node01")
    assert here.rank_nodes(_placements(2)) == ["node01", "node01"]  # testbed namespaces run here
    with pytest.raises(InputError, match=r"^--launcher: the run needs 3 ranks on node node01 but Slurm allocation "
                                         r"4242 \(node\[01-02\],gpu-a\.b\) has 2 tasks there"), flag_names(RUN_FLAGS):
        here.rank_nodes(_placements(3))
    with pytest.raises(InputError, match=r"^--launcher: the run needs 6 ranks but Slurm allocation 4242 .* has 5 "
                                         r"tasks \(SLURM_NTASKS\)"), flag_names(RUN_FLAGS):
        here.rank_nodes(_placements(6))


def test_srun_argv():
    assert srun_argv("/usr/bin/srun", 4, ["python", "-m", "x"]) == [
        "/usr/bin/srun", "--ntasks=4", "--distribution=arbitrary", "--kill-on-bad-exit=1", "--input=0", "--overlap",
        "--job-name=genie-ranks", "--mpi=pmi2", "python", "-m", "x"]
    assert "--mpi=pmi2" not in srun_argv("srun", 2, ["p"], mpi_type=None, extra=("--cpu-bind=none",))
    assert srun_argv("srun", 2, ["p"], mpi_type="pmix", extra=("--cpu-bind=none",))[-3:] == \
           ["--mpi=pmix", "--cpu-bind=none", "p"]


def _fake_srun(tmp_path: Path) -> Path:
    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\nexit 0\n")
    srun.chmod(0o755)
    return srun


def test_srun_is_found_on_path_or_named_missing(tmp_path):
    with pytest.raises(InputError, match=r"^--launcher: slurm needs Slurm's srun, and there is none on PATH"), flag_names(RUN_FLAGS):
        find_srun({"PATH": str(tmp_path)})
    srun = _fake_srun(tmp_path)
    assert find_srun({"PATH": str(srun.parent)}) == srun
    env = {**ALLOC_ENV, "PATH": str(srun.parent), "SLURM_MPI_TYPE": "pmix", "SLURMD_NODENAME": "node02"}
    found, launch = resolve_slurm(env, None)
    assert found == srun and launch.mpi_type is None and launch.local_node == "node02"  # the user's MPI type wins


def test_resolve_launch_slurm(tmp_path):
    with pytest.raises(InputError, match=r"^--launcher: slurm starts the ranks with srun inside a Slurm allocation"), flag_names(RUN_FLAGS):
        resolve_launch("slurm", "tcp", None, None, environ={})
    with pytest.raises(InputError, match=r"^--mpiexec: Slurm's srun starts the ranks with --launcher slurm"), flag_names(RUN_FLAGS):
        resolve_launch("slurm", "tcp", None, tmp_path / "mpiexec", environ=ALLOC_ENV)
    pytest.importorskip("mpi4py")
    env = {**ALLOC_ENV, "PATH": str(_fake_srun(tmp_path).parent)}
    choice = resolve_launch("slurm", "mpi", None, None, environ=env)  # no target: the allocation's nodes
    assert [(p.rank, p.host, p.address) for p in choice.placements] == [
        (0, "node01", "node01"), (1, "node01", "node01"), (2, "node02", "node02"), (3, "node02", "node02"),
        (4, "n2", "gpu-a.b")]
    assert choice.target == "Slurm allocation 4242 (node[01-02],gpu-a.b)"
    launch = choice.sessions.launch
    assert launch.transport == "mpi" and launch.slurm.allocation.job_id == "4242" and launch.mpiexec.name == "srun"
    assert [p.rank for p in resolve_launch("slurm", "tcp", None, None, ranks=3, environ=env).placements] == [0, 1, 2]
    with pytest.raises(InputError, match=r"^--ranks: testbed slurm-4242 has 5 ranks, asked for 6"):
        resolve_launch("slurm", "tcp", None, None, ranks=6, environ=env)
    # with a testbed target the ranks run here: placements come from the testbed
    choice = resolve_launch("slurm", "tcp", None, None, other_target="--topology", environ=env)
    assert choice.placements is None and choice.sessions.launch.slurm.host_nodes == {}


def test_cli_outside_an_allocation_is_exit_code_2_with_one_line(monkeypatch):
    for var in [v for v in os.environ if v.startswith("SLURM_")]:
        monkeypatch.delenv(var)
    done = run_genie("bench", "--loopback", "--launcher", "slurm", "-b", "1K", "-e", "1K")
    rc, err = done.returncode, done.stderr.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("genie: error: --launcher: slurm starts the ranks with srun inside a Slurm allocation")


def test_session_argv_under_slurm(tmp_path):
    from genie.engine.mpi import MpiLaunch
    from genie.engine.mpi.session import MpiSession
    from genie.engine.session import SessionOptions

    alloc = SlurmAllocation.from_env(ALLOC_ENV)
    launch = MpiLaunch(mpiexec=Path("/opt/slurm/bin/srun"), python=sys.executable,
                       slurm=SlurmLaunch(alloc, {}, local_node="node02"))
    session = MpiSession(_placements(2), SessionOptions(), launch)
    argv = session.command(tmp_path)
    assert argv[:2] == ["/opt/slurm/bin/srun", "--ntasks=2"] and "--mpi=pmi2" in argv
    assert argv[argv.index("--job-name=genie-ranks") + 2:][:4] == [sys.executable, "-m", "genie.engine.mpi.trampoline",
                                                                  "--map"]  # namespaces: the trampoline
    assert (tmp_path / "slurm-hosts").read_text() == "node02\nnode02\n"
    assert session._env == {"SLURM_HOSTFILE": str(tmp_path / "slurm-hosts")}
    with pytest.raises(InputError, match="has 2 tasks there"):
        MpiSession(_placements(3), SessionOptions(), launch)


def test_an_inventory_host_name_is_resolved_on_the_rank():
    """The allocation's inventory reaches nodes by name; the rank resolves its own name to listen on, and a
    loopback answer (Debian's 127.0.1.1) is useless when other hosts must connect."""
    from genie.core.errors import EnvironmentProblem
    from genie.engine.mpi.rank import resolve_own_name

    assert resolve_own_name("10.1.0.7", multi_host=True) == "10.1.0.7"
    assert resolve_own_name("localhost", multi_host=False) == "127.0.0.1"
    with pytest.raises(EnvironmentProblem, match=r"^host name 'localhost' resolves to 127\.0\.0\.1 here, which other "
                                                 r"hosts cannot reach; give the inventory an interface or subnet"):
        resolve_own_name("localhost", multi_host=True)
    with pytest.raises(EnvironmentProblem, match=r"^cannot resolve host name 'no-such-node\.invalid'"):
        resolve_own_name("no-such-node.invalid", multi_host=True)
