"""`genie experiment` end to end on a live 4-host star (root only): sweep, replay, calibrate, estimate, compare,
and nothing of the testbed left afterwards."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from astra_adapter.experiment_spec import load_experiment
from astra_adapter.measurements import read_measurements
from genie.services.experiment import ExperimentCommand, run_experiment_command
from genie.services.options import RunOptions
from genie.testbed.layout import NETNS_DIR
from genie.testbed.state import STATE_DIR_ENV
from netns_checks import root_namespace_snapshot
from test_experiment import write_dumbbell, write_tiny

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_ADMIN) to build namespaces")]


def _ours() -> list[str]:
    names = os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else []
    return [n for n in names if n.startswith(f"genie-tmp{os.getpid()}-")]


def test_tiny_experiment_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    before = root_namespace_snapshot()
    spec = load_experiment(write_tiny(tmp_path, "rounds: 2\n"))
    messages: list[str] = []
    result = run_experiment_command(ExperimentCommand(spec, RunOptions(out=tmp_path / "run")), messages.append)
    assert _ours() == [] and root_namespace_snapshot() == before
    assert messages[0].startswith("bringing up") and messages[-1] == "tearing down"
    out = tmp_path / "run"
    for name in ("sweep.csv", "sweep_detail.csv", "calibration.json", "calibration.csv", "estimate-measured.csv",
                 "estimate-calibrated.csv", "accuracy.csv", "summary.txt", "replay/ops.csv", "astra/system.json",
                 "astra/workload/workload.0.et"):
        assert (out / name).is_file(), name
    rows = list(csv.DictReader((out / "accuracy.csv").open()))
    assert [r["mode"] for r in rows] == ["measured", "calibrated"]
    measured_s = float(rows[0]["measured_s"])
    assert measured_s > 0.003  # at least the trace's compute (3 ms)
    assert len(result.replay_iteration_ns) == 2 and len(result.measurements) == 4  # 1 + 1 replay iterations
    assert sum(m.startswith("round ") for m in messages) == 4
    assert {r["iterations"] for r in csv.DictReader((out / "sweep.csv").open())} == {"4"}  # 2 + 2, pooled
    back = read_measurements([out])  # what `genie estimate --measurements` sees: groups and iterations
    assert [m.time_us for m in back] == pytest.approx([m.time_us for m in result.measurements], rel=1e-6)
    assert all(len(m.iterations_us) == 4 and m.groups for m in back)
    # the measured mode plays the trace with its own measured ops: within a factor of the replay
    assert 0.5 < float(rows[0]["estimated_s"]) / measured_s < 2.0


def test_an_unmappable_topology_runs_with_the_fabric_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two switches joined by one 500 Mbit/s link (no ASTRA-sim mapping): brought up, swept, replayed; the
    measured and fabric rows, no ASTRA-sim calibration; nothing left behind."""
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    before = root_namespace_snapshot()
    result = run_experiment_command(ExperimentCommand(load_experiment(write_dumbbell(tmp_path)),
                                                      RunOptions(out=tmp_path / "run")))
    assert _ours() == [] and root_namespace_snapshot() == before
    assert [r.mode for r in result.accuracy] == ["measured", "fabric"] and result.calibration is None
    assert (tmp_path / "run" / "fabric_calibration.json").is_file()
    assert not (tmp_path / "run" / "calibration.json").exists()
    fabric = result.accuracy[1]
    assert fabric.estimated_s > 0.003 and 0.25 < fabric.estimated_s / fabric.measured_s < 4  # a model, not noise


def test_a_job_mix_experiment_runs_on_a_testbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two 2-rank jobs across the dumbbell's 500 Mbit/s link (issue #34 item 1): swept, each job replayed alone
    and together, estimated per job by the fitted fabric model; nothing left behind."""
    from test_experiment_mix import write_mix_experiment

    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    before = root_namespace_snapshot()
    result = run_experiment_command(ExperimentCommand(load_experiment(write_mix_experiment(tmp_path)),
                                                      RunOptions(out=tmp_path / "run")))
    assert _ours() == [] and root_namespace_snapshot() == before
    assert [r.name for r in result.jobs] == ["a", "b"] and "sw0->sw1" in result.shared_links
    for r in result.jobs:
        assert r.measured_alone_ns > 1e6 and r.measured_slowdown_pct is not None
        assert 0.25 < r.estimated_together_ns / r.measured_together_ns < 4  # a model, not noise
    assert all((tmp_path / "run" / name).is_file() for name in ("jobs_accuracy.csv", "fabric_calibration.json"))
