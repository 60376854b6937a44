"""Issue #18: a testbed whose link emulator died is named as broken: a failed run says which emulator is not
running (not just "rank 2 timed out"), `testbed verify` refuses to measure it, `testbed status` says BROKEN.
Fake testbeds in a private state directory: their emulator PIDs are the kernel model's, never running here."""

from __future__ import annotations

from pathlib import Path

import pytest

from genie.core.errors import RunFailure
from genie.core import testbed as core_testbed
from genie.services.stage import _named_failure
from genie.services.target import Target
from genie.testbed import service
from genie.testbed.environment import FakeEnvironment
from genie.testbed.state import STATE_DIR_ENV
from genie.topology import load_topology_file

TOPOLOGY = "name: d\nhosts: [h0, h1]\nswitches: [s0]\ndefaults: {delay: 1ms}\n" \
           "links: [{endpoints: [h0, s0]}, {endpoints: [h1, s0]}]\n"


@pytest.fixture
def delayed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> core_testbed.TestbedInfo:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    source = tmp_path / "d.yaml"
    source.write_text(TOPOLOGY)
    env = FakeEnvironment(netem=False)  # no netem: the delay goes to genie's userspace link emulator
    info = service.up(load_topology_file(source), name="d", source=source, environment=env)
    assert service.dead_emulators("d", environment=env) == []  # running in the model
    return info


def test_a_failed_run_names_the_dead_emulator(delayed: core_testbed.TestbedInfo) -> None:
    dead = service.dead_emulators("d")  # the real kernel: the model's PIDs are not running
    assert dead, "the testbed should have a link emulator"
    target = Target([], None, "d", delayed)
    failure = _named_failure(RunFailure("rank 1: op timed out after 60 s"), target)
    assert str(failure).startswith(f"testbed 'd' is broken: its link emulator in {dead[0].netns} "
                                   f"(pid {dead[0].pid}) is not running")
    assert str(failure).endswith("rank 1: op timed out after 60 s")


def test_a_failure_on_loopback_or_a_healthy_testbed_is_unchanged() -> None:
    failure = RunFailure("rank 1: op timed out")
    assert _named_failure(failure, Target([], None, "loopback")) is failure


def test_verify_refuses_a_broken_testbed(delayed: core_testbed.TestbedInfo) -> None:
    from genie.services.verify import VerifyRequest, run_verify

    with pytest.raises(RunFailure, match="testbed 'd' is broken: its link emulator in genie-d-"):
        run_verify(VerifyRequest("d"))


def test_a_run_on_a_broken_testbed_is_refused_before_it_starts(delayed: core_testbed.TestbedInfo) -> None:
    from genie.services.target import open_target

    with pytest.raises(RunFailure, match="testbed 'd' is broken: its link emulator in genie-d-"):
        with open_target(None, "d", False, None, command="bench"):
            pass
