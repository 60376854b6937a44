"""Faults injected into a live run, as plain data (pure).

A `Fault` says *what* (`FaultKind` and its parameters), *where* (a link, a rank, or two hosts) and *when* (a
`Trigger`: ``at_s`` seconds after the run's first timed start, or before timed op ``at_op``). Faults are read
from YAML (`genie.faults.reader`) or from compact ``--fault`` specs, then checked against the testbed and the
run (`genie.faults.validation`), which turns them into a `FaultPlan` of `PlannedFault`s with resolved targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from genie.core.errors import shown
from genie.core.units import format_rate
from genie.topology.link_properties import format_time_us


class FaultKind(Enum):
    DEGRADE = "degrade"  # change a link's rate (and, with netem, delay / jitter / loss) live
    FLAP = "flap"  # take a link down for `duration_s`, then up again
    DOWN = "down"  # take a link down until the end of the run
    STRAGGLER = "straggler"  # one rank's compute lasts `factor` times longer (replay)
    CROSS_TRAFFIC = "cross_traffic"  # a bulk TCP flow between two hosts

    @classmethod
    def parse(cls, text: str) -> FaultKind:
        key = str(text).strip().lower().replace("-", "_")
        for kind in cls:
            if kind.value == key:
                return kind
        raise ValueError(f"unknown fault kind {shown(text)} (expected one of: {', '.join(k.value for k in cls)})")


class LinkDirection(Enum):
    """Which directions of a link a fault acts on: ``A-B`` both, ``A->B`` only A's egress towards B."""

    BOTH = "both"
    FORWARD = "forward"


@dataclass(frozen=True)
class Trigger:
    """Exactly one of: seconds after the run's first timed start (orchestrator's monotonic clock), or the index
    of a timed op (0-based; bench: the timed iterations of the whole sweep in order; replay: timed iterations
    of the trace)."""

    at_s: float | None = None
    at_op: int | None = None

    def describe(self) -> str:
        return f"op {self.at_op}" if self.at_op is not None else f"{self.at_s:g}s"


@dataclass(frozen=True)
class ShapeChange:
    """New values of a degraded link (None: keep the configured value)."""

    rate_bps: int | None = None
    delay_us: float | None = None
    jitter_us: float | None = None
    loss_pct: float | None = None

    @property
    def needs_delay_emulation(self) -> bool:
        return any(v is not None for v in (self.delay_us, self.jitter_us, self.loss_pct))

    def describe(self) -> str:
        parts = []
        if self.rate_bps is not None:
            parts.append(f"rate={format_rate(self.rate_bps)}")
        if self.delay_us is not None:
            parts.append(f"delay={format_time_us(self.delay_us)}")
        if self.jitter_us is not None:
            parts.append(f"jitter={format_time_us(self.jitter_us)}")
        if self.loss_pct is not None:
            parts.append(f"loss={self.loss_pct:g}%")
        return " ".join(parts)


@dataclass(frozen=True)
class Fault:
    """One fault as written (targets by name, not yet checked against a testbed)."""

    kind: FaultKind
    trigger: Trigger
    link: str | None = None  # degrade, flap, down: "h3-s0", "h3:s0" or "h3->s0"
    rank: int | None = None  # straggler
    src: str | None = None  # cross_traffic: sending host
    dst: str | None = None  # cross_traffic: receiving host
    change: ShapeChange = ShapeChange()  # degrade
    duration_s: float | None = None  # flap: how long down; degrade / cross_traffic: optional, else to the end
    factor: float | None = None  # straggler
    path: str = "faults[0]"  # where it was written (for errors): faults[2], --fault[1]
    source: str | None = None  # the file (None: the command line)

    @property
    def target(self) -> str:
        if self.kind is FaultKind.STRAGGLER:
            return f"rank {self.rank}"
        if self.kind is FaultKind.CROSS_TRAFFIC:
            return f"{self.src}->{self.dst}"
        return str(self.link)

    def params(self) -> str:
        """The parameters in the compact spec's key=value form."""
        parts = []
        if self.kind is FaultKind.DEGRADE:
            parts.append(self.change.describe())
        if self.factor is not None:
            parts.append(f"factor={self.factor:g}")
        if self.duration_s is not None:
            parts.append(f"for={format_time_us(self.duration_s * 1e6)}")
        return " ".join(p for p in parts if p)

    def spec(self) -> str:
        """The fault as one compact ``--fault`` spec (what the manifest records)."""
        target = f"rank={self.rank}" if self.kind is FaultKind.STRAGGLER else (
            f"{self.src} {self.dst}" if self.kind is FaultKind.CROSS_TRAFFIC else str(self.link))
        at = f"at=op{self.trigger.at_op}" if self.trigger.at_op is not None else \
            f"at={format_time_us((self.trigger.at_s or 0.0) * 1e6) or '0s'}"
        return " ".join(p for p in (self.kind.value, target, self.params(), at) if p)


@dataclass(frozen=True)
class LinkTarget:
    """A resolved link: topology link index, the link end(s) acted on (node, peer) and its display name."""

    link_index: int
    name: str
    ends: tuple[tuple[str, str], ...]  # (node, peer) of each end whose egress / state changes


@dataclass(frozen=True)
class PlannedFault:
    """A fault checked against the testbed and the run, with its target resolved."""

    index: int
    fault: Fault
    link: LinkTarget | None = None

    @property
    def kind(self) -> FaultKind:
        return self.fault.kind


@dataclass(frozen=True)
class FaultPlan:
    faults: tuple[PlannedFault, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.faults)

    def fault_points(self) -> tuple[int, ...]:
        """The op indices before which ranks pause so the orchestrator can inject (sorted, unique)."""
        return tuple(sorted({f.fault.trigger.at_op for f in self.faults if f.fault.trigger.at_op is not None}))

    def at_op(self, k: int) -> tuple[PlannedFault, ...]:
        return tuple(f for f in self.faults if f.fault.trigger.at_op == k)

    def timed(self) -> tuple[PlannedFault, ...]:
        """Faults triggered by time, in time order."""
        return tuple(sorted((f for f in self.faults if f.fault.trigger.at_s is not None),
                            key=lambda f: (f.fault.trigger.at_s, f.index)))

    def stragglers(self) -> tuple[PlannedFault, ...]:
        return tuple(f for f in self.faults if f.kind is FaultKind.STRAGGLER)

    def specs(self) -> list[str]:
        return [f.fault.spec() for f in self.faults]
