"""The userspace link emulator on live testbeds (root only): verify measures what the links promise, emulators
belong to their testbed (recorded, ended by down, rollback and after a SIGKILLed up), and the netem path where
the kernel has sch_netem.

Skipped without root, without the `iptables` command, or when this kernel cannot queue packets to userspace
(NFQUEUE). Every testbed is named ``u<pid>-...`` and recorded in a temporary state directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_support import run_genie
from genie.core import testbed as core_testbed
from genie.core.errors import EnvironmentProblem
from genie.core.topology import Host, Topology
from genie.testbed import service
from genie.testbed.emulators import EmulatorProcess, is_running, userspace_problem
from genie.testbed.state import STATE_DIR_ENV, load_record, record_path
from genie.testbed.steps import ShaperChoice
from genie.testbed.verify import Metric, Status
from genie.testbed.verify_run import VerifySettings, verify_testbed
from genie.topology import load_topology

from netns_checks import namespace_names, namespaces_of_run, run_fixtures

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_ADMIN) to build namespaces")]

ROOT = Path(__file__).resolve().parent.parent
RUN = f"u{os.getpid()}"
STAR = """
name: emulated-star
hosts: [{prefix: h, count: 4}]
switches: [{name: s0, kind: bridge}]
links:
  - {endpoints: [h0, s0], bandwidth: 100mbit, delay: 1ms}
  - {endpoints: [h1, s0], bandwidth: 100mbit, delay: 1ms}
  - {endpoints: [h2, s0], delay: 5ms, loss: 2}
  - {endpoints: [h3, s0], delay: 5ms}
"""
PAIR = "name: pair\nhosts: [{prefix: h, count: 2}]\nlinks: [{endpoints: [h0, h1], delay: 2ms, jitter: 100us}]\n"


def _ours() -> list[str]:
    return namespaces_of_run(RUN)


root_namespace_untouched, state_dir = run_fixtures(RUN)


@pytest.fixture(scope="module")
def nfqueue_works(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip (with the reason) unless iptables can queue to userspace and a queue can be bound, in a testbed."""
    if problem := userspace_problem():
        pytest.skip(problem)
    previous = os.environ.get(STATE_DIR_ENV)
    os.environ[STATE_DIR_ENV] = str(tmp_path_factory.mktemp("probe-state"))
    name = f"{RUN}-nfq"
    try:
        info = service.up(Topology("probe", (Host("h0"),)), name=name)
        assert isinstance(info, core_testbed.TestbedInfo)
        netns = info.hosts[0].netns
        assert netns is not None
        rule = subprocess.run(["ip", "netns", "exec", netns, "iptables", "-t", "mangle", "-A", "PREROUTING", "-i",
                               "lo", "-j", "NFQUEUE", "--queue-num", "9"], capture_output=True, text=True, timeout=30)
        if rule.returncode != 0:
            pytest.skip(f"iptables NFQUEUE target unavailable: {rule.stderr.strip()}")
        bind = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c",
                               "from genie.linkemu.nfqueue import NfQueue\nq = NfQueue(); q.bind(9); q.close()"],
                              capture_output=True, text=True, timeout=30, cwd=ROOT)
        if bind.returncode != 0:
            pytest.skip(f"cannot bind an NFQUEUE queue: {bind.stderr.strip().splitlines()[-1]}")
    finally:
        if record_path(name).exists():
            service.down(name)
        if previous is None:
            del os.environ[STATE_DIR_ENV]
        else:
            os.environ[STATE_DIR_ENV] = previous


def _up(text: str, suffix: str) -> core_testbed.TestbedInfo:
    info = service.up(load_topology(text), name=f"{RUN}-{suffix}", shaper=ShaperChoice.USERSPACE)
    assert isinstance(info, core_testbed.TestbedInfo)
    return info


def _emulators(name: str) -> list[EmulatorProcess]:
    return [EmulatorProcess(*e) for e in load_record(name).emulators]


def test_star_verify_measures_delay_loss_and_rate_then_down_leaves_nothing(nfqueue_works: None) -> None:
    info = _up(STAR, "star")
    emulators = _emulators(info.name)
    assert sorted(e.netns for e in emulators) == [f"genie-{RUN}-star-h{i}" for i in range(4)]
    assert all(is_running(e) for e in emulators)
    assert info.shaper == core_testbed.Shaping.HTB | core_testbed.Shaping.USERSPACE
    settings = VerifySettings(bulk_seconds=1.5, rtt_probes=100, loss_probes=3000)
    rows = verify_testbed(info.name, settings)
    by = {(row.direction, row.metric): row for row in rows}
    rtt_fast, rtt_slow = by[("h0<->h1", Metric.RTT)], by[("h2<->h3", Metric.RTT)]
    # h0-h1's wires (100 Mbit/s): the probe's 55 bytes at the second wire of each way, 4.4 us (the first lies
    # within its slack): 4 x 1 ms + 8.8 us
    assert (rtt_fast.configured, rtt_slow.configured) == (4008.8, 20000.0)
    for row in (rtt_fast, rtt_slow):  # generous: this machine is shared
        assert row.measured is not None and 0.8 < row.measured / row.configured < 1.25, row  # type: ignore
    for direction in ("h2->h3", "h3->h2"):
        loss = by[(direction, Metric.LOSS)]
        assert loss.configured == 2.0 and loss.measured is not None and 0.5 <= loss.measured <= 4.0, loss
    assert by[("h0->h1", Metric.LOSS)].measured == pytest.approx(0.0, abs=0.5)
    flows = {d: by[(d, Metric.THROUGHPUT)] for d in ("h0->h1", "h1->h0")}
    for _ in range(2):  # this machine is shared (the emulator is a process): a slow flow is measured again
        if all(f.error_pct is not None and abs(f.error_pct) <= 10 for f in flows.values()):
            break
        again = verify_testbed(info.name, settings, pairs=[("h0", "h1")])
        flows = {r.direction: r for r in again if r.metric is Metric.THROUGHPUT and r.direction in flows}
    for flow in flows.values():
        assert flow.error_pct is not None and abs(flow.error_pct) <= 10, flow
    state = service.status(info.name)
    assert all(e.running for e in state.emulators)
    stats = {e.netns: e.stats for e in state.emulators}
    assert stats[f"genie-{RUN}-star-h3"]["stages"]["links[2] h2>s0"]["lost"] > 0  # type: ignore[index]
    report = service.down(info.name)
    assert {e.pid for e in emulators} <= set(report.pids_ended)
    assert not any(is_running(e) for e in emulators)
    assert _ours() == [] and not (Path(os.environ[STATE_DIR_ENV]) / "emulators" / info.name).exists()


def test_a_failing_emulator_start_rolls_everything_back(nfqueue_works: None,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import genie.testbed.emulators as emulators

    started: list[int] = []

    def refuse(proc: subprocess.Popen[bytes], netns: str, log: Path) -> None:
        started.append(proc.pid)
        raise EnvironmentProblem(f"{netns}: refused by the test")

    monkeypatch.setattr(emulators, "_wait_ready", refuse)
    with pytest.raises(EnvironmentProblem, match="refused by the test"):
        _up(PAIR, "fail")
    assert started and not any(os.path.exists(f"/proc/{pid}") and _state(pid) not in "ZX" for pid in started)
    assert _ours() == [] and not record_path(f"{RUN}-fail").exists()


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return "X"


def test_a_sigkilled_up_with_emulators_leaves_nothing_after_down(nfqueue_works: None, state_dir: Path,
                                                                 tmp_path: Path) -> None:
    name = f"{RUN}-kill"
    topology = tmp_path / "pair.yaml"
    topology.write_text(PAIR)
    env = {**os.environ, STATE_DIR_ENV: str(state_dir)}
    proc = subprocess.Popen([sys.executable, "-m", "genie.cli.main", "testbed", "up", str(topology), "--name", name,
                             "--shaper", "userspace"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    emulators: list[EmulatorProcess] = []
    while not emulators:
        assert proc.poll() is None and time.monotonic() < deadline, "up ended before starting an emulator"
        try:
            emulators = [EmulatorProcess(*e) for e in json.loads(record_path(name).read_text())["emulators"]]
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    result = run_genie("testbed", "down", name, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert not any(is_running(e) for e in emulators)
    assert not any(n.startswith(f"genie-{name}-") for n in namespace_names())


def test_the_netem_path(state_dir: Path) -> None:
    from genie.testbed.netlink import probe_netem

    if not probe_netem():
        pytest.skip("this kernel has no sch_netem: the netem shaper cannot be tested here "
                    "(the userspace emulator covers delay, jitter and loss)")
    info = service.up(load_topology(PAIR), name=f"{RUN}-netem", shaper=ShaperChoice.NETEM)
    assert isinstance(info, core_testbed.TestbedInfo) and core_testbed.Shaping.NETEM in info.shaper
    rows = verify_testbed(info.name, VerifySettings(bulk_seconds=1.0, rtt_probes=100, loss_probes=1000))
    rtt = next(row for row in rows if row.metric is Metric.RTT)
    assert rtt.measured is not None and 0.8 < rtt.measured / 4000.0 < 1.25 and rtt.status is not Status.INFO
    service.down(info.name)
