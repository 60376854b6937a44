"""Issue #18: a replay that fails after some iterations keeps the iterations it finished (ops.csv, ranks.csv,
replay.json written, atomically, after each one), and its manifest says it failed."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from genie.core.errors import RunFailure
from genie.engine.inprocess import thread_sessions
from tests.hostile_support import run_cli

ROOT = Path(__file__).resolve().parents[1]


def _failing_after(finished: int):
    """A session factory (ranks as threads) whose run fails once `finished` timed iterations are reported."""
    inner = thread_sessions()

    def factory(placements, options):
        session = inner(placements, options)
        real_run = session.run

        def run(job, on_case=None):
            def counted(index, per_rank):
                on_case(index, per_rank)
                if index + 1 >= finished:
                    raise RunFailure("rank 1 died (simulated)")
            return real_run(job, on_case=counted)

        session.run = run
        return session

    return lambda _launcher=None: factory


def _iterations(run_dir: Path, name: str) -> set[int]:
    rows = csv.DictReader(io.StringIO((run_dir / name).read_text()))
    return {int(row["iteration"]) for row in rows}


def test_a_replay_that_fails_keeps_its_finished_iterations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genie.engine import session  # the replay service imports it when a replay runs

    monkeypatch.setattr(session, "local_sessions", _failing_after(2))
    out = tmp_path / "run"
    outcome = run_cli(["replay", str(ROOT / "traces" / "tp2_dp2_step.yaml"), "--loopback", "-n", "5",
                       "--out", str(out)])
    assert outcome.code != 0 and "rank 1 died" in outcome.stderr, outcome.stderr
    assert "Traceback" not in outcome.stderr
    assert _iterations(out, "ops.csv") == {0, 1}
    assert _iterations(out, "ranks.csv") == {0, 1}
    doc = json.loads((out / "replay.json").read_text())
    assert doc["iteration_median_ns"] > 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert {"ops.csv", "ranks.csv", "replay.json"} <= {f["name"] for f in manifest["files"]}
    assert not list(out.glob(".*"))  # no temporary file left beside them


def test_the_next_run_marks_a_killed_runs_manifest_interrupted(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from genie.report.manifest import RunRecorder, read_manifest

    killed = subprocess.run([sys.executable, "-c", "import os, signal\nfrom pathlib import Path\n"
                             "from genie.report.manifest import RunRecorder\n"
                             f"with RunRecorder('bench', root=Path({str(tmp_path)!r})) as run:\n"
                             "    run.write('sweep.csv', 'size\\n1024\\n')\n"
                             "    os.kill(os.getpid(), signal.SIGKILL)\n"])
    assert killed.returncode == -signal.SIGKILL
    (old,) = list(tmp_path.iterdir())
    assert read_manifest(old).status.value == "running"
    with RunRecorder("bench", root=tmp_path) as run:
        assert read_manifest(old).status.value == "interrupted"
        assert "ended without finishing" in (read_manifest(old).error or "")
        assert read_manifest(old).file_names() == ("sweep.csv",)
        assert read_manifest(run.run_dir).status.value == "running"  # a live run is left alone
    assert os.path.exists(old / "sweep.csv")
