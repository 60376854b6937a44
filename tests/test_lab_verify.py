"""`genie lab verify` reads the CPU load of the VMs a flow runs between (each probe reads its own machine's
/proc/stat), not of the VM it runs in: a flow short of its rate is the machine's `ceiling` when one of its
ends was saturated, a FAIL otherwise — whatever the machine running verify is doing."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from genie.core.topology import LinkShape
from genie.lab import plan_lab
from genie.testbed.layout import plan_layout
from genie.testbed.probe import cpu_busy, cpu_times
from genie.testbed.verify import Metric, Status, goodput_bps
from genie.testbed.verify_run import VerifySettings, flow_cpu_busy, measure_links
from genie.topology import star


class _CannedProbes:
    """Probes that answer like the probe programs on two VMs whose CPU load the test chooses."""

    def __init__(self, rate_bps: float, sender_busy: float | None, receiver_busy: float | None) -> None:
        self.rate_bps, self.sender_busy, self.receiver_busy = rate_bps, sender_busy, receiver_busy
        self.streams = itertools.count(1)

    def start_server(self, host: str, what: str, lifetime_s: float) -> None:
        pass

    def stop_servers(self) -> None:
        pass

    def run(self, host: str, *args: str, timeout_s: float) -> dict[str, object]:
        if args[0] == "rtt":
            return {"rtt_us": [30.0] * 10}
        if args[0] == "loss":
            return {"sent": 100, "received": 100}
        step_ns, bytes_per_step = 10_000_000, int(self.rate_bps / 8 / 100)
        timeline = [(k * step_ns, k * bytes_per_step) for k in range(600)]
        flow: dict[str, object] = {"timeline": timeline}
        for key, value in (("sender_cpu_busy", self.sender_busy), ("receiver_cpu_busy", self.receiver_busy)):
            if value is not None:
                flow[key] = value
        return flow


def _throughput(sender_busy: float | None, receiver_busy: float | None) -> list[Status]:
    lab = plan_lab(star(2, shape=LinkShape(rate_bps=10**9)))
    layout = plan_layout(lab.topology, "lab")
    short = 0.8 * goodput_bps(10**9, 1500)  # a flow 20% short of a 1 Gbit/s link
    probes = _CannedProbes(short, sender_busy, receiver_busy)
    rows = measure_links(layout, probes, {m.name: m.address or "" for m in lab.hosts},  # type: ignore[arg-type]
                         VerifySettings(bulk_seconds=1.0))
    return [row.status for row in rows if row.metric is Metric.THROUGHPUT]


def test_a_short_flow_is_the_ceiling_only_when_one_of_its_vms_was_busy() -> None:
    assert _throughput(0.95, 0.30) == [Status.CEILING, Status.CEILING], "the sending VM was saturated"
    assert _throughput(0.20, 0.97) == [Status.CEILING, Status.CEILING], "the receiving VM was saturated"
    assert _throughput(0.20, 0.30) == [Status.FAIL, Status.FAIL], "neither was: the link is wrong"
    assert _throughput(None, None) == [Status.FAIL, Status.FAIL], "unknown load is no excuse"


def test_flow_cpu_busy_is_the_busier_end() -> None:
    assert flow_cpu_busy({"sender_cpu_busy": 0.4, "receiver_cpu_busy": 0.9}) == 0.9
    assert flow_cpu_busy({"sender_cpu_busy": 0.4}) == 0.4
    assert flow_cpu_busy({"timeline": []}) is None
    assert cpu_busy((10, 100), (10, 100)) is None and cpu_busy((10, 100), (60, 200)) == 0.5


@pytest.mark.timeout(60)
def test_the_probes_report_their_own_cpu_load() -> None:
    """The real probe programs over loopback: the sender and the sink each report a load in [0, 1]. The sink on a
    port the kernel picks (a fixed one can be another test's connection's local port: failed so in CI)."""
    server = subprocess.Popen([sys.executable, "-m", "genie.testbed.probe", "serve", "--what", "tcp", "--bind",
                               "127.0.0.1", "--port", "0", "--lifetime", "30"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        ready = json.loads(server.stdout.readline())
        assert ready["ready"] is True and ready["port"] > 0
        before = cpu_times()
        flow = subprocess.run([sys.executable, "-m", "genie.testbed.probe", "bulk", "--to", "127.0.0.1", "--port",
                               str(ready["port"]), "--seconds", "0.5"], capture_output=True, text=True,
                              timeout=30, check=True)
        assert cpu_times()[1] > before[1]
    finally:
        server.terminate()
        server.wait(timeout=10)
    result = json.loads(flow.stdout.strip().splitlines()[-1])
    for key in ("sender_cpu_busy", "receiver_cpu_busy"):
        assert isinstance(result[key], float) and 0.0 <= result[key] <= 1.0, result
    assert result["timeline"] and result["sent_bytes"] > 0
