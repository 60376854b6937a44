"""Nothing of a run or a live change falls back to the root namespace when a record says "no namespace"
(review s34)."""

from __future__ import annotations

import dataclasses
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


@pytest.mark.parametrize("change", ["set_link_state", "change_htb_class", "backend"])
def test_live_link_changes_refuse_the_root_namespace(change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No netlink socket is ever opened for a namespace of None (the root's). pyroute2's IPRoute is replaced
    here, so that a genie without the check fails this test without reaching this machine's own interfaces
    (the first version of this test took eth0 down: review s34)."""
    from genie.testbed.netlink import backend
    from genie.testbed.steps import AddHtb

    opened = []

    def no_socket(*args: object, **kwargs: object) -> None:
        opened.append(kwargs.get("netns"))
        raise AssertionError(f"a netlink socket was opened (netns={kwargs.get('netns')!r})")

    monkeypatch.setattr(backend, "IPRoute", no_socket)
    with pytest.raises(EnvironmentProblem, match="outside genie's namespaces"):
        if change == "set_link_state":
            backend.set_link_state(None, "eth0", False)  # type: ignore[arg-type]
        elif change == "change_htb_class":
            step = next(s for s in _star4_steps() if isinstance(s, AddHtb))
            backend.change_htb_class(dataclasses.replace(step, netns=None))  # type: ignore[arg-type]
        else:
            backend.NetlinkBackend()._ipr(None)  # type: ignore[arg-type]
    assert opened == []


def _star4_steps() -> tuple:
    from genie.testbed.plan import build_plan

    return build_plan(load_topology_file(STAR4), "rt", netem_available=True).steps


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
    from genie.faults.live import LiveTestbed

    with pytest.raises(InputError, match="outside genie-rt-"):  # a live change reads the record itself too
        LiveTestbed.of("rt")
