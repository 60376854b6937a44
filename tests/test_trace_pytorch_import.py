"""`genie trace import` and load_trace on real PyTorch traces (issue #15 item 2): the shared 4-rank gloo DDP
job (tests/data/pytorch_ddp), checked against what DDP itself reported, and bad input."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.core.trace import CommType, NodeKind, topological_order
from genie.workloads.analysis import validate
from genie.workloads.chakra_et import read_et_set
from genie.workloads.loader import load_trace
from genie.workloads.pytorch_files import read_pytorch_set

ROOT = Path(__file__).resolve().parents[1]
DDP = ROOT / "tests" / "data" / "pytorch_ddp"


def genie(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "genie.cli.main", "trace", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _buckets() -> list[int]:
    truth = json.loads((DDP / "ground_truth.json").read_text())
    return [int(x) for x in truth["ddp_logging"]["rebuilt_bucket_sizes"].split(",")]


def test_ddp_collectives_per_rank_are_what_ddp_reported() -> None:
    result = read_pytorch_set([DDP])
    trace = result.trace
    assert trace.num_ranks == 4 and trace.groups == ()  # the world only (pg "0", all ranks)
    buckets = _buckets()
    assert buckets == [1071144, 1050624, 526336] and sum(buckets) == 662026 * 4  # all parameters, fp32
    for r in trace.ranks:
        comms = [n for n in topological_order(r.nodes) if n.kind.is_comm]
        assert [(n.comm_type, n.size_bytes, n.process_group, n.attr_value("dtype")) for n in comms] == \
            [(CommType.ALL_REDUCE, b, None, "float") for b in buckets]
    assert validate(trace) == ()
    assert [x.comm_ops for x in result.ranks] == [3, 3, 3, 3]
    assert [round(x.step_ns / 1e6, 1) for x in result.ranks] == [65.0, 59.5, 80.9, 61.0]  # Kineto ProfilerStep#1


def test_ddp_bucket_all_reduces_overlap_backward() -> None:
    rank0 = read_pytorch_set([DDP]).trace.ranks[0]
    order = topological_order(rank0.nodes)
    ids = [n.id for n in order]
    comms = [n for n in order if n.kind.is_comm]
    compute = {n.id: n for n in rank0.nodes if n.kind is NodeKind.COMPUTE}
    # the first bucket's all-reduce is issued in backward: backward compute follows it without waiting for it
    first = comms[0]
    later_backward = [n for n in order[ids.index(first.id) + 1:] if n.kind is NodeKind.COMPUTE
                      and n.name.startswith("autograd::engine::evaluate_function")]
    assert len(later_backward) >= 5 and all(first.id not in n.deps for n in later_backward)
    # the compute op that issued it is an AccumulateGrad of backward; the optimizer comes after the waits
    assert compute[first.deps[0]].name.startswith("autograd::engine::evaluate_function: torch::autograd::Accum")
    step = next(n for n in order if n.name.startswith("Optimizer.step"))
    assert ids.index(step.id) > max(ids.index(c.id) for c in comms[:2])
    assert sum(n.duration_ns for n in compute.values()) < 65_035_819  # communication time taken out


def test_gzip_single_file_and_no_kineto(tmp_path: Path) -> None:
    for r in range(4):
        shutil.copy(DDP / f"host.{r}.json.gz", tmp_path / f"et.{r}.json.gz")
    trace = load_trace(tmp_path / "et.2.json.gz")  # one file names the whole directory
    assert [[n.size_bytes for n in r.nodes if n.kind.is_comm] for r in trace.ranks] == [_buckets()] * 4
    assert all(n.duration_ns == 0 for r in trace.ranks for n in r.nodes)  # no Kineto: no durations
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "host.0.json").write_bytes(gzip.decompress((DDP / "host.0.json.gz").read_bytes()))
    # rank 0 of the 4-rank job alone: its world says 4 ranks, so its all-reduces are not 1-rank no-ops
    with pytest.raises(InputError, match=r"host\.0\.json: ## process_group:init ##\[0\]\.group_size: process group "
                                         r"'0' has 4 ranks \(group_size\), 1 rank\(s\) given: give every rank's trace"):
        load_trace(raw / "host.0.json")
    res = genie("import", raw / "host.0.json", tmp_path / "one")
    assert res.returncode == 2 and "group_size" in res.stderr and not (tmp_path / "one.0.et").exists()


def test_cli_import_writes_et_that_reads_back(tmp_path: Path) -> None:
    res = genie("import", DDP, tmp_path / "out" / "ddp")
    assert res.returncode == 0, res.stderr
    assert "all_reduce           4 x      1071144 B" in res.stdout and "on world" in res.stdout
    assert "rank 0: step 65.036 ms" in res.stdout
    back = read_et_set(tmp_path / "out" / "ddp")
    assert [[n.size_bytes for n in r.nodes if n.kind.is_comm] for r in back.ranks] == [_buckets()] * 4
    ok = genie("validate", tmp_path / "out" / "ddp")
    assert ok.returncode == 0 and ok.stdout.startswith("ok: 4 ranks"), ok.stderr


def test_show_warns_on_chakra_converter_output_of_a_cpu_capture() -> None:
    res = genie("show", DDP / "chakra" / "ddp")
    assert res.returncode == 0, res.stderr
    assert "groups: 1" in res.stdout
    assert "c10d::allreduce_ x12" in res.stderr and "genie trace import" in res.stderr
    val = genie("validate", DDP / "chakra" / "ddp")
    assert val.returncode == 0 and "warning: dangling_dependency: rank 0 node 1" in val.stderr
    assert "warning: comm_as_compute: rank 0 node" in val.stderr and "(26 warning(s))" in val.stdout


def test_estimate_warns_on_chakra_converter_output_of_a_cpu_capture(tmp_path: Path) -> None:
    """Its 22 communication ops are compute nodes: the estimate runs (no traffic for them) and says so."""
    res = subprocess.run([sys.executable, "-m", "genie.cli.main", "estimate", str(DDP / "chakra" / "ddp"), "--mode",
                          "fabric", "--topology", "topologies/star-4.yaml", "--out", str(tmp_path / "e")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "comm_as_compute: 22 warning(s), first: rank 0 node" in res.stderr
    manifest = json.loads((tmp_path / "e" / "manifest.json").read_text())
    assert any("comm_as_compute: 22 warning(s)" in w for w in manifest["warnings"])


def test_chakra_trace_link_output_is_named_in_the_warning(tmp_path: Path) -> None:
    """chakra_trace_link's output (the execution trace with Kineto's ts / inclusive_dur merged into its nodes) is read
    as an execution trace without Kineto; the warning says which file it is and what to import instead."""
    for r in range(4):
        doc = json.loads(gzip.decompress((DDP / f"host.{r}.json.gz").read_bytes()))
        for i, node in enumerate(doc["nodes"]):
            node.update(ts=1000 + i, inclusive_dur=2, exclusive_dur=1)
        (tmp_path / f"linked.{r}.json").write_text(json.dumps(doc))
    res = genie("import", tmp_path, tmp_path / "out")
    assert res.returncode == 0, res.stderr
    assert f"{tmp_path / 'linked.0.json'}: chakra_trace_link's output, whose merged Kineto times genie does not " \
           "read: compute durations are 0 (import the execution trace and the Kineto trace it was linked from)" \
        in res.stderr
    (tmp_path / "plain").mkdir()
    for r in range(4):
        shutil.copy(DDP / f"host.{r}.json.gz", tmp_path / "plain")
    plain = genie("import", tmp_path / "plain", tmp_path / "plain-out")
    assert plain.returncode == 0, plain.stderr
    assert "no Kineto trace beside it" in plain.stderr and "chakra_trace_link's output" not in plain.stderr

def _copy_set(dst: Path) -> Path:
    dst.mkdir()
    for r in range(4):
        for kind in ("host", "device"):
            (dst / f"{kind}.{r}.json").write_bytes(gzip.decompress((DDP / f"{kind}.{r}.json.gz").read_bytes()))
    return dst


def _edit(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("case, message", [
    ("schema", r"host\.1\.json: schema: unsupported execution-trace schema '9\.9\.9'"),
    ("field", r"host\.1\.json: nodes\[3\]\.inputs: missing field 'inputs'"),
    ("groups", r"host\.1\.json: ## process_group:init ##\.ranks: ranks disagree on process group '0'"),
    ("swapped", r"device\.2\.json: a second Kineto trace of rank 2 \(the first: .*device\.1\.json\)"),
    ("foreign", r"device\.1\.json: traceEvents\[\]\.pid: does not belong to .*host\.1\.json"),
])
def test_bad_input_is_one_line_exit_2_no_output(tmp_path: Path, case: str, message: str) -> None:
    src = _copy_set(tmp_path / "src")
    host, device = src / "host.1.json", src / "device.1.json"
    if case == "schema":
        _edit(host, lambda d: d.update(schema="9.9.9"))
    elif case == "field":
        _edit(host, lambda d: d["nodes"][3].pop("inputs"))
    elif case == "groups":
        def regroup(d):
            for n in d["nodes"]:
                if n["name"] == "## process_group:init ##":
                    n["inputs"]["values"][0] = json.dumps([{"pg_name": "0", "ranks": [0, 1]}])
        _edit(host, regroup)
    elif case == "swapped":
        _edit(device, lambda d: d["distributedInfo"].update(rank=2))
    elif case == "foreign":
        _edit(device, lambda d: [e.update(pid=4242) for e in d["traceEvents"] if isinstance(e.get("pid"), int)])
    res = genie("import", src, tmp_path / "out" / "job")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "out").exists()


def test_ambiguous_group_is_refused_naming_the_node(tmp_path: Path) -> None:
    src = _copy_set(tmp_path / "src")
    for r in range(4):  # a second group with every rank in it: which one did the all-reduces use?
        def add_group(d):
            for n in d["nodes"]:
                if n["name"] == "## process_group:init ##":
                    n["inputs"]["values"][0] = json.dumps([{"pg_name": "0", "ranks": []},
                                                           {"pg_name": "1", "ranks": [3, 2, 1, 0]}])
        _edit(src / f"host.{r}.json", add_group)
    with pytest.raises(InputError, match=r"host\.0\.json: nodes\[id=273\]\.inputs: node 273 \(c10d::allreduce_\): "
                                         r"cannot tell its process group"):
        read_pytorch_set([src])


def _mark_all_reduces(doc: dict, group: str, pg_records: list[str]) -> None:
    """Put each c10d::allreduce_ inside a ``genie::pg=<group>`` range (what `genie trace capture` records) and make
    the trace's ``## process_group:init ##`` records `pg_records` (the first: the one at the trace's start)."""
    nodes = doc["nodes"]
    inits = [n for n in nodes if n["name"] == "## process_group:init ##"]
    for n, values in zip(inits, pg_records):
        n["inputs"]["values"][0] = values
    next_id = max(n["id"] for n in nodes) + 1
    for n in [n for n in nodes if n["name"] == "c10d::allreduce_"]:
        nodes.append({"id": next_id, "name": f"genie::pg={group}", "ctrl_deps": n["ctrl_deps"],
                      "inputs": {"values": [], "shapes": [], "types": []}, "outputs": {"values": [], "shapes": [],
                                                                                    "types": []}, "attrs": []})
        n["ctrl_deps"] = next_id
        next_id += 1


def test_a_group_marker_the_trace_has_no_record_of_is_refused(tmp_path: Path) -> None:
    """Issue #35 item 3: a trace begun before new_group (--warmup 0 without the end-of-step record) names the
    group only in genie::pg=: refused, naming the node and the group, not run on the world."""
    src = _copy_set(tmp_path / "src")
    for r in range(4):
        _edit(src / f"host.{r}.json", lambda d: _mark_all_reduces(d, "1", ["[]", "[]"]))
    res = genie("import", src, tmp_path / "out" / "job")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert re.search(r"host\.0\.json: nodes\[id=\d+\]\.name: node 273 \(c10d::allreduce_\) ran inside genie::pg=1 but "
                     r"the trace records no process group '1'.*after a warmup step", res.stderr), res.stderr
    assert not (tmp_path / "out").exists()


def test_groups_recorded_at_the_end_of_the_trace_count(tmp_path: Path) -> None:
    """A group made after tracing began is in the later ``## process_group:init ##`` record only (`genie trace
    capture` writes one at the step's end): every record of the trace is read."""
    src = _copy_set(tmp_path / "src")
    first = json.dumps([{"pg_name": "0", "ranks": []}])
    later = json.dumps([{"pg_name": "0", "ranks": []}, {"pg_name": "1", "ranks": [3, 2, 1, 0]}])
    for r in range(4):
        _edit(src / f"host.{r}.json", lambda d: _mark_all_reduces(d, "1", [first, later]))
    trace = read_pytorch_set([src]).trace
    assert [(g.name, g.ranks) for g in trace.groups] == [("1", (3, 2, 1, 0))]
    for r in trace.ranks:
        assert [n.process_group for n in r.nodes if n.kind.is_comm] == ["1"] * 3


def test_gpu_kernels_are_the_compute_and_nccl_kernels_time_the_comms(tmp_path: Path) -> None:
    # the DDP job's execution traces with a synthetic GPU Kineto trace: compute kernels on stream 7, the three
    # all-reduces' NCCL kernels on stream 20 (us)
    compute = [(0, 100), (100, 200), (200, 300), (300, 400), (400, 500)]
    nccl = [(110, 260), (210, 450), (310, 320)]
    for r in range(4):
        (tmp_path / f"host.{r}.json").write_bytes(gzip.decompress((DDP / f"host.{r}.json.gz").read_bytes()))
        events = [{"ph": "X", "cat": "kernel", "name": f"gemm_{i}", "pid": 0, "tid": 7, "ts": a, "dur": b - a,
                   "args": {"stream": 7}} for i, (a, b) in enumerate(compute)]
        events += [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0,
                    "tid": 20, "ts": a, "dur": b - a, "args": {"stream": 20}} for a, b in nccl]
        (tmp_path / f"device.{r}.json").write_text(json.dumps({"traceEvents": events,
                                                               "distributedInfo": {"rank": r}}))
    rank0 = read_pytorch_set([tmp_path]).trace.ranks[0]
    kernels = {n.name: n for n in rank0.nodes if n.kind is NodeKind.COMPUTE}
    assert sorted(kernels) == [f"gemm_{i}" for i in range(5)]
    assert [kernels[f"gemm_{i}"].duration_ns for i in range(5)] == [100_000] * 5
    comms = [n for n in rank0.nodes if n.kind.is_comm]
    assert [n.size_bytes for n in comms] == _buckets()
    by_id = {n.id: n.name for n in rank0.nodes}
    assert [by_id[c.deps[0]] for c in comms] == ["gemm_1", "gemm_2", "gemm_3"]  # the kernel before each
    assert kernels["gemm_3"].deps == (kernels["gemm_2"].id, comms[0].id)  # the first ended at 260: gemm_3 waits
    assert kernels["gemm_4"].deps == (kernels["gemm_3"].id, comms[2].id)  # the third ended at 320
    assert all(comms[1].id not in k.deps for k in kernels.values())  # the second (450) ends the step
    assert validate(read_pytorch_set([tmp_path]).trace) == ()


ROOTED = ROOT / "tests" / "data" / "pytorch_rooted"


def test_rooted_collectives_and_barriers_are_what_the_job_issued() -> None:
    """broadcast/reduce/gather/scatter with their roots (c10d records the root's rank in the op's group; genie
    writes the global rank) and barriers, on the world and on a new_group, as the job recorded them."""
    trace = read_pytorch_set([ROOTED]).trace
    assert validate(trace) == ()
    for r in trace.ranks:
        seq = [(n.comm_type.name.lower(), n.size_bytes, list(trace.group(n.process_group).ranks), n.attr_value("root"))
               for n in topological_order(r.nodes) if n.kind.is_comm]
        assert seq == [tuple(c) for c in json.loads((ROOTED / f"calls.{r.rank}.json").read_text())]


def test_members_that_disagree_on_a_root_are_a_deadlock(tmp_path: Path) -> None:
    trace = read_pytorch_set([ROOTED]).trace
    bad_rank = trace.ranks[2]
    nodes = tuple(n.with_attr("root", 3) if n.comm_type is CommType.BROADCAST else n for n in bad_rank.nodes)
    broken = replace(trace, ranks=(*trace.ranks[:2], replace(bad_rank, nodes=nodes), *trace.ranks[3:]))
    problems = [p for p in validate(broken) if p.kind.value == "collective_mismatch"]
    assert len(problems) == 1 and "broadcast of 64 B to/from root 3" in problems[0].message


def test_a_root_outside_its_group_is_named() -> None:
    trace = read_pytorch_set([ROOTED]).trace
    nodes = tuple(n.with_attr("root", 7) if n.comm_type is CommType.GATHER else n for n in trace.ranks[1].nodes)
    broken = replace(trace, ranks=(trace.ranks[0], replace(trace.ranks[1], nodes=nodes), *trace.ranks[2:]))
    bad = [p for p in validate(broken) if p.kind.value == "bad_root"]
    assert [(p.rank, p.message) for p in bad] == [(1, "root 7 is not a rank of its group [0, 1, 2, 3]"),
                                                  (1, "root 7 is not a rank of its group [1, 2, 3]")]


ALLTOALLV = ROOT / "tests" / "data" / "pytorch_alltoallv"


def test_uneven_all_to_all_splits_are_what_the_job_issued() -> None:
    """MoE routing: `all_to_all_single` with input/output split sizes; each all-to-all node records the bytes
    sent to and received from every rank (the split lists of c10d::alltoall_base_ times a row's bytes)."""
    trace = read_pytorch_set([ALLTOALLV]).trace
    assert validate(trace) == ()
    for r in trace.ranks:
        seq = [(n.comm_type.name.lower(), n.size_bytes, list(trace.group(n.process_group).ranks),
                n.send_split_bytes and list(n.send_split_bytes), n.recv_split_bytes and list(n.recv_split_bytes))
               for n in topological_order(r.nodes) if n.kind.is_comm]
        assert seq == [tuple(c) for c in json.loads((ALLTOALLV / f"calls.{r.rank}.json").read_text())]


def _edited_splits(tmp_path: Path, splits: list[int]) -> int:
    """The alltoallv set with rank 1's first all-to-all given input split sizes `splits`; its node id."""
    for p in ALLTOALLV.glob("*.json.gz"):
        shutil.copy(p, tmp_path / p.name)
    host = tmp_path / "host.1.json.gz"
    doc = json.loads(gzip.decompress(host.read_bytes()))
    node = next(n for n in doc["nodes"] if n["name"] == "c10d::alltoall_base_")
    node["inputs"]["values"][4] = splits
    host.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return node["id"]


def test_split_lists_that_do_not_divide_the_tensor_are_named(tmp_path: Path) -> None:
    node = {"id": _edited_splits(tmp_path, [2, 2, 2, 1])}  # 7 rows do not divide the input's 480 bytes
    with pytest.raises(InputError, match=rf"host.1.json.gz: node {node['id']}.inputs.values\[4\]: split sizes "):
        read_pytorch_set([tmp_path])


def test_ranks_that_disagree_on_a_split_are_a_deadlock(tmp_path: Path) -> None:
    node_id = _edited_splits(tmp_path, [1, 1, 1, 1])  # rank 1 now sends 120 B to each; rank 0 expects 0 B
    problems = [p for p in validate(read_pytorch_set([tmp_path]).trace) if p.kind.value == "split_mismatch"]
    assert problems and str(problems[0]) == (f"rank 0 node 23: all-to-all ('c10d::alltoall_base_') receives 160 B "
                                             f"from rank 1, which sends it 120 B (node {node_id}) (deadlock)")
