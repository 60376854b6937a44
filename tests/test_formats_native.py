"""genie's JSON/YAML trace format and the format-sniffing loader/saver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.core.collective import Algorithm
from genie.core.trace import Attribute, AttrType, CommType, IOInfo, NodeKind, TraceNode, make_trace
from genie.workloads.analysis import validate
from genie.workloads.chakra_et import read_et_set, write_et_set
from genie.workloads.loader import OutputFormat, TraceFormat, detect_format, load_trace, output_format, save_trace
from genie.workloads.native import read_native, write_native_json, write_native_yaml

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "tp2_dp2_step.yaml"
REFERENCE = ROOT / "tests" / "data" / "astra-reference"
EXTERNAL = ROOT.parent / "shared" / "workloads-external" / "astra-text"
needs_reference = pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference data not found")


def test_sample_program_expands_per_rank() -> None:
    trace = read_native(SAMPLE.read_bytes(), source=str(SAMPLE))
    assert trace.num_ranks == 4 and validate(trace) == ()
    assert trace.info_value("name") == "tp2-dp2-step"
    r3 = {n.name: n for n in trace.ranks[3].nodes}
    assert r3["fwd_attn"].duration_ns == 120_000 and r3["fwd_attn"].num_ops == 2 * 10**9
    assert (r3["fwd_attn_ar"].comm_type, r3["fwd_attn_ar"].size_bytes) == (CommType.ALL_REDUCE, 8 * 2**20)
    assert r3["fwd_attn_ar"].process_group == "tp1" and r3["grad_rs"].process_group == "dp1"
    assert r3["grad_rs"].algorithm is Algorithm.RING
    assert (r3["act_send"].peer, r3["act_recv"].peer) == (0, 2)


def test_round_trips_json_yaml_and_et(tmp_path: Path) -> None:
    trace = read_native(SAMPLE.read_bytes())
    for data in (write_native_json(trace), write_native_yaml(trace)):
        assert read_native(data) == trace
    json.loads(write_native_json(trace))
    write_et_set(trace, tmp_path / "s")
    back = read_et_set(tmp_path / "s")
    assert back.ranks == trace.ranks and back.groups == trace.groups


@needs_reference
def test_et_to_json_to_et_is_byte_identical(tmp_path: Path) -> None:
    for case in ("cc_trainstep_L4_f50us_b100us_ar4MB_8npus_ring", "all_to_all_8npus_1MB_fc_Ring_4chunks"):
        src = sorted((REFERENCE / case / "workload").glob("*.et"))
        prefix = src[0].name.split(".")[0]
        trace = read_et_set(src[0].parent / prefix)
        again = read_native(write_native_json(trace))
        write_et_set(again, tmp_path / case)
        for f in src:
            assert (tmp_path / f"{case}.{f.name.split('.', 1)[1]}").read_bytes() == f.read_bytes()


def test_exact_form_keeps_odd_nodes() -> None:
    odd = TraceNode(3, "odd", NodeKind.MEM_LOAD, attrs=(Attribute("b", AttrType.BYTES, b"\x00"),
                                                         Attribute("f", AttrType.FLOAT_LIST, (0.5,))),
                    inputs=IOInfo("v", "s", "t"), extra_wire=b"\x58\x01")
    data = write_native_json(make_trace([[odd]]))
    assert json.loads(data)["ranks"][0]["nodes"][0]["kind"] == "mem_load"
    assert read_native(data).ranks[0].nodes[0] == odd


@pytest.mark.parametrize("text, message", [
    ("format: other\n", "not a genie trace"),
    ("format: genie-trace\nranks: 2\nprogram: [{type: compute}]\n", r"program\[0\]\.id: every node needs an id"),
    ("format: genie-trace\nranks: 2\nprogram: [{id: 0, type: allsum, size: 1}]\n", r"program\[0\]\.type"),
    ("format: genie-trace\nranks: 2\nprogram: [{id: 0, type: all_reduce}]\n", "needs a size"),
    ("format: genie-trace\nranks: 2\nprogram: [{id: 0, duration: 5 parsecs}]\n", r"program\[0\]\.duration"),
    ("format: genie-trace\nranks: 2\nprogram: [{id: 0, colour: red}]\n", r"program\[0\]\.colour: unknown key"),
    ("format: genie-trace\nranks: [{nodes: [{id: 0, deps: [x]}]}]\n", r"ranks\[0\]\.nodes\[0\]\.deps"),
    ("format: genie-trace\n: : :\n", "not JSON/YAML"),
])
def test_bad_native_input(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        read_native(text, source="t.yaml")


@needs_reference
def test_loader_sniffs_every_format(tmp_path: Path) -> None:
    case = REFERENCE / "all_reduce_8npus_1MB_fc_Ring_4chunks"
    assert detect_format(case) == (TraceFormat.CHAKRA_ET, case / "workload" / "all_reduce")
    assert detect_format(case / "workload" / "all_reduce.3.et")[0] is TraceFormat.CHAKRA_ET
    assert load_trace(case / "workload" / "all_reduce").num_ranks == 8
    assert load_trace(case / "workload" / "all_reduce.3.et").num_ranks == 8
    assert detect_format(ROOT / "traces" / "param_tp2_dp2" / "rank2.json") == (TraceFormat.PARAM_BASIC,
                                                                              ROOT / "traces" / "param_tp2_dp2")
    assert load_trace(SAMPLE).num_ranks == 4
    if EXTERNAL.is_dir():
        with pytest.raises(InputError, match="--npus"):
            load_trace(EXTERNAL / "microAllReduce.txt")
        assert load_trace(EXTERNAL / "microAllReduce.txt", npus=8).num_ranks == 8
    # one ET file named anything.et (chakra_converter --output_filename): Chakra ET, one rank
    (tmp_path / "rank3.et").write_bytes((case / "workload" / "all_reduce.3.et").read_bytes())
    assert detect_format(tmp_path / "rank3.et") == (TraceFormat.CHAKRA_ET, tmp_path / "rank3.et")
    assert load_trace(tmp_path / "rank3.et").num_ranks == 1
    (tmp_path / "junk.bin").write_bytes(b"\x00\x01")
    with pytest.raises(InputError, match="cannot tell the trace format"):
        load_trace(tmp_path / "junk.bin")
    with pytest.raises(InputError, match="no such file"):
        load_trace(tmp_path / "absent")


def test_saver(tmp_path: Path) -> None:
    trace = load_trace(SAMPLE)
    assert output_format("json", "x.yml") is OutputFormat.YAML
    with pytest.raises(InputError, match="unknown output format"):
        output_format("csv", "x")
    paths = save_trace(trace, tmp_path / "w", to=OutputFormat.ET)
    assert len(paths) == 5 and load_trace(tmp_path / "w").ranks == trace.ranks
    (out,) = save_trace(trace, tmp_path / "t.json", to=OutputFormat.JSON)
    assert load_trace(out) == trace


def test_attribute_values_are_checked_against_their_type() -> None:
    head = "format: genie-trace\nranks: 1\nprogram: [{id: 0, attrs: [{name: x, type: %s, value: %s}]}]\n"
    with pytest.raises(InputError, match=r"program\[0\]\.attrs\[0\]\.value: 'abc' is not a valid int64_val"):
        read_native(head % ("int64_val", '"abc"'))
    with pytest.raises(InputError, match="not a valid bool_val"):
        read_native(head % ("bool_val", "1"))
    with pytest.raises(InputError, match="unknown attribute type"):
        read_native(head % ("int128_val", "1"))
    node = read_native(head % ("float_list", "[1, 2.5]")).ranks[0].nodes[0]
    assert node.attr("x").value == (1.0, 2.5)
