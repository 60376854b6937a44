"""Time dilation in a run (`genie.core.dilation`): a running testbed's or loopback's factor, and the two
crossings between the host's real time and the stated fabric's emulated time that every rank-running service
makes — what the ranks are asked to do (compute durations, timeouts, straggler times: x N) and what they report
(every timestamp: / N). The engine itself never knows about dilation: it measures the host. Resolving a factor for
a new testbed (``auto`` measures this host) is genie.services.dilation_choice's.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from genie.core.dilation import (NO_DILATION, DilationChoice, DilationMode, IterationSteps, StepNode, TimeDilation,
                                 WeighedStep, fixed_dilation)
from genie.core.errors import InputError, RunFailure
from genie.core.limits import MAX_TIMEOUT_S
from genie.core.program import Lane, RankProgram
from genie.core.protocol import Barrier, CaseResult, Straggler
from genie.core.testbed import TestbedInfo


def running_dilation(info: TestbedInfo, choice: DilationChoice) -> TimeDilation:
    """A running testbed's own dilation; asking for another one is refused (its links are shaped already)."""
    if choice.is_none or (choice.mode is DilationMode.FIXED and choice.factor == info.dilation.factor):
        return info.dilation
    if choice.mode is DilationMode.AUTO:  # bringing it up again at auto would give it a factor of its own again
        raise InputError(f"testbed {info.name} runs at time dilation {info.dilation.factor:g} (how it was brought "
                         "up), and a running testbed keeps its factor: auto chooses one (per size, in a sweep) "
                         "only for a topology it brings up itself: leave the option out, or give the topology "
                         "(`topology` FILE) instead of the testbed", path="time_dilation")
    raise InputError(f"testbed {info.name} runs at time dilation {info.dilation.factor:g} (how it was brought up), "
                     f"not {choice.describe()}: leave the option out, or bring the topology up again with "
                     f"`genie testbed up --time-dilation {choice.describe()}`", path="time_dilation")


def loopback_dilation(choice: DilationChoice) -> TimeDilation:
    """Loopback has no links to shape: a fixed factor stretches compute and divides what is reported (the
    host's software costs shrink by it); ``auto`` measures links, which loopback has none of."""
    if choice.mode is DilationMode.AUTO:
        raise InputError("auto measures what a testbed's links sustain; loopback has none: give a factor, or "
                         "a topology", path="time_dilation")
    return fixed_dilation(choice.factor) if not choice.is_none else NO_DILATION


# ---- real -> emulated: what the ranks report ----------------------------------------------------------
def emulated_result(result: CaseResult, dilation: TimeDilation) -> CaseResult:
    """A rank's records with every timestamp divided by N (a monotonic clock read / N is a clock of emulated
    time, so every difference of two is an emulated duration)."""
    if not dilation.active:
        return result
    em = dilation.emulated_ns
    return dataclasses.replace(
        result,
        iterations=tuple((em(a), em(b)) for a, b in result.iterations),
        steps=tuple((row[0], row[1], em(row[2]), em(row[3]), *row[4:]) for row in result.steps),
        t0_ns=em(result.t0_ns),
        records=tuple((node, em(a), em(b)) for node, a, b in result.records))


def emulated_results(per_rank: dict[int, CaseResult], dilation: TimeDilation) -> dict[int, CaseResult]:
    return {rank: emulated_result(result, dilation) for rank, result in per_rank.items()}


def emulated_barrier(report: Barrier, dilation: TimeDilation) -> Barrier:
    """A fault point's report of the timed iterations so far, in emulated time."""
    if not dilation.active:
        return report
    em = dilation.emulated_ns
    return dataclasses.replace(report, iterations=tuple((em(a), em(b)) for a, b in report.iterations))


# ---- emulated -> real: what the ranks are asked to do -----------------------------------------------------
def real_program(program: RankProgram, dilation: TimeDilation) -> RankProgram:
    """Compute lasts N times longer on a dilated fabric."""
    if not dilation.active:
        return program
    return dataclasses.replace(program, nodes=tuple(
        dataclasses.replace(node, duration_ns=dilation.real_ns(node.duration_ns)) if node.duration_ns else node
        for node in program.nodes))


def real_stragglers(stragglers: tuple[Straggler, ...], dilation: TimeDilation) -> tuple[Straggler, ...]:
    """A straggler from `at_s` of the run clock on: that many emulated seconds are N times more real ones."""
    if not dilation.active:
        return stragglers
    return tuple(dataclasses.replace(s, at_s=None if s.at_s is None else dilation.real_s(s.at_s))
                 for s in stragglers)


def real_timeout_s(timeout_s: float, dilation: TimeDilation) -> float:
    """Op timeouts are emulated time too: everything a rank waits for takes N times longer (at most
    MAX_TIMEOUT_S of real time: a week, what any wait of genie's may last)."""
    return min(dilation.real_s(timeout_s), MAX_TIMEOUT_S)


def smallest_message_bytes(programs) -> Optional[int]:
    """The smallest message the rank programs send (`IterationSteps.smallest_bytes`: reported beside the
    iteration auto weighs), None without any."""
    sizes = [node.size_bytes for program in programs for node in program.nodes
             if node.size_bytes > 0 and node.lane in (Lane.COLLECTIVE, Lane.SEND, Lane.RECV)]
    return min(sizes) if sizes else None


def replay_iteration(programs) -> IterationSteps:
    """The rank programs' iteration as ``auto`` weighs it for a replay (`genie.core.dilation.IterationSteps`):
    each node's dependencies, compute and message steps — a collective's steps of its schedule for the rank,
    with the clear-to-send step before it where the engine runs one; a send or receive one step."""
    ranks = []
    for program in programs:
        index = {node.id: i for i, node in enumerate(program.nodes)}
        nodes = []
        for node in program.nodes:
            steps: tuple[WeighedStep, ...] = ()
            if node.lane is Lane.COLLECTIVE and node.op is not None and node.op.sends_messages:
                steps = op_steps(node.op, program.rank)
            elif node.lane is Lane.SEND and node.size_bytes > 0:
                steps = (WeighedStep(((node.peer, node.size_bytes),)),)
            elif node.lane is Lane.RECV and node.size_bytes > 0:
                steps = (WeighedStep((), ((node.peer, node.size_bytes),)),)
            nodes.append(StepNode(tuple(index[d] for d in node.deps if d in index),
                                  node.duration_ns if node.lane is Lane.COMPUTE else 0, steps))
        ranks.append(tuple(nodes))
    return IterationSteps(tuple(ranks), smallest_message_bytes(programs))


def op_steps(op, rank: int) -> tuple[WeighedStep, ...]:
    """A collective's steps for `rank` as ``auto`` weighs them (`genie.core.dilation.WeighedStep`): its
    schedule's steps, with the clear-to-send step before them where the engine runs one."""
    from genie.engine.program import cached_schedule, clear_to_send

    token = clear_to_send(op, rank)
    schedule = ((token,) if token else ()) + cached_schedule(op).for_rank(rank).steps
    return tuple(WeighedStep(tuple((send.peer, send.size_bytes) for send in step.sends),
                             tuple((recv.peer, recv.size_bytes) for recv in step.recvs))
                 for step in schedule if step.sends or step.recvs)


def collective_steps(ops) -> IterationSteps:
    """What one iteration of a bench case (`ops`: the collectives it runs at once, `genie.core.schedule.
    CollectiveOp`) asks of each rank, as ``auto`` weighs a sweep size (`genie.testbed.dilation_plan`): each
    rank's steps of every op it is in, one node per op, all starting together; labelled by its first op's
    size (as aligned) and collective, as ``auto``'s reason names it ("1MiB all_to_all")."""
    from genie.core.units import format_size

    world = sorted({rank for op in ops for rank in op.group})
    ranks = []
    for rank in range(max(world) + 1 if world else 0):
        ranks.append(tuple(StepNode(steps=op_steps(op, rank)) for op in ops
                           if rank in op.group and op.sends_messages))
    sizes = [op.size_bytes for op in ops if op.sends_messages and op.size_bytes > 0]
    label = f"{format_size(ops[0].size_bytes)} {ops[0].collective.value}" if ops else "iteration"
    return IterationSteps(tuple(ranks), min(sizes) if sizes else None, label)


# ---- a sweep's dilation per size, made real between sizes ------------------------------------------------
class SizeDilator:
    """Applies a sweep's dilation per size (`genie.testbed.dilation_plan.DilationPlan`) to the running testbed
    `info` between sizes, through `genie.faults.live.LiveTestbed` (`live`: a fake in tests). `use(d)` reshapes
    every link to `d` when it differs from the current one; a reshape that fails restores the testbed's own
    dilation and raises RunFailure (the sizes measured so far are already written). `restore()` (always called
    at the end) puts the testbed back as it was brought up; a failure there is a RunFailure too (one line naming
    the testbed), not the kernel's error. Where the links cannot be put back the message says what becomes of
    the testbed: a `scratch` one (the run's own, of a topology) the run removes; another, `genie testbed down`."""

    def __init__(self, info: TestbedInfo, live=None, *, scratch: bool = False) -> None:
        if live is None:
            from genie.faults.live import LiveTestbed

            live = LiveTestbed.of(info.name)
        self.info, self.live, self.scratch = info, live, scratch
        self.current = info.dilation

    def _remedy(self) -> str:
        return ("the run removes its scratch testbed" if self.scratch
                else f"`genie testbed down {self.info.name}`")

    def use(self, dilation: TimeDilation, *, size_bytes: int | None) -> None:
        """Every link reshaped to `dilation` for the sweep's size `size_bytes` (None: an experiment's replay)."""
        if dilation.factor == self.current.factor:
            return
        try:
            self.live.redilate(dilation)
        except Exception as exc:  # noqa: BLE001 - any failure of the live change: put the testbed back
            restored = self._put_back()
            from genie.core.units import format_size

            what = "the replay" if size_bytes is None else f"size {format_size(size_bytes)}"
            raise RunFailure(f"reshaping testbed {self.info.name}'s links to time dilation {dilation.factor:g} "
                             f"for {what} failed ({type(exc).__name__}: {exc}); "
                             f"{restored}; the sizes measured before it are kept") from None
        self.current = dilation

    def restore(self) -> None:
        if self.current.factor == self.info.dilation.factor:
            return
        try:
            self.live.redilate(self.info.dilation)
        except Exception as exc:  # noqa: BLE001 - any failure of the live change: one line, not a traceback
            raise RunFailure(f"putting testbed {self.info.name}'s links back at time dilation "
                             f"{self.info.dilation.factor:g} (from {self.current.factor:g}) failed "
                             f"({type(exc).__name__}: {exc}): {self._remedy()}; "
                             "what ran before is kept") from None
        self.current = self.info.dilation

    def _put_back(self) -> str:
        try:
            self.live.redilate(self.info.dilation)
        except Exception as exc:  # noqa: BLE001
            return (f"restoring its shapes at {self.info.dilation.factor:g} failed too ({type(exc).__name__}: "
                    f"{exc}): {self._remedy()}")
        self.current = self.info.dilation
        return f"its links are back at time dilation {self.info.dilation.factor:g}"
