"""`genie estimate --jobs` and `genie replay --jobs` through the CLI (the replay on loopback, no root)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cli_support import run_genie
from genie.core.trace import CommType, collective_node, compute_node, make_trace, send_node
from genie.workloads.loader import OutputFormat, save_trace

ROOT = Path(__file__).resolve().parents[1]
OVERSUB = ROOT / "topologies" / "leaf-spine-2x4-oversub.yaml"


def _ddp(ranks: int, size: int, compute_ns: int):
    return make_trace([[compute_node(1, "fwd", duration_ns=compute_ns),
                        collective_node(2, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=size, data_deps=(1,))]
                       for _ in range(ranks)])


@pytest.fixture
def mix_dir(tmp_path: Path) -> Path:
    save_trace(_ddp(4, 2_000_000, 2_000_000), tmp_path / "a.json", to=OutputFormat.JSON)
    save_trace(_ddp(4, 1_000_000, 1_000_000), tmp_path / "b.json", to=OutputFormat.JSON)
    broken = make_trace([[send_node(1, "s", rank=0, peer=1, size_bytes=10)], [compute_node(1, "c")]])  # no receive
    save_trace(broken, tmp_path / "broken.json", to=OutputFormat.JSON)
    (tmp_path / "mix.yaml").write_text("jobs:\n  - {name: a, trace: a.json, iterations: 2}\n"
                                       "  - {name: b, trace: b.json, start_offset: 1ms}\n")
    return tmp_path


def test_estimate_ranks_placements_of_a_mix(mix_dir: Path) -> None:
    r = run_genie("estimate", "--jobs", "mix.yaml", "--topology", str(OVERSUB), "--placements", "spread,packed",
                  "--out", "est", cwd=mix_dir)
    assert r.returncode == 0, r.stderr
    ranking = r.stdout[r.stdout.index("placements ranked"):]
    assert ranking.index(" packed ") < ranking.index(" spread ")
    rows = list(csv.DictReader((mix_dir / "est" / "jobs_estimate.csv").open()))
    by = {(row["placement"], row["job"]): row for row in rows}
    assert by[("packed", "a")]["hosts"] == "h0 h1 h2 h3" and by[("spread", "b")]["hosts"] == "h2 h6 h3 h7"
    assert float(by[("spread", "a")]["slowdown_pct"]) > 5 > abs(float(by[("packed", "a")]["slowdown_pct"]))
    links = list(csv.DictReader((mix_dir / "est" / "jobs_links.csv").open()))
    spine = {row["job"] for row in links if row["placement"] == "spread" and row["link"] == "leaf0->spine0"}
    assert spine == {"a", "b"}
    shown = run_genie("report", "est", cwd=mix_dir)
    assert shown.returncode == 0, shown.stderr
    page = (mix_dir / "est" / "report.html").read_text()
    assert "Job mix" in page and "leaf0-&gt;spine0" in page
    # every number with its unit (session 34): the per-job link columns are payload bytes, the per-job table ms
    assert "<th>a_bytes</th>" in page and "<th>b_bytes</th>" in page and "<th>alone_ms</th>" in page
    assert (mix_dir / "est" / "plots" / "mix_slowdown.png").is_file()


@pytest.mark.parametrize("text, words", [
    ("jobs:\n  - {trace: a.json, placement: diagonal}\n", "jobs[0].placement: unknown placement policy"),
    ("jobs:\n  - {trace: a.json, hosts: [h0, h1, h2, h3]}\n  - {trace: b.json, hosts: [h3, h4, h5, h6]}\n",
     "jobs[1].hosts[0]"),
    ("jobs:\n  - {trace: a.json}\n  - {trace: b.json}\n  - {trace: b.json}\n", "jobs[2].trace"),
    ("jobs:\n  - {trace: a.json}\n  - {trace: broken.json}\n", "jobs[1].trace: fails `genie trace validate`"),
])
def test_bad_mixes_fail_in_one_line_before_anything_runs(mix_dir: Path, text: str, words: str) -> None:
    (mix_dir / "bad.yaml").write_text(text)
    for argv in (("estimate", "--jobs", "bad.yaml", "--topology", str(OVERSUB), "--out", "e"),
                 ("replay", "--jobs", "bad.yaml", "--topology", str(OVERSUB), "--out", "r")):
        r = run_genie(*argv, cwd=mix_dir)
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "Traceback" not in r.stderr and not (mix_dir / argv[-1]).exists()


def test_a_bad_placement_flag_is_named(mix_dir: Path) -> None:
    r = run_genie("estimate", "--jobs", "mix.yaml", "--topology", str(OVERSUB), "--placements", "packed,zigzag",
                  cwd=mix_dir)
    assert r.returncode == 2 and "--placements" in r.stderr and "zigzag" in r.stderr


def test_replay_a_mix_on_loopback_alone_and_together(mix_dir: Path) -> None:
    r = run_genie("replay", "--jobs", "mix.yaml", "--loopback", "--out", "run", cwd=mix_dir)
    assert r.returncode == 0, r.stderr
    run = mix_dir / "run"
    table = {row["job"]: row for row in csv.DictReader((run / "mix.csv").open())}
    assert set(table) == {"a", "b"}
    for name in ("a", "b"):
        for part in ("alone", "together"):
            doc = json.loads((run / "jobs" / name / part / "replay.json").read_text())
            assert doc["iteration_median_ns"] > 0 and doc["meta"]["job"] == name
            ops = list(csv.DictReader((run / "jobs" / name / part / "ops.csv").open()))
            assert {int(o["rank"]) for o in ops} == {0, 1, 2, 3} and {o["name"] for o in ops} == {"fwd", "ar"}
        row = table[name]
        assert float(row["together_ns"]) >= 1_000_000 and float(row["alone_ns"]) >= 1_000_000
        assert int(row["together_iterations"]) >= 1
    assert int(table["a"]["alone_iterations"]) == 2
    manifest = json.loads((run / "manifest.json").read_text())
    assert "jobs/a/together/ops.csv" in {f["name"] for f in manifest["files"]}
    # the merged replay's every repetition (counted in the mix or not), so they can be counted again
    reps = {j["name"]: j["repetitions"] for j in json.loads((run / "mix.json").read_text())["jobs"]}
    merged = [o for o in csv.DictReader((run / "mix_ops.csv").open()) if o["node_id"] != "0"]
    timed = {o["iteration"] for o in merged}
    assert len(merged) == len(timed) * 4 * 2 * (reps["a"] + reps["b"])  # 4 ranks a job, fwd + ar each
    assert "mix_ops.csv" in {f["name"] for f in manifest["files"]}
    shown = run_genie("report", "run", cwd=mix_dir)
    assert shown.returncode == 0 and "Job mix" in (run / "report.html").read_text(), shown.stderr


def test_replay_a_mix_without_the_alone_runs(mix_dir: Path) -> None:
    r = run_genie("replay", "--jobs", "mix.yaml", "--loopback", "--no-alone", "--json", "--out", "run", cwd=mix_dir)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [j["name"] for j in doc["jobs"]] == ["a", "b"]
    assert all(j["alone_ns"] is None and j["slowdown_pct"] is None and j["together_ns"] > 0 for j in doc["jobs"])
    assert not (mix_dir / "run" / "jobs" / "a" / "alone").exists()
    mix = json.loads((mix_dir / "run" / "mix.json").read_text())
    assert mix["estimated_alone_ns"][0] >= 2_000_000  # job a's compute alone: the critical path on loopback


def test_a_mix_replay_stopped_in_a_later_job_keeps_the_alone_runs_that_finished(mix_dir: Path) -> None:
    """Ctrl-C while job b runs alone (session 34's walk-through on the oversubscribed leaf-spine): the run
    directory keeps job a's alone replay, written as it finished and listed, and its manifest says
    `interrupted` (until then every job's files were written only once the mix had run: all of it lost)."""
    import os
    import signal
    import subprocess
    import sys

    save_trace(_ddp(4, 1_000, 120_000_000_000), mix_dir / "long.json", to=OutputFormat.JSON)  # 120 s alone
    (mix_dir / "stop.yaml").write_text("jobs:\n  - {name: a, trace: a.json}\n  - {name: b, trace: long.json}\n")
    out = mix_dir / "run"
    proc = subprocess.Popen([sys.executable, "-m", "genie.cli.main", "replay", "--jobs", "stop.yaml", "--loopback",
                             "--out", str(out)], cwd=mix_dir, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("# job b alone"):  # printed once job a's alone run is over
                break
        else:
            pytest.fail("the mix ended before job b ran alone")
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted", manifest["status"]
    listed = {f["name"] for f in manifest["files"]}
    for name in ("ops.csv", "ranks.csv", "replay.json"):
        assert f"jobs/a/alone/{name}" in listed and (out / "jobs" / "a" / "alone" / name).is_file(), name
    assert json.loads((out / "jobs" / "a" / "alone" / "replay.json").read_text())["meta"]["run"] == "alone"
    assert not (out / "jobs" / "b").exists() and not (out / "mix.csv").exists()


def test_a_job_none_of_whose_repetitions_saw_the_whole_mix_is_named(mix_dir: Path) -> None:
    """Job a's one repetition starts before job b's start offset (the mix begins at the last job's start), so
    none of a's repetitions saw the whole mix and its together time is over all of them: the run says so on
    stderr, in the manifest's warnings and in mix.json (session 34: on the oversubscribed leaf-spine a TP job's
    "together" median came from 5 repetitions of which 3 ran after the DDP job had ended, 1036 ms where its
    repetitions beside DDP took 1949-2298 ms - and nothing said so)."""
    save_trace(_ddp(4, 1_000, 100_000_000), mix_dir / "slow.json", to=OutputFormat.JSON)
    save_trace(_ddp(4, 1_000, 30_000_000), mix_dir / "fast.json", to=OutputFormat.JSON)
    (mix_dir / "cut.yaml").write_text("jobs:\n  - {name: a, trace: slow.json}\n"
                                      "  - {name: b, trace: fast.json, start_offset: 5ms}\n")
    r = run_genie("replay", "--jobs", "cut.yaml", "--loopback", "--no-alone", "--out", "run", cwd=mix_dir)
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stderr.splitlines() if "WARNING" in line]
    assert len(warned) == 1 and "job a: none of its repetitions" in warned[0], r.stderr
    manifest = json.loads((mix_dir / "run" / "manifest.json").read_text())
    assert [w for w in manifest["warnings"] if "job a:" in w] and not [w for w in manifest["warnings"] if "job b:" in w]
    seen = {j["name"]: j["saw_the_whole_mix"] for j in json.loads((mix_dir / "run" / "mix.json").read_text())["jobs"]}
    assert seen == {"a": False, "b": True}


def test_the_estimate_names_a_job_none_of_whose_repetitions_saw_the_whole_mix(mix_dir: Path) -> None:
    """The fabric model plays the same rule: job a's one repetition starts before job b's offset."""
    save_trace(_ddp(4, 1_000, 100_000_000), mix_dir / "slow.json", to=OutputFormat.JSON)
    save_trace(_ddp(4, 1_000, 30_000_000), mix_dir / "fast.json", to=OutputFormat.JSON)
    (mix_dir / "cut.yaml").write_text("jobs:\n  - {name: a, trace: slow.json}\n"
                                      "  - {name: b, trace: fast.json, start_offset: 5ms}\n")
    r = run_genie("estimate", "--jobs", "cut.yaml", "--topology", str(OVERSUB), "--out", "est", cwd=mix_dir)
    assert r.returncode == 0, r.stderr
    assert "WARNING: job a: none of its repetitions" in r.stdout and "job b: none" not in r.stdout, r.stdout
    notes = json.loads((mix_dir / "est" / "jobs_estimate.json").read_text())["placements"][0]["notes"]
    assert [n for n in notes if "job a: none" in n]


def test_a_mix_estimate_s_manifest_covers_the_play_and_names_the_topology(mix_dir: Path, monkeypatch) -> None:
    """The record opens before the fabric model plays (its `duration_s` and `genie report`'s "took" were the
    writing of three files: 0.0 s for a 4 s estimate), and names the topology estimated on (it was null)."""
    import time

    import astra_adapter.fabric.mix as fabric_mix
    from genie.services.mix import MixEstimateRequest, run_mix_estimate

    played = fabric_mix.estimate_mixes

    def slow(calls, **kwargs):
        time.sleep(0.3)  # the play's time, made long enough to see beside the file writes
        return played(calls, **kwargs)

    monkeypatch.setattr(fabric_mix, "estimate_mixes", slow)
    result = run_mix_estimate(MixEstimateRequest(mix_dir / "mix.yaml", OVERSUB, out=mix_dir / "est"))
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["duration_s"] >= 0.3 and manifest["status"] == "complete"
    assert manifest["topology"]["name"] == "leaf-spine-2x4-oversub" and manifest["topology"]["hosts"] == 8
    assert manifest["params"]["placements"] == ["as placed"]


def test_a_mix_replay_without_a_target_asks_for_one(mix_dir: Path) -> None:
    """No --topology, --testbed or --loopback: the one-line error every replay gives, before the jobs are placed
    (it was `topology loopback has no host 'h0'` for a mix with explicit hosts, and the target's error named
    --replay-run, an estimate flag, for the others)."""
    (mix_dir / "hosts.yaml").write_text("jobs:\n  - {trace: a.json, hosts: [h0, h1, h2, h3]}\n")
    for mix in ("hosts.yaml", "mix.yaml"):
        r = run_genie("replay", "--jobs", mix, "--out", "run", cwd=mix_dir)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "give exactly one of --topology FILE, --testbed NAME, --loopback" in r.stderr, r.stderr
        assert "loopback has no host" not in r.stderr and "--replay-run" not in r.stderr
        assert not (mix_dir / "run").exists()
