"""Why genie loses a cell of the peers harness, computed from the run's own measurements (pure functions).

For every (shape, collective, size) where genie's time is above the best peer's, the report says which
algorithm each side ran, how many steps it takes, and how much of the gap the algorithm accounts for:

- genie's side is measured: the algorithm ``auto`` resolved to (sweep.csv), its steps and bytes per step
  (``genie bench --steps``: steps.csv of the band's recording pass, run after the timed one), the *wire rate*
  of that shape (the per-flow TCP limit the harness measured on the same testbed, `report.FlowLimit`; where
  it was not measured, the bytes per second genie's steps reach on their largest case, :func:`data_rate_GBps`)
  and its *per-step cost*: the cell's measured time less its bytes at the wire rate, over its steps. A step
  record's own duration is not that cost: in a ring a rank waits for the block coming round once per
  iteration and finds it already in at its other steps (the quiet run of 2026-12-05: median step record 8 us,
  the 1 KiB ring's iteration 57 us a step);
- the peer's side is its documented selection for that collective, size and 8 ranks (:func:`peer_algorithm`:
  MPICH's default tuning tree ``maint/tuning/coll/mpir/generic.json``, gloo's only CPU algorithm per
  collective in ``gloo/{allreduce,allgather,alltoall}.cc``) with its steps and bytes per step;
- the algorithm's cost is genie's time less genie's model of the peer's steps: ``sum(c + bytes_i / rate)``
  over the peer's steps, ``c`` genie's per-step cost. Where it covers the gap (genie's per-step cost is at
  most the peer's implied one, ``(peer time - peer bytes at the rate) / peer steps``), the gap is what running
  NCCL's (genie's) algorithm costs; where it does not, the rest is genie's software, and the cell says so
  beside the two per-step costs (the peer's negative: the peer moves its bytes faster than the wire rate
  allows genie - a data-path gap, not the algorithm).

The model is a split, not a measurement. Where genie has a schedule of the peer's algorithm
(:attr:`PeerAlgorithm.genie_algorithm`: MPICH's recursive-doubling all-gather is genie's ``halving_doubling``,
its Rabenseifner all-reduce genie's ``halving_doubling``, rings are rings) and ``auto`` ran another, the harness
also *measures* genie running the peer's algorithm on the same testbed (:func:`alternatives_to_run`, one
``genie bench --algorithm`` per lost cell, after the systems), and the cell says what NCCL's choice cost there
(auto's time minus that one) and what is left on the peer's own algorithm (genie's software).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass
from enum import Enum
from typing import Mapping, Sequence

from genie.collectives.tuner import DEFAULT_NET_GBPS, estimated_times
from genie.core.collective import Algorithm, Collective

from benchmarks.peers.report import GENIE, GLOO, MPI, PEERS, Row, find, format_size, shape_label

#: where the peers' selections come from (public sources, cited in the report)
MPICH_SOURCE = "MPICH maint/tuning/coll/mpir/generic.json (default csel tree)"
GLOO_SOURCE = "gloo/{allreduce,allgather,alltoall}.cc (one algorithm each)"
# MPICH's default tree, for a power-of-two communicator, a built-in commutative op, distinct send buffers:
MPICH_ALLGATHER_RD_BELOW_TOTAL_BYTES = 524288  # allgather: recursive doubling below this total, ring above
MPICH_ALLTOALL_BRUCK_MAX_BYTES = 256  # alltoall per destination: Bruck up to this
MPICH_ALLTOALL_SCATTERED_MAX_BYTES = 32768  # ... isend/irecv all at once ("scattered") up to this, pairwise above
MPICH_ALLREDUCE_RD_MAX_BYTES = 8  # allreduce: recursive doubling up to this (or count < pof2), else Rabenseifner


@dataclass(frozen=True)
class PeerAlgorithm:
    """An algorithm as a sequence of steps: per step the bytes one rank sends (and receives) on it."""

    name: str
    step_bytes: tuple[float, ...]
    source: str
    genie_algorithm: Algorithm | None = None  # genie's schedule of the same algorithm (None: genie has none)

    @property
    def steps(self) -> int:
        return len(self.step_bytes)


def _log2(n: int) -> int:
    return int(math.log2(n)) if n > 1 and n & (n - 1) == 0 else math.ceil(math.log2(max(n, 2)))


def peer_algorithm(system: str, collective: Collective, size_bytes: int, ranks: int) -> PeerAlgorithm | None:
    """The algorithm ``system`` runs for ``collective`` of ``size_bytes`` (nccl-tests' size: all-reduce the
    buffer, all-gather the total output, all-to-all the per-rank send buffer) on ``ranks`` ranks; None where
    not known (MPICH's tree below is the power-of-two branch)."""
    n, s = ranks, float(size_bytes)
    if system == GLOO:
        if collective is Collective.ALL_REDUCE:
            return PeerAlgorithm("ring (reduce-scatter + all-gather, 2 segments in flight)",
                                 (s / n,) * (2 * (n - 1)), GLOO_SOURCE, Algorithm.RING)
        if collective is Collective.ALL_GATHER:
            return PeerAlgorithm("ring", (s / n,) * (n - 1), GLOO_SOURCE, Algorithm.RING)
        if collective is Collective.ALL_TO_ALL:
            return PeerAlgorithm("all sends posted at once", (s * (n - 1) / n,), GLOO_SOURCE, Algorithm.DIRECT)
        return None
    if system != MPI or n & (n - 1):
        return None
    log_n = _log2(n)
    if collective is Collective.ALL_REDUCE:
        if size_bytes <= MPICH_ALLREDUCE_RD_MAX_BYTES or size_bytes // 4 < n:
            return PeerAlgorithm("recursive doubling", (s,) * log_n, MPICH_SOURCE, Algorithm.RECURSIVE_DOUBLING)
        halves = tuple(s / 2 ** (k + 1) for k in range(log_n))
        return PeerAlgorithm("reduce-scatter (recursive halving) + all-gather (recursive doubling)",
                             halves + tuple(reversed(halves)), MPICH_SOURCE, Algorithm.HALVING_DOUBLING)
    if collective is Collective.ALL_GATHER:
        if size_bytes < MPICH_ALLGATHER_RD_BELOW_TOTAL_BYTES:  # genie's halving_doubling all-gather is this
            return PeerAlgorithm("recursive doubling", tuple(s / n * 2 ** k for k in range(log_n)), MPICH_SOURCE,
                                 Algorithm.HALVING_DOUBLING)
        return PeerAlgorithm("ring", (s / n,) * (n - 1), MPICH_SOURCE, Algorithm.RING)
    if collective is Collective.ALL_TO_ALL:
        per_peer = s / n
        if per_peer <= MPICH_ALLTOALL_BRUCK_MAX_BYTES:
            return PeerAlgorithm("Bruck", (s / 2,) * log_n, MPICH_SOURCE)
        if per_peer <= MPICH_ALLTOALL_SCATTERED_MAX_BYTES:
            return PeerAlgorithm("scattered (every isend/irecv at once)", (per_peer * (n - 1),), MPICH_SOURCE,
                                 Algorithm.DIRECT)
        return PeerAlgorithm("pairwise exchange", (per_peer,) * (n - 1), MPICH_SOURCE)
    return None


def nccl_protocol(collective: Collective, algorithm: Algorithm, size_bytes: int, ranks: int,
                  net_GBps: float | None) -> str:
    """The protocol NCCL's tuner takes with genie's algorithm (all-gather and reduce-scatter, one rank per node:
    :mod:`genie.collectives.tuner`); '-' where genie's schedule has no NCCL protocol choice behind it."""
    if collective not in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER) or ranks < 2:
        return "-"
    if algorithm is Algorithm.PAT:
        return "Simple"
    if algorithm is not Algorithm.RING:
        return "-"
    times = estimated_times(size_bytes, ranks, net_GBps or DEFAULT_NET_GBPS)
    return "LL" if times.ring_ll_us < times.ring_simple_us else "Simple"


def nccl_reason(collective: Collective, size_bytes: int, ranks: int, net_GBps: float | None) -> str:
    """Why NCCL's tuner (one rank per node) takes what it takes for an all-gather / reduce-scatter: its three
    estimates; '' for other collectives (genie's choice there is not NCCL's tuner's)."""
    if collective not in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER) or ranks < 2:
        return ""
    t = estimated_times(size_bytes, ranks, net_GBps or DEFAULT_NET_GBPS)
    rate = f"{net_GBps * 8:g} Gbit/s" if net_GBps else f"{DEFAULT_NET_GBPS * 8:g} Gbit/s (unknown rate)"
    return (f"NCCL's tuner at {rate}: ring/LL {t.ring_ll_us:.1f}, ring/Simple {t.ring_simple_us:.1f}, "
            f"PAT {t.pat_us:.1f} us")


@dataclass(frozen=True)
class GenieSteps:
    """One case's step records (steps.csv of the same run): the algorithm ``auto`` ran, the steps a rank takes
    per iteration (the median over ranks and iterations), and every step's duration and bytes (the larger of
    sent and received: a star host's link carries both directions at once)."""

    algorithm: Algorithm
    steps_per_iteration: float
    durations_us: tuple[float, ...]
    step_bytes: tuple[float, ...]

    def bytes_per_iteration(self) -> float:
        """A rank's bytes per iteration (the mean over the step records, times the steps per iteration)."""
        return statistics.fmean(self.step_bytes) * self.steps_per_iteration if self.step_bytes else 0.0


def steps_from_csv(text: str) -> dict[tuple[Collective, int], GenieSteps]:
    """steps.csv (``genie bench --steps``) -> per (collective, size) its :class:`GenieSteps`."""
    per_case: dict[tuple[Collective, int], list[dict]] = {}
    for d in csv.DictReader(io.StringIO(text)):
        per_case.setdefault((Collective.parse(d["collective"]), int(d["size_bytes"])), []).append(d)
    out = {}
    for key, records in per_case.items():
        counts: dict[tuple[str, str], int] = {}
        for d in records:
            counts[(d["iteration"], d["rank"])] = counts.get((d["iteration"], d["rank"]), 0) + 1
        out[key] = GenieSteps(
            algorithm=Algorithm.parse(records[0]["algorithm"]),
            steps_per_iteration=statistics.median(counts.values()),
            durations_us=tuple((int(d["end_ns"]) - int(d["start_ns"])) / 1e3 for d in records),
            step_bytes=tuple(float(max(int(d["sent_bytes"]), int(d["received_bytes"]))) for d in records))
    return out


class Verdict(Enum):
    """What a lost cell's gap comes from."""

    ALGORITHM = "algorithm"  # NCCL's (genie's) algorithm costs at least the gap
    PARTLY = "partly"  # the algorithm costs part of it; the rest is genie's software
    SOFTWARE = "software"  # genie's algorithm is no costlier than the peer's: the gap is genie's software
    UNKNOWN = "unknown"  # no step records or no known peer algorithm


@dataclass(frozen=True)
class Loss:
    """One cell genie loses, with the explanation computed from the run's measurements."""

    shaped: bool
    collective: Collective
    size_bytes: int
    peer: str
    genie_us: float
    peer_us: float
    genie_algorithm: str
    genie_protocol: str
    genie_steps: float
    peer_algorithm: str
    peer_steps: int
    step_cost_us: float | None  # genie's per-step cost: (its time - its bytes at the wire rate) / its steps
    peer_step_cost_us: float | None  # the peer's implied one: (time - wire) / steps
    algorithm_cost_us: float | None  # genie's model with its steps minus with the peer's
    model_us: float | None  # genie's model of its own time: its measured time, or its wire time where longer
    verdict: Verdict
    peer_genie_algorithm: Algorithm | None = None  # genie's schedule of the peer's algorithm, if it has one
    peer_like_us: float | None = None  # genie's measured time running that schedule (None: not run)
    nccl_reason: str = ""  # NCCL's tuner estimates behind genie's choice (all-gather, reduce-scatter)

    @property
    def gap_us(self) -> float:
        return self.genie_us - self.peer_us


def data_rate_GBps(steps: Mapping[tuple[bool, Collective, int], GenieSteps], shaped: bool) -> float | None:
    """genie's data rate on one shape from its step records alone (the wire rate where the harness has no flow
    limit): per collective, the median bytes / duration of the step records of its largest case; the best of
    those (GB/s). None without records. An upper bound: a ring step's block is often in before the step begins
    (measured 0.65 GB/s on the 1 Gbit/s star, whose TCP flows carry 0.1196)."""
    best = None
    for collective in {c for s, c, _ in steps if s == shaped}:
        size = max(z for s, c, z in steps if s == shaped and c is collective)
        rec = steps[(shaped, collective, size)]
        rates = [b / (d * 1e3) for b, d in zip(rec.step_bytes, rec.durations_us) if d > 0 and b > 0]
        if rates:
            rate = statistics.median(rates)
            best = rate if best is None else max(best, rate)
    return best


def _cost(step_bytes: Sequence[float], c_us: float, rate_GBps: float) -> float:
    return sum(c_us + b / (rate_GBps * 1e3) for b in step_bytes)


#: (shaped, collective, size) -> genie's time (us) running the peer's algorithm there (`alternatives_to_run`)
PeerLike = Mapping[tuple[bool, Collective, int], float]


def losses(rows: Sequence[Row], steps: Mapping[tuple[bool, Collective, int], GenieSteps],
           rates_GBps: Mapping[bool, float], *, ranks: int = 8,
           nccl_net_GBps: Mapping[bool, float] | None = None, peer_like: PeerLike | None = None) -> list[Loss]:
    """Every (shape, collective, size) where genie is slower than the fastest peer measured, explained.
    ``steps``: genie's step records per (shaped, collective, size); ``rates_GBps``: the wire rate per shape
    (:func:`wire_rates`); ``nccl_net_GBps``: the per-rank network NCCL's tuner would assume, per shape;
    ``peer_like``: genie's measured times with the peer's algorithm, where the harness ran it."""
    out = []
    for g in sorted((r for r in rows if r.system == GENIE),
                    key=lambda r: (not r.shaped, r.collective.value, r.size_bytes)):
        peers = [p for p in (find(rows, s, g.shaped, g.collective, g.size_bytes) for s in PEERS)
                 if p is not None and p.time_us > 0]
        if not peers:
            continue
        best = min(peers, key=lambda p: p.time_us)
        if g.time_us <= best.time_us:
            continue
        rec = steps.get((g.shaped, g.collective, g.size_bytes))
        alg = peer_algorithm(best.system, g.collective, g.size_bytes, ranks)
        rate = rates_GBps.get(g.shaped)
        c = cp = cost = model = None
        verdict = Verdict.UNKNOWN
        if rec is not None and alg is not None and rate and round(rec.steps_per_iteration) > 0 and rec.step_bytes:
            own = (rec.bytes_per_iteration() / rec.steps_per_iteration,) * round(rec.steps_per_iteration)
            c = max(0.0, (g.time_us - _cost(own, 0.0, rate)) / len(own))
            model = _cost(own, c, rate)
            cost = model - _cost(alg.step_bytes, c, rate)
            cp = (best.time_us - sum(b / (rate * 1e3) for b in alg.step_bytes)) / alg.steps
            gap = g.time_us - best.time_us
            verdict = Verdict.ALGORITHM if cost >= gap else Verdict.PARTLY if cost > 0 else Verdict.SOFTWARE
        net = (nccl_net_GBps or {}).get(g.shaped)
        out.append(Loss(
            shaped=g.shaped, collective=g.collective, size_bytes=g.size_bytes, peer=best.system,
            genie_us=g.time_us, peer_us=best.time_us,
            genie_algorithm=rec.algorithm.value if rec is not None else "?",
            genie_protocol=nccl_protocol(g.collective, rec.algorithm, g.size_bytes, ranks, net)
            if rec is not None else "-",
            genie_steps=rec.steps_per_iteration if rec is not None else float("nan"),
            peer_algorithm=alg.name if alg is not None else "?", peer_steps=alg.steps if alg is not None else 0,
            step_cost_us=c, peer_step_cost_us=cp, algorithm_cost_us=cost, model_us=model, verdict=verdict,
            peer_genie_algorithm=alg.genie_algorithm if alg is not None else None,
            peer_like_us=(peer_like or {}).get((g.shaped, g.collective, g.size_bytes)),
            nccl_reason=nccl_reason(g.collective, g.size_bytes, ranks, net)))
    return out


def alternatives_to_run(found: Sequence[Loss]) -> list[tuple[bool, Collective, int, Algorithm]]:
    """The lost cells where genie has a schedule of the peer's algorithm and ``auto`` ran another: (shaped,
    collective, size, that algorithm), for a ``genie bench --algorithm`` that measures what NCCL's choice costs."""
    return [(x.shaped, x.collective, x.size_bytes, x.peer_genie_algorithm) for x in found
            if x.peer_genie_algorithm is not None and x.genie_algorithm != x.peer_genie_algorithm.value]


def measured_line(loss: Loss) -> str:
    """What genie's run with the peer's algorithm says about the cell: its time and what NCCL's choice cost, or
    why there is none (genie has no such schedule, already runs it, or the harness did not run it)."""
    alg = loss.peer_genie_algorithm
    if alg is None:
        return (f"genie has no schedule of {loss.peer}'s {loss.peer_algorithm}: "
                "the choice's cost is not measured, only modelled above")
    if loss.genie_algorithm == alg.value:
        return (f"genie already runs {loss.peer}'s algorithm ({alg.value}): the whole {loss.gap_us:.0f} us is "
                "genie's software on the same steps")
    if loss.peer_like_us is None:
        return f"genie with {loss.peer}'s algorithm ({alg.value}) not measured in this run"
    x = loss.peer_like_us
    choice = loss.genie_us - x
    head = (f"measured: genie running {loss.peer}'s algorithm ({alg.value}) took {x:.0f} us, so NCCL's choice "
            f"({loss.genie_algorithm}) cost {choice:+.0f} us here")
    if x <= loss.peer_us:
        return head + f" (>= the {loss.gap_us:.0f} us gap: with {loss.peer}'s algorithm genie is not behind)"
    share = f", {max(0.0, choice) / loss.gap_us:.0%} of the gap" if choice > 0 else ""
    return (head + f"{share}; on {loss.peer}'s own algorithm genie is still {x - loss.peer_us:.0f} us "
            f"({x / loss.peer_us:.2f}x) behind: genie's software")


def _us(value: float) -> str:
    """A per-step cost as the report prints it: tenths below 10 us (the shaped star's steps differ by a few)."""
    return f"{value:.1f}" if abs(value) < 10 else f"{value:.0f}"


def explain_line(loss: Loss) -> str:
    """One cell's explanation, every number from the run."""
    head = (f"{loss.collective.value} {format_size(loss.size_bytes)}: genie {loss.genie_us:.0f} us vs "
            f"{loss.peer} {loss.peer_us:.0f} us (gap {loss.gap_us:.0f} us, {loss.genie_us / loss.peer_us:.2f}x); "
            f"genie {loss.genie_algorithm}"
            + (f"/{loss.genie_protocol}" if loss.genie_protocol != "-" else "")
            + f" {loss.genie_steps:g} steps vs {loss.peer} {loss.peer_algorithm} {loss.peer_steps} steps"
            + (f" ({loss.nccl_reason})" if loss.nccl_reason else ""))
    measured = measured_line(loss)
    if loss.verdict == Verdict.UNKNOWN or loss.algorithm_cost_us is None:
        return head + "; not modelled: no step records or no known peer algorithm for this cell; " + measured
    c, cp, cost = loss.step_cost_us, loss.peer_step_cost_us, loss.algorithm_cost_us
    cs, cps = _us(c), _us(cp)
    fit = "" if loss.model_us <= loss.genie_us + 0.5 else (
        f" (genie's bytes alone at the rate take {loss.model_us:.0f} us, more than its measured "
        f"{loss.genie_us:.0f} us)")
    costs = f"genie {cs} us/step vs {loss.peer}'s implied {cps} us/step" if cp >= 0 else (
        f"genie {cs} us/step, and {loss.peer}'s bytes alone at the wire rate take "
        f"{-cp * loss.peer_steps:.0f} us longer than its whole time: it moves data faster than genie's data path")
    if loss.verdict == Verdict.ALGORITHM:
        why = (f"NCCL-faithful algorithm explains it: at genie's measured {cs} us/step + wire "
               f"({loss.peer}'s implied {cps} us/step), its {loss.genie_steps:g} steps cost {cost:.0f} us more "
               f"than the peer's {loss.peer_steps} >= the {loss.gap_us:.0f} us gap")
    elif loss.verdict == Verdict.PARTLY:
        why = (f"the algorithm explains {cost:.0f} us of the {loss.gap_us:.0f} us gap "
               f"({cost / loss.gap_us:.0%}); the other {loss.gap_us - cost:.0f} us is genie's software, "
               f"not the algorithm: {costs}")
    else:
        same = "the same steps and bytes" if abs(cost) < 0.5 else f"genie's steps cost {-cost:.0f} us less"
        why = f"NOT the algorithm ({same}): the {loss.gap_us:.0f} us gap is genie's software: {costs}"
    return f"{head}; model: {why}{fit}; {measured}"


def format_losses(found: Sequence[Loss], shaped: bool, rate_GBps: float | None,
                  rate_source: str = "genie's step records") -> str:
    mine = [x for x in found if x.shaped == shaped]
    label = shape_label(shaped)
    if not mine:
        return f"# genie vs the best peer, {label}: genie is at least as fast in every cell measured"
    rate = "not measured" if not rate_GBps else f"{rate_GBps:.4f} GB/s ({rate_source})"
    lines = [f"# where genie loses to the best peer, {label}: wire rate {rate}; genie's steps and bytes from its "
             f"steps.csv of this run, its per-step cost = (its time - its bytes at the wire rate) / its steps; "
             f"peers' algorithms: {MPICH_SOURCE}; {GLOO_SOURCE}"]
    counts = {v: sum(x.verdict == v for x in mine) for v in
              (Verdict.ALGORITHM, Verdict.PARTLY, Verdict.SOFTWARE, Verdict.UNKNOWN)}
    lines += [f"  {explain_line(x)}" for x in mine]
    ran = [x for x in mine if x.peer_like_us is not None]
    lines.append(f"# {len(mine)} cell(s) lost: {counts[Verdict.ALGORITHM]} explained by the algorithm, "
                 f"{counts[Verdict.PARTLY]} partly, {counts[Verdict.SOFTWARE]} by genie's software alone, "
                 f"{counts[Verdict.UNKNOWN]} not modelled (no records); measured with the peer's "
                 f"algorithm: {len(ran)}, of which NCCL's choice cost the whole gap in "
                 f"{sum(x.peer_like_us <= x.peer_us for x in ran)}")
    return "\n".join(lines)


#: where a shape's wire rate came from (`wire_rates`)
FLOW_SOURCE = "the per-flow TCP limit measured"
STEPS_SOURCE = "genie's step records; no flow limit measured"


def wire_rates(steps: Mapping[tuple[bool, Collective, int], GenieSteps],
               flow_GBps: Mapping[bool, float] | None = None) -> dict[bool, tuple[float, str]]:
    """Per shape the wire rate (GB/s) and its source: the per-flow TCP limit the harness measured on that shape's
    testbed (``flow_GBps``, `report.FlowLimit.mean_GBps`), else genie's step records (:func:`data_rate_GBps`)."""
    out = {}
    for shaped in (True, False):
        flow = (flow_GBps or {}).get(shaped)
        if flow:
            out[shaped] = (flow, FLOW_SOURCE)
        elif rate := data_rate_GBps(steps, shaped):
            out[shaped] = (rate, STEPS_SOURCE)
    return out


def losses_by_shape(rows: Sequence[Row], steps: Mapping[tuple[bool, Collective, int], GenieSteps], *,
                    shaped_rate_bps: int, ranks: int = 8, peer_like: PeerLike | None = None,
                    flow_GBps: Mapping[bool, float] | None = None) -> dict[bool, str]:
    """The report's "where genie loses" section per shape measured, at that shape's wire rate (:func:`wire_rates`);
    NCCL's protocol choice at the shaped link's rate (unshaped: the tuner's default, a veth's 10 Gbit/s);
    ``peer_like``: genie's times with the peers' algorithms (:func:`alternatives_to_run`)."""
    found = shape_losses(rows, steps, shaped_rate_bps=shaped_rate_bps, ranks=ranks, peer_like=peer_like,
                         flow_GBps=flow_GBps)
    rates = wire_rates(steps, flow_GBps)
    return {shaped: format_losses(found, shaped, *rates.get(shaped, (None, "")))
            for shaped in (True, False) if any(r.shaped == shaped for r in rows)}


def shape_losses(rows: Sequence[Row], steps: Mapping[tuple[bool, Collective, int], GenieSteps], *,
                 shaped_rate_bps: int, ranks: int = 8, peer_like: PeerLike | None = None,
                 flow_GBps: Mapping[bool, float] | None = None) -> list[Loss]:
    """`losses` at each shape's wire rate and NCCL's network (the report's and the harness's one call)."""
    rates = {shaped: rate for shaped, (rate, _) in wire_rates(steps, flow_GBps).items()}
    return losses(rows, steps, rates, ranks=ranks, nccl_net_GBps={True: shaped_rate_bps / 8e9},
                  peer_like=peer_like)
