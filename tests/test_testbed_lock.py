"""Issue #18: two runs on one testbed at once — the second is refused, or runs with `shared` and a warning in
its manifest. Fake testbeds in a private state directory (no root, nothing of anyone else's touched)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.services.target import open_target
from genie.testbed import service
from genie.testbed.environment import FakeEnvironment
from genie.testbed.state import STATE_DIR_ENV, run_lock
from genie.topology import load_topology_file

TOPOLOGIES = Path(__file__).resolve().parents[1] / "topologies"


@pytest.fixture
def testbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    service.up(load_topology_file(TOPOLOGIES / "star-4.yaml"), name="lk", source=TOPOLOGIES / "star-4.yaml",
               environment=FakeEnvironment())
    return "lk"


def test_a_second_run_on_a_testbed_in_use_is_refused(testbed: str) -> None:
    with open_target(None, testbed, False, None, command="bench") as first:
        assert first.warnings == ()
        with pytest.raises(InputError, match=r"testbed 'lk' is in use by another run \(pid \d+\).*`shared`"):
            with open_target(None, testbed, False, None, command="bench"):
                pass
    with open_target(None, testbed, False, None, command="bench"):  # free again once the first has ended
        pass


def test_a_shared_run_is_allowed_and_warned_about(testbed: str) -> None:
    with open_target(None, testbed, False, None, command="bench"):
        with open_target(None, testbed, False, None, command="bench", shared=True) as second:
            assert any("shared testbed" in w for w in second.warnings)


def test_the_lock_of_a_killed_run_does_not_outlive_it(testbed: str, tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from genie.testbed.state import run_lock\n"
                               "with run_lock('lk'):\n    print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match=f"pid {holder.pid}"):
            with run_lock(testbed):
                pass
    finally:
        holder.kill()
        holder.wait()
    with run_lock(testbed):  # SIGKILL released it
        pass


def test_links_a_killed_fault_run_left_changed_are_warned_about(testbed: str) -> None:
    from genie.testbed.state import abandoned_live_changes, live_changes_path, record_live_change

    killed = subprocess.run([sys.executable, "-c", "from genie.testbed.state import record_live_change\n"
                             "record_live_change('lk', 0, 'degraded'); record_live_change('lk', 2, 'down')"])
    assert killed.returncode == 0  # it exited without restoring: as a SIGKILLed run would
    assert abandoned_live_changes(testbed) == {0: "degraded", 2: "down"}
    with open_target(None, testbed, False, None, command="bench") as target:
        assert any("left links of lk changed (h0-s0 degraded, h2-s0 down)" in w for w in target.warnings)
    record_live_change(testbed, 1, "degraded")  # this (live) process: its own change is not abandoned
    assert abandoned_live_changes(testbed) == {}
    record_live_change(testbed, 1, None)  # restored; the killed run's links stay noted
    assert json.loads(live_changes_path(testbed).read_text())["links"] == {"0": "degraded", "2": "down"}
    service.down(testbed, environment=FakeEnvironment())  # the testbed, its note and its lock file are gone
    assert not live_changes_path(testbed).exists()
    assert not (live_changes_path(testbed).parent / "lk.lock").exists()
