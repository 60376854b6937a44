"""Nothing of a run or a live change falls back to the root namespace when a record says "no namespace"
(review s34)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genie.core.errors import EnvironmentProblem, InputError
from genie.faults import bulk
from genie.testbed import service
from genie.testbed.environment import FakeEnvironment
from genie.testbed.state import STATE_DIR_ENV, record_path
from genie.topology import load_topology_file

STAR4 = Path(__file__).resolve().parents[1] / "topologies" / "star-4.yaml"


def test_cross_traffic_never_starts_outside_a_testbed_namespace() -> None:
    with pytest.raises(ValueError, match="outside genie's namespaces"):
        bulk._argv(None, ["recv", "--address", "198.18.0.2"])


def test_live_link_changes_refuse_the_root_namespace() -> None:
    from genie.testbed import netlink

    # an interface no machine has: on a genie without the check this call reaches the root namespace, and a
    # real name (eth0) would be taken down there (it was, once, by this test's first version: review s34)
    with pytest.raises(EnvironmentProblem, match="outside genie's namespaces"):
        netlink.set_link_state(None, "genie-none0", False)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["hosts", "link_ends"])
def test_a_record_placing_runs_outside_its_namespaces_is_refused(field: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    service.up(load_topology_file(STAR4), name="rt", environment=FakeEnvironment())
    doc = json.loads(record_path("rt").read_text())
    doc["info"][field][0]["netns"] = None  # the root namespace
    record_path("rt").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="outside genie-rt-"):
        service.load_info("rt")
