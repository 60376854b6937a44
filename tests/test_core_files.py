"""genie.core.files.write_atomic: modes from the umask, the old content after a failed write, exclusive creation;
run directories and testbed state records follow the umask too."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from genie.core.files import write_atomic
from genie.report.rundir import new_run_dir


@contextmanager
def _umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700),
                                                       (0o002, 0o664, 0o775)])
def test_files_and_run_directories_get_the_umask(tmp_path: Path, mask: int, file_mode: int, dir_mode: int) -> None:
    with _umask(mask):
        written = write_atomic(tmp_path / "new" / "a.csv", "x,y\n")
        replaced = write_atomic(tmp_path / "new" / "a.csv", b"x,y\n1,2\n")
        exclusive = write_atomic(tmp_path / "b.json", "{}", exclusive=True)
        run = new_run_dir("bench", root=tmp_path / "runs")
        given = new_run_dir("bench", out=tmp_path / "given" / "run")
    assert written == replaced == tmp_path / "new" / "a.csv" and replaced.read_bytes() == b"x,y\n1,2\n"
    assert _mode(replaced) == file_mode and _mode(exclusive) == file_mode
    assert _mode(tmp_path / "new") == dir_mode  # the parent write_atomic made
    assert _mode(run) == _mode(tmp_path / "runs") == dir_mode
    assert _mode(given) == _mode(tmp_path / "given") == dir_mode
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["a.csv"]  # no temporary file left


def test_the_old_content_survives_a_failure_mid_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = write_atomic(tmp_path / "sweep.csv", "old\n")

    def disk_full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "new content that never lands\n")
    with pytest.raises(OSError, match="No space left"):
        write_atomic(tmp_path / "fresh.csv", "never\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.csv"]  # neither a temporary nor a half file


def test_exclusive_refuses_an_existing_file_and_keeps_it(tmp_path: Path) -> None:
    target = write_atomic(tmp_path / "t.json", "first")
    with pytest.raises(FileExistsError):
        write_atomic(target, "second", exclusive=True)
    assert target.read_text() == "first" and [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_testbed_state_records_follow_the_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genie.testbed.plan import build_plan
    from genie.testbed.state import STATE_DIR_ENV, TestbedRecord, create_record, record_path, save_record
    from genie.testbed.steps import Shaper
    from genie.topology import ring

    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    plan = build_plan(ring(3), "modes", netem_available=False)
    record = TestbedRecord(plan.info, plan.steps, 0, False, Shaper.KERNEL, os.getpid())
    with _umask(0o022):
        create_record(record)
        assert _mode(record_path("modes")) == 0o644 and _mode(tmp_path / "state") == 0o755
    with _umask(0o077):
        save_record(record)
    assert _mode(record_path("modes")) == 0o600
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["modes.json"]
