"""Chakra ET reader/writer: every reference file parses and round-trips byte for byte; bad input is located."""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import pytest

from genie.core.errors import InputError
from genie.core.trace import (Attribute, AttrType, CommType, IOInfo, NodeKind, TraceMetadata, collective_node,
                              compute_node, make_trace, recv_node, send_node, ProcessGroup)
from genie.workloads import et_schema
from genie.workloads.chakra_et import encode_varint, read_et, read_et_set, write_et, write_et_set

REFERENCE = Path(__file__).resolve().parent / "data" / "astra-reference"
ET_FILES = sorted(REFERENCE.glob("*/workload/*.et"))
needs_reference = pytest.mark.skipif(not ET_FILES, reason=f"reference data not found under {REFERENCE}")
CASE_RE = re.compile(r"^(?P<coll>all_reduce|all_gather|all_to_all|reduce_scatter)_(?P<n>\d+)npus_(?P<mb>\d+)MB")


@needs_reference
def test_every_reference_file_parses_and_round_trips_byte_identically() -> None:
    assert len(ET_FILES) > 100
    for path in ET_FILES:
        data = path.read_bytes()
        meta, nodes = read_et(data, source=str(path))
        assert meta.version == "0.0.4"
        assert nodes, path
        first = write_et(nodes, meta)
        assert first == data, path
        assert write_et(*reversed(read_et(first))) == first


@needs_reference
def test_reference_sets_have_the_expected_collectives() -> None:
    for case in sorted(p for p in REFERENCE.iterdir() if CASE_RE.match(p.name)):
        m = CASE_RE.match(case.name)
        files = sorted((case / "workload").glob("*.et"))
        prefix = files[0].name.split(".")[0]
        trace = read_et_set(case / "workload" / prefix)
        assert trace.num_ranks == int(m["n"]), case
        for rank in trace.ranks:
            (node,) = rank.nodes
            assert node.kind is NodeKind.COLLECTIVE
            assert node.comm_type is CommType[m["coll"].upper()]
            assert node.size_bytes == int(m["mb"]) * 2**20
            assert node.id == rank.rank


@needs_reference
def test_compute_comm_reference_decodes_durations_and_deps() -> None:
    trace = read_et_set(REFERENCE / "cc_trainstep_L4_f50us_b100us_ar4MB_8npus_ring" / "workload" / "workload")
    nodes = trace.ranks[0].nodes
    assert [n.kind for n in nodes[:5]] == [NodeKind.COMPUTE] * 5
    assert nodes[0].duration_ns == 50_000 and nodes[4].duration_ns == 100_000
    assert nodes[1].data_deps == (0,)
    colls = [n for n in nodes if n.kind is NodeKind.COLLECTIVE]
    assert len(colls) == 4 and all(n.size_bytes == 4 * 2**20 for n in colls)


@needs_reference
def test_writer_reproduces_the_hexdump_example() -> None:
    lines = (REFERENCE / "et_hexdump_example_microbenchmark.txt").read_text().splitlines()
    expected = bytes.fromhex("".join("".join(line.split(":", 1)[1].strip().split("  ")[0].split()) for line in lines))
    node = collective_node(3, "all_reduce_8npus_1MB", comm_type=CommType.ALL_REDUCE, size_bytes=2**20)
    assert write_et([node]) == expected
    assert read_et(expected)[1] == [node]


def test_gzip_and_stream_input() -> None:
    data = write_et([compute_node(0, "c", duration_ns=7000)])
    assert read_et(io.BytesIO(gzip.compress(data)))[1] == read_et(data)[1]


def test_every_attribute_type_and_unknown_fields_survive() -> None:
    values = {AttrType.DOUBLE: 1.5, AttrType.FLOAT: 0.25, AttrType.INT32: -3, AttrType.INT64: -2**40,
              AttrType.UINT32: 7, AttrType.UINT64: 2**63, AttrType.SINT32: -5, AttrType.SINT64: -2**50,
              AttrType.FIXED32: 9, AttrType.FIXED64: 2**60, AttrType.SFIXED32: -9, AttrType.SFIXED64: -2**60,
              AttrType.BOOL: False, AttrType.STRING: "x", AttrType.BYTES: b"\x00\x01"}
    attrs = [Attribute(t.value, t, v) for t, v in values.items()]
    attrs += [Attribute("empty_list", AttrType.INT64_LIST, ()), Attribute("none", AttrType.NONE, None),
              Attribute("strings", AttrType.STRING_LIST, ("a", "b"), doc_string="doc"),
              Attribute("bools", AttrType.BOOL_LIST, (True, False))]
    storage_field = bytes([11 << 3 | 2, 2, 8, 1])  # Node.storage (field 11) from a newer Chakra: unknown here
    node = compute_node(5, "all", duration_ns=3000, data_deps=(1, 2), ctrl_deps=(4,))
    from dataclasses import replace
    node = replace(node, attrs=tuple(attrs), inputs=IOInfo("[1]", "[[2]]", "[t]"), outputs=IOInfo(),
                   extra_wire=storage_field)
    meta = TraceMetadata("0.0.4", (Attribute("schema", AttrType.STRING, "x"),))
    dep_nodes = [compute_node(i, f"d{i}") for i in (1, 2, 4)]
    data = write_et([*dep_nodes, node], meta)
    meta2, nodes2 = read_et(data)
    assert meta2 == meta and nodes2[-1] == node
    assert write_et(nodes2, meta2) == data


def test_schema_matches_the_proto_file() -> None:
    text = (Path(et_schema.__file__).parent / "et_def.proto").read_text()
    fd = et_schema.file_descriptor()
    for msg in fd.message_type:
        body = re.search(r"message %s \{(.*?)\n?\}" % msg.name, text, re.S)
        assert body, msg.name
        declared = dict((name, int(num)) for name, num in re.findall(r"(\w+) = (\d+);", body.group(1)))
        assert declared == {f.name: f.number for f in msg.field}, msg.name
    for enum in fd.enum_type:
        body = re.search(r"enum %s \{(.*?)\}" % enum.name, text, re.S).group(1)
        assert dict(re.findall(r"(\w+) = (\d+);", body)) == {v.name: str(v.number) for v in enum.value}


def _frames_of(data: bytes) -> list[int]:
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        length = data[pos]
        pos += 1 + length
    return offsets


def test_truncated_file_names_source_and_byte_offset() -> None:
    data = write_et([compute_node(i, f"n{i}", duration_ns=1000) for i in range(3)])
    last = _frames_of(data)[-1]
    with pytest.raises(InputError) as err:
        read_et(data[:-2], source="w.0.et")
    assert "w.0.et" in str(err.value) and f"byte offset {last}" in str(err.value)


def test_corrupt_varint_and_corrupt_node() -> None:
    with pytest.raises(InputError, match=r"byte offset 0"):
        read_et(b"\xff" * 11)
    with pytest.raises(InputError, match=r"truncated frame length at byte offset 8"):
        read_et(write_et([]) + b"\x80")
    bad = write_et([]) + encode_varint(3) + b"\x0a\x05\x01"  # length-delimited field overruns its message
    with pytest.raises(InputError, match=r"corrupt Node \(frame 1\) at byte offset 8"):
        read_et(bad, source="x.et")
    with pytest.raises(InputError, match="empty"):
        read_et(b"")
    with pytest.raises(InputError, match="gzip"):
        read_et(b"\x1f\x8b\x08garbage")


def test_a_set_parses_each_distinct_record_once_and_shares_it(tmp_path: Path) -> None:
    """Replicas repeat each other's records: read once, shared (nodes are immutable), equal to reading alone."""
    replica = [compute_node(0, "fwd", duration_ns=1500),
               collective_node(1, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=4096, process_group="dp",
                               data_deps=(0,))]
    trace = make_trace([replica, replica, [compute_node(0, "other", duration_ns=7)]],
                       groups=(ProcessGroup("dp", (0, 1)),))
    write_et_set(trace, tmp_path / "w")
    back = read_et_set(tmp_path / "w")
    assert back.ranks == trace.ranks
    assert all(a is b for a, b in zip(back.ranks[0].nodes, back.ranks[1].nodes))
    alone = [read_et((tmp_path / f"w.{r}.et").read_bytes())[1] for r in range(3)]
    assert [list(r.nodes) for r in back.ranks] == alone


def test_set_round_trip_with_groups_and_missing_rank(tmp_path: Path) -> None:
    trace = make_trace([
        [compute_node(0, "c", duration_ns=2000), send_node(1, "s", rank=0, peer=1, size_bytes=64, data_deps=(0,)),
         collective_node(2, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=1024, process_group="tp")],
        [recv_node(0, "r", rank=1, peer=0, size_bytes=64),
         collective_node(1, "ar", comm_type=CommType.ALL_REDUCE, size_bytes=1024, process_group="tp")],
    ], groups=(ProcessGroup("tp", (0, 1)),))
    paths = write_et_set(trace, tmp_path / "w")
    assert {p.name for p in paths} == {"w.0.et", "w.1.et", "w.comm_group.json"}
    back = read_et_set(tmp_path / "w")
    assert back.ranks == trace.ranks and back.groups == trace.groups
    (tmp_path / "w.1.et").rename(tmp_path / "w.2.et")
    with pytest.raises(InputError, match=r"missing rank file\(s\) w\.1\.et"):
        read_et_set(tmp_path / "w")
    with pytest.raises(InputError, match="no files"):
        read_et_set(tmp_path / "nothing")
