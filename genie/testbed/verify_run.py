"""`genie testbed verify NAME`: measure the links of a live testbed from inside its namespaces.

Per chosen host pair (`genie.testbed.verify.choose_pairs`): RTT (paced UDP echo probes, median, minus the same
probe's median over loopback in the sending namespace: the probe's own overhead), loss in each direction
(paced UDP probes counted by the receiver) and throughput in each direction (one TCP flow; its rate after a
warm-up of 20 round trips, with the CPU load over the flow of the busier of its two ends, as their probes
read it). Measurements run one at a time. The probe servers are registered to the testbed (so `down` ends
them) and ended at the end.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from genie.core.errors import EnvironmentProblem
from genie.core.process import first_line
from genie.core.testbed import LinkModel
from genie.testbed.emulators import python_env
from genie.testbed.layout import NETNS_PREFIX, TestbedLayout, plan_layout
from genie.testbed.lifecycle import terminate_pids
from genie.testbed.service import load_info, register_pids, require_net_admin
from genie.testbed.verify import (PairTargets, VerifyRow, choose_pairs, emulated_row, loss_row, rate_from_timeline,
                                  rtt_row, throughput_row, uncovered_links)

PROBE_PORT = 47311
SERVER_READY_S = 15.0
WARMUP_RTTS = 20
MIN_WARMUP_S, MAX_WARMUP_S = 0.5, 5.0


@dataclass(frozen=True)
class VerifySettings:
    bulk_seconds: float = 2.0  # measured part of each TCP flow, after its warm-up
    rtt_probes: int = 200
    rtt_rate_pps: float = 500.0
    loss_probes: int = 5000
    loss_rate_pps: float = 5000.0


ProbeCommand = Callable[[str, Sequence[str]], list[str]]  # (host, probe arguments) -> argv that runs them there


def namespace_probe_command(netns_of: Mapping[str, str], python: str = sys.executable) -> ProbeCommand:
    """Probes inside the testbed's namespaces: ``ip netns exec NETNS python -m genie.testbed.probe ...``."""

    def command(host: str, args: Sequence[str]) -> list[str]:
        netns = netns_of[host]
        if not netns.startswith(NETNS_PREFIX):
            raise EnvironmentProblem(f"refusing to run a probe outside genie's namespaces: {netns!r}")
        return ["ip", "netns", "exec", netns, python, "-m", "genie.testbed.probe", *args]

    return command


class Probes:
    """Runs probe programs on the testbed's hosts through `command` (namespaces, or ssh for a lab);
    ``on_started`` is told of every server process started."""

    def __init__(self, command: ProbeCommand, *, server_command: ProbeCommand | None = None,
                 on_started: Callable[[int], None] | None = None) -> None:
        self.command = command
        self.server_command = server_command or command
        self.on_started = on_started
        self.servers: dict[tuple[str, str], subprocess.Popen[str]] = {}
        self.streams = itertools.count(1)

    def start_server(self, host: str, what: str, lifetime_s: float) -> None:
        """A probe server: ``udp`` (echo and counter) or ``tcp`` (sink), separate so that a bulk flow never
        delays an echo."""
        argv = self.server_command(host, ["serve", "--what", what, "--port", str(PROBE_PORT),
                                          "--lifetime", f"{lifetime_s:.0f}"])
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=python_env(), start_new_session=True)
        self.servers[(host, what)] = proc
        if self.on_started is not None:
            self.on_started(proc.pid)
        line = _first_line(proc, host, SERVER_READY_S)  # the server prints {"ready": true} once bound
        if not line:
            _, err = proc.communicate(timeout=5)
            raise EnvironmentProblem(f"{host}: probe server failed: {(err.strip().splitlines() or ['?'])[-1]}")

    def stop_servers(self) -> None:
        terminate_pids([proc.pid for proc in self.servers.values()], grace_s=1.0)
        for proc in self.servers.values():
            try:
                proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        self.servers.clear()

    def run(self, host: str, *args: str, timeout_s: float) -> dict[str, object]:
        result = subprocess.run(self.command(host, args), stdin=subprocess.DEVNULL, capture_output=True,
                                text=True, timeout=timeout_s, env=python_env(), check=False)
        if result.returncode != 0:
            reason = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
            raise EnvironmentProblem(f"{host}: probe {args[0]} failed: {reason}")
        return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _first_line(proc: subprocess.Popen[str], host: str, timeout_s: float) -> str:
    """The probe server's first line ("" if it ended first); EnvironmentProblem after `timeout_s` (a probe
    server over ssh can hang before it binds: ssh's ConnectTimeout covers the connection only)."""
    try:
        return first_line(proc, timeout_s).decode(errors="replace")
    except TimeoutError:
        raise EnvironmentProblem(f"{host}: the probe server was not ready within {timeout_s:g} s") from None


def flow_cpu_busy(flow: Mapping[str, object]) -> float | None:
    """How busy the CPUs were during a bulk flow: the busier of its two ends, each read by the probe on its own
    machine (the same machine for a namespace testbed; the sending and the receiving VM for a lab)."""
    values = [float(v) for key in ("sender_cpu_busy", "receiver_cpu_busy")  # type: ignore[arg-type]
              if (v := flow.get(key)) is not None]
    return max(values) if values else None


def verify_testbed(name: str, settings: VerifySettings = VerifySettings(), *,
                   pairs: Sequence[tuple[str, str]] | None = None,
                   progress: Callable[[str], None] | None = None) -> list[VerifyRow]:
    """Measure every link of testbed `name` (see the module doc), or only the host `pairs` given; rows in pair
    order. A dilated testbed is measured against the shapes it really has (rate / N, delay x N) and its rows
    reported in the stated fabric's units (`genie.testbed.verify.emulated_row`)."""
    info = load_info(name)
    layout = plan_layout(info.dilation.real_topology(info.topology), name)
    require_net_admin()
    probes = Probes(namespace_probe_command({h.host: h.netns for h in info.hosts}),
                    on_started=lambda pid: register_pids(name, [pid]))
    rows = measure_links(layout, probes, {h.host: h.address for h in info.hosts}, settings, pairs=pairs,
                         progress=progress, links=info.links)
    return [emulated_row(row, info.dilation) for row in rows]


def measure_links(layout: TestbedLayout, probes: Probes, address: Mapping[str, str],
                  settings: VerifySettings = VerifySettings(), *, pairs: Sequence[tuple[str, str]] | None = None,
                  progress: Callable[[str], None] | None = None, links: LinkModel = LinkModel.BUCKET
                  ) -> list[VerifyRow]:
    """The link checks of `layout`'s topology, run through `probes` between the hosts at `address` (their rank
    addresses): a namespace testbed, or a lab's VMs (`genie.services.lab`). Rows in pair order."""
    targets = choose_pairs(layout, pairs, links)
    if progress and pairs is None and (skipped := uncovered_links(layout, targets)):
        progress("not crossed by any measured path (equal-cost alternatives): "
                 + ", ".join(f"links[{i}]" for i in skipped))
    rows: list[VerifyRow] = []
    involved = sorted({host for t in targets for host in (t.there.src, t.there.dst)})
    lifetime = 120 + len(targets) * (60 + 4 * (MAX_WARMUP_S + settings.bulk_seconds))
    try:
        for host in involved:
            for what in ("udp", "tcp"):
                probes.start_server(host, what, lifetime)
        for target in targets:
            a, b = target.there.src, target.there.dst
            if progress:
                progress(f"measuring {a} <-> {b} ({target.links})")
            rows += _measure_pair(probes, settings, target, address)
    finally:
        probes.stop_servers()
    return rows


def _measure_pair(probes: Probes, settings: VerifySettings, target: PairTargets,
                  address: Mapping[str, str]) -> list[VerifyRow]:
    a, b = target.there.src, target.there.dst
    wait_s = max(0.2, 3 * target.rtt_us / 1e6)
    port = str(PROBE_PORT)
    rtt_args = ["--port", port, "--count", str(settings.rtt_probes), "--rate", str(settings.rtt_rate_pps),
                "--wait", f"{wait_s:.3f}"]
    baseline = probes.run(a, "rtt", "--to", "127.0.0.1", *rtt_args, timeout_s=60)
    measured = probes.run(a, "rtt", "--to", address[b], *rtt_args,
                          timeout_s=60 + settings.rtt_probes / settings.rtt_rate_pps)
    rows = [rtt_row(target, measured["rtt_us"], baseline["rtt_us"], settings.rtt_probes)]  # type: ignore[arg-type]
    for src, dst, loss_pct in ((a, b, target.loss_there_pct), (b, a, target.loss_back_pct)):
        stream = next(probes.streams)  # unique per run: a server counts every stream it receives
        counted = probes.run(src, "loss", "--to", address[dst], "--port", port, "--count",
                             str(settings.loss_probes), "--rate", str(settings.loss_rate_pps), "--stream",
                             str(stream), "--wait", f"{wait_s:.3f}",
                             timeout_s=90 + settings.loss_probes / settings.loss_rate_pps)
        rows.append(loss_row(target, src, dst, loss_pct, int(counted["sent"]),  # type: ignore[call-overload]
                             int(counted["received"])))  # type: ignore[call-overload]
    warmup = min(MAX_WARMUP_S, max(MIN_WARMUP_S, WARMUP_RTTS * target.rtt_us / 1e6))
    for src, dst, rate, loss_pct in ((a, b, target.rate_there_bps, target.loss_there_pct),
                                     (b, a, target.rate_back_bps, target.loss_back_pct)):
        seconds = warmup + settings.bulk_seconds
        flow = probes.run(src, "bulk", "--to", address[dst], "--port", port, "--seconds", f"{seconds:.3f}",
                          timeout_s=90 + 2 * seconds)
        busy = flow_cpu_busy(flow)
        rate_bps = rate_from_timeline(flow.get("timeline", []), warmup)  # type: ignore[arg-type]
        rows.append(throughput_row(target, src, dst, rate, loss_pct, rate_bps, busy))
        time.sleep(0.2)  # let the queues drain between flows
    return rows
