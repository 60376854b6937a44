"""`genie experiment` with a real cluster's NCCL calibration (`estimate.nccl_calibration` / `--calibration`): the
trace also estimated by the NCCL model on the experiment's topology, compared with the same replay; a calibration
that cannot be used is refused before anything is brought up."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from astra_adapter.experiment import prepare
from astra_adapter.experiment_spec import load_experiment
from astra_adapter.nccl.experiment import nccl_reference
from cli_support import run_genie
from genie.core.errors import InputError
from test_experiment import write_tiny

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "real-nccl"
G5 = DATA / "aws-batch-g5-a10g-2node-eth-socket"  # 1 GPU per node, like star-4's hosts
DGX = DATA / "nvidia-dgxc-dgxh100-8gpu-1node"  # 8 GPUs per node


def _calibrate(case: Path, run: str, out: Path) -> Path:
    done = run_genie("calibrate", str(case / run), "--topology", str(case / "topology.yaml"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def g5_calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _calibrate(G5, "all_reduce-2r.txt", tmp_path_factory.mktemp("g5") / "cal")


def test_the_spec_takes_a_calibration_and_the_reference_is_the_nccl_estimate(tmp_path: Path, g5_calibration: Path):
    spec = load_experiment(write_tiny(tmp_path, f"estimate: {{nccl_calibration: {g5_calibration}}}\n"))
    assert spec.nccl_calibration == g5_calibration
    reference, file = nccl_reference(prepare(spec), spec.nccl_calibration)
    assert file == g5_calibration / "nccl_calibration.json"
    # the tiny trace: a 256 KiB all-reduce on each pair (two of them, one per pair group) and a 1 MiB one on all
    kinds = {(c.prediction.call.ranks, c.prediction.call.size_bytes): c.ops for c in reference.choices}
    assert kinds == {(2, 256 * 1024): 2, (4, 1 << 20): 1}
    # the NIC (25 Gbit/s in the calibration, 1 Gbit/s on star-4) is scaled: the note says so
    assert any("NIC bandwidth scaled" in n and "star-4" in n for n in reference.estimate.notes)
    # iteration: 2 ms + the pair all-reduce + 1 ms + the 4-rank all-reduce (compute and the ops in series)
    pair = next(c for c in reference.choices if c.prediction.call.ranks == 2).prediction.time_us
    world = next(c for c in reference.choices if c.prediction.call.ranks == 4).prediction.time_us
    assert reference.estimate.iteration_ns == pytest.approx(3e6 + (pair + world) * 1e3, rel=1e-6)


def test_a_calibration_of_other_nodes_is_refused_naming_the_field(tmp_path: Path):
    cal = _calibrate(DGX, "all_reduce-8r.txt", tmp_path / "dgx")
    spec = load_experiment(write_tiny(tmp_path, f"estimate: {{nccl_calibration: {cal}}}\n"))
    with pytest.raises(InputError, match="8 GPUs; star-4 has 1 per node"):
        nccl_reference(prepare(spec), spec.nccl_calibration)


def test_cli_refuses_a_missing_calibration_before_bringing_anything_up(tmp_path: Path):
    spec = write_tiny(tmp_path)
    done = run_genie("experiment", str(spec), "--calibration", str(tmp_path / "nowhere"),
                     "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "no nccl_calibration.json" in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_bad_spec_value_names_the_key(tmp_path: Path):
    spec = write_tiny(tmp_path, "estimate: {nccl_calibration: 3}\n")
    done = run_genie("experiment", str(spec), "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and "estimate.nccl_calibration: expected a path" in done.stderr


def test_the_experiment_compares_the_nccl_estimate_with_the_replay(tmp_path: Path, g5_calibration: Path):
    """The whole path on loopback: the NCCL row beside the testbed-calibrated ones, its files in the manifest."""
    from genie.services.experiment import ExperimentCommand, run_experiment_command
    from genie.services.options import RunOptions
    from astra_adapter.experiment import format_summary

    spec = load_experiment(write_tiny(tmp_path, f"estimate: {{nccl_calibration: {g5_calibration}}}\n"))
    messages: list[str] = []
    result = run_experiment_command(ExperimentCommand(spec, RunOptions(loopback=True, out=tmp_path / "run")),
                                    messages.append)
    run = tmp_path / "run"
    assert [r.mode for r in result.accuracy] == ["measured", "calibrated", "nccl"]
    assert [r.mode for r in result.best_of][-1] == "nccl"
    nccl = result.accuracy[-1]
    assert nccl.estimated_s == pytest.approx(result.estimates[-1].iteration_ns / 1e9)
    assert nccl.measured_s == result.accuracy[0].measured_s
    manifest = json.loads((run / "manifest.json").read_text())
    listed = {f["name"] for f in manifest["files"]}
    assert {"estimate-nccl.csv", "nccl_choices.csv", "accuracy.csv"} <= listed
    assert [i["role"] for i in manifest["inputs"]][-1] == "calibration"
    with open(run / "accuracy.csv", newline="") as f:
        assert [row["mode"] for row in csv.DictReader(f)] == ["measured", "calibrated", "nccl"]
    with open(run / "nccl_choices.csv", newline="") as f:
        assert sorted(int(row["ranks"]) for row in csv.DictReader(f)) == [2, 4]
    summary = format_summary(result)
    assert "# nccl: NCCL model calibrated on g5-2node" in summary
    assert json.loads((run / "experiment.json").read_text())["nccl_calibration"] == str(g5_calibration)
    assert any(m.startswith("NCCL model with") for m in messages)
