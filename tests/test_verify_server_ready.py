"""A probe server that never says it is ready does not hold `genie testbed verify` / `lab verify` for ever
(review s34)."""

from __future__ import annotations

import sys
import time

import pytest

from genie.core.errors import EnvironmentProblem
from genie.testbed import verify_run


def test_a_silent_probe_server_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify_run, "SERVER_READY_S", 0.5)
    probes = verify_run.Probes(lambda host, args: [sys.executable, "-c", "import time; time.sleep(30)"])
    started = time.monotonic()
    try:
        with pytest.raises(EnvironmentProblem, match="not ready within"):
            probes.start_server("h0", "udp", 30)
    finally:
        probes.stop_servers()
    assert time.monotonic() - started < 10
