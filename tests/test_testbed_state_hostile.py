"""Issue #18: testbed state that is corrupt or hand-written. `down NAME --force` forgets a corrupt record,
`list` shows it, and `down` never touches anything outside ``genie-<name>-*`` whatever a record says. Fake
environments and a private state directory only (nothing of anyone else's is touched)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genie.core.errors import GenieError, InputError
from genie.testbed import service
from genie.testbed.environment import FakeEnvironment
from genie.testbed.kernel_model import Namespace
from genie.testbed.state import STATE_DIR_ENV, record_path
from genie.topology import load_topology_file

TOPOLOGIES = Path(__file__).resolve().parents[1] / "topologies"


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    return tmp_path / "state"


def _up(env: FakeEnvironment, name: str, tmp_path: Path) -> None:
    source = tmp_path / f"{name}.yaml"  # one file per testbed: the same file may not be up twice
    source.write_text((TOPOLOGIES / "star-4.yaml").read_text())
    service.up(load_topology_file(source), name=name, source=source, environment=env)


def test_a_corrupt_record_is_listed_refused_and_removed_with_force(tmp_path: Path) -> None:
    env = FakeEnvironment()
    _up(env, "keep", tmp_path)
    _up(env, "bad", tmp_path)
    record_path("bad").write_text("{not json")
    assert [s.name for s in service.list_testbeds(environment=env)] == ["keep"]
    assert service.corrupt_testbeds() == ["bad"]
    from tests.hostile_support import run_cli
    listing = run_cli(["testbed", "list"])
    assert "bad" in listing.stdout and "corrupt" in listing.stdout and "down bad --force" in listing.stdout
    with pytest.raises(InputError, match=r"bad\.json: unreadable testbed state.*`genie testbed down bad --force`"):
        service.down("bad", environment=env)
    report = service.down("bad", force=True, environment=env)
    assert not record_path("bad").exists()
    assert report.orphan_namespaces and all(n.startswith("genie-bad-") for n in report.orphan_namespaces)
    assert not [n for n in env.kernel.namespaces if n.startswith("genie-bad-")]
    assert [n for n in env.kernel.namespaces if n.startswith("genie-keep-")]  # the other testbed is untouched
    assert service.corrupt_testbeds() == []


def test_a_record_naming_a_foreign_namespace_never_makes_genie_touch_it(tmp_path: Path) -> None:
    env = FakeEnvironment()
    _up(env, "lk", tmp_path)
    env.kernel.namespaces["victim"] = Namespace()
    env.kernel.processes[4242] = "victim"
    doc = json.loads(record_path("lk").read_text())
    text = json.dumps(doc).replace('"genie-lk-h0"', '"victim"')
    assert "victim" in text
    record_path("lk").write_text(text)
    with pytest.raises(GenieError, match=r"names 'victim', outside genie-lk-\*"):
        service.down("lk", environment=env)
    service.down("lk", force=True, environment=env)
    service.down_all(environment=env)
    assert "victim" in env.kernel.namespaces and 4242 in env.kernel.processes
    assert 4242 not in env.ended
    assert not [n for n in env.kernel.namespaces if n.startswith("genie-lk-")]


def test_registered_pids_hold_live_processes_only(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = FakeEnvironment()
    _up(env, "lk", tmp_path)
    for _ in range(5):  # five runs, each registering a process that then ends
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        service.register_pids("lk", [proc.pid])
        proc.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        service.register_pids("lk", [live.pid])
        doc = json.loads(record_path("lk").read_text())
        assert [pid for pid, _ in doc["registered_pids"]] == [live.pid]
    finally:
        live.kill()
        live.wait()
    service.down("lk", environment=env)


def test_work_directories_of_killed_sessions_are_removed_by_the_next_run(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from genie.engine.session import WORKDIR_PREFIX, remove_stale_workdirs

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f"{WORKDIR_PREFIX}{gone.pid}-abc"
    live = tmp_path / f"{WORKDIR_PREFIX}{os.getpid()}-def"
    parent = tmp_path / f"{WORKDIR_PREFIX}{os.getppid()}-ghi"
    other = tmp_path / "genie-run-notapid"
    for path in (stale, live, parent, other):
        path.mkdir()
        (path / "rank-0.log").write_text("x")
    import socket
    foreign = tmp_path / f"{WORKDIR_PREFIX}{gone.pid}-jkl"  # a dead PID here, a live session elsewhere
    foreign.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(foreign / "control.sock"))
    listener.listen(1)
    try:
        assert remove_stale_workdirs(tmp_path) == [stale]
    finally:
        listener.close()
    assert not stale.exists() and live.exists() and parent.exists() and other.exists() and foreign.exists()
