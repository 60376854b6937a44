"""Which time dilation a new testbed gets (`genie.core.dilation`): a fixed factor checked to hold, or ``auto``,
this host measured first (genie.services.host_probe, which runs the ordinary case runner on scratch testbeds:
this module sits above both)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from genie.core.dilation import DilationChoice, DilationMode, IterationSteps, TimeDilation, fixed_dilation
from genie.core.errors import InputError
from genie.core.testbed import LinkModel
from genie.core.topology import Topology

if TYPE_CHECKING:
    from genie.testbed.dilation_plan import DilationPlan


def resolve_dilation(choice: DilationChoice, topology: Topology, *, source: Optional[str] = None,
                     links: Optional[LinkModel] = None,
                     reference_bytes: Optional[int] = None,
                     iteration: Optional[IterationSteps] = None) -> tuple[TimeDilation, LinkModel]:
    """The dilation and link model a testbed of `topology` is brought up with: a fixed factor checked to hold
    (`genie.testbed.dilation_rules`), or ``auto``: this host measured (`genie.services.host_probe`) and the
    smallest factor that keeps its limits under the target share of every figure — of the run's smallest
    message, `reference_bytes` (None: 1 KiB), or of a replay's `iteration`. `links` None: the default for the dilation
    (`genie.testbed.shaping.default_link_model`)."""
    from genie.testbed.dilation_rules import check_dilation_holds
    from genie.testbed.shaping import default_link_model

    if choice.mode is DilationMode.AUTO:
        from genie.services.host_probe import auto_dilation

        model = links or default_link_model(topology, TimeDilation(2.0))  # what a dilated testbed will have
        dilation = auto_dilation(topology, links=model, source=source, reference_bytes=reference_bytes,
                                 iteration=iteration)
    else:
        dilation = fixed_dilation(choice.factor)
    check_dilation_holds(topology, dilation, source=source)
    return dilation, links or default_link_model(topology, dilation)


def resolve_dilation_plan(choice: DilationChoice, topology: Topology, sizes: Sequence[int], *,
                          source: Optional[str] = None, links: Optional[LinkModel] = None,
                          iteration: Optional[IterationSteps] = None,
                          size_steps: Optional[Callable[[Topology], Any]] = None) -> tuple[DilationPlan, LinkModel]:
    """A sweep's dilation per size (`genie.testbed.dilation_plan`) and the link model of its testbed: under
    ``auto`` this host is measured once and each size gets its own factor (weighing the collectives
    `size_steps(topology)` says each size runs, where given), and an experiment's replay `iteration` the
    replay's (InputError naming the first size, or the replay, whose factor the topology cannot hold: nothing
    is brought up); a fixed factor (or none) is every size's and the replay's."""
    from genie.testbed.dilation_plan import plan_per_size, single_plan
    from genie.testbed.shaping import default_link_model

    if choice.mode is DilationMode.AUTO and (len(set(sizes)) > 1 or iteration is not None or size_steps is not None):
        from genie.services.host_probe import measure_host

        weighed = size_steps(topology) if size_steps is not None else None  # refuses bad input before the probe
        model = links or default_link_model(topology, TimeDilation(2.0))  # what a dilated testbed will have
        figures = measure_host(topology, model, wakes=iteration is not None)
        plan = plan_per_size(topology, figures, sizes, source=source, iteration=iteration, size_steps=weighed)
        return plan, links or default_link_model(topology, plan.first)
    dilation, model = resolve_dilation(choice, topology, source=source, links=links,
                                       reference_bytes=min(sizes) if sizes else None)
    return single_plan(sizes, dilation), model


def testbed_up(topology: Topology, *, name: str, source, dry_run: bool, shaper, choice: DilationChoice,
               links: Optional[LinkModel] = None):
    """`genie testbed up`: the dilation resolved (``auto`` measures this host first), then the testbed up (or
    its plan, with `dry_run`). Returns what `genie.testbed.service.up` returns."""
    from genie.testbed import service

    if dry_run and choice.mode is DilationMode.AUTO:
        raise InputError("auto measures this host in scratch namespaces, and a dry run changes nothing: give a "
                         "factor to see its plan", path="time_dilation")
    dilation, model = resolve_dilation(choice, topology, source=None if source is None else str(source),
                                       links=links)
    return service.up(topology, name=name, source=source, dry_run=dry_run, shaper=shaper, dilation=dilation,
                      links=model)
