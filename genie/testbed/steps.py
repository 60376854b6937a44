"""The steps of a testbed plan: frozen dataclasses, each one netlink-sized change with a one-line `describe()`.

A plan is a list of these; a backend applies them in order and undoes them in reverse. Every step names the
namespace it acts in, so nothing ever lands in the root namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.units import describe_rate, format_size
from genie.linkemu.config import EmulatorConfig


class Shaper(Enum):
    """How link shapes are realised. KERNEL: HTB for rates, netem (sch_netem) for delay/jitter/loss.
    USERSPACE: HTB for rates, genie's userspace link emulator (NFQUEUE, `genie.linkemu`) for the rest."""

    KERNEL = "kernel"
    USERSPACE = "userspace"


class ShaperChoice(Enum):
    """What the user asks for (``--shaper``): AUTO takes netem where the kernel has sch_netem, else userspace."""

    AUTO = "auto"
    NETEM = "netem"
    USERSPACE = "userspace"


class QdiscParent(Enum):
    """Where a leaf qdisc (netem, pfifo) hangs: at the interface root, under the HTB rate class 1:1, or under
    the HTB's ACK lane 1:2 (a netem that delays the pure ACKs as 1:1's delays the rest)."""

    ROOT = "root"
    HTB_CLASS = "1:1"
    ACK_CLASS = "1:2"


#: Sysctls of a kernel module that may not be loaded (br_netfilter's ``net.bridge.*``): a `SetSysctl` of one is
#: applied only where the kernel has it. A property of the key, not a field of the step: testbed records stay
#: readable by genie versions before it.
MODULE_SYSCTL_PREFIXES = ("net.bridge.",)
#: TCP's minimum retransmission timeout, per namespace since Linux 6.11 (set under time dilation:
#: `genie.testbed.plan.dilated_rto_min_us`).
RTO_MIN_US = "net.ipv4.tcp_rto_min_us"
#: Sysctls newer than some kernels genie runs on, applied likewise only where the kernel has them.
OPTIONAL_SYSCTL_KEYS = (RTO_MIN_US,)


@dataclass(frozen=True)
class CreateNetns:
    netns: str

    def describe(self) -> str:
        return f"netns add {self.netns}"


@dataclass(frozen=True)
class SetSysctl:
    """A per-namespace sysctl such as ``net.ipv4.ip_forward``; it lives and dies with the namespace."""

    netns: str
    key: str
    value: str

    @property
    def if_present(self) -> bool:
        """Set only where the kernel has the key (`MODULE_SYSCTL_PREFIXES`, `OPTIONAL_SYSCTL_KEYS`), else
        skipped."""
        return self.key.startswith(MODULE_SYSCTL_PREFIXES) or self.key in OPTIONAL_SYSCTL_KEYS

    def describe(self) -> str:
        where = " (where the kernel has it)" if self.if_present else ""
        return f"{self.netns}: sysctl {self.key}={self.value}{where}"


@dataclass(frozen=True)
class SetLinkUp:
    netns: str
    ifname: str

    def describe(self) -> str:
        return f"{self.netns}: link set {self.ifname} up"


@dataclass(frozen=True)
class AddBridge:
    netns: str
    ifname: str

    def describe(self) -> str:
        return f"{self.netns}: link add {self.ifname} type bridge"


@dataclass(frozen=True)
class CreateVethPair:
    """A veth created inside ``netns_a`` with its peer created directly inside ``netns_b``: neither end ever
    exists in the root namespace."""

    netns_a: str
    ifname_a: str
    netns_b: str
    ifname_b: str
    mtu_bytes: int = 1500
    mac_a: str | None = None  # fixed MAC addresses (the userspace emulator tells senders apart by MAC)
    mac_b: str | None = None

    def describe(self) -> str:
        macs = f" mac {self.mac_a} / {self.mac_b}" if self.mac_a and self.mac_b else ""
        return f"veth {self.netns_a}:{self.ifname_a} <-> {self.netns_b}:{self.ifname_b} mtu {self.mtu_bytes}{macs}"


@dataclass(frozen=True)
class EnslaveLink:
    netns: str
    ifname: str
    bridge: str

    def describe(self) -> str:
        return f"{self.netns}: link set {self.ifname} master {self.bridge}"


@dataclass(frozen=True)
class AddAddress:
    netns: str
    ifname: str
    address: str
    prefix_len: int

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefix_len}"

    def describe(self) -> str:
        return f"{self.netns}: addr add {self.cidr} dev {self.ifname}"


@dataclass(frozen=True)
class NextHop:
    """One next hop of a route: a gateway on interface ``ifname`` (None: the destination is on that link)."""

    ifname: str
    gateway: str | None = None

    def describe(self) -> str:
        return f"via {self.gateway} dev {self.ifname}" if self.gateway else f"dev {self.ifname}"


@dataclass(frozen=True)
class AddRoute:
    """A static route to ``destination`` (a CIDR); several next hops make an ECMP multipath route.
    ``source`` is the preferred source address (hosts answer from the address their ranks listen on)."""

    netns: str
    destination: str
    nexthops: tuple[NextHop, ...]
    source: str | None = None

    def describe(self) -> str:
        if len(self.nexthops) == 1:
            hops = self.nexthops[0].describe()
        else:
            hops = " ".join(f"nexthop {hop.describe()}" for hop in self.nexthops)
        src = f" src {self.source}" if self.source else ""
        return f"{self.netns}: route add {self.destination} {hops}{src}"


@dataclass(frozen=True)
class AddHtb:
    """HTB root qdisc 1: (default class 1:1) plus class 1:1 on an interface's egress: ``rate_bps`` long-term
    (bucket ``burst_bytes``), at most ``ceil_bps`` at any time (bucket ``cburst_bytes``); and the ACK lane:
    class 1:2 at ``ceil_bps`` (bucket ``cburst_bytes``), served first, which a filter gives the pure TCP
    ACKs (`genie.testbed.shaping`, "The ACK lane")."""

    netns: str
    ifname: str
    rate_bps: int
    burst_bytes: int
    ceil_bps: int
    cburst_bytes: int
    quantum_bytes: int

    def describe(self) -> str:
        return (f"{self.netns}: tc htb dev {self.ifname} root 1: class 1:1 rate {describe_rate(self.rate_bps)} "
                f"burst {format_size(self.burst_bytes)} ceil {describe_rate(self.ceil_bps)} "
                f"cburst {format_size(self.cburst_bytes)} quantum {self.quantum_bytes}; class 1:2 (pure ACKs, "
                f"prio 0) rate {describe_rate(self.ceil_bps)}")


@dataclass(frozen=True)
class AddNetem:
    netns: str
    ifname: str
    parent: QdiscParent
    delay_us: float
    jitter_us: float
    loss_pct: float
    limit_packets: int
    rate_bps: int | None = None  # the wire: netem serializes every packet at this rate (LinkModel.WIRE)

    def describe(self) -> str:
        parts = ([f"rate {describe_rate(self.rate_bps)}"] if self.rate_bps else []) + [f"delay {self.delay_us:g}us"]
        if self.jitter_us:
            parts.append(f"jitter {self.jitter_us:g}us")
        if self.loss_pct:
            parts.append(f"loss {self.loss_pct:g}%")
        parts.append(f"limit {self.limit_packets}")
        return f"{self.netns}: tc netem dev {self.ifname} parent {self.parent.value} " + " ".join(parts)


@dataclass(frozen=True)
class AddPfifo:
    """A packet-limited FIFO: the link's queue length when nothing else (netem) holds the queue."""

    netns: str
    ifname: str
    parent: QdiscParent
    limit_packets: int

    def describe(self) -> str:
        return f"{self.netns}: tc pfifo dev {self.ifname} parent {self.parent.value} limit {self.limit_packets}"


@dataclass(frozen=True)
class AddQueueRule:
    """Inside ``netns``: send every IPv4 packet arriving on ``ifname`` to NFQUEUE ``queue_num`` (iptables-nft:
    nft's own ``queue`` statement is missing from some kernels). No ``--queue-bypass``: without its emulator a
    queued link carries nothing, which is loud rather than silently unshaped."""

    netns: str
    ifname: str
    queue_num: int

    def iptables_argv(self, action: str = "-A") -> list[str]:
        return ["iptables", "-w", "5", "-t", "mangle", action, "PREROUTING", "-i", self.ifname, "-j", "NFQUEUE",
                "--queue-num", str(self.queue_num)]

    def describe(self) -> str:
        return f"{self.netns}: {' '.join(self.iptables_argv())}"


@dataclass(frozen=True)
class StartEmulator:
    """Start the namespace's link emulator (``ip netns exec NETNS python -m genie.linkemu``), which binds the
    queues of `config` and holds each packet for its chain of link stages. Undone by ending the process."""

    netns: str
    config: EmulatorConfig

    def describe(self) -> str:
        return f"{self.netns}: start link emulator (python -m genie.linkemu): {self.config.describe()}"


PlanStep = (CreateNetns | SetSysctl | SetLinkUp | AddBridge | CreateVethPair | EnslaveLink | AddAddress | AddRoute
            | AddHtb | AddNetem | AddPfifo | AddQueueRule | StartEmulator)
STEP_TYPES: tuple[type, ...] = (CreateNetns, SetSysctl, SetLinkUp, AddBridge, CreateVethPair, EnslaveLink,
                                AddAddress, AddRoute, AddHtb, AddNetem, AddPfifo, AddQueueRule, StartEmulator)
USERSPACE_STEP_TYPES: tuple[type, ...] = (AddQueueRule, StartEmulator)


def step_namespaces(step: PlanStep) -> tuple[str, ...]:
    """The namespaces a step touches."""
    if isinstance(step, CreateVethPair):
        return (step.netns_a, step.netns_b)
    return (step.netns,)
