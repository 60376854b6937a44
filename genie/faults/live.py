"""The injector's view of a live emulated testbed (`LiveNetwork`): link shapes, link state and cross-traffic,
made real through `genie.testbed.netlink` (the only pyroute2 importer) and `genie.faults.bulk`.

* degrade: each affected link end's egress gets the new shape. A rate change on a link that already has an
  HTB rate changes the class in place (queued packets kept); anything else replaces the end's qdiscs with
  those of the new shape (`genie.testbed.shaping.shaping_steps`, the same steps `up` uses). Restoring is the
  same with the configured shape.
* down: both veth ends set administratively down. The kernel then drops the routes through them; bringing the
  link up adds back the testbed plan's routes through those interfaces (connected routes come back with the
  interface).
* cross-traffic: `genie.faults.bulk` processes, registered to the testbed (so `genie testbed down` ends them
  by PID even if genie is killed) and ended by PID.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from genie.core.testbed import LinkEnd, TestbedInfo
from genie.core.topology import LinkShape
from genie.faults import bulk
from genie.faults.model import LinkTarget, PlannedFault
from genie.testbed.shaping import htb_burst_bytes, htb_quantum_bytes, shaping_steps
from genie.testbed.steps import AddRoute, PlanStep, Shaper


class LiveTestbed:
    def __init__(self, info: TestbedInfo, steps: tuple[PlanStep, ...], shaper: Shaper, *,
                 on_pids: Callable[[list[int]], None] | None = None) -> None:
        self.info, self.steps, self.shaper, self.on_pids = info, steps, shaper, on_pids
        self._shapes: dict[tuple[str, str], LinkShape] = {}  # current shape per end (node, peer)
        self._flows: list[bulk.CrossTraffic] = []
        self._lock = threading.Lock()

    @classmethod
    def of(cls, name: str, on_pids: Callable[[list[int]], None] | None = None) -> LiveTestbed:
        from genie.testbed.state import load_record

        record = load_record(name)
        return cls(record.info, record.steps, record.shaper, on_pids=on_pids)

    def _netlink(self) -> Any:
        from genie.testbed import netlink

        return netlink

    def _ends(self, target: LinkTarget) -> list[LinkEnd]:
        wanted = set(target.ends)
        return [e for e in self.info.link_ends if e.link_index == target.link_index and (e.node, e.peer) in wanted]

    def configured(self, end: LinkEnd) -> LinkShape:
        return self.info.topology.links[end.link_index].shape

    def _reshape(self, end: LinkEnd, new: LinkShape) -> None:
        assert end.netns is not None
        old = self._shapes.get((end.node, end.peer), self.configured(end))
        netlink = self._netlink()
        only_rate = dataclasses.replace(old, rate_bps=new.rate_bps) == new
        if only_rate and old.rate_bps is not None and new.rate_bps is not None:
            netlink.change_htb_rate(end.netns, end.ifname, new.rate_bps, htb_burst_bytes(new.rate_bps),
                                    htb_quantum_bytes(new.rate_bps, new.mtu_bytes))
        elif new != old:
            netlink.replace_egress_qdiscs(end.netns, end.ifname, shaping_steps(end.netns, end.ifname, new,
                                                                               self.shaper))
        self._shapes[(end.node, end.peer)] = new

    # ---- LiveNetwork
    def degrade(self, target: LinkTarget, fault: PlannedFault) -> None:
        updates = {k: v for k, v in dataclasses.asdict(fault.fault.change).items() if v is not None}
        for end in self._ends(target):
            self._reshape(end, dataclasses.replace(self.configured(end), **updates))

    def restore_shape(self, target: LinkTarget) -> None:
        for end in self._ends(target):
            self._reshape(end, self.configured(end))

    def set_link_up(self, target: LinkTarget, up: bool) -> None:
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
        flow = bulk.start(src, a.netns, dst, b.netns, b.address, on_pids=self.on_pids)
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
