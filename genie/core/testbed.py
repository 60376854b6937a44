"""What a live testbed looks like to its users (engine, measurement): pure data saved in the state directory."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, Flag, auto

from genie.core.dilation import NO_DILATION, TimeDilation
from genie.core.topology import Topology


class Shaping(Flag):
    """What shapes a testbed's links (`TestbedInfo.shaper`): HTB rate classes, netem qdiscs (delay, jitter,
    loss), pfifo queue limits, genie's userspace link emulator; NONE when nothing does (unshaped links, real
    hosts). Written as its `label`, the qdisc kinds joined by ``+`` in this order: ``none``, ``htb``,
    ``htb+netem``, ``htb+userspace``, ``htb+netem+pfifo``... (`str()` gives the label too)."""

    NONE = 0
    HTB = auto()
    NETEM = auto()
    PFIFO = auto()
    USERSPACE = auto()

    @property
    def label(self) -> str:
        return "+".join(kind.name.lower() for kind in _SHAPING_KINDS if kind in self) or "none"

    @classmethod
    def from_label(cls, label: str) -> Shaping:
        """The Shaping a label names (as state records and manifests store it); ValueError if unknown."""
        if label == "none":
            return cls.NONE
        shaping = cls.NONE
        for part in label.split("+"):
            kind = next((k for k in _SHAPING_KINDS if k.name.lower() == part), None)
            if kind is None:
                raise ValueError(f"unknown shaping {part!r} in {label!r}")
            shaping |= kind
        return shaping

    def __str__(self) -> str:
        return self.label


_SHAPING_KINDS = (Shaping.HTB, Shaping.NETEM, Shaping.PFIFO, Shaping.USERSPACE)


class LinkModel(Enum):
    """What a rate-shaped link is (``--links``). WIRE: every packet is serialized at the link's rate after the
    one before it (netem's ``rate``, or the userspace emulator's wire stage), so no message ever arrives sooner
    than its bytes take at the rate plus the delay, whatever its size. BUCKET: HTB's token buckets alone — the
    right long-term rate at the least CPU, but after an idle period the bucket lets up to ~1 ms of the rate
    through at once (a 64 KiB message then beats the wire)."""

    WIRE = "wire"
    BUCKET = "bucket"


@dataclass(frozen=True)
class HostEndpoint:
    """Where a host's rank processes run (``netns``; None means the current namespace) and the address
    peers reach them at."""

    host: str
    netns: str | None
    address: str


@dataclass(frozen=True)
class LinkEnd:
    """One end of topology link ``link_index`` (index into Topology.links): interface ``ifname`` of ``node``
    living in namespace ``netns``. Its TX counters are the link direction node -> peer."""

    link_index: int
    node: str
    peer: str
    netns: str | None
    ifname: str


@dataclass(frozen=True)
class TestbedInfo:
    name: str
    prefix: str
    topology: Topology
    hosts: tuple[HostEndpoint, ...]
    link_ends: tuple[LinkEnd, ...] = ()
    shaper: Shaping = Shaping.NONE
    #: the links are shaped at rate / N with delay x N of `topology` (which states the emulated fabric)
    dilation: TimeDilation = NO_DILATION
    links: LinkModel = LinkModel.BUCKET

    def endpoint(self, host: str) -> HostEndpoint:
        for h in self.hosts:
            if h.host == host:
                return h
        raise KeyError(host)
