"""The one path every rank-running service (bench, replay, experiment) takes: read and check the faults, choose
the launcher, open the target (a testbed from a topology, a running testbed, loopback, real hosts), plan the
faults against it, open the run directory with its manifest, and watch the measured part (link observation,
packet capture, live faults). Everything that can fail on bad input fails before anything starts."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from genie.core.dilation import IterationSteps
from genie.core.errors import RunFailure
from genie.core.placement import RankPlacement
from genie.services.launch import LaunchChoice, check_launch, launch_meta, launch_target, resolve_launch
from genie.services.options import RunOptions
from genie.services.target import Target, Watch, capture_end_for, open_target, watched


@dataclass
class Stage:
    """Where a service's ranks run (`placements` of `target`, started as `choice` says) and the run directory
    (`run`, a `genie.report.manifest.RunRecorder`) that records it; `fault_plan` checked against the target."""

    target: Target
    placements: list[RankPlacement]
    choice: LaunchChoice
    run: Any
    fault_plan: Any  # genie.faults.model.FaultPlan
    options: RunOptions
    capture_end: Any = None
    watch: Watch | None = None

    @property
    def sessions(self):
        return self.choice.sessions

    @property
    def dilation(self):
        """The run's `genie.core.dilation.TimeDilation` (the target's)."""
        return self.target.dilation

    @contextlib.contextmanager
    def watching(self, *, report_s: float = 0.0, on_interval=None) -> Iterator[Watch]:
        """Observe, capture and inject faults for the block; their files join the run directory also when the
        block fails or is interrupted. `on_interval` gets the links' `IntervalReport` every `report_s`."""
        with watched(self.run, self.target, sample_ms=self.options.sample_ms, capture_end=self.capture_end,
                     fault_plan=self.fault_plan, report_s=report_s, on_interval=on_interval) as watch:
            self.watch = watch
            yield watch

    def summary(self) -> dict[str, Any]:
        return self.watch.summary() if self.watch is not None else {}


@contextlib.contextmanager
def staged(kind: str, opts: RunOptions, *, ranks: int | None, bounds: Callable[[int, list], Any],
           params: dict[str, Any], inputs: Sequence[Any] = (), loopback_ranks: int | None = None,
           name: str | None = None,
           fits: Callable[[list[RankPlacement]], list[RankPlacement]] = lambda placements: placements,
           smallest_message_bytes: int | None = None, sweep_sizes_bytes: Sequence[int] = (),
           iteration: IterationSteps | None = None, size_steps: Callable[[Any], Any] | None = None
           ) -> Iterator[Stage]:
    """The stage of one `kind` run (bench, replay, experiment). `ranks`: the first N ranks of the target
    (None: all); `loopback_ranks`: how many ranks loopback gets; `bounds(ranks, faults)` the run's fault
    bounds (`genie.faults.validation.RunBounds`) for a rank count and the faults asked for; `fits(placements)`
    the placements the run uses (it may refuse a target too small); `params` and `inputs` go into the
    manifest; `name` names the default run directory (runs/<time>-<name>, default: the kind);
    `smallest_message_bytes` is what ``--time-dilation auto`` protects (the run's smallest message), a
    replay's `iteration` instead when given;
    `sweep_sizes_bytes`, a sweep's sizes: under ``auto`` each gets its own factor, and an experiment's replay
    `iteration` beside them its own (the target's `dilation_plan`); `size_steps(topology)`: the collectives
    each size runs there, as ``auto`` weighs a size (`genie.testbed.dilation_plan.plan_per_size`; None: one
    message of the size)."""
    from genie.faults import service as faults_service
    from genie.report.manifest import RunRecorder

    opts.check()
    faults = faults_service.read_faults(opts.faults_file, list(opts.faults))
    choice = resolve_launch(opts.launcher, opts.transport, opts.inventory, opts.mpiexec, ranks=ranks,
                            port_range=opts.port_range, other_target=opts.target_option())
    faults_service.check_launcher(faults, choice.sessions is None, opts.faults_field)
    faults_service.precheck_topology(faults, opts.topology, lambda n: bounds(n, faults))
    open_testbed = lambda: open_target(opts.topology, opts.testbed, opts.loopback,  # noqa: E731
                                       loopback_ranks if opts.loopback else ranks, command=kind,
                                       shared=opts.shared, dilation=opts.time_dilation,
                                       reference_bytes=smallest_message_bytes, sweep_sizes=sweep_sizes_bytes,
                                       iteration=iteration, size_steps=size_steps)
    with launch_target(choice, opts.inventory, open_testbed) as target:
        placements = fits(target.placements)
        check_launch(choice, placements)
        fault_plan = faults_service.plan(faults, target.info, bounds(len(placements), faults))
        capture_end = capture_end_for(target, opts.capture)
        params = {**params, **opts.extra_params(), **({"faults": fault_plan.specs()} if fault_plan else {})}
        with RunRecorder(kind, name=name, out=opts.out, inputs=(*inputs, *target.inputs), params=params,
                         force=opts.force) as run:
            run.describe(target=target.name, shaper=target.shaper, topology=target.topology,
                         time_dilation={**target.dilation.to_dict(),
                                        **(_planned(target.dilation_plan)
                                           if target.dilation_plan is not None else {})})
            for warning in target.warnings:
                run.warn(warning)
            try:
                yield Stage(target, placements, choice, run, fault_plan, opts, capture_end)
            except RunFailure as failure:
                raise _named_failure(failure, target) from None
            if choice.sessions is not None:
                run.write("launch.json", json.dumps(launch_meta(opts.launcher, opts.transport, choice), indent=2))


def _planned(plan: Any) -> dict[str, Any]:
    """A per-size plan (`genie.testbed.dilation_plan.DilationPlan`) as the manifest's `time_dilation` keeps it:
    each size's factor and why, and an experiment's replay's."""
    return {"per_size": plan.to_dict(), **({"replay": plan.replay.to_dict()} if plan.replay is not None else {})}


def _named_failure(failure: RunFailure, target: Any) -> RunFailure:
    """A run that failed on a testbed whose link emulator died says so (a rank merely "timed out" otherwise)."""
    if target.info is None:
        return failure
    from genie.testbed import service

    dead = service.dead_emulators(target.info.name)
    return RunFailure(f"{service.broken_message(target.info.name, dead)}: {failure}") if dead else failure
