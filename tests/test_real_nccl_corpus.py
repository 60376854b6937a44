"""The corpus of real nccl-tests output (benchmarks/data/real-nccl, issue 33): every case directory says where its
output came from and whether it is anomalous, parses, loads on its own topology, and is registered in the
benchmark (benchmarks/real_clusters.py) with a label that agrees with its README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.real_clusters import CASES, DATA, load_case
from genie.measure.nccl_output import parse_nccl_tests

#: directories of reference material that hold no nccl-tests runs (their README says so)
REFERENCE_ONLY = {"astrasim-hgx-h100-validation-reference"}
FLAG = re.compile(r"^- \*\*Anomalous flag\*\*: (yes|no)\b", re.MULTILINE)
CASE_DIRS = sorted(p for p in DATA.iterdir() if p.is_dir() and p.name not in REFERENCE_ONLY)
BY_NAME = {c.name: c for c in CASES}
NCCL_TESTS_NAME = {"all_to_all": "alltoall", "send_recv": "sendrecv"}  # nccl-tests' binary names, as in file names


def test_every_case_directory_is_registered_once_and_every_registered_case_exists():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    assert {p.name for p in CASE_DIRS} == set(names)
    for name in REFERENCE_ONLY:
        assert not list((DATA / name).glob("*.txt"))


@pytest.mark.parametrize("case_dir", CASE_DIRS, ids=lambda p: p.name)
def test_every_case_has_a_readme_with_source_and_one_anomalous_flag(case_dir: Path):
    readme = (case_dir / "README.md").read_text()
    assert readme.startswith("# ")
    assert "**Source**" in readme
    flags = FLAG.findall(readme)
    assert len(flags) == 1, f"{case_dir.name}: one '- **Anomalous flag**: yes|no' line, found {flags}"
    if flags[0] == "yes":  # an anomalous case never counts as clean
        assert not BY_NAME[case_dir.name].clean
    assert (case_dir / "topology.yaml").is_file()
    assert list(case_dir.glob("*.txt"))


@pytest.mark.parametrize("case_dir", CASE_DIRS, ids=lambda p: p.name)
def test_every_run_parses_and_loads_on_its_topology(case_dir: Path):
    for path in sorted(case_dir.glob("*.txt")):
        tables = parse_nccl_tests(path.read_bytes(), source=str(path)).tables
        assert tables and all(t.rows for t in tables)
        # the file name says what ran: <collective>-<ranks>r[-variant].txt
        collective, ranks = re.match(r"([a-z_]+)-(\d+)r", path.name).groups()
        assert {NCCL_TESTS_NAME.get(t.collective.value, t.collective.value) for t in tables} == {collective}
        assert {t.ranks for t in tables} == {int(ranks)}
    cluster, runs = load_case(BY_NAME[case_dir.name])
    assert runs and all(r.observations for r in runs)
    assert cluster.gpus_per_node >= max(o.call.ranks // o.call.nodes for r in runs for o in r.observations)
