"""Time dilation (pure): the testbed runs a fabric N times slower than the one the topology states, and every
figure a run reports is brought back to the stated fabric's time.

With factor N every link is shaped at ``rate / N`` with ``delay x N`` (and jitter x N), replayed compute takes
``N x`` its duration, and a measured real time ``t`` is reported as ``t / N`` (a rate ``r`` as ``r x N``). The
host's own costs — interpreter overhead per message, late timer wake-ups, a CPU that cannot push the
aggregate rate — are fixed in real time, so in emulated time they shrink by N: a 2-core VM speaks about a
400 Gbit/s fabric with microsecond links once N is large enough (DieCast, NSDI'07, dilates whole VMs the same
way; genie dilates only what it controls: the links, the compute waits and its clocks' readings).

`TimeDilation` is what a run records (factor, why it was chosen, and for ``auto`` the host limits measured);
`DilationChoice` is what the user asked for (``--time-dilation N|auto``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from genie.core.errors import InputError, shown
from genie.core.topology import LinkShape, Topology

MAX_DILATION = 1_000_000.0  # a 10 Tbit/s link at N = 1e6 is 10 Mbit/s: nothing needs more


class DilationMode(Enum):
    """``--time-dilation``: a FIXED factor, or AUTO (measure this host and choose)."""

    FIXED = "fixed"
    AUTO = "auto"


@dataclass(frozen=True)
class DilationChoice:
    """What was asked for: a fixed `factor` (1 = none), or AUTO."""

    mode: DilationMode = DilationMode.FIXED
    factor: float = 1.0

    @property
    def is_none(self) -> bool:
        return self.mode is DilationMode.FIXED and self.factor == 1.0

    @staticmethod
    def parse(text: str | float | int | None, *, path: str = "time_dilation") -> DilationChoice:
        """``auto``, or a factor >= 1 (``10``, ``2.5``); None means no dilation."""
        if text is None:
            return DilationChoice()
        if isinstance(text, str) and text.strip().lower() == "auto":
            return DilationChoice(DilationMode.AUTO)
        try:
            factor = float(text)
        except (TypeError, ValueError):
            raise InputError(f"expected 'auto' or a factor >= 1 such as 10, got {shown(text)}", path=path) from None
        check_factor(factor, path=path)
        return DilationChoice(DilationMode.FIXED, factor)

    def describe(self) -> str:
        return "auto" if self.mode is DilationMode.AUTO else f"{self.factor:g}"


def check_factor(factor: float, *, path: str = "time_dilation") -> None:
    if not (math.isfinite(factor) and 1.0 <= factor <= MAX_DILATION):
        raise InputError(f"must be a factor between 1 and {MAX_DILATION:g}, got {shown(factor)}", path=path)


@dataclass(frozen=True)
class HostLimit:
    """One limit of this host that auto dilation weighs: what was measured (`measured`, in `unit`), what the
    topology needs of it, and the smallest factor that makes its cost under the target share of any figure."""

    name: str  # "throughput", "software", "emulator", "wake-up"
    measured: float
    unit: str
    needed_factor: float
    detail: str  # one line: how the factor follows from the measurement

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> HostLimit:
        return HostLimit(str(data["name"]), float(data["measured"]), str(data["unit"]),
                         float(data["needed_factor"]), str(data["detail"]))


@dataclass(frozen=True)
class TimeDilation:
    """The factor a testbed or run uses, and why (`reason`; `limits` when ``auto`` measured the host)."""

    factor: float = 1.0
    reason: str = "no dilation asked for"
    limits: tuple[HostLimit, ...] = ()

    @property
    def active(self) -> bool:
        return self.factor != 1.0

    # --- time and rate conversions (real: what the host does; emulated: what the topology states) ---
    def real_ns(self, emulated_ns: float) -> int:
        return round(emulated_ns * self.factor)

    def real_s(self, emulated_s: float) -> float:
        return emulated_s * self.factor

    def emulated_ns(self, real_ns: float) -> int:
        """A real time (or timestamp: a monotonic clock read divided by N is a clock of emulated time)."""
        return round(real_ns / self.factor)

    def emulated_s(self, real_s: float) -> float:
        return real_s / self.factor

    def emulated_rate(self, real_rate: float) -> float:
        return real_rate * self.factor

    # --- what the testbed builds ---
    def real_shape(self, shape: LinkShape) -> LinkShape:
        """The shape the host applies for a link the topology states as `shape`: rate / N, delay and jitter x N
        (loss, queue and MTU unchanged)."""
        if not self.active:
            return shape
        rate = None if shape.rate_bps is None else max(1, round(shape.rate_bps / self.factor))
        return dataclasses.replace(shape, rate_bps=rate, delay_us=shape.delay_us * self.factor,
                                   jitter_us=shape.jitter_us * self.factor)

    def real_topology(self, topology: Topology) -> Topology:
        """`topology` with every link's `real_shape`."""
        if not self.active:
            return topology
        links = tuple(dataclasses.replace(link, shape=self.real_shape(link.shape)) for link in topology.links)
        return dataclasses.replace(topology, links=links)

    def describe(self) -> str:
        return f"time dilation {self.factor:g} ({self.reason})" if self.active else "no time dilation"

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "reason": self.reason, "limits": [limit.to_dict() for limit in self.limits]}

    @staticmethod
    def from_dict(data: dict[str, Any] | None) -> TimeDilation:
        if not data:
            return NO_DILATION
        return TimeDilation(float(data["factor"]), str(data.get("reason", "")),
                            tuple(HostLimit.from_dict(d) for d in data.get("limits", ())))


@dataclass(frozen=True)
class WeighedStep:
    """One message step of a rank as ``auto`` weighs it: what it sends and what it receives, each as (the peer's
    global rank, bytes). Every message sent pays the host's per-step cost once (a step that only receives, once:
    `messages`); only the messages to or from ranks on other hosts take wire time, and the sends among them leave
    the host at once through its links (`genie.testbed.dilation_rules.step_floor_us`)."""

    sends: tuple[tuple[int, int], ...] = ()
    recvs: tuple[tuple[int, int], ...] = ()

    @property
    def messages(self) -> int:
        return max(1, len(self.sends))

    @property
    def largest_bytes(self) -> int:
        """Its largest message, sent or received (0 with none)."""
        return max((size for _, size in (*self.sends, *self.recvs)), default=0)


@dataclass(frozen=True)
class StepNode:
    """One node of a replayed rank's iteration as ``auto`` weighs it (`IterationSteps`): the nodes it waits for
    (indexes into its rank's nodes, all before it), its compute time, and its message steps (`WeighedStep`)."""

    deps: tuple[int, ...] = ()
    compute_ns: int = 0
    steps: tuple[WeighedStep, ...] = ()


@dataclass(frozen=True)
class IterationSteps:
    """A replay's iteration rank by rank, as ``auto`` weighs it for one clock over a whole trace: every step
    pays the host's per-step cost once, and the iteration lasts at least its longest chain of nodes at the
    stated fabric's wire (`genie.testbed.dilation_rules.iteration_floor`). `smallest_bytes`: the smallest
    message (what ``auto`` weighed before it weighed the iteration, still reported). `label`: what the steps
    are, as ``auto``'s reason names them ("iteration" for a replay; a sweep size's collective, such as "1MiB
    all_to_all", for the steps a bench runs at that size)."""

    ranks: tuple[tuple[StepNode, ...], ...]
    smallest_bytes: int | None = None
    label: str = "iteration"


NO_DILATION = TimeDilation()


def fixed_dilation(factor: float) -> TimeDilation:
    """A factor the user gave."""
    check_factor(factor)
    return NO_DILATION if factor == 1.0 else TimeDilation(factor, "asked for")
