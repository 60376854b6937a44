"""What `down --all` and `down NAME` may touch (review s34): a testbed brought up while `down --all` runs, one a
run holds, a record copied under another name, a ``genie-*`` name bound to this machine's own namespace. Fake
environments and a private state directory only."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.testbed import namespaces, service, teardown
from genie.testbed.environment import FakeEnvironment
from genie.testbed.state import STATE_DIR_ENV, load_record, record_path, run_lock, save_record
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
    record = load_record("tmp2-0")  # the maker's PID now names a newer process: another start time
    save_record(dataclasses.replace(record, owner_start_ticks=record.owner_start_ticks - 1))
    monkeypatch.setattr(os, "getpid", lambda: 1)  # seen from another process
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


def test_down_all_tears_down_a_testbed_whose_maker_was_killed_but_not_yet_reaped() -> None:
    """A SIGKILLed run whose parent has not waited for it yet is a zombie: /proc still shows its PID with the
    same start time, but it holds nothing; its testbed is a killed run's leftover (review2 s34)."""
    import signal
    import subprocess
    import sys
    import time

    env = FakeEnvironment()
    service.up(STAR4, name="zomb", environment=env)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = service.process_start_ticks(proc.pid)
        save_record(dataclasses.replace(load_record("zomb"), owner_pid=proc.pid, owner_start_ticks=start))
        assert service.down_all(environment=env).in_use == ("zomb",)  # the maker runs: left up
        os.kill(proc.pid, signal.SIGKILL)
        while service.process_alive(proc.pid):  # a zombie until reaped below
            time.sleep(0.01)
        assert service.process_start_ticks(proc.pid) == start  # /proc still names it
        report = service.down_all(environment=env)
        assert report.testbeds == ("zomb",) and report.in_use == ()
        assert _namespaces(env, "zomb") == []
    finally:
        proc.kill()
        proc.wait()


def test_down_all_leaves_a_testbed_a_shared_run_uses() -> None:
    """`shared` runs (and verify) take no exclusive hold, but `down --all` must not end their ranks either."""
    env = FakeEnvironment()
    service.up(STAR4, name="beside", environment=env)
    with run_lock("beside", shared=True), run_lock("beside", shared=True):  # two shared runs at once: allowed
        with run_lock("beside"):  # and an exclusive one beside them, as before
            pass
        report = service.down_all(environment=env)
    assert report.in_use == ("beside",) and len(_namespaces(env, "beside")) == 5
    assert service.down_all(environment=env).testbeds == ("beside",)


def test_down_all_keeps_the_emulator_files_of_a_testbed_brought_up_while_it_ran(state_dir: Path) -> None:
    """Another process's `up` right after down --all's last read of the records (once the namespaces are
    gone): the files of its live emulators (stats, overrides, logs) stay, as its namespaces do (review2 s34)."""
    import sys

    env = FakeEnvironment()
    names, listing = teardown.record_names, env.list_genie_namespaces
    listed = []

    def list_namespaces() -> list[str]:
        listed.append(True)
        return listing()

    def names_then_an_up() -> list[str]:
        found = names()
        if listed and sys._getframe(1).f_code.co_name == "down_all" and not record_path("late").exists():
            service.up(STAR4, name="late", environment=env)
            (state_dir / "emulators" / "late").mkdir(parents=True)  # as its emulators' start makes it
        return found

    env.list_genie_namespaces = list_namespaces  # type: ignore[method-assign]
    teardown.record_names = names_then_an_up  # type: ignore[attr-defined]
    try:
        service.down_all(environment=env)
    finally:
        teardown.record_names = names  # type: ignore[attr-defined]
    assert load_record("late").complete and (state_dir / "emulators" / "late").is_dir()
