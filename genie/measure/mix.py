"""A job mix's replay split per job (pure): the merged trace's records become each job's own outcome, one
iteration per repetition that saw the whole mix, with the job's own ranks and node ids - so every job gets the
files and metrics a single-job replay writes (ops.csv, ranks.csv, iteration times, exposed communication)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import median

from genie.core.jobmix import (MixMap, RepetitionTime, jobs_outside_in_any, longest_rank_span_ns, mixed_repetitions,
                               repetition_times)
from genie.core.placement import RankPlacement
from genie.core.program import RankProgram
from genie.core.records import IterationRecords, RankRecords, ReplayOutcome


def _iteration_times(outcome: ReplayOutcome, mix: MixMap) -> list[tuple[RepetitionTime, ...]]:
    """Per timed iteration of the merged replay, every job's repetition times."""
    out = []
    for it in outcome.iterations:
        spans: list[tuple] = [() for _ in mix.ranks]
        for rr in it.ranks:
            spans[rr.rank] = rr.records
        out.append(repetition_times(mix, spans))
    return out


def repetitions_seen(outcome: ReplayOutcome, mix: MixMap, jobs: int
                     ) -> list[dict[int, tuple[RepetitionTime, ...]]]:
    """Per timed iteration of the merged replay, each job's repetitions that saw the whole mix."""
    return [mixed_repetitions(times, jobs, mix.offsets_ns) for times in _iteration_times(outcome, mix)]


def jobs_outside_mix(outcome: ReplayOutcome, mix: MixMap, jobs: int) -> tuple[int, ...]:
    """The jobs that in some timed iteration of the merged replay had no repetition that saw the whole mix
    (:func:`genie.core.jobmix.jobs_outside_the_mix`): their iterations "together" are all of theirs."""
    return jobs_outside_in_any(_iteration_times(outcome, mix), jobs, mix.offsets_ns)


def job_outcome(outcome: ReplayOutcome, mix: MixMap, job: int, programs: tuple[RankProgram, ...],
                placements: tuple[RankPlacement, ...]) -> ReplayOutcome:
    """Job ``job``'s part of a merged replay as its own outcome: ``programs`` are the job's own (built from its
    trace), every repetition that saw the mix one iteration (numbered in order), each rank's records mapped back
    to the job's rank and node ids, all ranks of a repetition starting at its window's start."""
    seen = repetitions_seen(outcome, mix, len(mix.repetitions))
    ranks = mix.job_ranks(job)
    iterations = []
    for it, chosen in zip(outcome.iterations, seen):
        by_rank = {rr.rank: rr for rr in it.ranks}
        for rep in chosen[job]:
            rows = []
            for merged in ranks:
                rr = by_rank.get(merged)
                if rr is None:
                    continue
                records = []
                for node_id, s, e in rr.records:
                    where = mix.origin(merged, node_id)
                    if where is not None and where[2] == rep.repetition:
                        records.append((where[3], s, e))
                rows.append(RankRecords(mix.ranks[merged].job_rank, int(rep.start_ns), tuple(records)))
            iterations.append(IterationRecords(len(iterations), tuple(sorted(rows, key=lambda r: r.rank))))
    return ReplayOutcome(programs, tuple(iterations), placements)


@dataclass(frozen=True)
class JobComparison:
    """One job's iteration time alone and in the mix (medians of the measured iterations)."""

    name: str
    hosts: tuple[str, ...]
    repetitions: int
    together_ns: float
    together_iterations: int
    alone_ns: float | None = None
    alone_iterations: int = 0

    @property
    def slowdown_pct(self) -> float | None:
        if not self.alone_ns:
            return None
        return 100.0 * (self.together_ns / self.alone_ns - 1.0)


def mixed_iteration_ns(outcome: ReplayOutcome) -> float:
    """A job's iteration in the mix (its outcome from :func:`job_outcome`): the median over its iterations of
    the longest rank's own span (:func:`genie.core.jobmix.longest_rank_span_ns`: its ranks run at an offset that
    no barrier resets, which the window would count)."""
    times = [longest_rank_span_ns((min(s for _, s, _ in rr.records), max(e for _, _, e in rr.records))
                                  for rr in it.ranks if rr.records)
             for it in outcome.iterations if any(rr.records for rr in it.ranks)]
    return float(median(times)) if times else 0.0


def median_iteration_ns(outcome: ReplayOutcome) -> float:
    """A replay's median iteration: each iteration's window from its ranks' common start (alone, a barrier
    starts every iteration)."""
    from genie.measure.replay import iteration_time_ns, rank_summaries

    times = [iteration_time_ns(rank_summaries(outcome.programs, it)) for it in outcome.iterations if it.ranks]
    return float(median(times)) if times else 0.0


def job_placements(placements: list[RankPlacement], slots: tuple[int, ...]) -> tuple[RankPlacement, ...]:
    """A job's placements: its rank ``r`` where slot ``slots[r]`` of the target runs."""
    return tuple(replace(placements[slot], rank=r) for r, slot in enumerate(slots))


def mixed_placements(placements: list[RankPlacement], mix: MixMap) -> list[RankPlacement]:
    """The merged trace's placements: its rank ``i`` on slot ``mix.slots[i]``."""
    return [replace(placements[slot], rank=i) for i, slot in enumerate(mix.slots)]
