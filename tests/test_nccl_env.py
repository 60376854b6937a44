"""NCCL_ALGO / NCCL_PROTO / NCCL_NVLS_ENABLE: what the environment lets NCCL's tuner choose (astra_adapter/nccl/env.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from genie.core.collective import Collective
from genie.core.errors import InputError

from astra_adapter.nccl.calibration_io import load_calibration
from astra_adapter.nccl.env import env_from_output, parse_assignment, parse_env
from astra_adapter.nccl.hardware import Cluster, Interconnect, tuner_system
from astra_adapter.nccl.tuning import NcclAlgorithm, NcclProtocol, choose, tuner_table
from tests.cli_support import run_genie

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "real-nccl"
DGX = DATA / "nvidia-dgxc-dgxh100-8gpu-1node"
MOC = DATA / "moc-h100-roce-2node-nogdr-anomalous"
H100 = Cluster("hgx", 1, 8, "H100", 90, Interconnect.NVSWITCH, 370.8, 0.5, 8, 50.0, 1.0)
H100_2NODE = replace(H100, nodes=2)


def _pairs(cluster: Cluster, collective: Collective) -> set[tuple[NcclAlgorithm, NcclProtocol]]:
    return {(e.algorithm, e.protocol) for e in tuner_table(tuner_system(cluster), collective)}


def test_names_are_case_insensitive_and_a_caret_excludes():
    env = parse_env([("NCCL_ALGO", "ring,TREE"), ("NCCL_PROTO", "^ll128")], source="x")
    assert env.allows(Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.LL)
    assert not env.allows(Collective.ALL_REDUCE, NcclAlgorithm.NVLS, NcclProtocol.SIMPLE)
    assert not env.allows(Collective.ALL_REDUCE, NcclAlgorithm.TREE, NcclProtocol.LL128)
    later = parse_env([("NCCL_ALGO", "Ring"), ("NCCL_ALGO", "^Ring")], source="x")  # the later setting wins
    assert not later.allows(Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.SIMPLE)
    assert later.allows(Collective.ALL_REDUCE, NcclAlgorithm.TREE, NcclProtocol.SIMPLE)


def test_per_collective_lists_leave_other_collectives_free():
    env = parse_env([("NCCL_ALGO", "allreduce:tree;allgather:ring")], source="x")
    assert env.allows(Collective.ALL_REDUCE, NcclAlgorithm.TREE, NcclProtocol.SIMPLE)
    assert not env.allows(Collective.ALL_REDUCE, NcclAlgorithm.RING, NcclProtocol.SIMPLE)
    assert not env.allows(Collective.ALL_GATHER, NcclAlgorithm.PAT, NcclProtocol.SIMPLE)
    assert env.allows(Collective.REDUCE_SCATTER, NcclAlgorithm.PAT, NcclProtocol.SIMPLE)


@pytest.mark.parametrize("pairs, field", [
    ([("NCCL_ALGO", "Ring,Butterfly")], "NCCL_ALGO"),
    ([("NCCL_PROTO", "")], "NCCL_PROTO"),
    ([("NCCL_ALGO", "alltoall:ring")], "NCCL_ALGO"),
    ([("NCCL_NVLS_ENABLE", "yes")], "NCCL_NVLS_ENABLE"),
])
def test_bad_settings_name_the_variable(pairs, field):
    with pytest.raises(InputError) as err:
        parse_env(pairs, source="f")
    assert err.value.path == field


def test_assignments_need_an_nccl_variable():
    assert parse_assignment("NCCL_ALGO=Ring,Tree", source="s") == ("NCCL_ALGO", "Ring,Tree")
    with pytest.raises(InputError):
        parse_assignment("ALGO=Ring", source="s")


def test_the_tuner_never_picks_what_the_environment_excludes():
    every = _pairs(H100, Collective.ALL_REDUCE)
    assert (NcclAlgorithm.NVLS, NcclProtocol.SIMPLE) in every
    off = replace(H100, nccl_env=(("NCCL_NVLS_ENABLE", "0"),))
    assert _pairs(off, Collective.ALL_REDUCE) == {p for p in every if p[0] not in (NcclAlgorithm.NVLS,
                                                                                   NcclAlgorithm.NVLS_TREE)}
    ring_simple = replace(H100_2NODE, nccl_env=(("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "Simple")))
    for size in (8, 65536, 1 << 30):
        choice, _ = choose(tuner_system(ring_simple), Collective.ALL_REDUCE, size)
        assert (choice.algorithm, choice.protocol) == (NcclAlgorithm.RING, NcclProtocol.SIMPLE)
    # the default pick at 8 bytes on 2 nodes is not Ring/Simple: the setting is what moved it
    default, _ = choose(tuner_system(H100_2NODE), Collective.ALL_REDUCE, 8)
    assert default.protocol is not NcclProtocol.SIMPLE


def test_outputs_print_the_settings_nccl_read():
    data = (MOC / "all_reduce-2r.txt").read_bytes()
    assert env_from_output(data) == (("NCCL_ALGO", "RING"),)  # NCCL_SOCKET_IFNAME etc. are not modelled
    line = b"host:1:2 [0] NCCL INFO NCCL_PROTO set by environment to Simple.\n"
    assert env_from_output(line) == (("NCCL_PROTO", "Simple"),)


def test_calibrate_reads_printed_settings_and_takes_the_users_over_them(tmp_path):
    out = tmp_path / "cal"
    r = run_genie("calibrate", str(MOC / "all_reduce-2r.txt"), "--topology", str(MOC / "topology.yaml"),
                  "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "# NCCL environment: NCCL_ALGO=RING" in r.stdout
    cluster, _, _ = load_calibration(out)
    assert cluster.nccl_env == (("NCCL_ALGO", "RING"),)
    assert json.loads((out / "manifest.json").read_text())["params"]["nccl_env"] == {"NCCL_ALGO": "RING"}
    out2 = tmp_path / "cal2"
    r = run_genie("calibrate", str(DGX / "all_reduce-8r.txt"), "--topology", str(DGX / "topology.yaml"),
                  "--nccl-env", "NCCL_NVLS_ENABLE=0", "--out", str(out2))
    assert r.returncode == 0, r.stderr
    assert "NVLS/Simple" not in r.stdout and "NCCL_NVLS_ENABLE=0" in r.stdout
    assert load_calibration(out2)[0].nccl_env == (("NCCL_NVLS_ENABLE", "0"),)


def test_calibrate_refuses_a_bad_setting_in_one_line(tmp_path):
    out = tmp_path / "cal"
    r = run_genie("calibrate", str(DGX / "all_reduce-8r.txt"), "--topology", str(DGX / "topology.yaml"),
                  "--nccl-env", "NCCL_ALGO=Butterfly", "--out", str(out))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Butterfly" in r.stderr
    assert not out.exists()


def test_outputs_that_disagree_on_a_setting_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = tmp_path / "a" / "all_reduce-2r.txt"  # the file name says the collective (2 ranks: all_reduce or sendrecv)
    b = tmp_path / "b" / "all_reduce-2r.txt"
    text = (MOC / "all_reduce-2r.txt").read_text()
    a.write_text(text)
    b.write_text(text.replace("NCCL_ALGO set by environment to RING", "NCCL_ALGO set by environment to TREE"))
    r = run_genie("calibrate", str(a), str(b), "--topology", str(MOC / "topology.yaml"), "--out", str(tmp_path / "c"))
    assert r.returncode == 2 and "NCCL_ALGO" in r.stderr and str(a) in r.stderr
    r = run_genie("calibrate", str(a), str(b), "--topology", str(MOC / "topology.yaml"), "--nccl-env",
                  "NCCL_ALGO=Ring", "--out", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr
