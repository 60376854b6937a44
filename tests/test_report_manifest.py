"""Run directories: manifest fields, status transitions, atomic progressive files, input digests."""

import json
import os

import pytest

from genie import __version__
from genie.core.errors import InputError, RunFailure
from genie.core.testbed import Shaping
from genie.core.topology import Host, Link, LinkShape, Switch, Topology
from genie.report.manifest import (MANIFEST_NAME, RunRecorder, RunStatus, add_run_files, input_digest,
                                   manifest_from_json, read_manifest, topology_summary)
from genie.testbed.lifecycle import Terminated


def _manifest(run_dir):
    return json.loads((run_dir / MANIFEST_NAME).read_text())


def test_manifest_fields_while_running_and_after(tmp_path):
    topo = tmp_path / "t.yaml"
    topo.write_text("name: t\n")
    with RunRecorder("bench", out=tmp_path / "run", argv=["genie", "bench", "--loopback"],
                     inputs=[input_digest(topo, "topology")], seed=7, params={"iterations": 3}) as run:
        doc = _manifest(run.run_dir)
        assert doc["status"] == "running" and doc["ended_at"] is None and doc["files"] == []
        run.describe(target="tb", shaper=Shaping.HTB, topology={"name": "t", "link_rate_bps": 10**9})
        run.write("sweep.csv", "a,b\n1,2\n")
        doc = _manifest(run.run_dir)
        assert [f["name"] for f in doc["files"]] == ["sweep.csv"]  # listed as soon as written
        run.write("sweep.csv", "a,b\n1,2\n3,4\n")  # rewritten progressively: listed once, new size
    doc = _manifest(run.run_dir)
    assert doc["format"] == "genie-run" and doc["version"] == 1
    assert doc["kind"] == "bench" and doc["argv"] == ["genie", "bench", "--loopback"]
    assert doc["genie_version"] == __version__ and doc["kernel"]["release"] == os.uname().release
    assert doc["status"] == "complete" and doc["error"] is None
    assert doc["started_at"].endswith("Z") and doc["ended_at"] >= doc["started_at"] and doc["duration_s"] >= 0
    assert doc["target"] == "tb" and doc["shaper"] == "htb" and doc["topology"]["link_rate_bps"] == 10**9
    assert doc["seed"] == 7 and doc["params"] == {"iterations": 3}
    assert doc["inputs"][0]["role"] == "topology" and len(doc["inputs"][0]["sha256"]) == 64
    assert doc["files"] == [{"name": "sweep.csv", "size_bytes": 12, "sha256": doc["files"][0]["sha256"]}]
    m = read_manifest(run.run_dir)
    assert m.status is RunStatus.COMPLETE and m.file_names() == ("sweep.csv",)
    assert m.shaper is Shaping.HTB


def test_the_manifest_writes_the_shaping_label_and_reads_it_back(tmp_path):
    with RunRecorder("bench", out=tmp_path / "run", argv=["genie"]) as run:
        run.describe(shaper=Shaping.HTB | Shaping.NETEM | Shaping.PFIFO)
    assert _manifest(run.run_dir)["shaper"] == "htb+netem+pfifo"
    assert read_manifest(run.run_dir).shaper == Shaping.HTB | Shaping.NETEM | Shaping.PFIFO
    doc = _manifest(run.run_dir)
    for label, shaping in (("none", Shaping.NONE), (None, None), ("htb+userspace", Shaping.HTB | Shaping.USERSPACE)):
        doc["shaper"] = label
        (run.run_dir / MANIFEST_NAME).write_text(json.dumps(doc))
        assert read_manifest(run.run_dir).shaper == shaping
    doc["shaper"] = "htb+tbf"
    (run.run_dir / MANIFEST_NAME).write_text(json.dumps(doc))
    with pytest.raises(InputError, match="shaper"):
        read_manifest(run.run_dir)


@pytest.mark.parametrize("exc,status", [
    (KeyboardInterrupt(), "interrupted"),
    (Terminated(15), "interrupted"),
    (RunFailure("rank 3: rank 4 closed the connection"), "failed"),
    (RuntimeError("boom"), "failed"),
])
def test_status_on_exceptions_keeps_finished_files(tmp_path, exc, status):
    with pytest.raises(type(exc)):
        with RunRecorder("bench", out=tmp_path / "run") as run:
            run.write("sweep.csv", "x\n1\n")
            raise exc
    doc = _manifest(tmp_path / "run")
    assert doc["status"] == status
    assert [f["name"] for f in doc["files"]] == ["sweep.csv"] and (tmp_path / "run" / "sweep.csv").exists()
    if status == "failed":
        assert doc["error"] == str(exc)


def test_bad_input_before_any_file_leaves_nothing(tmp_path):
    root = tmp_path / "runs"
    with pytest.raises(InputError):
        with RunRecorder("replay", root=root):
            raise InputError("must be >= 1", path="--iterations")
    assert list(root.iterdir()) == []


def test_default_run_dir_is_timestamped_and_unique(tmp_path):
    with RunRecorder("bench", root=tmp_path) as a, RunRecorder("bench", root=tmp_path) as b:
        pass
    assert a.run_dir != b.run_dir and a.run_dir.name.endswith("-bench") and b.run_dir.name.endswith("-bench-2")


def test_no_temporary_files_left(tmp_path):
    with RunRecorder("bench", out=tmp_path) as run:
        run.write("a.csv", "1\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", MANIFEST_NAME]


def test_add_run_files_updates_a_finished_manifest(tmp_path):
    with RunRecorder("bench", out=tmp_path) as run:
        run.write("sweep.csv", "1\n")
    (tmp_path / "report.html").write_text("<html></html>")
    add_run_files(tmp_path, ["report.html"])
    m = read_manifest(tmp_path)
    assert m.file_names() == ("sweep.csv", "report.html") and m.status is RunStatus.COMPLETE


def test_input_digest_of_file_directory_and_prefix(tmp_path):
    (tmp_path / "w.0.et").write_bytes(b"a")
    (tmp_path / "w.1.et").write_bytes(b"b")
    prefix = input_digest(tmp_path / "w", "trace")
    one = input_digest(tmp_path / "w.0.et", "trace")
    directory = input_digest(tmp_path, "trace")
    assert prefix.files == 2 and one.sha256 == prefix.sha256 and directory.files == 2
    (tmp_path / "w.1.et").write_bytes(b"c")
    assert input_digest(tmp_path / "w", "trace").sha256 != prefix.sha256
    assert input_digest(tmp_path / "missing", "trace").sha256 is None


def test_manifest_reader_rejects_foreign_json():
    with pytest.raises(InputError, match="format"):
        manifest_from_json(b'{"kind": "bench"}', source="x/manifest.json")
    with pytest.raises(InputError, match="not JSON"):
        manifest_from_json(b"{", source="x/manifest.json")


def test_topology_summary_line_rate_is_the_slowest_host_link():
    topo = Topology("t", (Host("a"), Host("b")), (Switch("s"),),
                    (Link("a", "s", LinkShape(rate_bps=25 * 10**9)), Link("b", "s", LinkShape(rate_bps=10**10))))
    assert topology_summary(topo)["link_rate_bps"] == 10**10
    unshaped = Topology("u", (Host("a"),), (Switch("s"),), (Link("a", "s"),))
    assert topology_summary(unshaped)["link_rate_bps"] is None


def test_ctrl_c_between_a_write_and_its_listing_still_lists_the_file(tmp_path, monkeypatch):
    """`genie bench` interrupted just as a size's sweep.csv is in place (tests/test_report_cli.py's interrupted
    bench hit this window): the file the run directory holds whole is in the manifest of the interrupted run."""
    def cut_off(self, entry):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with RunRecorder("bench", out=tmp_path / "run") as run:
            run.write("first.csv", "a\n")
            monkeypatch.setattr(RunRecorder, "_add", cut_off)
            run.write("sweep.csv", "a,b\n1,2\n")
    doc = _manifest(tmp_path / "run")
    assert doc["status"] == "interrupted"
    assert [f["name"] for f in doc["files"]] == ["first.csv", "sweep.csv"]
    assert doc["files"][1]["size_bytes"] == len("a,b\n1,2\n")


def test_ctrl_c_inside_a_write_lists_nothing_new(tmp_path, monkeypatch):
    """Interrupted before the file was in place (write_atomic renames last): the name keeps what it held - here
    the earlier version, listed as it was."""
    import genie.report.manifest as manifest_module

    def cut_off(path, payload):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with RunRecorder("bench", out=tmp_path / "run") as run:
            run.write("sweep.csv", "old\n")
            monkeypatch.setattr(manifest_module, "write_atomic", cut_off)
            try:
                run.write("sweep.csv", "new,longer\n")
            finally:
                monkeypatch.undo()
    doc = _manifest(tmp_path / "run")
    assert doc["status"] == "interrupted"
    assert [(f["name"], f["size_bytes"]) for f in doc["files"]] == [("sweep.csv", len("old\n"))]
