"""The injector's view of a live emulated testbed (`LiveNetwork`): link shapes, link state and cross-traffic,
made real through `genie.testbed.netlink` (the only pyroute2 importer) and `genie.faults.bulk`.

* degrade: each affected link end's egress gets the qdiscs of the new shape (`genie.testbed.shaping.
  shaping_steps`, the same steps `up` uses): when only the HTB rate differs the class changes in place (queued
  packets kept), otherwise the end's qdiscs are replaced. On a userspace-shaped testbed, delay / jitter / loss
  live in the link emulators' stages (``links[i] a>b``): the injector writes each affected emulator's
  overrides file and signals it (SIGUSR1, by PID and start time), then waits until its statistics confirm the
  change. Restoring is the same with the configured shape.
* down: both veth ends set administratively down. The kernel then drops the routes through them; bringing the
  link up adds back the testbed plan's routes through those interfaces (connected routes come back with the
  interface).
* cross-traffic: `genie.faults.bulk` processes, registered to the testbed (so `genie testbed down` ends them
  by PID even if genie is killed) and ended by PID.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from genie.core.congestion import congestion_control_for
from genie.core.dilation import TimeDilation
from genie.core.errors import EnvironmentProblem
from genie.core.testbed import LinkEnd, TestbedInfo
from genie.core.topology import LinkShape
from genie.faults import bulk
from genie.faults.model import LinkTarget, PlannedFault
from genie.testbed.plan import LINUX_RTO_MIN_US, dilated_rto_min_us
from genie.testbed.shaping import emulator_limit_packets, is_wire, shaping_steps
from genie.testbed.steps import RTO_MIN_US, AddHtb, AddRoute, PlanStep, Shaper, StartEmulator

CONFIRM_TIMEOUT_S = 5.0


def emulator_stages(steps: Sequence[PlanStep]) -> dict[str, list[str]]:
    """Stage name (``links[i] a>b``) -> the namespaces whose link emulator has that stage."""
    out: dict[str, list[str]] = {}
    for step in steps:
        if isinstance(step, StartEmulator):
            for stage in step.config.stages:
                out.setdefault(stage.name, []).append(step.netns)
    return out


class LiveTestbed:
    def __init__(self, info: TestbedInfo, steps: tuple[PlanStep, ...], shaper: Shaper, *,
                 on_pids: Callable[[list[int]], None] | None = None,
                 emulators: Sequence[tuple[str, int, int | None]] = (), netlink: Any = None) -> None:
        self.info, self.steps, self.shaper, self.on_pids = info, steps, shaper, on_pids
        self.dilation: TimeDilation = info.dilation  # what the links are shaped at now (`redilate`)
        self._netlink_module = netlink  # None: genie.testbed.netlink (tests pass a fake beside it)
        self._shapes: dict[tuple[str, str], LinkShape] = {}  # current shape per end (node, peer)
        self._flows: list[bulk.CrossTraffic] = []
        self._lock = threading.Lock()
        self._stages = emulator_stages(steps)
        self._emulators = {netns: (pid, start) for netns, pid, start in emulators}
        self._overrides: dict[str, dict[str, dict[str, Any]]] = {}  # netns -> stage -> live fields
        self._generation = 0
        self._dirty: set[str] = set()

    @classmethod
    def of(cls, name: str, on_pids: Callable[[list[int]], None] | None = None) -> LiveTestbed:
        from genie.testbed.state import load_trusted_record

        record = load_trusted_record(name)
        return cls(record.info, record.steps, record.shaper, on_pids=on_pids, emulators=record.emulators)

    def _netlink(self) -> Any:
        if self._netlink_module is not None:
            return self._netlink_module
        from genie.testbed import netlink

        return netlink

    def _ends(self, target: LinkTarget) -> list[LinkEnd]:
        wanted = set(target.ends)
        return [e for e in self.info.link_ends if e.link_index == target.link_index and (e.node, e.peer) in wanted]

    def configured(self, end: LinkEnd) -> LinkShape:
        return self.info.topology.links[end.link_index].shape

    def _reshape(self, end: LinkEnd, new: LinkShape, was: TimeDilation | None = None) -> None:
        """The egress qdiscs of one end to those of `new` (and, userspace-shaped, its emulator stages). Shapes
        are the stated fabric's; a dilated testbed applies them at rate / N and delay x N (`was`: the dilation
        the end is shaped at now, when `redilate` changes it)."""
        assert end.netns is not None
        old = self._shapes.get((end.node, end.peer), self.configured(end))
        was = was or self.dilation
        before = shaping_steps(end.netns, end.ifname, was.real_shape(old), self.shaper, self.info.links)
        after = shaping_steps(end.netns, end.ifname, self.dilation.real_shape(new), self.shaper, self.info.links)
        netlink = self._netlink()
        if before != after:
            changed = [(a, b) for a, b in zip(before, after) if a != b]
            if len(before) == len(after) and all(isinstance(a, AddHtb) and isinstance(b, AddHtb)
                                                 for a, b in changed):
                (_, htb), = changed
                netlink.change_htb_class(htb)
            else:
                netlink.replace_egress_qdiscs(end.netns, end.ifname, after)
        self._shapes[(end.node, end.peer)] = new
        if self.shaper is Shaper.USERSPACE:
            self._restage(end, new)

    def _restage(self, end: LinkEnd, new: LinkShape) -> None:
        """Record the live stage fields of direction end.node>end.peer in every emulator that has it."""
        name = f"links[{end.link_index}] {end.node}>{end.peer}"
        real = self.dilation.real_shape(new)
        fields = {"delay_ns": round(real.delay_us * 1000), "jitter_ns": round(real.jitter_us * 1000),
                  "loss_pct": real.loss_pct, "limit_packets": emulator_limit_packets(real),
                  "rate_bps": real.rate_bps if is_wire(real, self.info.links) else None}
        for netns in self._stages.get(name, ()):
            stages = self._overrides.setdefault(netns, {})
            if new == self.configured(end) and self.dilation.factor == self.info.dilation.factor:
                stages.pop(name, None)
            else:
                stages[name] = fields
            self._dirty.add(netns)

    def _push_overrides(self) -> None:
        """Write each changed emulator's overrides file, signal it, wait until it reports the generation."""
        from genie.linkemu.emulator import overrides_path_for, write_json_atomic
        from genie.testbed.emulators import EmulatorProcess, is_running, stats_path

        dirty, self._dirty = sorted(self._dirty), set()
        if not dirty:
            return
        self._generation += 1
        waiting = {}
        for netns in dirty:
            stats = stats_path(self.info.name, netns)
            write_json_atomic(overrides_path_for(stats), {"generation": self._generation,
                                                          "stages": self._overrides.get(netns, {})})
            pid, start = self._emulators.get(netns, (0, None))
            if not pid or not is_running(EmulatorProcess(netns, pid, start)):
                raise EnvironmentProblem(f"{netns}: its link emulator is not running")
            os.kill(pid, signal.SIGUSR1)
            waiting[netns] = stats
        deadline = time.monotonic() + CONFIRM_TIMEOUT_S
        while waiting:
            for netns, stats in list(waiting.items()):
                try:
                    if int(json.loads(stats.read_text()).get("overrides_generation") or 0) >= self._generation:
                        del waiting[netns]
                except (OSError, ValueError):
                    pass
            if waiting and time.monotonic() > deadline:
                raise EnvironmentProblem(f"{sorted(waiting)[0]}: the link emulator did not confirm the change "
                                         f"within {CONFIRM_TIMEOUT_S:g} s")
            time.sleep(0.01)

    def redilate(self, dilation: TimeDilation) -> None:
        """Every shaped link end at `dilation` instead (its stated shape kept): rate / N and delay x N of the
        new N, through the same qdisc and emulator changes as a degrade, and every host's TCP minimum RTO that of
        the new N (`genie.testbed.plan.dilated_rto_min_us`, the kernel's 200 ms at N <= 1; skipped where the
        kernel lacks the key, as `testbed up` skips it). Applying the testbed's own dilation again restores it;
        a failure part-way leaves some ends changed: apply the dilation before again."""
        was, self.dilation = self.dilation, dilation
        for end in self.info.link_ends:
            if end.netns is not None:
                self._reshape(end, self._shapes.get((end.node, end.peer), self.configured(end)), was)
        self._push_overrides()
        rto_min_us = dilated_rto_min_us(dilation) or LINUX_RTO_MIN_US
        for host in self.info.hosts:
            if host.netns is not None:
                self._netlink().write_sysctl(host.netns, RTO_MIN_US, str(rto_min_us), if_present=True)

    # ---- LiveNetwork
    def _remember(self, link_index: int, change: str | None) -> None:
        from genie.testbed.state import record_live_change

        record_live_change(self.info.name, link_index, change)

    def degrade(self, target: LinkTarget, fault: PlannedFault) -> None:
        updates = {k: v for k, v in dataclasses.asdict(fault.fault.change).items() if v is not None}
        self._remember(target.link_index, "degraded")  # before the change: a kill mid-way still leaves a note
        for end in self._ends(target):
            self._reshape(end, dataclasses.replace(self.configured(end), **updates))
        self._push_overrides()

    def restore_shape(self, target: LinkTarget) -> None:
        for end in self._ends(target):
            self._reshape(end, self.configured(end))
        self._push_overrides()
        self._remember(target.link_index, None)

    def set_link_up(self, target: LinkTarget, up: bool) -> None:
        if not up:
            self._remember(target.link_index, "down")
        self._set_link_up(target, up)
        if up:
            self._remember(target.link_index, None)

    def _set_link_up(self, target: LinkTarget, up: bool) -> None:
        netlink = self._netlink()
        ends = [e for e in self.info.link_ends if e.link_index == target.link_index]
        for end in ends:
            netlink.set_link_state(end.netns, end.ifname, up)
        if up:
            through = {(e.netns, e.ifname) for e in ends}
            routes = [s for s in self.steps if isinstance(s, AddRoute)
                      and any((s.netns, hop.ifname) in through for hop in s.nexthops)]
            netlink.add_routes(routes)

    def start_cross_traffic(self, src: str, dst: str) -> bulk.CrossTraffic:
        a, b = self.info.endpoint(src), self.info.endpoint(dst)
        flow = bulk.start(src, a.netns, dst, b.netns, b.address, on_pids=self.on_pids,
                          congestion=congestion_control_for(self.dilation.factor))
        with self._lock:
            self._flows.append(flow)
        return flow

    def stop_cross_traffic(self, handle: bulk.CrossTraffic) -> None:
        bulk.stop(handle)
        with self._lock:
            if handle in self._flows:
                self._flows.remove(handle)

    def stop_all(self) -> None:
        """End every flow still running (the injector normally stops each one)."""
        for flow in list(self._flows):
            self.stop_cross_traffic(flow)
