"""What `down --all` and `down NAME` may touch (review s34): a testbed brought up while `down --all` runs, one a
run holds, a record copied under another name, a ``genie-*`` name bound to this machine's own namespace. Fake
environments and a private state directory only."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.testbed import namespaces, service
from genie.testbed.environment import FakeEnvironment
from genie.testbed.state import STATE_DIR_ENV, load_record, record_path, run_lock
from genie.topology import load_topology_file

STAR4 = load_topology_file(Path(__file__).resolve().parents[1] / "topologies" / "star-4.yaml")


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    return tmp_path / "state"


def _namespaces(env: FakeEnvironment, name: str) -> list[str]:
    return [n for n in env.kernel.genie_namespaces() if n.startswith(f"genie-{name}-")]


def test_down_all_keeps_a_testbed_brought_up_while_it_ran() -> None:
    env = FakeEnvironment()
    service.up(STAR4, name="old", environment=env)
    listing = env.list_genie_namespaces

    def list_after_a_concurrent_up() -> list[str]:  # another process's `up` between the records and the listing
        service.up(STAR4, name="newcomer", environment=env)
        return listing()

    env.list_genie_namespaces = list_after_a_concurrent_up  # type: ignore[method-assign]
    report = service.down_all(environment=env)
    assert report.testbeds == ("old",) and report.orphan_namespaces == ()
    assert len(_namespaces(env, "newcomer")) == 5 and load_record("newcomer").complete


def test_down_all_leaves_a_testbed_a_run_holds_unless_forced() -> None:
    env = FakeEnvironment()
    service.up(STAR4, name="busy", environment=env)
    service.up(STAR4, name="idle", environment=env)
    with run_lock("busy"):
        report = service.down_all(environment=env)
    assert report.testbeds == ("idle",) and report.in_use == ("busy",)
    assert len(_namespaces(env, "busy")) == 5 and report.orphan_namespaces == ()
    assert service.down_all(force=True, environment=env).testbeds == ("busy",)
    assert env.kernel.genie_namespaces() == []


def test_down_all_leaves_a_testbed_whose_maker_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    env = FakeEnvironment()
    service.up(STAR4, name="tmp1-0", environment=env)
    monkeypatch.setattr(os, "getpid", lambda: 1)  # seen from another process: the owner (this one) runs
    assert service.down_all(environment=env).in_use == ("tmp1-0",)
    assert len(_namespaces(env, "tmp1-0")) == 5


def test_down_all_tears_down_a_testbed_whose_makers_pid_names_another_process_now(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed run's testbed (`down --all`'s job) whose maker's PID the kernel has given to a newer process: the
    recorded start time tells them apart, so the leftover goes."""
    env = FakeEnvironment()
    service.up(STAR4, name="tmp2-0", environment=env)
    assert load_record("tmp2-0").owner_start_ticks == service.process_start_ticks(os.getpid())
    real = service.process_start_ticks
    monkeypatch.setattr(os, "getpid", lambda: 1)  # seen from another process
    monkeypatch.setattr(service, "process_start_ticks", lambda pid: real(pid) + 1)  # the PID: a newer process
    assert service.down_all(environment=env).testbeds == ("tmp2-0",)
    assert _namespaces(env, "tmp2-0") == []


def test_a_record_copied_under_another_name_is_refused() -> None:
    env = FakeEnvironment()
    service.up(STAR4, name="b", environment=env)
    shutil.copy(record_path("b"), record_path("c"))
    with pytest.raises(InputError, match="testbed state of 'b', not of 'c'"):
        service.down("c", environment=env)
    assert len(_namespaces(env, "b")) == 5


def test_a_genie_name_bound_to_this_namespace_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bound = tmp_path / "netns" / "genie-x-h0"  # as `ip netns attach genie-x-h0 1` makes
    bound.parent.mkdir()
    bound.touch()
    st = os.stat(bound)
    monkeypatch.setattr(namespaces, "NETNS_DIR", str(bound.parent))
    monkeypatch.setattr(namespaces, "_own_namespaces", lambda: {(st.st_dev, st.st_ino)})
    with pytest.raises(namespaces.SharedNamespace):
        namespaces.namespace_pids("genie-x-h0")

    env = FakeEnvironment()
    env.kernel.apply(service.CreateNetns("genie-x-h0"))

    def shared(name: str) -> list[int]:
        raise namespaces.SharedNamespace(name)

    env.namespace_pids = shared  # type: ignore[method-assign]
    report = service.down_all(environment=env)
    assert report.shared_namespaces == ("genie-x-h0",) and report.orphan_namespaces == ()
    assert env.kernel.genie_namespaces() == ["genie-x-h0"]


def test_a_namespace_the_rollback_could_not_remove_stays_recorded() -> None:
    from genie.testbed.backend import StepFailed
    from genie.testbed.plan import build_plan
    from genie.testbed.steps import CreateNetns

    stuck = CreateNetns("genie-rb-h0")
    steps = build_plan(STAR4, "rb", netem_available=True).steps
    env = FakeEnvironment(fail_at=len(steps) - 1, fail_undo=frozenset({stuck}))
    with pytest.raises(StepFailed):
        service.up(STAR4, name="rb", environment=env)
    assert _namespaces(env, "rb") == ["genie-rb-h0"]
    assert load_record("rb").namespaces == ("genie-rb-h0",)  # `down rb` can find it (not only `down --all`)
    env.fail_undo = frozenset()
    service.down("rb", environment=env)
    assert _namespaces(env, "rb") == [] and not record_path("rb").exists()
