"""Issue #18: an --out genie cannot write, or one already holding files, is refused before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.report.manifest import RunRecorder
from genie.report.rundir import check_run_dir
from tests.hostile_support import assert_refused, run_cli, tree

TRACE = "format: genie-trace\nranks: 2\nprogram: [{id: 1, type: compute, duration: 1us}]\n"


def _outs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    afile = tmp_path / "afile"
    afile.write_text("x")
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    return {"existing file": (afile, "it exists and is not a directory"),
            "under a file": (afile / "run", "afile is not a directory"),
            "proc": (Path("/proc/genie-x/run"), "cannot use /proc/genie-x/run as the run directory"),
            "not empty": (full, "it is not empty (give --force")}


@pytest.mark.parametrize("case", ["existing file", "under a file", "proc", "not empty"])
@pytest.mark.parametrize("command", [["bench", "--loopback", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0"],
                                     ["replay", "{trace}", "--loopback"]])
def test_an_unusable_out_is_refused_before_the_run(tmp_path: Path, command: list[str], case: str) -> None:
    trace = tmp_path / "t.yaml"
    trace.write_text(TRACE)
    out, message = _outs(tmp_path)[case]
    before = tree(tmp_path)
    outcome = run_cli([a.format(trace=trace) for a in command] + ["--out", str(out)])
    assert_refused(outcome, "--out: ", message, max_lines=1)
    assert tree(tmp_path) == before


def test_force_writes_into_a_directory_that_holds_files(tmp_path: Path) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    outcome = run_cli(["bench", "--loopback", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "--out", str(full),
                       "--force"])
    assert outcome.code == 0, outcome.stderr
    assert (full / "notes.txt").read_text() == "mine" and (full / "manifest.json").exists()


def test_an_empty_existing_out_is_used(tmp_path: Path) -> None:
    check_run_dir(tmp_path)
    with RunRecorder("bench", out=tmp_path) as run:
        run.write("a.txt", "a")
    assert (tmp_path / "a.txt").exists()


def test_a_read_only_out_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into a mode-555 directory")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    with pytest.raises(InputError, match="it is not writable"):
        check_run_dir(ro)


def test_trace_gen_into_an_unwritable_place_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    outcome = run_cli(["trace", "gen", "--model", "resnet50", "--dp", "2", "--to", "json", "--out", str(afile / "t.json")])
    assert_refused(outcome, "cannot write", "afile/t.json", max_lines=1)
