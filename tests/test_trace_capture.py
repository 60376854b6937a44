"""`genie trace capture` on real 4-rank gloo jobs written for the tests (tests/data/torch_jobs): each job
writes what it did; the captured trace must say exactly that, rank by rank (type, size, group, peer). Needs
torch (the `capture` extra; scripts/setup.sh --test installs it)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_support import run_genie
from genie.core.trace import NodeKind, topological_order
from genie.workloads.analysis import validate
from genie.workloads.chakra_et import read_et_set
from genie.workloads.pytorch_files import read_pytorch_set

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch is not installed (pip install -e '.[capture]')")

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "tests" / "data" / "torch_jobs"


def _capture(tmp_path: Path, job: str, *extra: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    reports = tmp_path / "reports"
    reports.mkdir(exist_ok=True)
    env = {**__import__("os").environ, "JOB_REPORT_DIR": str(reports)}
    return subprocess.run([sys.executable, "-m", "genie.cli.main", "trace", "capture", "--nproc", "4", "--out",
                           str(tmp_path / "cap"), *extra, "--", str(JOBS / job)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout_s)


def _why(res: subprocess.CompletedProcess, tmp_path: Path) -> str:
    """A failed capture's error and the end of its torchrun log (what CI prints when a capture fails)."""
    log = tmp_path / "cap" / "torchrun.log"
    tail = log.read_text(errors="replace")[-6000:] if log.is_file() else "(no torchrun.log)"
    return f"{res.stderr[-2000:]}\n--- torchrun.log (end) ---\n{tail}"


def _comms(prefix: Path) -> list[list[tuple]]:
    trace = read_et_set(prefix)
    assert [p for p in validate(trace)] == []
    out = []
    for r in trace.ranks:
        seq = []
        for n in topological_order(r.nodes):
            if n.kind.is_comm:
                kind = n.comm_type.name.lower() if n.kind is NodeKind.COLLECTIVE else n.kind.value
                seq.append((kind, n.size_bytes, list(trace.group(n.process_group).ranks), n.peer))
        out.append(seq)
    return out


def test_ddp_buckets_are_the_all_reduces_ddp_reports(tmp_path: Path) -> None:
    res = _capture(tmp_path, "ddp_buckets.py")
    assert res.returncode == 0, _why(res, tmp_path)
    report = json.loads((tmp_path / "reports" / "ddp.2.json").read_text())  # steps 0, 1 untraced; 2 traced
    buckets = report["rebuilt_bucket_sizes"]
    assert len(buckets) >= 3 and sum(buckets) == report["param_count"] * 4
    comms = _comms(tmp_path / "cap" / "ddp_buckets")
    assert comms == [[("all_reduce", b, [0, 1, 2, 3], None) for b in buckets]] * 4
    summary = json.loads((tmp_path / "cap" / "summary.json").read_text())
    assert [r["comm_ops"] for r in summary["ranks"]] == [len(buckets)] * 4
    assert all(r["traced_step_ms"] > 0 and r["compute_ms"] > 0 for r in summary["ranks"])
    # DDP's reducer waits for its buckets in C++, in no range: whether a rank's thread sat in such a gap depends
    # on how the host scheduled it (CI saw a rank with none), so the live run checks the accounting's
    # invariants; test_pytorch_gaps.py checks the classification on fixed events
    assert all(r["gap_wait_ms"] >= 0 and 0 <= r["gap_compute_ms"] <= r["compute_ms"] for r in summary["ranks"])
    assert sorted(p.name for p in (tmp_path / "cap").iterdir()) == \
        ["ddp_buckets.0.et", "ddp_buckets.1.et", "ddp_buckets.2.et", "ddp_buckets.3.et", "raw", "summary.json",
         "torchrun.log"]


def test_new_group_p2p_and_all_to_all_sequences(tmp_path: Path) -> None:
    res = _capture(tmp_path, "groups_p2p.py")
    assert res.returncode == 0, _why(res, tmp_path)
    expected = [[tuple(c) for c in json.loads((tmp_path / "reports" / f"calls.{r}.2.json").read_text())]
                for r in range(4)]
    assert _comms(tmp_path / "cap" / "groups_p2p") == expected
    groups = json.loads((tmp_path / "cap" / "groups_p2p.comm_group.json").read_text())
    assert sorted(groups.values()) == [[0, 1], [2, 3]]


def _calls(reports: Path, step: int) -> list[list[tuple]]:
    """What each rank's job recorded of its communication in `step` (the traced one)."""
    return [[tuple(c) for c in json.loads((reports / f"calls.{r}.{step}.json").read_text())] for r in range(4)]


def test_batch_isend_irecv_pipeline_runs_unchanged_and_replays(tmp_path: Path) -> None:
    """Issue #35 item 2: P2POp(dist.isend/irecv, ...) + batch_isend_irecv as PyTorch's docs write it. Each
    send/recv is captured with its peer, bytes and group (the job's own log), and the trace replays."""
    res = _capture(tmp_path, "pipeline_p2p.py")
    assert res.returncode == 0, _why(res, tmp_path)
    expected = _calls(tmp_path / "reports", 2)
    assert _comms(tmp_path / "cap" / "pipeline_p2p") == expected
    assert sum(kind in ("send", "recv") for kind, *_ in expected[0]) == 4  # 2 micro-batches, forward + backward
    replay = run_genie("replay", tmp_path / "cap" / "pipeline_p2p", "--loopback", "--out", tmp_path / "replay")
    assert replay.returncode == 0, replay.stderr[-2000:]
    assert "# replay: 4 ranks" in replay.stdout


def test_warmup_0_keeps_subgroups_of_groups_made_after_tracing_began(tmp_path: Path) -> None:
    """Issue #35 item 3: with --warmup 0 tracing starts before init_process_group and new_group; the groups are
    recorded again at the end of the step, so every TP/DP subgroup op comes back on its pair (6 all-reduces and a
    broadcast per rank), the world's on the world, and the trace replays."""
    res = _capture(tmp_path, "tp_dp.py", "--warmup", "0")
    assert res.returncode == 0, _why(res, tmp_path)
    expected = _calls(tmp_path / "reports", 0)
    trace = read_et_set(tmp_path / "cap" / "tp_dp")
    assert validate(trace) == ()
    got = [[(n.comm_type.name.lower(), n.size_bytes, list(trace.group(n.process_group).ranks), n.attr_value("root"))
            for n in topological_order(r.nodes) if n.kind.is_comm] for r in trace.ranks]
    assert got == expected
    assert all(sum(len(g) == 2 and k == "all_reduce" for k, _, g, _ in seq) == 6 for seq in got)
    groups = json.loads((tmp_path / "cap" / "tp_dp.comm_group.json").read_text())
    assert sorted(groups.values()) == [[0, 1], [0, 2], [1, 3], [2, 3]]
    replay = run_genie("replay", tmp_path / "cap" / "tp_dp", "--loopback", "--out", tmp_path / "replay")
    assert replay.returncode == 0, replay.stderr[-2000:]


def test_a_crashing_script_is_one_line_exit_2_and_leaves_only_its_log(tmp_path: Path) -> None:
    res = _capture(tmp_path, "crash.py")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    log = tmp_path / "cap" / "torchrun.log"
    assert len(lines) == 1 and "crash.py" in lines[0] and "RuntimeError: boom: rank 1 fell over" in lines[0]
    assert f"torchrun's log: {log}" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap", "reports"]
    assert [p.name for p in (tmp_path / "cap").iterdir()] == ["torchrun.log"]
    assert "Traceback" in log.read_text() and "boom: rank 1 fell over" in log.read_text()
    again = _capture(tmp_path, "crash.py")  # the directory holding only a failed capture's log is reused
    assert again.returncode == 2 and "boom" in again.stderr and "not empty" not in again.stderr


def test_a_rank_killed_by_a_signal_is_named_with_its_signal(tmp_path: Path) -> None:
    """A rank that dies of a signal prints no error of its own (the others' gloo errors follow from it):
    the one line names torchrun's root cause, the rank and its signal, before the first error seen."""
    res = _capture(tmp_path, "killed.py")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "killed.py" in lines[0]
    assert "the script failed under torchrun (exit 1): rank 2 (pid " in lines[0]
    assert ") was killed by SIGKILL" in lines[0]


def test_a_hanging_script_times_out(tmp_path: Path) -> None:
    res = _capture(tmp_path, "hang.py", "--timeout", "25")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "capture timed out after 25 s" in lines[0] and "torchrun's log" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap", "reports"]
    assert [p.name for p in (tmp_path / "cap").iterdir()] == ["torchrun.log"]
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, str(tmp_path))]
    assert left == []  # torchrun and every rank were killed


def test_moe_all_to_allv_keeps_every_pairs_size_and_replays(tmp_path: Path) -> None:
    """MoE routing with uneven `all_to_all_single` splits: the captured trace records, per rank and op, the
    bytes sent to and received from each rank exactly as the job issued them, and the trace replays (an even
    split of each rank's size timed out)."""
    from genie.engine.inprocess import thread_sessions
    from genie.services.replay import ReplayRequest, run_replay
    from genie.services.target import loopback_placements

    res = _capture(tmp_path, "moe_alltoallv.py")
    assert res.returncode == 0, _why(res, tmp_path)
    trace = read_et_set(tmp_path / "cap" / "moe_alltoallv")
    assert validate(trace) == ()
    for r in trace.ranks:
        expected = [tuple(c) for c in json.loads((tmp_path / "reports" / f"calls.{r.rank}.2.json").read_text())]
        got = [(n.comm_type.name.lower(), n.size_bytes, list(trace.group(n.process_group).ranks),
                n.send_split_bytes and list(n.send_split_bytes), n.recv_split_bytes and list(n.recv_split_bytes))
               for n in topological_order(r.nodes) if n.kind is NodeKind.COLLECTIVE]
        assert got == expected
    outcome = run_replay(trace, loopback_placements(4), ReplayRequest(iterations=1, timeout_s=30.0),
                         sessions=thread_sessions())
    assert [len(rr.records) for rr in outcome.iterations[0].ranks] == [len(r.nodes) for r in trace.ranks]


def _cmdline_has(proc: Path, text: str) -> bool:
    try:
        return text in (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_fsdp2_hsdp_with_a_new_group(tmp_path: Path) -> None:
    """FSDP2 on a 2x2 mesh (HSDP) + a new_group: each rank's sequence is the collectives the job recorded itself,
    and their sizes are the padded shards the job computes from its parameter shapes."""
    res = _capture(tmp_path, "fsdp_hsdp.py")
    assert res.returncode == 0, _why(res, tmp_path)
    reports = [json.loads((tmp_path / "reports" / f"fsdp.{r}.2.json").read_text()) for r in range(4)]
    assert _comms(tmp_path / "cap" / "fsdp_hsdp") == [[tuple(c) for c in rep["calls"]] for rep in reports]
    for rank, rep in enumerate(reports):
        units = rep["units"]
        assert sum(u["param_count"] for u in units) == rep["param_count"] == 29251
        assert [u["param_count"] for u in units] == [8255, 16640, 4323, 33]
        assert [u["shard_numel"] for u in units] == [4160, 8320, 2227, 17]  # dim 0 rounded up: padded
        shard, replicate = units[0]["shard_group"], units[0]["replicate_group"]
        assert shard == [rank & 2, (rank & 2) + 1] and replicate == [rank & 1, (rank & 1) + 2]
        by_type: dict[tuple, list[int]] = {}
        for kind, size, ranks, _ in rep["calls"]:
            by_type.setdefault((kind, tuple(ranks)), []).append(size)
        shard_bytes = [u["shard_numel"] * 4 for u in units]
        # forward all-gathers every unit; backward gathers again all but the root (not resharded after forward)
        assert sorted(by_type[("all_gather", tuple(shard))]) == sorted(shard_bytes + shard_bytes[:-1])
        assert sorted(by_type[("reduce_scatter", tuple(shard))]) == sorted(2 * b for b in shard_bytes)
        assert sorted(by_type[("all_reduce", tuple(replicate))]) == sorted(shard_bytes)
        assert by_type.get(("all_reduce", (0, 3))) == ([4] if rank in (0, 3) else None)
        assert len(rep["calls"]) == 15 + (rank in (0, 3))
    groups = json.loads((tmp_path / "cap" / "fsdp_hsdp.comm_group.json").read_text())
    assert sorted(groups.values()) == [[0, 1], [0, 2], [0, 3], [1, 3], [2, 3]]


def _compute_error(cap: Path, reports: Path, name: str) -> list[tuple[float, float, float]]:
    """Per rank: (imported compute, step - communication as the job measured it, gap compute), ms. Step time is
    the traced step as Kineto recorded it; communication is what the job itself timed around its calls."""
    result = read_pytorch_set([cap / "raw"])
    out = []
    for r in result.ranks:
        comm_ms = json.loads((reports / f"{name}.{r.rank}.2.json").read_text())["comm_s"] * 1e3
        out.append((r.compute_ns / 1e6, r.step_ns / 1e6 - comm_ms, r.gap_compute_ns / 1e6))
    return out


@pytest.mark.serial  # a preemption at a call boundary moves time between compute and communication
def test_compute_is_the_step_minus_the_communication_the_job_timed(tmp_path: Path) -> None:
    """Issue #15 deliverable 5: compute per rank within 10% of the step time minus communication. The job times
    its own torch.distributed calls and waits; compute includes pure-Python work between ops (no torch op: only
    the gaps show it). Measured: 24 rank-steps (6 captures, load 6-11 on 2 cores) within +0.1..+0.3%; a 4x
    smaller job once missed by 13% (a 9.5 ms preemption at a call boundary: counted as communication by the
    job, as compute here), hence compute of 180+ ms per rank, where such a preemption is below 6%."""
    res = _capture(tmp_path, "compute_comm.py")
    assert res.returncode == 0, _why(res, tmp_path)
    reports = tmp_path / "reports"
    for rank, (compute, expected, gaps) in enumerate(_compute_error(tmp_path / "cap", reports, "times")):
        assert abs(compute - expected) <= 0.10 * expected, (rank, compute, expected)
        python_ms = json.loads((reports / f"times.{rank}.2.json").read_text())["python_s"] * 1e3
        assert gaps >= 0.9 * python_ms  # the pure-Python compute is counted, from the gaps between ops
