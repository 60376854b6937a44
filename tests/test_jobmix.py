"""Job mixes, pure parts: the file and its errors, placement policies, the merged trace and its per-job split,
the fabric estimate of a mix."""

from __future__ import annotations

from pathlib import Path

import pytest

from astra_adapter.fabric.mix import JobEstimate, LinkShare, MixEstimate, format_ranking
from genie.core.errors import InputError
from genie.core.jobmix import JobPlacement, MixMap, PlacementPolicy, mixed_repetitions, repetition_times
from genie.core.topology import LinkShape
from genie.core.trace import CommType, NodeKind, collective_node, compute_node, make_trace, recv_node, send_node
from genie.topology.builders import leaf_spine
from genie.topology.job_placement import leaf_slots, place_jobs
from genie.workloads.analysis import errors, validate
from genie.workloads.jobmix_file import load_job_traces, parse_job_mix
from genie.workloads.mix import merge_jobs, repetition_counts

TOPO = leaf_spine(2, 4, 2, shape=LinkShape(rate_bps=1_000_000_000), fabric_shape=LinkShape(rate_bps=500_000_000))


def ddp(ranks: int, size: int = 4_000_000, compute_ns: int = 1_000_000):
    return make_trace([[compute_node(1, "fwd", duration_ns=compute_ns),
                        collective_node(2, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=size, data_deps=(1,))]
                       for _ in range(ranks)])


def pipeline():
    return make_trace([[compute_node(1, "f", duration_ns=1000), send_node(2, "s", rank=0, peer=1, size_bytes=1000,
                                                                          data_deps=(1,))],
                       [recv_node(1, "r", rank=1, peer=0, size_bytes=1000),
                        compute_node(2, "f", duration_ns=1000, data_deps=(1,))]])


# ---- the file --------------------------------------------------------------------------------------------
def test_a_mix_file_reads_every_field(tmp_path: Path) -> None:
    mix = parse_job_mix("jobs:\n"
                        "  - {name: a, trace: a.json, placement: spread, start_offset: 2ms, iterations: 3}\n"
                        "  - {trace: b.json, placement: random, seed: 7}\n"
                        "  - {generate: {model: gpt3-125m, dp: 2}, hosts: [h0, h1]}\n", source="m.yaml",
                        base=tmp_path)
    a, b, c = mix.jobs
    assert (a.name, a.trace_path, a.placement.policy, a.start_offset_ns, a.iterations) == \
        ("a", tmp_path / "a.json", PlacementPolicy.SPREAD, 2_000_000, 3)
    assert (b.name, b.placement) == ("job1", JobPlacement(PlacementPolicy.RANDOM, 7))
    assert c.placement.hosts == ("h0", "h1") and dict(c.generate)["dp"] == 2
    inline = parse_job_mix("jobs:\n  - {trace: a.json, placement: 'random:5'}\n", source="m.yaml")
    assert inline.jobs[0].placement == JobPlacement(PlacementPolicy.RANDOM, 5)


def test_placements_random_needs_its_seed() -> None:
    """`--placements random` is refused (a seed nobody chose places the jobs on hosts no one asked for);
    random:SEED is the policy with that seed."""
    from genie.services.mix import parse_placements

    with pytest.raises(InputError) as info:
        parse_placements(("packed,random",))
    assert info.value.path == "placements" and "random needs a seed" in str(info.value)
    assert parse_placements(("random:0",)) == (JobPlacement(PlacementPolicy.RANDOM, 0),)


@pytest.mark.parametrize("text, path, words", [
    ("jobs:\n  - {trace: a.json, placement: diagonal}\n", "jobs[0].placement", "unknown placement policy"),
    ("jobs:\n  - {trace: a.json}\n  - {trace: b.json, placement: packed, seed: 3}\n", "jobs[1].seed", "random"),
    ("jobs:\n  - {trace: a.json, iterations: 0}\n", "jobs[0].iterations", "1..10000"),
    ("jobs:\n  - {trace: a.json, start_offset: 5}\n", "jobs[0].start_offset", "unit"),
    ("jobs:\n  - {placement: packed}\n", "jobs[0].trace", "exactly one"),
    ("jobs:\n  - {trace: a.json, hosts: [h0], placement: spread}\n", "jobs[0].hosts", "not both"),
    ("jobs:\n  - {trace: a.json}\n  - {trace: a.json, name: job0}\n", "jobs[1].name", "already"),
    ("jobs:\n  - {trace: a.json, colour: red}\n", "jobs[0].colour", "unknown key"),
    ("jobs: []\n", "jobs", "non-empty"),
    ("jobs:\n  - {trace: a.json, name: ../x}\n", "jobs[0].name", "letters"),
    # random without a seed: an error naming the seed, not a silent seed 0 (session 34's walk-through)
    ("jobs:\n  - {trace: a.json, placement: random}\n", "jobs[0].seed", "random needs a seed"),
    ("jobs:\n  - {trace: a.json, placement: 'random:x'}\n", "jobs[0].placement", "not an integer"),
    ("jobs:\n  - {trace: a.json, placement: 'random:3', seed: 4}\n", "jobs[0].placement", "once"),
    ("jobs:\n  - {trace: a.json, placement: spread, seed: x}\n", "jobs[0].seed", "integer"),
])
def test_a_bad_mix_file_names_the_job_and_field(text: str, path: str, words: str) -> None:
    with pytest.raises(InputError) as info:
        parse_job_mix(text, source="m.yaml")
    assert info.value.path == path and info.value.source == "m.yaml" and words in str(info.value)


def test_a_job_whose_trace_fails_validation_is_named(tmp_path: Path) -> None:
    from genie.workloads.loader import OutputFormat, save_trace

    broken = make_trace([[send_node(1, "s", rank=0, peer=1, size_bytes=10)], [compute_node(1, "c")]])
    assert errors(validate(broken))
    save_trace(ddp(2), tmp_path / "ok.json", to=OutputFormat.JSON)
    save_trace(broken, tmp_path / "bad.json", to=OutputFormat.JSON)
    mix = parse_job_mix("jobs:\n  - {trace: ok.json}\n  - {trace: bad.json}\n", source="m.yaml", base=tmp_path)
    with pytest.raises(InputError) as info:
        load_job_traces(mix)
    assert info.value.path == "jobs[1].trace" and "genie trace validate" in str(info.value)


# ---- placement -----------------------------------------------------------------------------------------------
def test_leaves_group_the_hosts_by_their_switch() -> None:
    assert leaf_slots(TOPO) == ((0, 1, 2, 3), (4, 5, 6, 7))


def test_packed_fills_a_leaf_and_spread_alternates_leaves() -> None:
    packed, spread = JobPlacement(PlacementPolicy.PACKED), JobPlacement(PlacementPolicy.SPREAD)
    assert place_jobs([packed, packed], [4, 4], TOPO) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert place_jobs([spread, spread], [4, 4], TOPO) == ((0, 4, 1, 5), (2, 6, 3, 7))
    assert place_jobs([packed, spread], [3, 3], TOPO) == ((0, 1, 2), (3, 4, 5))


def test_random_is_seeded_and_explicit_hosts_come_first() -> None:
    rnd = JobPlacement(PlacementPolicy.RANDOM, 5)
    first = place_jobs([rnd, JobPlacement(hosts=("h0", "h7"))], [4, 2], TOPO)
    assert first == place_jobs([rnd, JobPlacement(hosts=("h0", "h7"))], [4, 2], TOPO)
    assert first[1] == (0, 7) and not set(first[0]) & {0, 7} and len(set(first[0])) == 4
    draws = {place_jobs([JobPlacement(PlacementPolicy.RANDOM, seed)], [4], TOPO)[0] for seed in range(6)}
    assert len(draws) > 1  # the seed decides


def test_two_jobs_on_one_slot_and_too_many_ranks_are_refused() -> None:
    with pytest.raises(InputError) as info:
        place_jobs([JobPlacement(hosts=("h0", "h1")), JobPlacement(hosts=("h2", "h1"))], [2, 2], TOPO)
    assert info.value.path == "jobs[1].hosts[1]" and "two jobs on one host slot" in str(info.value)
    with pytest.raises(InputError) as info:
        place_jobs([JobPlacement(PlacementPolicy.PACKED)] * 2, [4, 5], TOPO)
    assert info.value.path == "jobs[1].trace" and "8 host slots" in str(info.value)
    with pytest.raises(InputError) as info:
        place_jobs([JobPlacement(hosts=("h9",))], [1], TOPO)
    assert info.value.path == "jobs[0].hosts[0]"


# ---- merge and split -----------------------------------------------------------------------------------------
def test_the_merged_trace_renumbers_ranks_groups_and_peers() -> None:
    merged, mix = merge_jobs([ddp(2), pipeline()], ["a", "b"], [(5, 1), (0, 6)], [2, 1], [0, 3000])
    assert mix.slots == (0, 1, 5, 6) and merged.num_ranks == 4
    assert not errors(validate(merged))
    assert merged.group("a").ranks == (2, 1)  # job a's rank 0 on slot 5 = merged rank 2
    assert merged.group("b").ranks == (0, 3)
    send = next(n for n in merged.ranks[0].nodes if n.kind is NodeKind.SEND)
    assert send.peer == 3 and send.attr_value("comm_src") == 0
    assert merged.ranks[0].nodes[0].duration_ns == 3000  # b's start offset
    collectives = [n for n in merged.ranks[2].nodes if n.kind is NodeKind.COLLECTIVE]
    assert [n.process_group for n in collectives] == ["a", "a"]  # two repetitions on job a's own world
    assert [mix.origin(2, n.id) for n in collectives] == [(0, 0, 0, 2), (0, 0, 1, 2)]
    second_compute = [n for n in merged.ranks[2].nodes if n.name == "fwd"][1]
    assert second_compute.ctrl_deps == (collectives[0].id,)  # repetition 1 waits for repetition 0


def test_repetitions_cover_the_longest_job() -> None:
    assert repetition_counts([10.0, 3.0], [0, 0], [2, 1]) == (2, 8)  # 20 / 3 -> 7, plus one
    assert repetition_counts([10.0, 30.0], [0, 5], [1, 1]) == (5, 1)


def test_mixed_repetitions_are_those_that_saw_every_job() -> None:
    mix = MixMap((), (), (3, 1), (0, 5))
    from genie.core.jobmix import RepetitionTime as R
    times = (R(0, 0, 0, 10), R(0, 1, 10, 20), R(0, 2, 20, 30), R(1, 0, 5, 25))
    chosen = mixed_repetitions(times, 2, mix.offsets_ns)  # job 1 starts 5 after job 0, as configured
    assert [t.repetition for t in chosen[0]] == [1] and [t.repetition for t in chosen[1]] == [0]
    assert mix.repetitions == (3, 1)


def test_a_job_with_no_repetition_inside_the_mix_keeps_all_and_is_named() -> None:
    # session 34's replay: job 1 (offset 2) ended at 38, job 0's repetition 0 began before job 1 did and its
    # repetition 1 ended after job 1's end; the rule keeps all of job 0's, and says which job that is
    from genie.core.jobmix import RepetitionTime as R
    from genie.core.jobmix import jobs_outside_the_mix

    times = (R(0, 0, 0, 18), R(0, 1, 18, 40), R(0, 2, 40, 50), R(0, 3, 50, 60), R(1, 0, 2, 20), R(1, 1, 20, 38))
    chosen = mixed_repetitions(times, 2, (0, 2))
    assert [t.repetition for t in chosen[0]] == [0, 1, 2, 3] and [t.repetition for t in chosen[1]] == [0, 1]
    assert jobs_outside_the_mix(times, 2, (0, 2)) == (0,)
    assert jobs_outside_the_mix(times, 2, (0, 0)) == ()  # without the offset repetition 0 saw the whole mix
    assert jobs_outside_the_mix((), 2, ()) == ()


def test_a_repetition_counts_from_the_configured_start_not_from_when_the_last_first_op_fired() -> None:
    # a replay's jobs start after one barrier, their first ops microseconds apart: with no offsets every job's
    # repetition 0 saw the whole mix, however the first ops' starts jitter (the fabric model, whose jobs start
    # at exactly 0, keeps them all); the rule before session 25 dropped the first-firing job's repetition 0
    from genie.core.jobmix import RepetitionTime as R
    from genie.core.jobmix import mix_begin_ns

    for jitter in (0.0, 2_000.0, -2_000.0):  # ns between the two jobs' first ops
        j0, j1 = max(0.0, -jitter), max(0.0, jitter)
        times = (R(0, 0, j0, 100), R(0, 1, 100, 200), R(0, 2, 200, 300),
                 R(1, 0, j1, 150), R(1, 1, 150, 300))
        chosen = mixed_repetitions(times, 2, ())
        assert [t.repetition for t in chosen[0]] == [0, 1, 2], jitter
        assert [t.repetition for t in chosen[1]] == [0, 1], jitter
        assert mix_begin_ns(times, 2, ()) == min(j0, j1)
    # with offsets: the job of the largest keeps its repetition 0 even when its first op fires a little before
    # the origin plus its offset; the others' repetitions before it do not count
    times = (R(0, 0, 1_000, 100_000), R(0, 1, 100_000, 200_000), R(0, 2, 200_000, 300_000),
             R(1, 0, 50_999, 150_000), R(1, 1, 150_000, 300_000))
    chosen = mixed_repetitions(times, 2, (0, 50_000))
    assert [t.repetition for t in chosen[1]] == [0, 1] and [t.repetition for t in chosen[0]] == [1, 2]
    assert mix_begin_ns(times, 2, (0, 50_000)) == 50_999  # origin min(1_000 - 0, 50_999 - 50_000) + 50_000
    assert mix_begin_ns((), 2, ()) == 0.0


def test_the_replay_counts_the_first_firing_job_s_repetition_0_as_the_estimate_does() -> None:
    # the merged replay's records, job 0's first op 1 us before job 1's (both from the common barrier at 0):
    # job 0's outcome in the mix holds all its repetitions, and the fabric estimate's count is the same
    from types import SimpleNamespace

    from astra_adapter.fabric.mix import _rep_medians
    from genie.core.placement import RankPlacement
    from genie.core.records import IterationRecords, RankRecords, ReplayOutcome
    from genie.engine.program import build_programs
    from genie.measure.mix import job_outcome

    a, b = ddp(2), ddp(2)
    merged, mix = merge_jobs([a, b], ["a", "b"], [(0, 1), (2, 3)], [3, 3], [0, 0])
    spans = []
    for rank in merged.ranks:
        first = 1_000 if mix.ranks[rank.rank].job == 0 else 2_000
        rows, t = [], float(first)
        for n in rank.nodes:
            if n.id == 0:
                continue
            rows.append((n.id, t, t + 1e6))
            t += 1e6
        spans.append(tuple(rows))
    outcome = ReplayOutcome(tuple(build_programs(merged)), (IterationRecords(0, tuple(
        RankRecords(r, 0, tuple((i, int(s), int(e)) for i, s, e in rows)) for r, rows in enumerate(spans))),), ())
    places = tuple(RankPlacement(r, "localhost", None, "127.0.0.1") for r in range(2))
    counted = [len(job_outcome(outcome, mix, j, tuple(build_programs(t)), places).iterations)
               for j, t in enumerate((a, b))]
    assert counted == [3, 2]  # job 1's repetition 2 ends after job 0 finished
    estimated = _rep_medians(mix, [SimpleNamespace(spans=spans)], 2, mixed=True)
    assert [n for _, n in estimated] == counted


def test_repetition_times_read_the_spans_per_job() -> None:
    merged, mix = merge_jobs([ddp(2)], ["a"], [(0, 1)], [2], [0])
    spans = [tuple((n.id, float(n.id), float(n.id) + 0.5) for n in r.nodes) for r in merged.ranks]
    times = repetition_times(mix, spans)
    assert [(t.job, t.repetition) for t in times] == [(0, 0), (0, 1)]
    assert times[0].start_ns == 2.0 and times[1].end_ns == 6.5  # stride 3: ids 2, 3 then 5, 6


# ---- the fabric estimate ------------------------------------------------------------------------------------
def test_a_job_s_mixed_time_is_the_median_of_its_repetitions_as_the_replay_reports_it() -> None:
    # the replay reports the median of a job's iterations (genie.measure.mix.median_iteration_ns); the estimate
    # takes the same statistic of its repetitions, per draw, then the mean over the draws: one short repetition
    # (an iteration that fell into the other job's quiet phase) moves a mean, not the median
    from types import SimpleNamespace

    from astra_adapter.fabric.mix import _rep_medians

    merged, mix = merge_jobs([ddp(1)], ["a"], [(0,)], [5], [0])
    ids = [n.id for n in merged.ranks[0].nodes if n.id]  # two nodes per repetition (stride 3)

    def timeline(durations: list[float]) -> SimpleNamespace:
        spans, t = [], 0.0
        for k, d in enumerate(durations):
            spans += [(ids[2 * k], t, t + d / 2), (ids[2 * k + 1], t + d / 2, t + d)]
            t += d
        return SimpleNamespace(spans=[tuple(spans)])

    (value, count), = _rep_medians(mix, [timeline([100.0, 100.0, 40.0, 100.0, 100.0])], 1, mixed=True)
    assert value == 100.0 and count == 5  # the mean would be 88
    (value, count), = _rep_medians(mix, [timeline([100.0, 100.0, 40.0, 100.0, 100.0]),
                                         timeline([10.0, 50.0, 60.0, 70.0, 80.0])], 1, mixed=True)
    assert value == 80.0 and count == 10  # each draw's median (100, 60), then their mean


def test_the_fabric_sees_spread_jobs_meet_and_packed_jobs_not() -> None:
    from astra_adapter.fabric.mix import estimate_mix, rank_placements

    traces, names = [ddp(4), ddp(4)], ["a", "b"]
    estimates = []
    for policy in (PlacementPolicy.SPREAD, PlacementPolicy.PACKED):
        slots = place_jobs([JobPlacement(policy)] * 2, [4, 4], TOPO)
        estimates.append(estimate_mix(traces, names, slots, [0, 0], [2, 2], TOPO, placement=policy.value,
                                      ecmp_samples=0))
    spread, packed = estimates
    assert all(abs(j.slowdown_pct) < 0.5 for j in packed.jobs) and not packed.shared_links
    assert all(j.slowdown_pct > 10 for j in spread.jobs)
    assert {(s.a, s.b) for s in spread.shared_links} >= {("leaf0", "spine0"), ("spine1", "leaf1")}
    assert [e.placement for e in rank_placements(estimates)] == ["packed", "spread"]
    assert spread.jobs[0].hosts == ("h0", "h4", "h1", "h5")


def test_a_mix_is_played_without_the_calibration_s_flow_contention() -> None:
    # the jobs' flows share shaped FIFOs that deliver their whole rate (mix_play_params): a calibration's fitted
    # flow contention changes nothing in a mix's estimate with the standing queues, alone or together; with the
    # rates alone it still slows the links that several flows cross
    from astra_adapter.fabric.flows import FabricParams
    from astra_adapter.fabric.mix import estimate_mix, mix_play_params

    traces, names = [ddp(4), ddp(4)], ["a", "b"]
    slots = place_jobs([JobPlacement(PlacementPolicy.SPREAD)] * 2, [4, 4], TOPO)

    def times(contention: float, queues: bool) -> list[tuple[float, float]]:
        est = estimate_mix(traces, names, slots, [0, 0], [2, 2], TOPO, FabricParams(flow_contention=contention),
                           ecmp_samples=0, standing_queues=queues)
        return [(j.alone_ns, j.mixed_ns) for j in est.jobs]

    assert times(0.05, True) == times(0.0, True)
    assert all(x[1] > y[1] for x, y in zip(times(0.05, False), times(0.0, False)))  # the mix's shared links
    played = mix_play_params(FabricParams(flow_contention=0.05))
    assert played.flow_contention == 0.0 and played.standing_queues and played.ring_chains
    assert mix_play_params(FabricParams(flow_contention=0.05), False).flow_contention == 0.05


def test_placements_estimated_in_worker_processes_are_the_ones_estimated_in_turn() -> None:
    from astra_adapter.fabric.mix import estimate_mixes

    traces, names = [ddp(4), ddp(4)], ["a", "b"]
    calls = [((traces, names, place_jobs([JobPlacement(policy)] * 2, [4, 4], TOPO), [0, 0], [2, 2], TOPO),
              {"placement": policy.value, "ecmp_samples": samples})
             for policy, samples in ((PlacementPolicy.SPREAD, 0), (PlacementPolicy.PACKED, 0),
                                     (PlacementPolicy.SPREAD, 2))]
    in_turn = estimate_mixes(calls, workers=1)
    assert estimate_mixes(calls, workers=2) == in_turn  # every float the same, in the calls' order
    assert [e.placement for e in in_turn] == ["spread", "packed", "spread"]
    assert in_turn[0].mean_slowdown_pct > 10 > in_turn[1].mean_slowdown_pct


def test_a_merged_replay_splits_into_each_jobs_own_outcome() -> None:
    from genie.core.placement import RankPlacement
    from genie.core.records import IterationRecords, RankRecords, ReplayOutcome
    from genie.engine.program import build_programs
    from genie.measure.mix import job_outcome, median_iteration_ns

    a, b = ddp(2), ddp(2)
    merged, mix = merge_jobs([a, b], ["a", "b"], [(0, 1), (2, 3)], [3, 1], [0, 0])
    # job b (one repetition) runs 0..100; job a's repetitions take 40 each: 0-40, 40-80, 80-120
    def timing(rank, where):
        if where[0] == 0:
            start = 40 * where[2]
            return start + (0 if where[3] == 1 else 10), start + (10 if where[3] == 1 else 40)
        return (0, 50) if where[3] == 1 else (50, 100)

    records = [RankRecords(rank, 0, rows) for rank, rows in enumerate(_rank_rows(merged, mix, timing))]
    outcome = ReplayOutcome(tuple(build_programs(merged)), (IterationRecords(0, tuple(records)),), ())
    places = tuple(RankPlacement(r, "localhost", None, "127.0.0.1") for r in range(2))
    mine = job_outcome(outcome, mix, 0, tuple(build_programs(a)), places)
    assert len(mine.iterations) == 2  # repetitions 0 and 1 ended before b did; repetition 2 (to 120) did not
    assert {nid for rr in mine.iterations[1].ranks for nid, _, _ in rr.records} == {1, 2}
    assert [rr.rank for rr in mine.iterations[0].ranks] == [0, 1]
    assert median_iteration_ns(mine) == 40
    theirs = job_outcome(outcome, mix, 1, tuple(build_programs(b)), places)
    assert len(theirs.iterations) == 1 and median_iteration_ns(theirs) == 100


def _offset_ranks(merged, mix, offset: int, period: int = 100):
    """Job 0 of ``merged`` (two ranks, a compute and a collective per repetition) with rank 1 ``offset`` behind
    rank 0 on every repetition, each rank ``period`` per repetition: per rank (node id, start, end)."""
    def timing(rank, where):
        start = period * where[2] + (offset if where[1] == 1 else 0)
        return start + (0 if where[3] == 1 else 10), start + (10 if where[3] == 1 else period)

    return _rank_rows(merged, mix, timing)


def _rank_rows(merged, mix, timing):
    """Per rank of ``merged``, (node id, start, end) of each node: ``timing(rank, where)`` for a job's node
    (``where``: ``mix.origin``), (0, 0) for the merge's own nodes."""
    spans = []
    for rank, rt in enumerate(merged.ranks):
        rows = []
        for n in rt.nodes:
            where = mix.origin(rank, n.id)
            rows.append((n.id, 0, 0) if where is None else (n.id, *timing(rank, where)))
        spans.append(tuple(rows))
    return spans


def test_a_job_s_iteration_in_a_mix_is_its_longest_rank_s_own_span_not_the_window() -> None:
    # no barrier resets the offset between a mix's ranks (benchmarks/README.md: 3-100 ms on the spread TP2xDP2,
    # held on every iteration of a run): a job whose rank 1 runs 30 behind rank 0 still takes 100 per iteration
    from genie.core.jobmix import longest_rank_span_ns

    merged, mix = merge_jobs([ddp(2)], ["a"], [(0, 1)], [3], [0])
    times = repetition_times(mix, _offset_ranks(merged, mix, 30))
    assert [t.duration_ns for t in times] == [130, 130, 130]  # the window counts the offset
    assert [t.iteration_ns for t in times] == [100, 100, 100]
    assert longest_rank_span_ns([(0, 100), (30, 120), (5, 90)]) == 100
    assert longest_rank_span_ns([]) == 0.0
    in_step = repetition_times(mix, _offset_ranks(merged, mix, 0))
    assert [t.iteration_ns for t in in_step] == [t.duration_ns for t in in_step] == [100, 100, 100]


def test_the_replay_and_the_estimate_time_an_offset_job_alike() -> None:
    from types import SimpleNamespace

    from astra_adapter.fabric.mix import _rep_medians
    from genie.core.placement import RankPlacement
    from genie.core.records import IterationRecords, RankRecords, ReplayOutcome
    from genie.engine.program import build_programs
    from genie.measure.mix import job_outcome, median_iteration_ns, mixed_iteration_ns

    a = ddp(2)
    merged, mix = merge_jobs([a], ["a"], [(0, 1)], [3], [0])
    spans = _offset_ranks(merged, mix, 30)
    outcome = ReplayOutcome(tuple(build_programs(merged)), (IterationRecords(0, tuple(
        RankRecords(rank, 0, rows) for rank, rows in enumerate(spans))),), ())
    places = tuple(RankPlacement(r, "localhost", None, "127.0.0.1") for r in range(2))
    mine = job_outcome(outcome, mix, 0, tuple(build_programs(a)), places)
    assert mixed_iteration_ns(mine) == 100  # what the mix replay reports (mix.json's together_ns)
    assert median_iteration_ns(mine) == 130  # the window, from the repetition's common start
    (estimated, count), = _rep_medians(mix, [SimpleNamespace(spans=spans)], 1, mixed=True)
    assert estimated == 100 and count == 3
    (alone, _), = _rep_medians(mix, [SimpleNamespace(spans=spans)], 1, mixed=False)
    assert alone == 130  # alone a barrier starts every iteration: the window, as the replay times it alone


def test_a_long_play_with_tiny_step_latencies_ends() -> None:
    """Late in a long play (a mix runs for many iterations) t + a tiny latency rounds back to t: the player
    advances by the horizon itself instead of waiting forever for time to move."""
    import signal

    from astra_adapter.fabric.estimate import estimate_fabric
    from astra_adapter.fabric.flows import FabricParams

    trace = ddp(8, size=1_000_000, compute_ns=30_000_000_000)  # 30 s of compute first: ulp(t) ~ 4e-6 ns
    params = FabricParams(message_overhead_ns=1.5e-6)  # under half of ulp(t): t + it == t

    def hung(*_args) -> None:
        raise AssertionError("the play did not end")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        est = estimate_fabric(trace, TOPO, params, ecmp_samples=0)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert est.iteration_ns > 30_000_000_000


def test_ranking_names_the_shared_links_or_says_none():
    def est(placement, links):
        jobs = (JobEstimate("a", (0, 1), 3, 100.0, 110.0, 3), JobEstimate("b", (2, 3), 3, 100.0, 100.0, 3))
        return MixEstimate(placement, jobs, links)

    apart = est("packed", (LinkShare("leaf0", "spine0", (5.0, 0.0)),))  # one job only: not shared
    together = est("spread", tuple(LinkShare(f"leaf{k}", "spine0", (5.0, 5.0)) for k in range(8)))
    lines = format_ranking([apart, together]).splitlines()
    assert lines[2].endswith("  none")
    assert lines[3].endswith("8: " + ", ".join(f"leaf{k}->spine0" for k in range(6)) + " ...")


@pytest.mark.parametrize("options, path, words", [
    ("{model: gpt3-125m, colour: red}", "jobs[0].generate.colour", "unknown option (expected one of model,"),
    ("{model: gpt3-125m, layers: two}", "jobs[0].generate.layers", "expected an integer, got 'two'"),
    ("{model: nosuch}", "jobs[0].generate.model", "unknown model 'nosuch'"),
    # session 35: options were checked by their type's name as a string, others converted blindly: `no` was a
    # true flag, `true` an efficiency of 1.0, `fast` a ValueError naming only `generate`, 7 a model named '7'
    ("{model: gpt3-125m, sequence_parallel: 'no'}", "jobs[0].generate.sequence_parallel",
     "expected true or false, got 'no'"),
    ("{model: gpt3-125m, efficiency: true}", "jobs[0].generate.efficiency", "expected a number, got True"),
    ("{model: gpt3-125m, efficiency: fast}", "jobs[0].generate.efficiency", "expected a number, got 'fast'"),
    ("{model: 7}", "jobs[0].generate.model", "expected a name, got 7"),
    ("{model: gpt3-125m, dp: null}", "jobs[0].generate.dp", "expected a value, got none"),
])
def test_a_bad_generate_option_is_named_as_the_file_spells_it(options: str, path: str, words: str) -> None:
    # session 34: these were `jobs[0].generate: GeneratorOptions.__init__() got an unexpected keyword argument
    # 'colour'` and `... '<' not supported between instances of 'str' and 'int'`
    mix = parse_job_mix(f"jobs:\n  - {{generate: {options}}}\n", source="m.yaml")
    with pytest.raises(InputError) as info:
        load_job_traces(mix)
    assert info.value.path == path and info.value.source == "m.yaml" and words in str(info.value), str(info.value)
    assert "GeneratorOptions" not in str(info.value) and "instances of" not in str(info.value)
