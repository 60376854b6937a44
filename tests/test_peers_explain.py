"""benchmarks.peers.explain: where genie loses a peers cell and how much of it NCCL's (genie's) algorithm
explains, computed from a results table and step records (pure; no root, no processes)."""

from __future__ import annotations

import pytest

from benchmarks.peers import explain, report
from benchmarks.peers.explain import GenieSteps, Verdict, losses, peer_algorithm, steps_from_csv
from benchmarks.peers.report import GENIE, GLOO, MPI
from genie.core.collective import Algorithm, Collective

AR, AG, A2A = Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.ALL_TO_ALL
RATE = 0.1  # GB/s = 100 bytes per us


def row(system, shaped, collective, size, time_us):
    return report.row_from_time(system, shaped, collective, 8, size, time_us, 5)


def steps_of(algorithm, n_steps, step_bytes, duration_us, iterations=2, ranks=8):
    k = iterations * ranks * n_steps
    return GenieSteps(algorithm, float(n_steps), (duration_us,) * k, (float(step_bytes),) * k)


def test_mpich_selection_follows_its_default_tree():
    # allgather, 8 ranks: recursive doubling below 512 KiB total, ring from there
    rd = peer_algorithm(MPI, AG, 1024, 8)
    assert rd.name == "recursive doubling" and rd.step_bytes == (128.0, 256.0, 512.0)
    assert peer_algorithm(MPI, AG, 512 * 1024, 8).steps == 7
    # allreduce: Rabenseifner (2 log2 n steps, halving then doubling) above 8 bytes / count >= pof2
    ra = peer_algorithm(MPI, AR, 1024, 8)
    assert ra.steps == 6 and ra.step_bytes == (512.0, 256.0, 128.0, 128.0, 256.0, 512.0)
    assert peer_algorithm(MPI, AR, 16, 8).name == "recursive doubling"  # 4 floats < 8 ranks
    # alltoall per destination: Bruck <= 256 B, scattered <= 32 KiB, pairwise above
    assert peer_algorithm(MPI, A2A, 2048, 8).name == "Bruck"
    assert peer_algorithm(MPI, A2A, 4096, 8).steps == 1
    assert peer_algorithm(MPI, A2A, 8 * 32768 + 8 * 4, 8).name == "pairwise exchange"
    assert peer_algorithm(GLOO, AR, 1 << 20, 8).steps == 14
    assert peer_algorithm(MPI, AR, 1024, 6) is None  # not the power-of-two branch: not claimed


def test_algorithm_explains_a_gap_it_covers():
    # genie's ring all-gather: 7 steps of 128 B at 60 us software each; MPI's recursive doubling: 3 steps
    rows = [row(GENIE, True, AG, 1024, 7 * (60 + 1.28)), row(MPI, True, AG, 1024, 200.0),
            row(GLOO, True, AG, 1024, 500.0)]
    steps = {(True, AG, 1024): steps_of(Algorithm.RING, 7, 128, 61.28)}
    (loss,) = losses(rows, steps, {True: RATE})
    assert loss.peer == MPI and loss.peer_steps == 3 and loss.genie_steps == 7
    assert loss.step_cost_us == pytest.approx(60.0)
    # (7 - 3) x 60 us of steps, same bytes in total: 240 us >= the gap of ~229 us
    assert loss.algorithm_cost_us == pytest.approx(240.0)
    assert loss.verdict == Verdict.ALGORITHM
    assert "NCCL-faithful algorithm explains it" in explain.explain_line(loss)


def test_a_gap_beyond_the_algorithm_is_called_software():
    rows = [row(GENIE, True, AG, 1024, 1000.0), row(MPI, True, AG, 1024, 200.0)]
    steps = {(True, AG, 1024): steps_of(Algorithm.RING, 7, 128, 61.28)}
    (loss,) = losses(rows, steps, {True: RATE})
    assert loss.verdict == Verdict.PARTLY
    line = explain.explain_line(loss)
    # genie's step: (1000 - 7 x 1.28 us of wire) / 7 = 141.6 us; its 4 extra steps 566 us of the 800 us gap; the
    # rest is its dearer step on the peer's 3 (MPI's implied (200 - 8.96) / 3 = 63.7 us)
    assert loss.step_cost_us == pytest.approx((1000 - 8.96) / 7)
    assert "the other 234 us is genie's software" in line and "genie 142 us/step vs mpi's implied 64 us/step" in line
    # the same algorithm on both sides: nothing to blame on it
    rows = [row(GENIE, False, A2A, 4 << 20, 9000.0), row(MPI, False, A2A, 4 << 20, 8000.0)]
    steps = {(False, A2A, 4 << 20): steps_of(Algorithm.DIRECT, 1, 7 * (1 << 19), 9000.0)}
    steps_pairwise = losses(rows, steps, {False: RATE})[0]
    assert steps_pairwise.peer_algorithm == "pairwise exchange" and steps_pairwise.verdict == Verdict.SOFTWARE
    assert "NOT the algorithm" in explain.explain_line(steps_pairwise)
    # its 3.5 MiB at 0.1 GB/s take longer than its measured time: no per-step cost is left, and the line says why
    assert steps_pairwise.step_cost_us == 0.0
    assert "genie's bytes alone at the rate take 36700 us, more than its measured 9000 us" in \
        explain.explain_line(steps_pairwise)


def test_cells_genie_wins_or_ties_are_not_listed_and_missing_records_say_so():
    rows = [row(GENIE, True, AR, 1024, 100.0), row(MPI, True, AR, 1024, 100.0),
            row(GENIE, True, AR, 4096, 300.0), row(GLOO, True, AR, 4096, 200.0)]
    (loss,) = losses(rows, {}, {True: RATE})
    assert loss.size_bytes == 4096 and loss.verdict == Verdict.UNKNOWN
    assert "not modelled" in explain.explain_line(loss)


def test_steps_from_csv_counts_steps_and_bytes():
    text = "collective,algorithm,size_bytes,iteration,rank,step,peers,sent_bytes,received_bytes,start_ns,end_ns\n"
    for it in range(2):
        for rank in range(2):
            for step in range(3):
                text += f"all_gather,ring,1024,{it},{rank},{step},1 7,128,256,{1000 * step},{1000 * step + 5000}\n"
    (key, rec), = steps_from_csv(text).items()
    assert key == (AG, 1024) and rec.algorithm is Algorithm.RING and rec.steps_per_iteration == 3
    assert rec.durations_us == (5.0,) * 12 and rec.step_bytes == (256.0,) * 12
    assert rec.bytes_per_iteration() == pytest.approx(3 * 256)


def test_losses_by_shape_at_the_measured_flow_rate_else_genies_step_rate():
    rows = [row(GENIE, False, AG, 1024, 500.0), row(MPI, False, AG, 1024, 100.0),
            row(GENIE, True, AG, 1024, 50.0), row(MPI, True, AG, 1024, 100.0)]
    # the largest case's steps move 1000 B in 20 us: 0.05 GB/s, the rate the 1 KiB case's wire time is taken at
    # when the harness measured no flow limit
    steps = {(False, AG, 1024): steps_of(Algorithm.RING, 7, 128, 70.0),
             (False, AG, 8192): steps_of(Algorithm.RING, 7, 1000, 20.0)}
    assert explain.data_rate_GBps(steps, False) == pytest.approx(0.05)
    assert explain.data_rate_GBps(steps, True) is None
    text = explain.losses_by_shape(rows, steps, shaped_rate_bps=10 ** 9)
    assert "at least as fast in every cell" in text[True]
    assert "wire rate 0.0500 GB/s (genie's step records; no flow limit measured)" in text[False]
    assert "1 cell(s) lost" in text[False]
    (loss,) = losses(rows, steps, {False: 0.05})
    assert loss.step_cost_us == pytest.approx((500.0 - 7 * 128 / 50) / 7)
    # the per-flow TCP limit the harness measured on the shape's testbed wins over the step records
    text = explain.losses_by_shape(rows, steps, shaped_rate_bps=10 ** 9, flow_GBps={False: 0.1})
    assert "wire rate 0.1000 GB/s (the per-flow TCP limit measured)" in text[False]
    (loss,) = explain.shape_losses(rows, steps, shaped_rate_bps=10 ** 9, flow_GBps={False: 0.1})
    assert loss.step_cost_us == pytest.approx((500.0 - 7 * 1.28) / 7)


def test_a_ring_whose_ranks_wait_once_per_iteration_is_charged_its_iteration_not_its_median_step():
    """The quiet run of 2026-12-05, unshaped 1 KiB all-gather: genie's ring (NCCL's ring/LL) 401 us against MPI's
    recursive doubling 283 us. Each rank waits for the block coming round once an iteration (one long step) and
    finds it in at its other six (8 us each): the median step record is 8 us, but the iteration is 57 us a step.
    Charged the median, the model fitted 61 of the 401 us and called 84 us of the gap genie's software; charged
    its measured time per step, the ring's 4 extra steps cost 229 us: the algorithm explains the gap, as genie
    measured with MPI's algorithm (192 us)."""
    rows = [row(GENIE, False, AG, 1024, 401.2), row(MPI, False, AG, 1024, 283.2)]
    k = 2 * 8  # iterations x ranks
    durations = (8.0,) * (6 * k) + (401.2 - 6 * 8.0,) * k
    steps = {(False, AG, 1024): GenieSteps(Algorithm.RING, 7.0, durations, (128.0,) * (7 * k))}
    (loss,) = losses(rows, steps, {False: 1.1235}, peer_like={(False, AG, 1024): 192.0})
    assert loss.step_cost_us == pytest.approx((401.2 - 7 * 128 / 1123.5) / 7)
    assert loss.algorithm_cost_us == pytest.approx(4 * loss.step_cost_us)
    assert loss.verdict == Verdict.ALGORITHM
    line = explain.explain_line(loss)
    assert "NCCL-faithful algorithm explains it: at genie's measured 57 us/step + wire (mpi's implied 94 us/step), " \
           "its 7 steps cost 229 us more than the peer's 3 >= the 118 us gap" in line
    assert "genie's software" not in line.split("; measured")[0]


def test_a_peer_faster_than_genies_data_path_is_said_so():
    rows = [row(GENIE, False, AG, 64 << 20, 3e6), row(MPI, False, AG, 64 << 20, 1e6)]
    steps = {(False, AG, 64 << 20): steps_of(Algorithm.RING, 7, (64 << 20) / 8, 3e6 / 7)}
    (loss,) = losses(rows, steps, {False: 0.02})
    assert loss.verdict == Verdict.SOFTWARE and loss.peer_step_cost_us < 0
    line = explain.explain_line(loss)
    assert "NOT the algorithm (the same steps and bytes)" in line and "faster than genie's data path" in line


def test_peer_algorithms_map_to_genies_schedules():
    """Each peer algorithm genie has a schedule of names it (the harness re-runs genie with it where it loses)."""
    from genie.collectives import build_schedule
    from genie.core.schedule import CollectiveOp

    assert peer_algorithm(MPI, AG, 1024, 8).genie_algorithm is Algorithm.HALVING_DOUBLING
    assert peer_algorithm(MPI, AG, 1 << 20, 8).genie_algorithm is Algorithm.RING
    assert peer_algorithm(MPI, AR, 16, 8).genie_algorithm is Algorithm.RECURSIVE_DOUBLING
    assert peer_algorithm(MPI, AR, 1024, 8).genie_algorithm is Algorithm.HALVING_DOUBLING
    assert peer_algorithm(MPI, A2A, 2048, 8).genie_algorithm is None  # Bruck: genie has none
    assert peer_algorithm(GLOO, AG, 1024, 8).genie_algorithm is Algorithm.RING
    # the mapped schedule has the peer's steps and bytes per step (MPICH's recursive-doubling all-gather)
    op = CollectiveOp(AG, 1024, tuple(range(8)), Algorithm.HALVING_DOUBLING, dtype_bytes=4)
    sent = [step.sent_bytes for step in build_schedule(op).for_rank(0).steps]
    assert sent == [128, 256, 512]


def test_a_lost_cell_measured_with_the_peers_algorithm_says_what_nccls_choice_cost():
    # genie's ring all-gather 1000 us; MPI (recursive doubling) 400 us; genie's halving_doubling measured 600 us
    rows = [row(GENIE, True, AG, 65536, 1000.0), row(MPI, True, AG, 65536, 400.0),
            row(GENIE, True, AR, 1024, 500.0), row(MPI, True, AR, 1024, 450.0)]
    steps = {(True, AG, 65536): steps_of(Algorithm.RING, 7, 8192, 140.0),
             (True, AR, 1024): steps_of(Algorithm.HALVING_DOUBLING, 6, 512, 80.0)}
    found = losses(rows, steps, {True: RATE})
    # the all-gather ran ring where MPI runs recursive doubling: re-run; the all-reduce is MPI's algorithm already
    assert explain.alternatives_to_run(found) == [(True, AG, 65536, Algorithm.HALVING_DOUBLING)]
    ag, ar = sorted(losses(rows, steps, {True: RATE}, peer_like={(True, AG, 65536): 600.0}),
                    key=lambda x: x.collective.value)
    line = explain.explain_line(ag)
    assert "took 600 us, so NCCL's choice (ring) cost +400 us here, 67% of the gap" in line
    # why NCCL takes ring there: its tuner's three estimates (unknown rate: a veth's 10 Gbit/s)
    assert "(NCCL's tuner at 10 Gbit/s (unknown rate): ring/LL 137.2, ring/Simple 154.2, PAT 115.2 us)" in line
    shaped = losses(rows, steps, {True: RATE}, nccl_net_GBps={True: 0.125})
    assert "ring/Simple" in explain.explain_line(shaped[0] if shaped[0].collective is AG else shaped[1])
    assert "NCCL's tuner at 1 Gbit/s: ring/LL 997.3, ring/Simple 584.3, PAT 770.6 us" in explain.explain_line(
        shaped[0] if shaped[0].collective is AG else shaped[1])
    assert "NCCL's tuner" not in explain.explain_line(ar)  # all-reduce: genie's choice is not NCCL's tuner's
    assert "still 200 us (1.50x) behind" in line
    assert "already runs mpi's algorithm (halving_doubling): the whole 50 us" in explain.explain_line(ar)
    # the peer's algorithm closes the gap: NCCL's choice cost all of it
    (ag,) = [x for x in losses(rows, steps, {True: RATE}, peer_like={(True, AG, 65536): 380.0})
             if x.collective is AG]
    assert "(>= the 600 us gap: with mpi's algorithm genie is not behind)" in explain.explain_line(ag)
    text = explain.format_losses([ag], True, RATE)
    assert "measured with the peer's algorithm: 1, of which NCCL's choice cost the whole gap in 1" in text
    # not run (the harness's --no-peer-algorithms): said so
    assert "not measured in this run" in explain.explain_line(found[0] if found[0].collective is AG else found[1])


def test_the_harness_reruns_genie_with_the_peers_algorithm_where_it_lost(monkeypatch, tmp_path):
    """run_peer_algorithms: one `genie bench --algorithm` per lost cell of the shape (not the cells genie won, nor
    one where it already ran the peer's algorithm); the times land in peer_like, a failure in problems."""
    from benchmarks.peers import run as harness
    from benchmarks.peers import systems
    from benchmarks.peers.plan import Iterations

    rows = [row(GENIE, True, AG, 1024, 700.0), row(MPI, True, AG, 1024, 400.0),  # lost, ran pat
            row(GENIE, True, AG, 4096, 300.0), row(MPI, True, AG, 4096, 400.0),  # won
            row(GENIE, True, AR, 1024, 500.0), row(MPI, True, AR, 1024, 450.0),  # lost on MPI's own algorithm
            row(GENIE, False, AG, 1024, 900.0), row(MPI, False, AG, 1024, 400.0)]  # the other shape
    steps = {(True, AG, 1024): steps_of(Algorithm.PAT, 3, 256, 200.0),
             (True, AR, 1024): steps_of(Algorithm.HALVING_DOUBLING, 6, 512, 80.0)}
    calls = []

    def fake_run_genie(info, collectives, sizes, policy, workdir, shaped, timeout_s, log, algorithm="auto",
                       **_):
        calls.append((tuple(collectives), tuple(sizes), shaped, algorithm, workdir.name))
        run = systems.SystemRun(GENIE, shaped)
        run.rows = [row(GENIE, shaped, collectives[0], sizes[0], 420.0)]
        run.error = "genie bench exited with code 1: boom"
        return run

    monkeypatch.setattr(systems, "run_genie", fake_run_genie)
    peer_like, problems = {}, []
    harness.run_peer_algorithms(None, True, tmp_path, rows, steps, [(1 << 20, Iterations(1, 5))], 60.0, peer_like,
                                problems)
    assert calls == [((AG,), (1024,), True, "halving_doubling", "all_gather-1K")]
    assert peer_like == {(True, AG, 1024): 420.0}
    assert problems == ["shaped genie --algorithm halving_doubling all_gather-1K: genie bench exited with code 1: "
                        "boom"]


def test_every_lost_cell_of_every_collective_gets_a_line_with_numbers():
    """All three collectives of the harness, both shapes: each lost cell is listed with its times and gap, and
    says whether the peer's algorithm was or can be measured (Bruck: genie has no schedule of it)."""
    rows = [row(GENIE, s, c, z, 900.0) for s in (True, False) for c in (AR, AG, A2A) for z in (1024, 4096)]
    rows += [row(MPI, s, c, z, 300.0) for s in (True, False) for c in (AR, AG, A2A) for z in (1024, 4096)]
    found = losses(rows, {}, {})
    assert len(found) == 12
    assert {(x.shaped, x.collective, x.size_bytes) for x in found} == \
        {(s, c, z) for s in (True, False) for c in (AR, AG, A2A) for z in (1024, 4096)}
    for x in found:
        line = explain.explain_line(x)
        assert "genie 900 us vs mpi 300 us (gap 600 us, 3.00x)" in line
    bruck = [x for x in found if x.collective is A2A and x.size_bytes == 1024][0]
    assert "genie has no schedule of mpi's Bruck" in explain.explain_line(bruck)
    text = explain.format_losses(found, False, None)
    assert "6 cell(s) lost" in text and "6 not modelled" in text
