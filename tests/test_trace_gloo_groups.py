"""gloo jobs on several process groups (tests/data/gloo_groups: 4-rank HSDP-like, EP + PP and TP/DP jobs made by
job.py there, traced with ExecutionTraceObserver + Kineto, each rank's own log of its communication as ground
truth): the PyTorch import recovers every op's group across ranks, and refuses only a job it cannot tell."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.core.trace import NodeKind
from genie.workloads.pytorch_et import comm_ops, load_json, read_execution_trace
from genie.workloads.pytorch_files import read_pytorch_set
from genie.workloads.pytorch_groups import candidates
from genie.workloads.pg_metadata import merge_groups

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "gloo_groups"
JOBS = ("hsdp", "ep_pp", "tp_dp")


def _truth(job_dir: Path, rank: int) -> list[dict]:
    return json.loads((job_dir / f"truth.{rank}.json").read_text())


def _groups_per_op(job_dir: Path) -> dict[int, list[tuple[str, list[int]]]]:
    trace = read_pytorch_set([job_dir]).trace
    out = {}
    for rt in trace.ranks:
        comms = [n for n in sorted(rt.nodes, key=lambda n: n.id) if n.kind not in (NodeKind.COMPUTE, NodeKind.METADATA)]
        out[rt.rank] = [(n.name, list(trace.group(n.process_group).ranks)) for n in comms]
    return out


def _ambiguous_ops(job_dir: Path) -> int:
    """Collectives the trace alone leaves on several groups (what the import has to infer)."""
    hosts = {r: read_execution_trace(load_json((job_dir / f"host.{r}.json.gz").read_bytes(), source="h"),
                                     source="h", world_size=4) for r in range(4)}
    groups = merge_groups({r: h.groups for r, h in hosts.items()}, sources={})
    return sum(1 for r, h in hosts.items() for op in comm_ops(h)
               if "send" not in op.node.name and "recv" not in op.node.name and len(candidates(op, r, groups)) > 1)


@pytest.mark.parametrize("job", JOBS)
def test_every_op_is_on_the_group_the_job_used(job: str) -> None:
    job_dir = DATA / job
    assert _ambiguous_ops(job_dir) >= 16  # every collective of these jobs: gloo does not say
    got = _groups_per_op(job_dir)
    for rank in range(4):
        truth = _truth(job_dir, rank)
        assert [ranks for _, ranks in got[rank]] == [e["ranks"] for e in truth], f"rank {rank}"
        assert len(truth) >= 6


def _host_only(dst: Path, drop_last_world_all_reduce: bool) -> Path:
    dst.mkdir()
    for r in range(4):
        doc = json.loads(gzip.decompress((DATA / "ep_pp" / f"host.{r}.json.gz").read_bytes()))
        if drop_last_world_all_reduce:
            last = [n for n in doc["nodes"] if n["name"] == "c10d::allreduce_"][-1]
            last["name"] = "aten::add_"  # a compute op now
        (dst / f"host.{r}.json").write_text(json.dumps(doc))
    return dst


def test_without_times_deadlock_freedom_puts_the_stage_all_to_alls_on_the_ep_groups(tmp_path: Path) -> None:
    # no Kineto: sizes and order allow every all-to-all on the world too; only a world all-to-all on stage 0
    # before its send (that stage 1's recv waits for) would deadlock
    job_dir = _host_only(tmp_path / "ep_pp", drop_last_world_all_reduce=True)
    got = _groups_per_op(job_dir)
    for rank in range(4):
        want = [e["ranks"] for e in _truth(DATA / "ep_pp", rank)][:-1]
        assert [ranks for _, ranks in got[rank]] == want, f"rank {rank}"


def test_a_job_that_fits_several_assignments_is_refused_naming_op_and_groups(tmp_path: Path) -> None:
    # without Kineto the closing world all-reduce of 512 B could as well be on the EP pairs or the other pairs
    job_dir = _host_only(tmp_path / "ep_pp", drop_last_world_all_reduce=False)
    with pytest.raises(InputError, match=r"host\.0\.json: nodes\[id=\d+\]\.inputs: node \d+ \(c10d::allreduce_\): "
                                         r"cannot tell its process group: .* 3 assignments .*it could be on "
                                         r"groups '0', '1', '3'$"):
        read_pytorch_set([job_dir])
    res = subprocess.run([sys.executable, "-m", "genie.cli.main", "trace", "import", str(job_dir),
                          str(tmp_path / "out" / "job")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "could be on groups" in res.stderr
    assert not (tmp_path / "out").exists()
