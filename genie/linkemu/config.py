"""What one link-emulator process does: its queues, the routes from source MAC to a chain of stages, and the
stages (one link direction each). Pure data, JSON round-trip; planned by `genie.testbed.userspace`.

A *stage* is one direction of one topology link as seen by one receiving namespace: delay, jitter (with or
without reordering), loss (independent or in Gilbert bursts) and a delay-line limit, with its own seed. A
packet queued on ``queue_num`` is matched by its source MAC to a *route* (the chain of stages of the links it
crossed since the last L3 hop, e.g. ``h0>s0`` then ``s0>h1`` on a bridged star); packets from an unknown MAC
take the queue's ``default_chain``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from genie.core.units import describe_rate

NS_PER_US = 1000


#: the most an emulator releases a packet before its time: its wake-up compensation's bound (genie.linkemu.emulator)
MAX_COMPENSATION_NS = 100_000


@dataclass(frozen=True)
class StageSpec:
    """One link direction: ``name`` is ``links[i] a>b``; times in nanoseconds; ``limit_packets`` counts
    MTU-sized segments held in the delay line (a GSO super-packet counts as its segments). With ``rate_bps``
    the stage is a wire of that rate: each packet occupies it for its serialization time (its segments'
    bytes with their Ethernet framing), one after another, before the delay."""

    name: str
    delay_ns: int
    jitter_ns: int = 0
    reorder: bool = False
    loss_pct: float = 0.0
    loss_burst_packets: float = 0.0  # 0: independent losses; >= 1: Gilbert model with this mean burst length
    limit_packets: int = 1000
    mtu_bytes: int = 1500
    seed: int = 0
    rate_bps: int | None = None
    #: a packet reaching an idle wire may start this long before it arrived: the sender's shaper may have been
    #: that late with it (a message is then early by at most this, never by a whole burst)
    wire_slack_ns: int = 0

    def describe(self) -> str:
        parts = [self.name] + ([f"wire {describe_rate(self.rate_bps)}"] if self.rate_bps else []) + [
            f"delay {_time(self.delay_ns)}"]
        if self.jitter_ns:
            parts.append(f"jitter {_time(self.jitter_ns)}{' reorder' if self.reorder else ''}")
        if self.loss_pct:
            parts.append(f"loss {self.loss_pct:g}%")
            if self.loss_burst_packets:
                parts.append(f"burst {self.loss_burst_packets:g}")
        parts += [f"limit {self.limit_packets}", f"seed {self.seed}"]
        return " ".join(parts)


@dataclass(frozen=True)
class SourceRoute:
    """Packets whose source MAC is ``mac`` (sent by ``source``, a node name for humans) go through the stages
    ``chain`` (indices into `EmulatorConfig.stages`), in order."""

    mac: str
    source: str
    chain: tuple[int, ...]


@dataclass(frozen=True)
class QueueSpec:
    """NFQUEUE ``queue_num`` holds what arrives on ``ifname``."""

    queue_num: int
    ifname: str
    default_chain: tuple[int, ...]
    routes: tuple[SourceRoute, ...] = ()


@dataclass(frozen=True)
class EmulatorConfig:
    netns: str
    stages: tuple[StageSpec, ...]
    queues: tuple[QueueSpec, ...]
    realtime: bool = True  # SCHED_FIFO when permitted: wake-ups on time although the machine is busy
    wake_compensation: bool = True  # release early by the measured wake-up latency (genie.linkemu.emulator)
    #: the per-packet path compiled (genie/linkemu/line_core.pyx) where it is built; False: the pure Python
    #: reference (genie.linkemu.line and nfqueue), the same decisions
    compiled: bool = True

    def describe(self) -> str:
        """One line: per queue the chains by source, then the stages."""
        parts = []
        for queue in self.queues:
            routes = [f"from {r.source} ({r.mac}): " + " + ".join(self.stages[i].name for i in r.chain)
                      for r in queue.routes]
            if queue.default_chain:
                routes.append("others: " + " + ".join(self.stages[i].name for i in queue.default_chain))
            parts.append(f"queue {queue.queue_num} on {queue.ifname} [{'; '.join(routes)}]")
        stages = "; ".join(stage.describe() for stage in self.stages)
        return f"{', '.join(parts)}; stages: {stages}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> EmulatorConfig:
        return EmulatorConfig(
            netns=str(data["netns"]),
            stages=tuple(StageSpec(**stage) for stage in data["stages"]),
            queues=tuple(QueueSpec(queue_num=int(q["queue_num"]), ifname=str(q["ifname"]),
                                   default_chain=tuple(int(i) for i in q["default_chain"]),
                                   routes=tuple(SourceRoute(str(r["mac"]), str(r["source"]),
                                                            tuple(int(i) for i in r["chain"]))
                                                for r in q.get("routes", ())))
                         for q in data["queues"]),
            realtime=bool(data.get("realtime", True)),
            wake_compensation=bool(data.get("wake_compensation", True)),
            compiled=bool(data.get("compiled", True)),
        )

    @staticmethod
    def from_json(text: str) -> EmulatorConfig:
        return EmulatorConfig.from_dict(json.loads(text))


def _time(ns: int) -> str:
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns >= scale and ns % scale == 0:
            return f"{ns // scale}{unit}"
    return f"{ns / NS_PER_US:g}us"
