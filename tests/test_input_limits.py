"""Issue #18: inputs that never end, are huge or expand without end are refused before they are read whole
(every case runs under a memory cap and a timeout, so a regression fails here instead of taking CI down)."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.core.files import InputKind, gunzip_input, read_input
from tests.hostile_support import assert_refused, run_capped, tree


@pytest.fixture()
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "input.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("argv, label", [
    (["testbed", "up", "/dev/zero", "--dry-run"], "topology file"),
    (["experiment", "/dev/zero"], "experiment file"),
    (["trace", "show", "/dev/zero"], "trace file"),
    (["bench", "--inventory", "/dev/zero", "--launcher", "mpi"], "inventory file"),
])
def test_dev_zero_is_refused_before_a_byte_is_read(tmp_path: Path, argv: list[str], label: str) -> None:
    outcome = run_capped(argv, cwd=tmp_path)
    assert_refused(outcome, "/dev/zero", f"cannot read {label}: not a regular file (a character device)",
                   max_lines=1)
    assert tree(tmp_path) == set()


@pytest.mark.parametrize("argv, label", [
    (["testbed", "up", "{fifo}", "--dry-run"], "topology file"),
    (["bench", "--loopback", "--faults", "{fifo}"], "faults file"),
    (["replay", "{fifo}", "--loopback"], "trace file"),
])
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path, fifo: Path, argv: list[str],
                                                         label: str) -> None:
    outcome = run_capped([a.format(fifo=fifo) for a in argv], cwd=tmp_path, timeout_s=30)
    assert_refused(outcome, str(fifo), f"cannot read {label}: not a regular file (a FIFO)", max_lines=1)
    assert tree(tmp_path) == {fifo.name}


def test_a_50_mb_host_list_is_refused_at_once_with_the_limit(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    line = b"  - {name: host%07d, address: 198.18.0.1, ranks: 1}\n"
    with open(inventory, "wb") as f:
        f.write(b"hosts:\n")
        for start in range(0, 1_000_000, 10_000):
            f.write(b"".join(line % n for n in range(start, start + 10_000)))
    assert inventory.stat().st_size > 50_000_000
    outcome = run_capped(["bench", "--inventory", str(inventory), "--launcher", "mpi"], cwd=tmp_path)
    assert_refused(outcome, "inventory.yaml: inventory file", "larger than the 8 MiB genie reads", max_lines=1)
    assert outcome.elapsed_s < 30  # refused from its size, not after parsing it (was 246 s and 3.2 GB)


def test_a_file_growing_while_it_is_read_stops_at_the_limit(tmp_path: Path) -> None:
    """The size check and the bounded read are separate: a file larger than it said is cut off too."""
    path = tmp_path / "t.yaml"
    path.write_bytes(b"x" * (InputKind.EXPERIMENT.limit_bytes + 1))
    with pytest.raises(InputError, match=r"t\.yaml: experiment file \(1048577 bytes\) is larger than the 1 MiB"):
        read_input(path, InputKind.EXPERIMENT)
    assert read_input(path, InputKind.TRACE, head_bytes=10) == b"x" * 10


def test_a_gzip_bomb_is_refused_once_it_passes_the_trace_limit(tmp_path: Path) -> None:
    member = zlib.compress(bytes(8 << 20), 9, wbits=16 + zlib.MAX_WBITS)  # gzip members may be concatenated
    bomb = tmp_path / "bomb.0.et"
    bomb.write_bytes(member * (InputKind.TRACE.limit_bytes // (8 << 20) + 2))
    assert bomb.stat().st_size < 2 * 1024 * 1024
    outcome = run_capped(["trace", "show", str(bomb)], cwd=tmp_path)
    assert_refused(outcome, "bomb.0.et: the gunzipped trace file is larger than the 512 MiB", max_lines=1)


def test_gunzip_input_reads_several_members_and_refuses_truncated_data() -> None:
    data = zlib.compress(b"abc", wbits=16 + zlib.MAX_WBITS) * 2
    assert gunzip_input(data, InputKind.TRACE, "t.et") == b"abcabc"
    with pytest.raises(InputError, match="t.et: corrupt gzip data"):
        gunzip_input(data[:10], InputKind.TRACE, "t.et")


def test_an_unreadable_trace_is_an_input_error_not_a_traceback(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads a mode-000 file")
    trace = tmp_path / "t.json"
    trace.write_text('{"format": "genie-trace"}')
    trace.chmod(0)
    outcome = run_capped(["trace", "show", str(trace)], cwd=tmp_path)
    assert_refused(outcome, "t.json: cannot read trace file: Permission denied", max_lines=1)
