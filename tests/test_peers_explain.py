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
    assert "the other 560 us is genie's software" in line
    # the same algorithm on both sides: nothing to blame on it
    rows = [row(GENIE, False, A2A, 4 << 20, 9000.0), row(MPI, False, A2A, 4 << 20, 8000.0)]
    steps = {(False, A2A, 4 << 20): steps_of(Algorithm.DIRECT, 1, 7 * (1 << 19), 9000.0)}
    steps_pairwise = losses(rows, steps, {False: RATE})[0]
    assert steps_pairwise.peer_algorithm == "pairwise exchange" and steps_pairwise.verdict == Verdict.SOFTWARE
    assert "NOT the algorithm" in explain.explain_line(steps_pairwise)


def test_cells_genie_wins_or_ties_are_not_listed_and_missing_records_say_so():
    rows = [row(GENIE, True, AR, 1024, 100.0), row(MPI, True, AR, 1024, 100.0),
            row(GENIE, True, AR, 4096, 300.0), row(GLOO, True, AR, 4096, 200.0)]
    (loss,) = losses(rows, {}, {True: RATE})
    assert loss.size_bytes == 4096 and loss.verdict == Verdict.UNKNOWN
    assert "not explained" in explain.explain_line(loss)


def test_steps_from_csv_counts_steps_and_bytes():
    text = "collective,algorithm,size_bytes,iteration,rank,step,peers,sent_bytes,received_bytes,start_ns,end_ns\n"
    for it in range(2):
        for rank in range(2):
            for step in range(3):
                text += f"all_gather,ring,1024,{it},{rank},{step},1 7,128,256,{1000 * step},{1000 * step + 5000}\n"
    (key, rec), = steps_from_csv(text).items()
    assert key == (AG, 1024) and rec.algorithm is Algorithm.RING and rec.steps_per_iteration == 3
    assert rec.durations_us == (5.0,) * 12 and rec.step_bytes == (256.0,) * 12
    assert rec.step_cost_us(RATE) == pytest.approx(5.0 - 2.56)


def test_losses_by_shape_at_genies_own_data_rate():
    rows = [row(GENIE, False, AG, 1024, 500.0), row(MPI, False, AG, 1024, 100.0),
            row(GENIE, True, AG, 1024, 50.0), row(MPI, True, AG, 1024, 100.0)]
    # the largest case's steps move 1000 B in 20 us: 0.05 GB/s, the rate the 1 KiB case's wire time is taken at
    steps = {(False, AG, 1024): steps_of(Algorithm.RING, 7, 128, 70.0),
             (False, AG, 8192): steps_of(Algorithm.RING, 7, 1000, 20.0)}
    assert explain.data_rate_GBps(steps, False) == pytest.approx(0.05)
    assert explain.data_rate_GBps(steps, True) is None
    text = explain.losses_by_shape(rows, steps, shaped_rate_bps=10 ** 9)
    assert "at least as fast in every cell" in text[True]
    assert "data rate 0.0500 GB/s" in text[False] and "1 cell(s) lost" in text[False]
    (loss,) = losses(rows, steps, {False: 0.05})
    assert loss.step_cost_us == pytest.approx(70.0 - 128 / 50)


def test_a_peer_faster_than_genies_data_path_is_said_so():
    rows = [row(GENIE, False, AG, 64 << 20, 3e6), row(MPI, False, AG, 64 << 20, 1e6)]
    steps = {(False, AG, 64 << 20): steps_of(Algorithm.RING, 7, (64 << 20) / 8, 3e6 / 7)}
    (loss,) = losses(rows, steps, {False: 0.02})
    assert loss.verdict == Verdict.SOFTWARE and loss.peer_step_cost_us < 0
    line = explain.explain_line(loss)
    assert "NOT the algorithm (the same steps and bytes)" in line and "faster than genie's data path" in line
