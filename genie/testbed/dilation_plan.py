"""Time dilation per size (pure): in a sweep each size runs at the factor ``auto`` chooses for it, so a 64 MiB
row does not run at the factor its 1 KiB row needs; an experiment's replay beside its sweep at the factor
``auto`` chooses for a replay (its iteration, as `genie replay` has it).

``auto``'s factor protects a size's figure: in `genie bench` and an experiment's sweep the collectives run at
that size, weighed as a replay's iteration is (every send of its busiest rank pays the host's per-step cost,
against the collective's least time, a step's sends at once sharing their host's links: an all-to-all's 7
sends per rank on 8 ranks are 7 x the per-step cost where one message of the size was 1 x), elsewhere one
message of the size between
the two closest hosts (`genie.testbed.dilation_rules.choose_dilation`): a bigger size needs a smaller factor
for the same share of software cost, down to what the host's throughput needs. The host is measured once
(`genie.testbed.dilation_rules.HostFigures`); the plan is then a pure function of those figures, the topology
and the sizes: size -> factor -> the links' real shapes. `genie bench --dry-run` prints it; the bench service
applies it between sizes through the live testbed (`genie.faults.live.LiveTestbed.redilate`, the mechanism the
fault injector changes shapes with).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

from genie.core.dilation import IterationSteps, TimeDilation
from genie.core.errors import InputError
from genie.core.topology import LinkShape, Topology
from genie.core.units import describe_rate, format_size


@dataclass(frozen=True)
class SizeDilation:
    """One size of a sweep and the dilation it runs at."""

    size_bytes: int
    dilation: TimeDilation

    def to_dict(self) -> dict[str, Any]:
        return {"size_bytes": self.size_bytes, "factor": self.dilation.factor, "reason": self.dilation.reason}


@dataclass(frozen=True)
class DilationPlan:
    """Each size of a sweep with its dilation (ascending sizes, each once), and an experiment's `replay` (one
    clock for the whole trace; None: no replay beside the sweep). The testbed comes up at `first` (the smallest
    size's); a size, or the replay, at another factor has every link reshaped before it runs."""

    sizes: tuple[SizeDilation, ...]
    replay: Optional[TimeDilation] = None

    @property
    def first(self) -> TimeDilation:
        return self.sizes[0].dilation if self.sizes or self.replay is None else self.replay

    @property
    def per_size(self) -> bool:
        """True when the sizes (and the replay) do not all share one factor."""
        return len({s.dilation.factor for s in self.sizes} | ({self.replay.factor} if self.replay else set())) > 1

    def dilation_for(self, size_bytes: int) -> TimeDilation:
        """The dilation of `size_bytes` (a size aligned for a collective may differ from the sweep's: the
        nearest planned size not above it, else the smallest)."""
        chosen = self.sizes[0].dilation
        for entry in self.sizes:
            if entry.size_bytes <= size_bytes:
                chosen = entry.dilation
        return chosen

    def to_dict(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.sizes]

    def reasons(self) -> list[str]:
        """One line per size, and the replay's: the factor it ran at and why (what a run prints at its end)."""
        lines = [f"{format_size(entry.size_bytes)}: {entry.dilation.describe()}" for entry in self.sizes]
        return lines + ([f"the replay: {self.replay.describe()}"] if self.replay is not None else [])

    def describe(self, topology: Topology) -> list[str]:
        """One line per size: its factor, why, and the real shape of each distinct stated link shape."""
        lines = []
        for entry in self.sizes:
            shapes = ", ".join(f"{_shape_text(shape)} -> {_shape_text(entry.dilation.real_shape(shape))}"
                               for shape in distinct_shapes(topology))
            lines.append(f"{format_size(entry.size_bytes):>8}  N = {entry.dilation.factor:<8g} "
                         f"{shapes}  ({entry.dilation.reason})")
        if self.replay is not None:
            lines.append(f"{'replay':>8}  N = {self.replay.factor:<8g} ({self.replay.reason})")
        return lines


def distinct_shapes(topology: Topology) -> list[LinkShape]:
    out: list[LinkShape] = []
    for link in topology.links:
        if link.shape not in out:
            out.append(link.shape)
    return out


def _shape_text(shape: LinkShape) -> str:
    rate = "unshaped" if shape.rate_bps is None else describe_rate(shape.rate_bps)
    return f"{rate} {shape.delay_us:g}us" if shape.delay_us else rate


def single_plan(sizes: Iterable[int], dilation: TimeDilation) -> DilationPlan:
    """Every size at one dilation (a fixed factor, or none)."""
    return DilationPlan(tuple(SizeDilation(s, dilation) for s in sorted(set(sizes))))


def plan_per_size(topology: Topology, figures: Any, sizes: Sequence[int], *, source: Optional[str] = None,
                  iteration: Optional[IterationSteps] = None,
                  size_steps: Optional[Mapping[int, Sequence[IterationSteps]]] = None) -> DilationPlan:
    """``auto``'s factor for each size of a sweep, from this host's `figures`
    (`genie.testbed.dilation_rules.HostFigures`, measured once), and with an experiment's replay `iteration`
    (`genie.services.dilation.replay_iteration`) the replay's: ``auto``'s rule for a replay, as `genie replay`
    has it. A size's figure is one message of that size between the two closest hosts, or, where `size_steps`
    gives the collectives the sweep runs at that size (`genie.services.dilation.collective_steps`, one per
    case), each collective's iteration as a replay's is weighed (every send of its busiest rank pays the
    per-step cost, against the collective's least time; no wake-ups: a bench's iterations follow each other
    without a timed sleep), the largest factor of them. InputError naming the first size (or the replay) the
    topology cannot hold a factor for, and the limit that needs it."""
    import dataclasses

    from genie.testbed.dilation_rules import check_dilation_holds, choose_dilation

    def held(what: str, figures: Any = figures, **figure: Any) -> TimeDilation:
        try:
            dilation = choose_dilation(topology, figures, source=source, **figure)
            check_dilation_holds(topology, dilation, source=source)
        except InputError as exc:
            raise InputError(f"{what}: {exc.detail}", source=exc.source, path=exc.path) from None
        return dilation

    def for_size(size: int) -> TimeDilation:
        what = f"size {format_size(size)}"
        collectives = (size_steps or {}).get(size)
        if not collectives:
            return held(what, reference_bytes=size)
        stepped = dataclasses.replace(figures, wake_us=None)
        return max((held(what, iteration=steps, figures=stepped) for steps in collectives),
                   key=lambda dilation: dilation.factor)

    planned = tuple(SizeDilation(size, for_size(size)) for size in sorted(set(sizes)))
    return DilationPlan(planned, None if iteration is None else held("the replay", iteration=iteration))
