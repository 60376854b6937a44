"""`genie astra simulate|parse|run` and the ASTRA-sim binary runner (with a stand-in binary)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from astra_adapter.runner import run_astra_binary
from cli_support import run_genie
from genie.core.errors import EnvironmentProblem, GenieError, InputError

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "data" / "astra-reference"
needs_reference = pytest.mark.skipif(not REFERENCE.is_dir(), reason="ASTRA-sim reference data not found")
CASE = REFERENCE / "cc_trainstep_L4_f50us_b100us_ar4MB_8npus_ring"


def _lines(text: str) -> list[str]:
    return [re.sub(r"^\[[^\]]*\] ", "", line) for line in text.splitlines()]


@needs_reference
def test_simulate_is_a_drop_in_for_the_binary(tmp_path: Path) -> None:
    """ASTRA-sim's own command line (cmd.sh), run from the case directory."""
    command = (CASE / "cmd.sh").read_text().splitlines()[2].split(">")[0].split()[1:]
    done = run_genie("astra", "simulate", *command, "--out", tmp_path, cwd=CASE)
    assert done.returncode == 0, done.stderr
    assert _lines(done.stdout) == _lines((CASE / "stdout_congestion_unaware.txt").read_text())
    rows = (tmp_path / "estimate.csv").read_text().splitlines()
    assert rows[0] == "rank,finish_cycles,exposed_comm_cycles,comm_time,gpu_time,overlap"
    assert rows[1:] == [f"{r},988400,388400,688400,600000,300000" for r in range(8)]


@needs_reference
def test_parse_writes_estimate_csv(tmp_path: Path) -> None:
    done = run_genie("astra", "parse", CASE / "stdout_congestion_unaware.txt", "--out", tmp_path, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "8 ranks, max finish 988400 cycles" in done.stdout
    assert (tmp_path / "estimate.csv").read_text().splitlines()[1] == "0,988400,388400,688400,600000,300000"


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text("Segmentation fault\n")
    done = run_genie("astra", "parse", log, "--out", tmp_path / "out", cwd=ROOT)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "genie: error:" in done.stderr
    assert not (tmp_path / "out").exists()
    net = tmp_path / "net.yml"
    net.write_text("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ -5 ]\n")
    sys_json = tmp_path / "sys.json"
    sys_json.write_text('{"preferred-dataset-splits": 4}')
    done = run_genie("astra", "simulate", "--workload-configuration=w", f"--system-configuration={sys_json}",
                     f"--network-configuration={net}", "--out", tmp_path / "o2", cwd=ROOT)
    assert done.returncode == 2 and "latency[0]" in done.stderr and not (tmp_path / "o2").exists()


def _fake_binary(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "fake_astra"
    exe.write_text(f"#!{sys.executable}\nimport sys, json\n" + body)
    exe.chmod(0o755)
    return exe


def _configs(tmp_path: Path) -> tuple[Path, Path, Path]:
    files = (tmp_path / "system.json", tmp_path / "network.yml", tmp_path / "remote_memory.json")
    for f in files:
        f.write_text("{}")
    return files


def test_runner_parses_the_binary_output(tmp_path: Path) -> None:
    exe = _fake_binary(tmp_path, (
        "open(sys.argv[0] + '.argv', 'w').write(json.dumps(sys.argv[1:]))\n"
        "print('[t] [workload] [info] sys[1] finished, 70 cycles, exposed communication 20 cycles.')\n"
        "print('[t] [statistics] [info] sys[1], Wall time: 70')\n"
        "print('[t] [workload] [info] sys[0] finished, 50 cycles, exposed communication 50 cycles.')\n"))
    system, net, mem = _configs(tmp_path)
    done = run_astra_binary(exe, "work/prefix", system, net, mem, comm_group=tmp_path / "groups.json")
    assert [r.rank for r in done.result.by_rank()] == [0, 1] and done.result.max_finish_cycles == 70
    assert json.loads(Path(str(exe) + ".argv").read_text()) == [
        "--workload-configuration=work/prefix", f"--system-configuration={system}",
        f"--network-configuration={net}", f"--remote-memory-configuration={mem}",
        f"--comm-group-configuration={tmp_path / 'groups.json'}"]


def test_runner_failures(tmp_path: Path) -> None:
    system, net, mem = _configs(tmp_path)
    with pytest.raises(EnvironmentProblem, match="not found"):
        run_astra_binary(tmp_path / "nope", "w", system, net, mem)
    crash = _fake_binary(tmp_path, "print('assertion event_time > current_time', file=sys.stderr)\nsys.exit(134)\n")
    with pytest.raises(GenieError, match="status 134: assertion event_time > current_time"):
        run_astra_binary(crash, "w", system, net, mem)
    quiet = _fake_binary(tmp_path, "print('nothing useful')\n")
    with pytest.raises(GenieError, match="no 'sys\\[N\\] finished' line: nothing useful"):
        run_astra_binary(quiet, "w", system, net, mem)
    with pytest.raises(InputError, match="network configuration not found"):
        run_astra_binary(quiet, "w", system, tmp_path / "missing.yml", mem)


def _two_npus(tmp_path: Path) -> tuple[Path, Path, Path]:
    system, net, mem = _configs(tmp_path)
    net.write_text("topology: [ Switch ]\nnpus_count: [ 2 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n")
    return system, net, mem


_RANK = ("print('[t] [workload] [info] sys[{r}] finished, {c} cycles, exposed communication {c} cycles.')\n"
         "print('[t] [statistics] [info] sys[{r}], Wall time: {c}')\n")


def test_runner_keeps_results_of_a_binary_that_aborts_at_exit(tmp_path: Path) -> None:
    # ASTRA-sim 518bd51 with a comm-group file: every rank's results, then SIGABRT (double free at exit)
    exe = _fake_binary(tmp_path, _RANK.format(r=1, c=70) + _RANK.format(r=0, c=50)
                       + "sys.stdout.flush()\nimport os\nos.abort()\n")
    system, net, mem = _two_npus(tmp_path)
    done = run_astra_binary(exe, "w", system, net, mem, comm_group=tmp_path / "groups.json")
    assert done.returncode == -6 and done.result.max_finish_cycles == 70 and len(done.result.ranks) == 2
    assert len(done.warnings) == 1 and "SIGABRT after every rank finished" in done.warnings[0]


def test_runner_fails_when_a_crash_lost_a_ranks_line(tmp_path: Path) -> None:
    exe = _fake_binary(tmp_path, _RANK.format(r=1, c=70) + "sys.stdout.flush()\nimport os\nos.abort()\n")
    system, net, mem = _two_npus(tmp_path)
    with pytest.raises(GenieError, match=r"no 'finished' line for 1 of 2 ranks \(0\), exited with signal SIGABRT"):
        run_astra_binary(exe, "w", system, net, mem)
    quiet = _fake_binary(tmp_path, _RANK.format(r=0, c=50))  # exit 0, a rank missing: still not a result
    with pytest.raises(GenieError, match=r"no 'finished' line for 1 of 2 ranks \(1\): "):
        run_astra_binary(quiet, "w", system, net, mem)


def test_astra_run_prints_the_results_and_warns_about_the_crash(tmp_path: Path) -> None:
    exe = _fake_binary(tmp_path, _RANK.format(r=0, c=50) + _RANK.format(r=1, c=70)
                       + "sys.stdout.flush()\nimport os\nos.abort()\n")
    system, net, mem = _two_npus(tmp_path)
    done = run_genie("astra", "run", "--binary", exe, "--workload-configuration=w", "--system-configuration",
                     system, "--network-configuration", net, "--remote-memory-configuration", mem,
                     "--out", tmp_path / "out", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "sys[1] finished, 70 cycles" in done.stdout
    assert "warning: ASTRA-sim exited with signal SIGABRT" in done.stderr
    assert (tmp_path / "out" / "estimate.csv").read_text().count("\n") == 3


CRASH = ROOT / "tests" / "data" / "astra-crash-at-exit"


@pytest.mark.parametrize(("backend", "signal_name", "cycles"), [("congestion_unaware", "SIGSEGV", 2650770294),
                                                                 ("congestion_aware", "SIGABRT", 5286024054)])
def test_runner_on_the_real_binarys_crash_at_exit(tmp_path: Path, backend: str, signal_name: str, cycles: int) -> None:
    """What the real binaries printed on TP2xDP4 exported with halvingDoubling (process groups), before they
    crashed at exit: the unaware one with SIGSEGV, the aware one with SIGABRT (``malloc_consolidate()``)."""
    stdout = (CRASH / f"stdout_{backend}.txt").read_text()
    (tmp_path / "stdout.txt").write_text(stdout)
    exe = _fake_binary(tmp_path, f"sys.stdout.write(open({str(tmp_path / 'stdout.txt')!r}).read())\n"
                                 "sys.stdout.flush()\nimport os, signal\n"
                                 f"os.kill(os.getpid(), signal.{signal_name})\n")
    system, _, mem = _configs(tmp_path)
    done = run_astra_binary(exe, "w", system, CRASH / "network.yml", mem, comm_group=tmp_path / "g.json")
    assert done.result.max_finish_cycles == cycles and len(done.result.ranks) == 8
    assert f"signal {signal_name} after every rank finished" in done.warnings[0]
    cut = stdout[:stdout.index("sys[7] finished")]  # the logger lost the last rank's lines
    (tmp_path / "stdout.txt").write_text(cut)
    lost = rf"no 'finished' line for 1 of 8 ranks \(7\), exited with signal {signal_name}"
    with pytest.raises(GenieError, match=lost):
        run_astra_binary(exe, "w", system, CRASH / "network.yml", mem)
