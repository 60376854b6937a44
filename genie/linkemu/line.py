"""The emulator's core, pure: loss models, stages and the delay line (a heap of release times). No clock, no
sockets: callers pass times in nanoseconds, so every decision is a function of the config, the seeds and the
arrival sequence.

Semantics per stage (one link direction), in netem's order: the loss model decides first (a lost packet is
dropped), then the limit (a packet that would hold more than ``limit_packets`` segments in the stage is
dropped, tail drop), then — for a stage with a rate — the wire: the packet's bytes are serialized at the rate
after everything the stage admitted before it, then the delay ``delay ± jitter`` (uniform, like netem without
a distribution table). With ``reorder`` False a packet never leaves a jittered stage before the packet admitted
before it (FIFO); with True it may overtake. A packet's release time is when its last byte leaves its last
stage; chains of stages add up.

The wire works in virtual time, so a late wake-up of the emulator never costs the link any capacity: a packet's
serialization starts when the previous packet's virtual serialization ended, not when it was released. A
packet that reaches an idle wire first in its chain may start up to ``wire_slack_ns`` before it arrived: the
sender's token bucket (HTB, whose timers fire late on a busy host) may have held it back that long, and a real
NIC would have been sending it; without the slack that late time would be lost capacity of the link. A GSO
super-packet is its segments back to back, each with its Ethernet framing (`wire_bytes`); through a chain of
wires they are pipelined segment by segment, as store-and-forward switches pass a burst of packets: a stage
may start a super-packet once its first segment is through the stage before, and ends no earlier than one
segment after the previous stage's end.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from genie.core.limits import MAX_RATE_BPS, MAX_TIME_NS
from genie.linkemu.config import EmulatorConfig, StageSpec
from genie.topology.link_properties import MAX_QUEUE_PACKETS

SEED_SALT_DELAY = 0x5EED_DE1A
# the fields a live change may set, each with its bounds: within them no release time leaves 64 bits (the
# compiled line's arithmetic) however long the host has been up
_LIVE_FIELDS: dict[str, tuple[type, float, float]] = {
    "delay_ns": (int, 0, MAX_TIME_NS), "jitter_ns": (int, 0, MAX_TIME_NS), "loss_pct": (float, 0.0, 100.0),
    "limit_packets": (int, 1, MAX_QUEUE_PACKETS), "rate_bps": (int, 1, MAX_RATE_BPS)}


class BernoulliLoss:
    """Each packet is lost with probability ``p`` (0..1), independently."""

    def __init__(self, p: float, rng: random.Random) -> None:
        self.p = p
        self._rng = rng

    def lost(self) -> bool:
        return self.p > 0 and self._rng.random() < self.p


class GilbertElliottLoss:
    """Two-state Markov loss: GOOD -> BAD with probability ``p``, BAD -> GOOD with ``r`` (evaluated per packet,
    before its loss draw), loss probability ``loss_bad`` in BAD and ``loss_good`` in GOOD. The stationary loss
    rate is ``(p * loss_bad + r * loss_good) / (p + r)``; with loss_bad 1 and loss_good 0 bursts last ``1/r``
    packets on average."""

    def __init__(self, p: float, r: float, rng: random.Random, *, loss_bad: float = 1.0,
                 loss_good: float = 0.0) -> None:
        self.p, self.r, self.loss_bad, self.loss_good = p, r, loss_bad, loss_good
        self.bad = False
        self._rng = rng

    @staticmethod
    def from_rate(loss: float, burst_packets: float, rng: random.Random) -> GilbertElliottLoss:
        """The simple Gilbert model with mean loss rate ``loss`` (0..1) and mean burst length ``burst_packets``
        (>= 1): every packet in BAD is lost, none in GOOD; r = 1/burst, p = loss * r / (1 - loss)."""
        r = 1.0 / burst_packets
        p = loss * r / (1.0 - loss)
        if p > 1.0:
            raise ValueError(f"loss {loss:g} cannot come in bursts of {burst_packets:g} packets")
        return GilbertElliottLoss(p, r, rng)

    def stationary_loss(self) -> float:
        return (self.p * self.loss_bad + self.r * self.loss_good) / (self.p + self.r) if self.p + self.r else 0.0

    def lost(self) -> bool:
        if self.bad:
            if self._rng.random() < self.r:
                self.bad = False
        elif self._rng.random() < self.p:
            self.bad = True
        probability = self.loss_bad if self.bad else self.loss_good
        return probability > 0 and self._rng.random() < probability


LossModel = BernoulliLoss | GilbertElliottLoss


def loss_model(spec: StageSpec, rng: random.Random) -> LossModel:
    if spec.loss_burst_packets >= 1 and spec.loss_pct > 0:
        return GilbertElliottLoss.from_rate(spec.loss_pct / 100, spec.loss_burst_packets, rng)
    return BernoulliLoss(spec.loss_pct / 100, rng)


def segments(length_bytes: int, mtu_bytes: int) -> int:
    """How many MTU-sized packets a (possibly GSO) packet of ``length_bytes`` stands for: at least 1."""
    return max(1, -(-length_bytes // mtu_bytes))


ETHERNET_HEADER_BYTES = 14  # what HTB counts on a veth (and genie's payload limit): no preamble, gap or FCS
TCP_IP_HEADER_BYTES = 52  # IPv4 20 + TCP 20 + timestamps 12: repeated in every segment of a GSO packet


def wire_segments(length_bytes: int, mtu_bytes: int) -> int:
    """Segments of an IP packet of ``length_bytes`` (a GSO super-packet is cut into MTU-sized ones, each with
    its own TCP/IP headers)."""
    payload = max(0, length_bytes - TCP_IP_HEADER_BYTES)
    return max(1, -(-payload // (mtu_bytes - TCP_IP_HEADER_BYTES)))


def wire_bytes(length_bytes: int, mtu_bytes: int) -> int:
    """Bytes on the wire for an IP packet of ``length_bytes``: its segments with their headers and framing
    (a 1500-byte MTU carries 1448 bytes of TCP payload in 1514: genie's payload limit)."""
    count = wire_segments(length_bytes, mtu_bytes)
    return length_bytes + (count - 1) * TCP_IP_HEADER_BYTES + count * ETHERNET_HEADER_BYTES


def message_wire_bytes(payload_bytes: int, mtu_bytes: int = 1500) -> int:
    """Bytes on the wire for a TCP message of ``payload_bytes``: what a wire stage serializes for it."""
    return wire_bytes(payload_bytes + TCP_IP_HEADER_BYTES, mtu_bytes)


@dataclass
class StageCounters:
    packets: int = 0  # admitted to the stage (not lost, not over the limit)
    lost: int = 0
    overflow: int = 0  # dropped by the limit


class Stage:
    """One link direction's state: RNGs (loss and delay draw from separate streams, so changing the jitter
    never changes which packets are lost), the loss model, held segments, the last exit time (FIFO)."""

    def __init__(self, spec: StageSpec) -> None:
        self.spec = spec
        self.loss = loss_model(spec, random.Random(spec.seed))
        self._delay_rng = random.Random(spec.seed ^ SEED_SALT_DELAY)
        self.held_segments = 0
        self.last_exit_ns = 0
        self.free_ns = 0  # the wire: when its last packet's last byte is serialized (virtual time)
        self.counters = StageCounters()

    def update(self, spec: StageSpec) -> None:
        """Change the stage's parameters live (fault injection): packets already held keep their release
        times; new packets see the new delay, jitter, loss and limit."""
        if spec.loss_pct != self.spec.loss_pct or spec.loss_burst_packets != self.spec.loss_burst_packets:
            self.loss = loss_model(spec, random.Random(spec.seed))
        self.spec = spec

    def delay_ns(self) -> int:
        spec = self.spec
        if not spec.jitter_ns:
            return spec.delay_ns
        return max(0, spec.delay_ns + round(self._delay_rng.uniform(-spec.jitter_ns, spec.jitter_ns)))

    def pass_ns(self, first_ns: int, last_ns: int, length_bytes: int, *, arriving: bool = False) -> tuple[int, int]:
        """A packet whose first segment is at the stage's entrance at `first_ns` and its last at `last_ns`:
        when its first and last segment have left (serialization at the rate, then the delay). `arriving`: the
        times are the packet's real arrival (the chain's first stage), where the wire's slack applies."""
        spec = self.spec
        if spec.rate_bps:
            count = wire_segments(length_bytes, spec.mtu_bytes)
            total_ns = -(-wire_bytes(length_bytes, spec.mtu_bytes) * 8_000_000_000 // spec.rate_bps)
            segment_ns = total_ns // count
            slack = spec.wire_slack_ns if arriving else 0
            begin = max(first_ns - slack, self.free_ns)
            wire_end = max(begin + total_ns, last_ns - slack + segment_ns)
            self.free_ns = wire_end
            # the slack lends the wire idle time it lost to the sender, never a packet time before it arrived
            first_ns = max(begin + segment_ns, first_ns) if arriving else begin + segment_ns
            last_ns = max(wire_end, last_ns) if arriving else wire_end
        delay = self.delay_ns()
        exit_ns = last_ns + delay
        if spec.jitter_ns and not spec.reorder:
            exit_ns = max(exit_ns, self.last_exit_ns)
        self.last_exit_ns = max(self.last_exit_ns, exit_ns)
        return first_ns + (exit_ns - last_ns), exit_ns


class Released(NamedTuple):
    queue_num: int
    packet_id: int


class DropReason:
    LOSS = "loss"
    LIMIT = "limit"


class DelayLine:
    """All queues of one emulator process. `admit` decides a packet's fate (a release time, or a drop reason);
    `due` pops the packets whose release time has come, in release order."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.stages = tuple(Stage(spec) for spec in config.stages)
        self._configured = tuple(config.stages)
        self._routes: dict[tuple[int, bytes], tuple[Stage, ...]] = {}
        self._defaults: dict[int, tuple[Stage, ...]] = {}
        for queue in config.queues:
            self._defaults[queue.queue_num] = tuple(self.stages[i] for i in queue.default_chain)
            for route in queue.routes:
                self._routes[(queue.queue_num, mac_bytes(route.mac))] = tuple(self.stages[i] for i in route.chain)
        self._heap: list[tuple[int, int, int, int, tuple[Stage, ...], tuple[int, ...]]] = []
        self._order = itertools.count()
        self.passed_through = 0  # packets on a queue/MAC with no stage at all

    def chain(self, queue_num: int, mac: bytes | None) -> tuple[Stage, ...]:
        if mac is not None:
            found = self._routes.get((queue_num, mac))
            if found is not None:
                return found
        return self._defaults.get(queue_num, ())

    def admit(self, queue_num: int, packet_id: int, arrival_ns: int, length_bytes: int,
              mac: bytes | None = None) -> int | str:
        """The release time of the packet (ns, same clock as ``arrival_ns``), or the `DropReason`."""
        chain = self.chain(queue_num, mac)
        held = tuple(segments(length_bytes, stage.spec.mtu_bytes) for stage in chain)
        for stage, count in zip(chain, held):
            if stage.loss.lost():
                stage.counters.lost += 1
                return DropReason.LOSS
            if stage.held_segments + count > stage.spec.limit_packets:
                stage.counters.overflow += 1
                return DropReason.LIMIT
        first = t = arrival_ns
        for position, (stage, count) in enumerate(zip(chain, held)):
            stage.counters.packets += 1
            stage.held_segments += count
            first, t = stage.pass_ns(first, t, length_bytes, arriving=position == 0)
        if not chain:
            self.passed_through += 1
        heapq.heappush(self._heap, (t, next(self._order), queue_num, packet_id, chain, held))
        return t

    def next_release_ns(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)

    def due(self, now_ns: int) -> list[Released]:
        """Pop every packet whose release time is <= ``now_ns``."""
        out: list[Released] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ns:
            _, _, queue_num, packet_id, chain, held = heapq.heappop(heap)
            for stage, count in zip(chain, held):
                stage.held_segments -= count
            out.append(Released(queue_num, packet_id))
        return out

    def drain(self) -> list[Released]:
        """Everything still held (shutdown)."""
        return self.due(2**63)

    def apply_overrides(self, overrides: dict[str, dict[str, object]]) -> None:
        """Stage name -> new StageSpec fields (delay_ns, jitter_ns, loss_pct, limit_packets, rate_bps); stages
        not named go back to their configured spec. A value of the wrong type or out of its bounds
        (`_LIVE_FIELDS`; ``rate_bps`` may be None, no wire) raises ValueError and changes nothing."""
        specs = [dataclasses.replace(spec, **_live_changes(spec.name, overrides.get(spec.name) or {}))
                 for spec in self._configured]
        for stage, spec in zip(self.stages, specs):
            stage.update(spec)

    def counters(self) -> dict[str, dict[str, int]]:
        return {stage.spec.name: {"packets": stage.counters.packets, "lost": stage.counters.lost,
                                  "overflow": stage.counters.overflow, "held_segments": stage.held_segments}
                for stage in self.stages}


def _live_changes(stage: str, changes: dict[str, object]) -> dict[str, object]:
    """The live fields of ``changes`` (others are ignored), each checked against its type and bounds."""
    out = {}
    for key, value in changes.items():
        if key not in _LIVE_FIELDS:
            continue
        kind, low, high = _LIVE_FIELDS[key]
        if not (value is None and key == "rate_bps"):
            number = isinstance(value, (int, float)) if kind is float else isinstance(value, int)
            if isinstance(value, bool) or not number or not low <= value <= high:
                raise ValueError(f"stage {stage!r}: {key} must be a{'n integer' if kind is int else ' number'} "
                                 f"in [{low:g}, {high:g}], got {value!r}")
        out[key] = value
    return out


def mac_bytes(text: str) -> bytes:
    """'02:00:00:00:00:01' -> 6 bytes."""
    return bytes(int(part, 16) for part in text.split(":"))


def release_order(line: DelayLine, arrivals: Iterable[tuple[int, int, int]], *, queue_num: int = 0,
                  mac: bytes | None = None) -> list[int]:
    """Packet ids in the order the line releases them, for arrivals ``(packet_id, arrival_ns, length)``
    (a pure helper for tests and docs)."""
    for packet_id, arrival_ns, length in arrivals:
        line.admit(queue_num, packet_id, arrival_ns, length, mac)
    return [r.packet_id for r in line.drain()]
