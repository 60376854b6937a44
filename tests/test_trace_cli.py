"""`genie trace convert|show|validate` end to end, through `genie.cli.main` in-process: output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import run_genie

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "data" / "astra-reference"
SAMPLE = ROOT / "traces" / "tp2_dp2_step.yaml"


def test_show_validate_convert(tmp_path: Path) -> None:
    shown = run_genie("trace", "show", SAMPLE)
    assert shown.returncode == 0, shown.stderr
    assert "ranks: 4" in shown.stdout and "reduce_scatter" in shown.stdout and "critical path" in shown.stdout
    ok = run_genie("trace", "validate", SAMPLE)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: 4 ranks")
    conv = run_genie("trace", "convert", SAMPLE, tmp_path / "w", "--to", "et")
    assert conv.returncode == 0, conv.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.0.et", "w.1.et", "w.2.et", "w.3.et",
                                                          "w.comm_group.json"]
    back = run_genie("trace", "convert", tmp_path / "w", tmp_path / "w.json", "--to", "json")
    assert back.returncode == 0 and json.loads((tmp_path / "w.json").read_text())["format"] == "genie-trace"


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference data not found")
def test_reference_case_directory() -> None:
    shown = run_genie("trace", "show", REFERENCE / "cc_trainstep_L4_f50us_b100us_ar4MB_8npus_ring")
    assert shown.returncode == 0, shown.stderr
    assert "ranks: 8" in shown.stdout and "600.000 us" in shown.stdout


def test_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    data = (tmp_path / "w.0.et")
    good = run_genie("trace", "convert", SAMPLE, tmp_path / "w", "--to", "et")
    assert good.returncode == 0
    data.write_bytes(data.read_bytes()[:-3])
    bad = run_genie("trace", "show", tmp_path / "w")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "w.0.et" in bad.stderr and "byte offset" in bad.stderr
    assert "Traceback" not in bad.stderr
    cyc = tmp_path / "cycle.yaml"
    cyc.write_text("format: genie-trace\nranks: 1\nprogram:\n - {id: 0, deps: [1]}\n - {id: 1, deps: [0]}\n")
    res = run_genie("trace", "validate", cyc)
    assert res.returncode == 2 and "cycle" in res.stderr
    res = run_genie("trace", "convert", cyc, tmp_path / "c.json", "--to", "json")
    assert res.returncode == 2 and not (tmp_path / "c.json").exists()
    res = run_genie("trace", "convert", SAMPLE, tmp_path / "x", "--to", "csv")
    assert res.returncode == 2 and "unknown output format" in res.stderr
    assert run_genie("trace", "show", tmp_path / "nothing").returncode == 2
