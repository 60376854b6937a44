"""A job mix (pure data): several training jobs sharing one topology, each on its own host slots.

A job is a trace (a file, or ``genie trace gen`` options), where its ranks go (:class:`JobPlacement`: explicit
hosts, or a :class:`PlacementPolicy`), a start offset and the iterations it times. A *host slot* is one rank
position of the topology: global rank ``g`` of the topology (ranks numbered host by host in file order, as
every testbed places them) is slot ``g``. A placed mix becomes one merged trace (``genie.workloads.mix``) whose
rank ``i`` runs on slot ``slots[i]``; :class:`MixMap` says which job, job rank, repetition and original node
each merged node is, so every measurement splits per job again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any


class PlacementPolicy(Enum):
    """How a job's ranks are given host slots when the file does not list hosts."""

    PACKED = "packed"  # fill a leaf (a multi-GPU node: the node) before the next one
    SPREAD = "spread"  # round-robin over the leaves
    RANDOM = "random"  # a seeded random choice of the free slots

    @classmethod
    def parse(cls, text: str) -> "PlacementPolicy":
        for policy in cls:
            if policy.value == str(text).strip().lower():
                return policy
        raise ValueError(f"unknown placement policy {text!r} (expected {', '.join(p.value for p in cls)}, "
                         f"or hosts: [...])")


@dataclass(frozen=True)
class JobPlacement:
    """Explicit ``hosts`` (one entry per rank, in rank order; a host named twice gives its next slot) or a
    ``policy`` (with ``seed`` for random)."""

    policy: PlacementPolicy | None = None
    seed: int = 0
    hosts: tuple[str, ...] = ()

    def label(self) -> str:
        if self.hosts:
            return "hosts:" + ",".join(self.hosts)
        assert self.policy is not None
        return f"random:{self.seed}" if self.policy is PlacementPolicy.RANDOM else self.policy.value

    @classmethod
    def parse(cls, text: str, seed: int | None = None) -> "JobPlacement":
        """``packed``, ``spread`` or ``random:SEED`` (or ``random`` with ``seed`` given apart, as a mix file's
        ``seed:``); ValueError otherwise. ``random`` needs a seed: a draw nobody chose would place the job on
        hosts that no one asked for, and the same seed places it on the same hosts."""
        name, _, inline = str(text).strip().partition(":")
        policy = PlacementPolicy.parse(name)
        if (inline or seed is not None) and policy is not PlacementPolicy.RANDOM:
            raise ValueError(f"only random takes a seed, not {text!r}")
        if inline and seed is not None:
            raise ValueError(f"give the seed once: {text!r} and a seed {seed}")
        if inline:
            try:
                seed = int(inline)
            except ValueError:
                raise ValueError(f"the seed of {text!r} is not an integer") from None
        if policy is PlacementPolicy.RANDOM and seed is None:
            raise ValueError("random needs a seed (random:SEED, or seed: N in a mix file): the same seed places "
                             "the job on the same hosts")
        return cls(policy, seed if seed is not None else 0)


@dataclass(frozen=True)
class JobSpec:
    """One job of a mix file: exactly one of ``trace_path`` or ``generate`` (``genie trace gen`` options)."""

    name: str
    placement: JobPlacement
    trace_path: Path | None = None
    generate: tuple[tuple[str, Any], ...] = ()
    npus: int | None = None
    start_offset_ns: int = 0
    iterations: int = 1


@dataclass(frozen=True)
class JobMix:
    jobs: tuple[JobSpec, ...]
    source: str = "<jobs>"

    def with_policy(self, placement: JobPlacement) -> "JobMix":
        """Every job placed by ``placement`` instead of its own (the placement what-if)."""
        from dataclasses import replace
        return replace(self, jobs=tuple(replace(j, placement=placement) for j in self.jobs))


@dataclass(frozen=True)
class MixRank:
    """Merged rank -> its job, its rank in the job, and how its node ids were laid out: node 0 is the start
    offset; repetition ``k``'s copy of original node ``n`` has id ``1 + k * stride + n``."""

    job: int
    job_rank: int
    stride: int
    repetitions: int


@dataclass(frozen=True)
class MixMap:
    """Which job each rank of a merged trace is, where it runs (``slots``), and each job's repetitions."""

    ranks: tuple[MixRank, ...]
    slots: tuple[int, ...]  # merged rank -> host slot (global rank of the topology)
    repetitions: tuple[int, ...]  # per job
    offsets_ns: tuple[int, ...] = ()  # per job: its configured start offset (none given: all 0)

    def origin(self, rank: int, node_id: int) -> tuple[int, int, int, int] | None:
        """(job, job rank, repetition, original node id) of a merged node; None for the start offset."""
        r = self.ranks[rank]
        if node_id == 0:
            return None
        rep, original = divmod(node_id - 1, r.stride)
        return r.job, r.job_rank, rep, original

    def job_ranks(self, job: int) -> tuple[int, ...]:
        """The merged ranks of ``job``, in job-rank order."""
        return tuple(i for _, i in sorted((r.job_rank, i) for i, r in enumerate(self.ranks) if r.job == job))


@dataclass(frozen=True)
class RepetitionTime:
    """One repetition (iteration) of a job inside a run: its window over the job's ranks, and the time it took
    (:attr:`iteration_ns`)."""

    job: int
    repetition: int
    start_ns: float  # earliest start of its nodes on any of the job's ranks
    end_ns: float  # latest end
    rank_span_ns: float = -1.0  # its longest rank's own span (:func:`longest_rank_span_ns`); < 0: the window's

    @property
    def duration_ns(self) -> float:
        """The window: first start on any rank to last end on any rank."""
        return self.end_ns - self.start_ns

    @property
    def iteration_ns(self) -> float:
        """What the repetition took the job: its longest rank's own span (see :func:`longest_rank_span_ns`)."""
        return self.rank_span_ns if self.rank_span_ns >= 0 else self.duration_ns


def longest_rank_span_ns(windows) -> float:
    """A job's iteration inside a mix, from each of its ranks' ``(first start, last end)`` in that iteration:
    the longest rank's own span. Nothing holds a mix's iterations together (no barrier between a job's
    repetitions), so its ranks run at an offset from each other that its collectives keep: a 2-rank ring
    all-reduce whose rank ahead reaches the rank behind after a wait ``d`` (a queue) turns an offset ``x``
    between them into ``min(x, d)``, so any offset up to the wait stays, and how large it is depends on the
    run's history, not on the job or the network (the spread TP2xDP2 of benchmarks/job_mix.py: 12-100 ms through
    a whole replay). The window (first start on any rank to last end on any rank) counts that offset once per
    iteration although each rank - and so the job - takes only its own span per iteration; alone, a barrier
    starts every iteration, and the two are the same. One rule for the replay
    (:func:`genie.measure.mix.mixed_iteration_ns`) and the fabric estimate (astra_adapter.fabric.mix)."""
    return max((end - start for start, end in windows), default=0.0)


def repetition_times(mix: MixMap, spans) -> tuple[RepetitionTime, ...]:
    """Each job's repetition windows and iteration times from ``spans``: per merged rank, (node id, start, end)
    of its nodes."""
    ranks: dict[tuple[int, int], dict[int, list[float]]] = {}  # per (job, repetition): each rank's [start, end]
    for rank, rows in enumerate(spans):
        for node_id, start, end in rows:
            where = mix.origin(rank, node_id)
            if where is None:
                continue
            r = ranks.setdefault((where[0], where[2]), {}).setdefault(rank, [start, end])
            r[0], r[1] = min(r[0], start), max(r[1], end)
    return tuple(RepetitionTime(job, rep, min(s for s, _ in per_rank.values()), max(e for _, e in per_rank.values()),
                                longest_rank_span_ns(per_rank.values()))
                 for (job, rep), per_rank in sorted(ranks.items()))


def mix_begin_ns(times: tuple[RepetitionTime, ...], jobs: int, offsets_ns: tuple[int, ...]) -> float:
    """When every job of a mix is running, by the jobs' configured start offsets, not by when their first ops
    happened to fire: the mix's origin is the earliest first start less its job's offset (``min_j (first_j -
    offset_j)``), and every job has started from the origin plus the largest offset. With no offsets (the
    common case) that is the earliest first start: in a replay the jobs' first ops start microseconds apart
    after the common barrier, and a rule that waits for the last of them drops the first-starting job's
    repetition 0 by that jitter, while the fabric model, whose jobs start at exactly 0, keeps it
    (benchmarks/README.md "Job mixes", sessions 24-25). With offsets the job of the largest one keeps its
    repetition 0 on both sides, however its first op's start jitters against the origin's."""
    offsets = [int(offsets_ns[j]) if j < len(offsets_ns) else 0 for j in range(jobs)]
    firsts = [(min(t.start_ns for t in times if t.job == j), offsets[j]) for j in range(jobs)
              if any(t.job == j for t in times)]
    if not firsts:
        return 0.0
    return min(first - offset for first, offset in firsts) + max(offsets, default=0)


def _inside_the_mix(times: tuple[RepetitionTime, ...], jobs: int, offsets_ns: tuple[int, ...]
                    ) -> dict[int, tuple[RepetitionTime, ...]]:
    """Per job its repetitions that started at or after every job had started (:func:`mix_begin_ns`) and ended
    before the first job finished (its last repetition); possibly none."""
    lasts = [max((t.end_ns for t in times if t.job == j), default=0.0) for j in range(jobs)]
    begin, end = mix_begin_ns(times, jobs, offsets_ns), min(lasts, default=0.0)
    return {j: tuple(t for t in times if t.job == j and t.start_ns >= begin and t.end_ns <= end + 1e-6)
            for j in range(jobs)}


def mixed_repetitions(times: tuple[RepetitionTime, ...], jobs: int, offsets_ns: tuple[int, ...]
                      ) -> dict[int, tuple[RepetitionTime, ...]]:
    """Per job the repetitions that saw the whole mix: started at or after every job had started
    (:func:`mix_begin_ns`, by the jobs' configured ``offsets_ns``) and ended before the first job finished (its
    last repetition); a job with none such keeps all of its repetitions (:func:`jobs_outside_the_mix` names
    them). One rule for the replay (genie.measure.mix) and the fabric estimate (astra_adapter.fabric.mix), each
    passing the mix's offsets (:attr:`MixMap.offsets_ns`)."""
    inside = _inside_the_mix(times, jobs, offsets_ns)
    return {j: inside[j] or tuple(t for t in times if t.job == j) for j in range(jobs)}


def jobs_outside_the_mix(times: tuple[RepetitionTime, ...], jobs: int, offsets_ns: tuple[int, ...]
                         ) -> tuple[int, ...]:
    """The jobs none of whose repetitions saw the whole mix, so that :func:`mixed_repetitions` keeps all of
    theirs - some of which ran beside fewer jobs, or after the others had finished (a job slowed by the mix
    whose longest partner ran faster in it than alone, or whose first repetition a start offset cut)."""
    inside = _inside_the_mix(times, jobs, offsets_ns)
    return tuple(j for j in range(jobs) if not inside[j] and any(t.job == j for t in times))


def jobs_outside_in_any(runs: Iterable[tuple[RepetitionTime, ...]], jobs: int, offsets_ns: tuple[int, ...]
                       ) -> tuple[int, ...]:
    """The jobs :func:`jobs_outside_the_mix` names in any of ``runs`` (a replay's timed iterations, or the fabric
    model's hash draws), ascending."""
    return tuple(sorted({j for times in runs for j in jobs_outside_the_mix(times, jobs, offsets_ns)}))


def outside_the_mix_warning(name: str, repetitions: int, what: str) -> str:
    """What the replay and the estimate say of a job :func:`jobs_outside_the_mix` names (``what``: the time it
    reports, "together" or "mixed")."""
    return (f"job {name}: none of its repetitions ran from the last job's start to the first job's end, so its "
            f"{what} time is the median of all {repetitions}, some beside fewer jobs or none (give the job that "
            f"finished first more iterations, or the jobs no start offset)")
