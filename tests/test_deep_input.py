"""Issue #35 item 5: a pathological JSON/YAML document (nested a million deep, NaN, 1e400, a huge integer, the
wrong top-level type) is one line naming the file, exit code 2, no traceback, from every reader of user input."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from genie.core.errors import InputError
from genie.core.jsondoc import decode_json
from tests.hostile_support import assert_refused, run_cli

DEPTH = 200_000  # far past Python's recursion limit (1000) and any C stack the decoder may use
DEEP_LIST = "[" * DEPTH + "]" * DEPTH
DEEP_OBJECT = '{"a":' * DEPTH + "1" + "}" * DEPTH
DEEP_YAML = "a: " + "[" * DEPTH + "]" * DEPTH + "\n"


# ---- the one decoder ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "needle"), [
    (DEEP_LIST, "nested too deeply"),
    (DEEP_OBJECT, "nested too deeply"),
    ('{"x": NaN}', "NaN is not a JSON number"),
    ('{"x": -Infinity}', "-Infinity is not a JSON number"),
    ('{"x": 1e400}', "too large for a float"),
    ('{"x": ' + "9" * 5000 + "}", "digits"),
    ('{"x": 1,}', "(line 1, column 9)"),
    (b'{"x": "\xff"}', "UTF-8"),
])
def test_decode_json_refuses_pathological_documents(text: str | bytes, needle: str) -> None:
    with pytest.raises(InputError) as info:
        decode_json(text, source="f.json")
    assert needle in str(info.value) and str(info.value).startswith("f.json")
    assert "\n" not in str(info.value)


def test_decode_json_checks_the_top_level_type_and_reads_good_documents() -> None:
    with pytest.raises(InputError, match="f.json: expected a JSON object at the top level, got a JSON list"):
        decode_json("[1]", source="f.json", top=dict)
    with pytest.raises(InputError, match="got null"):
        decode_json("null", source="f.json", top=list)
    assert decode_json('{"a": [1, 2.5, "x", null, true]}', source="f.json", top=dict) == {
        "a": [1, 2.5, "x", None, True]}
    assert decode_json("[" * 50 + "]" * 50, source="f.json") is not None
    # a run directory's own files: Python's json writes NaN for a NaN figure, and genie reads its runs back
    doc = decode_json('{"x": NaN, "y": -Infinity}', source="f.json", allow_nan=True)
    assert doc["x"] != doc["x"] and doc["y"] == float("-inf")
    with pytest.raises(InputError, match="too large for a float"):
        decode_json('{"x": 1e400}', source="f.json", allow_nan=True)


# ---- every reader of user JSON/YAML -----------------------------------------------------------------------
def _readers() -> dict[str, Callable[[bytes], object]]:
    from astra_adapter.calibration_io import parse_calibration
    from astra_adapter.config import parse_network, parse_remote_memory, parse_system
    from astra_adapter.nccl.calibration_io import parse_calibration as parse_nccl_calibration
    from genie.core.flowpath import RunPaths
    from genie.input_yaml import parse_yaml
    from genie.measure.nccl_output import parse_nccl_tests
    from genie.report.manifest import manifest_from_json
    from genie.report.readers import read_calibration, read_diagnose_json
    from genie.workloads.chakra_et import read_comm_groups
    from genie.workloads.native import read_native
    from genie.workloads.param_comms import read_param_rank
    from genie.workloads.pg_metadata import parse_pg_records
    from genie.workloads.pytorch_et import load_json

    s = "f.json"
    return {
        "astra calibration": lambda d: parse_calibration(d, source=s),
        "astra system": lambda d: parse_system(d, source=s),
        "astra network": lambda d: parse_network(d, source=s),
        "astra remote memory": lambda d: parse_remote_memory(d, source=s),
        "nccl calibration": lambda d: parse_nccl_calibration(d, source=s),
        "paths.json": lambda d: RunPaths.parse(d, source=s),
        "yaml": lambda d: parse_yaml(d.decode(), s),
        "nccl-tests -J": lambda d: parse_nccl_tests(d, source=s),
        "manifest": lambda d: manifest_from_json(d, source=s),
        "report calibration": lambda d: read_calibration(d, None, source_json=s, source_csv="c.csv"),
        "diagnose": lambda d: read_diagnose_json(d, source=s),
        "comm groups": lambda d: read_comm_groups(d, source=s),
        "native trace": lambda d: read_native(d, source=s),
        "param": lambda d: read_param_rank(d, rank=0, world_size=1, source=s),
        "pg metadata": lambda d: parse_pg_records(d.decode(), world_size=2, source=s),
        "pytorch": lambda d: load_json(d, source=s),
    }


@pytest.mark.parametrize("reader", sorted(_readers()))
@pytest.mark.parametrize("doc", [DEEP_LIST, DEEP_OBJECT], ids=["list", "object"])
def test_every_reader_refuses_deep_nesting_in_one_line(reader: str, doc: str) -> None:
    with pytest.raises(InputError) as info:
        _readers()[reader](doc.encode())
    message = str(info.value)
    assert message.startswith("f.json") and "\n" not in message, message
    if not (reader == "nccl-tests -J" and doc.startswith("[")):  # not '{': read as nccl-tests text, not JSON
        assert "deeply" in message, message


def test_the_fabric_calibration_reader_refuses_deep_nesting(tmp_path: Path) -> None:
    from astra_adapter.fabric.calibration_io import load_fabric_params

    path = tmp_path / "fabric_calibration.json"
    path.write_text(DEEP_OBJECT)
    with pytest.raises(InputError, match="nested too deeply") as info:
        load_fabric_params(path)
    assert str(path) in str(info.value)


# ---- through the CLI: exit 2, one line naming the file ---------------------------------------------------
OK_TOPOLOGY = "name: t\nhosts: [h0, h1]\nlinks: [{endpoints: [h0, h1]}]\n"
CLI_CASES = {
    "native JSON trace": (("trace", "show", "{d}/trace.json"), "trace.json", {"trace.json": DEEP_OBJECT}),
    "native JSON trace list": (("trace", "show", "{d}/trace.json"), "trace.json",
                               {"trace.json": '{"format": "genie-trace", "ranks": 2, "program": ' + DEEP_LIST + "}"}),
    "native JSON trace NaN": (("trace", "show", "{d}/trace.json"), "trace.json",
                              {"trace.json": '{"format": "genie-trace", "ranks": NaN, "program": []}'}),
    "native YAML trace": (("trace", "show", "{d}/trace.yaml"), "trace.yaml",
                          {"trace.yaml": "format: genie-trace\nranks: 2\nprogram: " + DEEP_LIST + "\n"}),
    "replay a deep trace": (("replay", "{d}/trace.json", "--loopback", "--out", "{d}/run"), "trace.json",
                            {"trace.json": DEEP_OBJECT}),
    "topology": (("testbed", "up", "{d}/topo.yaml", "--dry-run"), "topo.yaml", {"topo.yaml": DEEP_YAML}),
    "experiment": (("experiment", "{d}/exp.yaml", "--out", "{d}/run"), "exp.yaml", {"exp.yaml": DEEP_YAML}),
    "faults": (("bench", "--loopback", "--faults", "{d}/faults.yaml", "--out", "{d}/run"), "faults.yaml",
               {"faults.yaml": DEEP_YAML}),
    "PARAM trace": (("trace", "show", "{d}/rank0.json"), "rank0.json", {"rank0.json": DEEP_LIST}),
    "PyTorch ET": (("trace", "import", "{d}/pt", "{d}/out"), "host.0.json", {"pt/host.0.json": DEEP_OBJECT}),
}


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_a_deeply_nested_input_is_one_line_and_exit_2(tmp_path: Path, name: str) -> None:
    argv, file_name, files = CLI_CASES[name]
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    outcome = run_cli([a.format(d=tmp_path) for a in argv])
    assert_refused(outcome, file_name, max_lines=1)
