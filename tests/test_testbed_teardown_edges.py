"""Rough edges of teardown (session 35): `down --all` leaving testbeds up must not look like success; two
testbeds whose names map to one namespace (``a`` with node ``b-h0``, ``a-b`` with node ``h0``: ``genie-a-b-h0``);
the kernel probe's scratch namespace of a live `up` of another state directory. Fake environments and a private
state directory only: nothing here lists or removes a real namespace."""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

import pytest

from cli_support import run_genie
from genie.core.errors import GenieError, InputError
from genie.testbed import service, teardown
from genie.testbed.environment import FakeEnvironment
from genie.testbed.layout import check_testbed_name, probe_netns_name, probe_owner
from genie.testbed.lifecycle import process_start_ticks
from genie.testbed.plan import build_plan
from genie.testbed.state import (STATE_DIR_ENV, TestbedRecord, create_record, load_record, record_path, run_lock,
                                 save_record)
from genie.testbed.steps import CreateNetns, Shaper
from genie.topology import load_topology_file, star

ROOT = Path(__file__).resolve().parents[1]
STAR4 = load_topology_file(ROOT / "topologies" / "star-4.yaml")
#: testbed `a` of this topology and testbed `a-b` of star(2) both map hosts to genie-a-b-h0 and genie-a-b-h1
NODE_B_H = """\
name: a
hosts:
  - {name: b-h0}
  - {name: b-h1}
switches:
  - {name: s0, kind: bridge}
links:
  - {endpoints: [b-h0, s0]}
  - {endpoints: [b-h1, s0]}
"""


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def node_b_h(tmp_path: Path):
    path = tmp_path / "a.yaml"
    path.write_text(NODE_B_H)
    return load_topology_file(path)


def _genie_down_all(env: FakeEnvironment, monkeypatch: pytest.MonkeyPatch, *args: str):
    monkeypatch.setattr(service, "down_all", functools.partial(teardown.down_all, environment=env))
    return run_genie("testbed", "down", "--all", *args, cwd=ROOT)


# ---- 1. `down --all` that leaves testbeds up -------------------------------------------------------------------

def test_down_all_that_leaves_a_testbed_up_exits_1_naming_it_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    env = FakeEnvironment()
    service.up(STAR4, name="busy", environment=env)
    service.up(STAR4, name="idle", environment=env)
    service.up(STAR4, name="made", environment=env)
    save_record(dataclasses.replace(load_record("made"), owner_pid=1, owner_start_ticks=process_start_ticks(1)))
    assert load_record("made").owner_pid == 1  # init: a maker that still runs
    with run_lock("busy"):
        result = _genie_down_all(env, monkeypatch)
        again = _genie_down_all(env, monkeypatch)  # idle is down by now: only what is left up
    assert result.returncode == 1, result
    assert again.returncode == 1 and "nothing to tear down" not in again.stdout, again
    assert "testbed idle is down" in result.stdout
    assert "left testbed busy up: a run holds it" in result.stderr
    assert "left testbed made up: the process that made it still runs (pid 1)" in result.stderr
    forced = _genie_down_all(env, monkeypatch, "--force")
    assert forced.returncode == 0 and "testbed busy is down" in forced.stdout, forced
    nothing = _genie_down_all(env, monkeypatch)
    assert nothing.returncode == 0 and nothing.stdout == "nothing to tear down\n"  # nothing left: success


def test_down_all_reports_why_each_testbed_was_left() -> None:
    env = FakeEnvironment()
    service.up(STAR4, name="busy", environment=env)
    with run_lock("busy"):
        report = service.down_all(environment=env)
    assert report.left_up == (teardown.LeftUp("busy", teardown.LeftUpReason.RUN_HOLDS),)
    assert not report.complete and report.in_use == ("busy",)


# ---- 2. one namespace name, two testbeds ----------------------------------------------------------------------

def test_up_refuses_a_namespace_another_testbeds_record_names(node_b_h) -> None:
    """`a`'s `up` under way has recorded genie-a-b-h0 but not made it yet: `up a-b` must not take the name."""
    plan = build_plan(node_b_h, "a", netem_available=True)
    create_record(TestbedRecord(plan.info, plan.steps, 0, False, Shaper.KERNEL, owner_pid=os.getpid()))
    env = FakeEnvironment()
    with pytest.raises(GenieError, match="namespace genie-a-b-h0 of testbed 'a-b' is named by testbed 'a' too"):
        service.up(star(2), name="a-b", environment=env)
    assert env.kernel.genie_namespaces() == [] and not record_path("a-b").exists()


def test_down_leaves_a_namespace_that_is_no_longer_the_one_its_up_made(node_b_h) -> None:
    """`a` made genie-a-b-h0; it was removed and the name made again (by testbed `a-b`): `down a` must leave it."""
    env = FakeEnvironment()
    service.up(node_b_h, name="a", environment=env)
    assert load_record("a").namespace_identity("genie-a-b-h0") == env.namespace_identity("genie-a-b-h0")
    env.remove_namespace("genie-a-b-h0")
    env.kernel.apply(CreateNetns("genie-a-b-h0"))  # another's now
    env.kernel.processes[4242] = "genie-a-b-h0"
    report = service.down("a", environment=env)
    assert report.not_owned == ("genie-a-b-h0",)
    assert env.kernel.genie_namespaces() == ["genie-a-b-h0"] and 4242 not in env.ended


def test_a_record_without_identities_leaves_a_namespace_another_record_names(node_b_h) -> None:
    """A record of older genie (or an `up` killed before noting the namespace) names genie-a-b-h0, which testbed
    `a-b` holds: neither `down a`, `down --all` nor `down --all --force` may remove it."""
    env = FakeEnvironment()
    service.up(star(2), name="a-b", environment=env)
    plan = build_plan(node_b_h, "a", netem_available=True)
    create_record(TestbedRecord(plan.info, plan.steps, len(plan.steps), False, Shaper.KERNEL, owner_pid=2**22 + 7))
    with run_lock("a-b"):
        report = service.down_all(environment=env)
    assert report.testbeds == ("a",) and set(report.not_owned) == {"genie-a-b-h0", "genie-a-b-h1"}
    assert len([n for n in env.kernel.genie_namespaces() if n.startswith("genie-a-b-")]) == 3
    assert service.down("a-b", environment=env).testbeds == ("a-b",)
    assert env.kernel.genie_namespaces() == []


def test_down_force_leaves_the_namespaces_of_a_longer_named_testbed(node_b_h) -> None:
    """`down a --force` (record unreadable) removes genie-a-*, but not genie-a-b-* while testbed `a-b` is recorded
    (even unreadably: then no record claims them by name)."""
    env = FakeEnvironment()
    service.up(star(2), name="a-b", environment=env)
    service.up(STAR4, name="a", environment=env)
    record_path("a").write_text("{broken")
    record_path("a-b").write_text("{broken")
    with pytest.raises(InputError):
        service.down("a", environment=env)
    report = service.down("a", force=True, environment=env)
    assert len(report.orphan_namespaces) == 5 and all(not n.startswith("genie-a-b-") for n in report.orphan_namespaces)
    assert sorted(env.kernel.genie_namespaces()) == ["genie-a-b-h0", "genie-a-b-h1", "genie-a-b-s0"]


# ---- 3. the kernel probe's scratch namespace ------------------------------------------------------------------

def test_down_all_leaves_the_probe_namespace_of_a_live_process_and_removes_a_dead_ones() -> None:
    env = FakeEnvironment()
    live = f"genie-probe-{os.getpid()}-{process_start_ticks(os.getpid())}"  # an `up` of another state directory
    dead = f"genie-probe-{os.getpid()}-{process_start_ticks(os.getpid()) - 1}"  # its PID reused since
    for name in (live, dead):
        env.kernel.apply(CreateNetns(name))
    report = service.down_all(environment=env)
    assert report.orphan_namespaces == (dead,)
    assert env.kernel.genie_namespaces() == [live]


def test_probe_names_round_trip_and_no_testbed_can_take_them() -> None:
    assert probe_netns_name(123, 456) == "genie-probe-123-456"
    assert probe_owner("genie-probe-123-456") == (123, 456)
    assert probe_owner("genie-probe-x-h0") is None and probe_owner("genie-star-h0") is None
    for name in ("probe", "probe-123"):
        with pytest.raises(InputError, match="genie's own"):
            check_testbed_name(name)
    assert check_testbed_name("probes") == "probes"
