"""Issue #35 item 6: a dependency on a node that does not exist is refused in genie's own trace formats (a typo,
named), and where it is tolerated on purpose (Chakra converter output) replay says so and records it."""

from __future__ import annotations

import json
from pathlib import Path

from genie.core.trace import compute_node, make_trace
from genie.workloads.chakra_et import write_et_set
from tests.hostile_support import assert_refused, run_cli

TYPO_TRACE = ("format: genie-trace\nranks: 2\nprogram:\n  - {id: 1, type: compute, duration: 1us}\n"
              "  - {id: 2, type: compute, duration: 1us, deps: [7]}\n")


def test_replay_refuses_a_native_trace_with_a_dependency_on_a_missing_node(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(TYPO_TRACE)
    outcome = run_cli(["replay", str(tmp_path / "t.yaml"), "--loopback", "-n", "1", "--out", str(tmp_path / "run")])
    assert_refused(outcome, "t.yaml", "node 2", "missing node 7", max_lines=1)
    assert not (tmp_path / "run").exists()


def test_trace_validate_refuses_it_too(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(TYPO_TRACE)
    outcome = run_cli(["trace", "validate", str(tmp_path / "t.yaml")])
    assert outcome.code != 0 and "missing node 7" in outcome.stdout + outcome.stderr
    assert "Traceback" not in outcome.stderr


def test_replay_of_chakra_output_warns_and_records_the_missing_dependencies(tmp_path: Path) -> None:
    # Chakra's converter removes node 0 but keeps `ctrl_deps: [0]` on each thread root
    trace = make_trace([[compute_node(1, "root", duration_ns=1000, ctrl_deps=(0,)),
                         compute_node(2, "a", duration_ns=1000, data_deps=(1,))]] * 2)
    write_et_set(trace, tmp_path / "w")
    outcome = run_cli(["replay", str(tmp_path / "w"), "--loopback", "-n", "1", "--warmup", "0",
                       "--out", str(tmp_path / "run")])
    assert outcome.code == 0, outcome.stderr[-2000:]
    warned = [line for line in outcome.error_lines if line.startswith("warning: ")]
    assert len(warned) == 1 and "dangling_dependency: 2 warning(s)" in warned[0] and "missing node 0" in warned[0]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert any("missing node 0" in w for w in manifest["warnings"])


def _experiment(tmp_path: Path, trace: str) -> Path:
    root = Path(__file__).resolve().parents[1]
    spec = tmp_path / "exp.yaml"
    spec.write_text(f"name: deps\nworkload: {{trace: {trace}}}\ntopology: {root}/topologies/star-4.yaml\n"
                    "sweep: {iterations: 3, warmup: 1, grid: [64KiB]}\nreplay: {iterations: 2, warmup: 1}\n")
    return spec


def test_experiment_refuses_the_typo_and_carries_chakras_warnings(tmp_path: Path) -> None:
    import pytest

    from astra_adapter.experiment import prepare
    from astra_adapter.experiment_spec import load_experiment
    from genie.core.errors import InputError

    (tmp_path / "t.yaml").write_text(TYPO_TRACE.replace("ranks: 2", "ranks: 4"))
    with pytest.raises(InputError, match="t.yaml: rank 0 node 2: depends on missing node 7"):
        prepare(load_experiment(_experiment(tmp_path, "t.yaml")))
    trace = make_trace([[compute_node(1, "root", duration_ns=1000, ctrl_deps=(0,))]] * 4)
    write_et_set(trace, tmp_path / "w")
    prepared = prepare(load_experiment(_experiment(tmp_path, "w")))
    assert len(prepared.warnings) == 1 and "dangling_dependency: 4 warning(s)" in prepared.warnings[0]
