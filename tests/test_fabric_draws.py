"""The fabric estimate's ECMP hash draws stop once their mean is pinned (``estimate_fabric``'s
``draw_precision``, :func:`astra_adapter.fabric.estimate.draws_enough`): the rule on hand-made draw values, the
same draws and estimate whatever the workers, the CLI's ``--draw-precision`` (pure)."""

from __future__ import annotations

import math
import statistics

import pytest

from astra_adapter.fabric.estimate import (DRAW_PRECISION, MIN_DRAWS, draw_standard_error, draws_enough,
                                           estimate_fabric, play_draws)
from astra_adapter.fabric.flows import ECMP_SAMPLES, FabricParams
from astra_adapter.fabric.network import FabricNetwork, sample_networks
from fabric_cases import fabric, moe


def _stop(values: list[int], precision: float) -> int:
    """How many of ``values`` (draws in index order) the rule plays: the first k it calls enough, else all."""
    return next((k for k in range(1, len(values) + 1) if draws_enough(values[:k], precision)), len(values))


def test_the_rule_stops_at_the_fewest_draws_when_the_spread_is_tiny():
    tiny = [84_000_000, 84_010_000, 83_990_000, 84_005_000, 83_995_000, 84_000_000, 84_002_000, 83_998_000]
    assert draw_standard_error(tiny[:2]) < DRAW_PRECISION  # enough at 2 already, but the spread needs 3 dof
    assert MIN_DRAWS == 4 and ECMP_SAMPLES == 8
    assert _stop(tiny, DRAW_PRECISION) == 4


def test_the_rule_plays_every_draw_when_the_spread_is_large_or_the_precision_is_0():
    large = [100_000, 110_000, 90_000, 105_000, 95_000, 100_000, 108_000, 92_000]
    assert _stop(large, DRAW_PRECISION) == 8
    assert not any(draws_enough(large[:k], DRAW_PRECISION) for k in range(1, 9))
    same = [5_000_000] * 8  # a standard error of 0 is within any precision but 0's
    assert _stop(same, 1e-3) == 4
    assert not any(draws_enough(same[:k], 0.0) for k in range(1, 9))


def test_the_standard_error_takes_the_sample_deviation():
    draws = [1000, 1002, 1000, 1002]  # ddof=1: 0.0577 % of the mean; ddof=0 would give 0.0500 %
    assert draw_standard_error(draws) == pytest.approx(statistics.stdev(draws) / math.sqrt(4) / 1001)
    assert not draws_enough(draws, 5.5e-4) and draws_enough(draws, 6e-4)
    assert draw_standard_error([7]) == 0.0 and draw_standard_error([]) == 0.0


def test_the_draws_stop_at_the_same_one_whatever_the_workers():
    """The stop depends on the draws' values in index order only: one worker or two (the second's draws in
    flight killed) play the same first k draws, and the estimate is their mean."""
    topology, trace = fabric(), moe(seed=9, layers=3)
    nets = sample_networks(FabricNetwork(topology), ECMP_SAMPLES)
    params = FabricParams(end_precision=1e-3)
    every = play_draws(trace, nets, params, workers=1)
    values = [t.iteration_ns for t in every]
    precision = draw_standard_error(values[:5])  # enough at 5 draws, not at 4 (the trace's draws: checked)
    assert draw_standard_error(values[:4]) > precision > 0 and _stop(values, precision) == 5

    def enough(played):
        return draws_enough([t.iteration_ns for t in played], precision)

    serial = play_draws(trace, nets, params, workers=1, enough=enough)
    forked = play_draws(trace, nets, params, workers=2, enough=enough)
    assert serial == forked == every[:5]

    full = estimate_fabric(trace, topology, draw_precision=0.0)  # its params: the estimate's ring model
    assert len(full.draw_iterations_ns) == 8 and "mean of 8 ECMP hash draws (standard error" in full.notes[0]
    values = list(full.draw_iterations_ns)
    precision = draw_standard_error(values[:5])
    assert draw_standard_error(values[:4]) > precision > 0 and _stop(values, precision) == 5
    est = estimate_fabric(trace, topology, draw_precision=precision)
    assert est.draw_iterations_ns == full.draw_iterations_ns[:5]
    assert est.ranks == estimate_fabric(trace, topology, ecmp_samples=5, draw_precision=0.0).ranks
    assert f"mean of 5 ECMP hash draws (standard error {precision * 100:.2f} % <=" in est.notes[0]


def test_the_cli_takes_the_draw_precision_and_records_it(tmp_path):
    import json
    from pathlib import Path

    from tests.cli_support import run_genie

    root = Path(__file__).resolve().parent.parent
    trace, topology = root / "traces" / "gen_moe_ep8_gpt3", root / "topologies" / "leaf-spine-2x4-oversub.yaml"
    runs = {}
    for name, precision in (("loose", "0.05"), ("all", "0"), ("default", None)):
        flag = (f"--draw-precision={precision}",) if precision is not None else ()
        done = run_genie("estimate", trace, "--topology", topology, *flag, "--out", tmp_path / name, cwd=root)
        assert done.returncode == 0, done.stderr
        runs[name] = done.stdout
    params = [json.loads((tmp_path / d / "manifest.json").read_text())["params"] for d in ("loose", "all", "default")]
    assert [p["draw_precision"] for p in params] == [0.05, 0.0, DRAW_PRECISION]
    assert "mean of 4 ECMP hash draws (standard error" in runs["loose"] and "<= 5 %" in runs["loose"]
    assert "mean of 8 ECMP hash draws (standard error" in runs["all"]  # the draws spread by % here: all 8
    assert "mean of 8 ECMP hash draws (standard error" in runs["default"] and "> 0.1 %: all 8" in runs["default"]
    for bad in ("1.5", "-0.1"):
        done = run_genie("estimate", trace, "--topology", topology, f"--draw-precision={bad}", "--out",
                         tmp_path / "bad", cwd=root)
        assert done.returncode == 2 and "--draw-precision" in done.stderr and done.stderr.count("\n") == 1
        assert not (tmp_path / "bad").exists()


_STOP_EARLY = """
import time
from astra_adapter.fabric.estimate import fork_map

def square_or_hang(state, k):
    if k >= 2:
        time.sleep(3600)  # a draw in flight when the first two are enough
    return state * k * k

print(fork_map(square_or_hang, 1, 6, 2, enough=lambda done: len(done) == 2))
"""


def test_enough_results_end_the_map_and_kill_the_calls_in_flight():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _STOP_EARLY], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[0, 1]"]
