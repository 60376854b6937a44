"""Issue #18: a corpus of bad inputs. Each is refused with exit code 2, no traceback, at most 3 lines that
name the file (or option) and the field, and nothing is created. Plain files run in this process; hostile ones
(a FIFO, /dev/zero, bombs, huge files) in a subprocess under a memory cap (`tests.hostile_support`)."""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from genie.core.trace import Attribute, AttrType, NodeKind, TraceNode
from genie.workloads.chakra_et import write_et
from tests.hostile_support import assert_refused, run_capped, run_cli, tree

ROOT = Path(__file__).resolve().parents[1]
OK_TOPOLOGY = "name: t\nhosts: [h0, h1]\nswitches: [s0]\nlinks: [{endpoints: [h0, s0]}, {endpoints: [h1, s0]}]\n"
OK_TRACE = "format: genie-trace\nranks: 2\nprogram: [{id: 1, type: compute, duration: 1us}]\n"
BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"] + [
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi")]) + "\n"


def _link(key: str, value: str) -> str:
    return f"name: t\nhosts: [h0, h1]\nlinks: [{{endpoints: [h0, h1], {key}: {value}}}]\n"


def _fault(text: str) -> str:
    return f"faults:\n  - {text}\n"


def _experiment(extra: str) -> str:
    return f"workload: {{trace: trace.yaml}}\ntopology: topo.yaml\n{extra}"


Builder = Callable[[Path], None]


@dataclass(frozen=True)
class Bad:
    argv: tuple[str, ...]  # {d} is the case's directory
    needles: tuple[str, ...]  # the file (or option) and the field, as the message must name them
    files: dict[str, str | bytes] = field(default_factory=dict)
    build: Builder | None = None  # a hostile file made at run time
    capped: bool = False  # run in a subprocess under a memory cap and a timeout


def _fifo(name: str) -> Builder:
    return lambda d: os.mkfifo(d / name)


def _big(name: str, size_bytes: int) -> Builder:
    """A file of `size_bytes` (sparse: the size limit refuses it before a byte is read; the bounded read of a
    file that grows is in test_input_limits)."""
    def build(d: Path) -> None:
        with open(d / name, "wb") as f:
            f.write(b"hosts:\n")
            f.truncate(size_bytes)
    return build


def _gzip_bomb(name: str) -> Builder:
    def build(d: Path) -> None:  # 70 gzip members of 8 MiB of zeros each: 560 MiB from ~560 KB
        member = zlib.compress(bytes(8 << 20), 9, wbits=16 + zlib.MAX_WBITS)
        (d / name).write_bytes(member * 70)
    return build


TOPO = ("testbed", "up", "{d}/topo.yaml", "--dry-run")
FAULTS = ("bench", "--loopback", "--faults", "{d}/faults.yaml", "--out", "{d}/run")
EXPERIMENT = ("experiment", "{d}/exp.yaml", "--out", "{d}/run")
SHOW = ("trace", "show", "{d}/trace.yaml")
INVENTORY = ("bench", "--inventory", "{d}/inv.yaml", "--launcher", "mpi", "--out", "{d}/run")
LOOP = ("bench", "--loopback", "--out", "{d}/run")

CORPUS: dict[str, Bad] = {
    # ---- topology
    "topo: not a mapping": Bad(TOPO, ("topo.yaml",), {"topo.yaml": "- a\n- b\n"}),
    "topo: yaml syntax": Bad(TOPO, ("topo.yaml", "line 3"), {"topo.yaml": "name: t\nhosts: [h0\n"}),
    "topo: unknown key": Bad(TOPO, ("topo.yaml", "colour"), {"topo.yaml": OK_TOPOLOGY + "colour: red\n"}),
    "topo: duplicate key": Bad(TOPO, ("topo.yaml", "duplicate key 'name'"), {"topo.yaml": "name: a\n" + OK_TOPOLOGY}),
    "topo: no hosts": Bad(TOPO, ("topo.yaml", "hosts"), {"topo.yaml": "name: t\nhosts: []\nlinks: []\n"}),
    "topo: ranks 0": Bad(TOPO, ("topo.yaml", "hosts[0].ranks"),
                         {"topo.yaml": "name: t\nhosts: [{name: h0, ranks: 0}, h1]\nlinks: [{endpoints: [h0, h1]}]\n"}),
    "topo: a billion ranks": Bad(TOPO, ("topo.yaml", "hosts[0].ranks", "at most 4096"),
                                 {"topo.yaml": "name: t\nhosts: [{name: h0, ranks: 1000000000}, h1]\n"
                                               "links: [{endpoints: [h0, h1]}]\n"}),
    "topo: huge host group": Bad(TOPO, ("topo.yaml", "hosts[0].count"),
                                 {"topo.yaml": "name: t\nhosts: [{prefix: h, count: 100000000}]\nlinks: []\n"}),
    "topo: bandwidth no unit": Bad(TOPO, ("topo.yaml", "links[0].bandwidth"), {"topo.yaml": _link("bandwidth", "100")}),
    "topo: bandwidth 1e400": Bad(TOPO, ("topo.yaml", "links[0].bandwidth"), {"topo.yaml": _link("bandwidth", "1e400gbit")}),
    "topo: bandwidth absurd": Bad(TOPO, ("topo.yaml", "links[0].bandwidth", "10tbit"),
                                  {"topo.yaml": _link("bandwidth", "99999999999tbit")}),
    "topo: bandwidth negative": Bad(TOPO, ("topo.yaml", "links[0].bandwidth"), {"topo.yaml": _link("bandwidth", "-1gbit")}),
    "topo: delay 1e400": Bad(TOPO, ("topo.yaml", "links[0].delay"), {"topo.yaml": _link("delay", "1e400ms")}),
    "topo: delay huge": Bad(TOPO, ("topo.yaml", "links[0].delay"), {"topo.yaml": _link("delay", "1000000s")}),
    "topo: loss 200%": Bad(TOPO, ("topo.yaml", "links[0].loss"), {"topo.yaml": _link("loss", "200%")}),
    "topo: loss nan": Bad(TOPO, ("topo.yaml", "links[0].loss"), {"topo.yaml": _link("loss", ".nan")}),
    "topo: mtu tiny": Bad(TOPO, ("topo.yaml", "links[0].mtu"), {"topo.yaml": _link("mtu", "10")}),
    "topo: unknown endpoint": Bad(TOPO, ("topo.yaml", "links[0].endpoints", "h9"),
                                  {"topo.yaml": "name: t\nhosts: [h0, h1]\nlinks: [{endpoints: [h0, h9]}]\n"}),
    "topo: long value": Bad(TOPO, ("topo.yaml", "links[0].bandwidth", "characters)"),
                            {"topo.yaml": _link("bandwidth", "9" * 100_000 + "x")}),
    "topo: not utf-8": Bad(TOPO, ("topo.yaml", "UTF-8"), {"topo.yaml": b"name: \xff\xfe\n"}),
    "topo: alias bomb": Bad(TOPO, ("topo.yaml", "aliases"), {"topo.yaml": BOMB}, capped=True),
    "topo: /dev/zero": Bad(("testbed", "up", "/dev/zero", "--dry-run"), ("/dev/zero", "not a regular file"), capped=True),
    "topo: fifo": Bad(TOPO, ("topo.yaml", "a FIFO"), build=_fifo("topo.yaml"), capped=True),
    "topo: 50 MB": Bad(TOPO, ("topo.yaml", "larger than the 8 MiB"), build=_big("topo.yaml", 50_000_000), capped=True),
    "topo: a directory": Bad(("testbed", "up", "{d}/dir", "--dry-run"), ("dir", "a directory"),
                             build=lambda d: (d / "dir").mkdir()),
    # ---- faults
    "faults: not a list": Bad(FAULTS, ("faults.yaml", "faults"), {"faults.yaml": "faults: 3\n"}),
    "faults: unknown kind": Bad(FAULTS, ("faults.yaml", "faults[0].kind"), {"faults.yaml": _fault("{kind: explode, at: 1s}")}),
    "faults: rate 1e400": Bad(FAULTS, ("faults.yaml", "faults[0].rate"),
                              {"faults.yaml": _fault("{kind: degrade, link: h0-s0, rate: 1e400mbit, at: 1s}")}),
    "faults: at 1e400": Bad(FAULTS, ("faults.yaml", "faults[0].at"),
                            {"faults.yaml": _fault("{kind: degrade, link: h0-s0, rate: 1mbit, at: 1e400s}")}),
    "faults: at negative": Bad(FAULTS, ("faults.yaml", "faults[0].at"),
                               {"faults.yaml": _fault("{kind: degrade, link: h0-s0, rate: 1mbit, at: -1s}")}),
    "faults: duplicate key": Bad(FAULTS, ("faults.yaml", "duplicate key"),
                                 {"faults.yaml": _fault("{kind: down, kind: up, link: h0-s0, at: 1s}")}),
    "faults: unknown field": Bad(FAULTS, ("faults.yaml", "faults[0]", "colour"),
                                 {"faults.yaml": _fault("{kind: down, link: h0-s0, at: 1s, colour: red}")}),
    "faults: alias bomb": Bad(FAULTS, ("faults.yaml", "aliases"), {"faults.yaml": BOMB}, capped=True),
    "faults: fifo": Bad(FAULTS, ("faults.yaml", "a FIFO"), build=_fifo("faults.yaml"), capped=True),
    "faults: compact spec": Bad(("bench", "--loopback", "--fault", "degrade h0-s0 rate=1e400mbit at=1s",
                                 "--out", "{d}/run"), ("--fault",), {}),
    # ---- experiment
    "exp: not a mapping": Bad(EXPERIMENT, ("exp.yaml",), {"exp.yaml": "[1, 2]\n"}),
    "exp: missing topology": Bad(EXPERIMENT, ("exp.yaml", "topology"), {"exp.yaml": "workload: {trace: t}\n"}),
    "exp: unknown key": Bad(EXPERIMENT, ("exp.yaml", "colour"), {"exp.yaml": _experiment("colour: red\n")}),
    "exp: duplicate key": Bad(EXPERIMENT, ("exp.yaml", "duplicate key 'topology'"),
                              {"exp.yaml": _experiment("topology: other.yaml\n")}),
    "exp: iterations 0": Bad(EXPERIMENT, ("exp.yaml", "sweep.iterations"), {"exp.yaml": _experiment("sweep: {iterations: 0}\n")}),
    "exp: timeout nan": Bad(EXPERIMENT, ("exp.yaml", "replay.timeout"), {"exp.yaml": _experiment("replay: {timeout: .nan}\n")}),
    "exp: timeout inf": Bad(EXPERIMENT, ("exp.yaml", "replay.timeout"), {"exp.yaml": _experiment("replay: {timeout: .inf}\n")}),
    "exp: grid size 1e400": Bad(EXPERIMENT, ("exp.yaml", "sweep.grid[0]"), {"exp.yaml": _experiment("sweep: {grid: [1e400K]}\n")}),
    "exp: alias bomb": Bad(EXPERIMENT, ("exp.yaml", "aliases"), {"exp.yaml": BOMB}, capped=True),
    "exp: /dev/zero": Bad(("experiment", "/dev/zero"), ("/dev/zero", "not a regular file"), capped=True),
    # ---- genie trace (JSON/YAML)
    "trace: unknown top-level key": Bad(SHOW, ("trace.yaml", "bogus"), {"trace.yaml": OK_TRACE + "bogus: 1\n"}),
    "trace: ranks 0": Bad(SHOW, ("trace.yaml", "ranks"), {"trace.yaml": OK_TRACE.replace("ranks: 2", "ranks: 0")}),
    "trace: a billion ranks": Bad(SHOW, ("trace.yaml", "ranks", "65536"),
                                  {"trace.yaml": OK_TRACE.replace("ranks: 2", "ranks: 1000000000")}, capped=True),
    "trace: duration 1e400": Bad(SHOW, ("trace.yaml", "program[0].duration"),
                                 {"trace.yaml": OK_TRACE.replace("1us", "1e400us")}),
    "trace: duplicate key": Bad(SHOW, ("trace.yaml", "duplicate key 'ranks'"), {"trace.yaml": OK_TRACE + "ranks: 3\n"}),
    "trace: bad json": Bad(("trace", "show", "{d}/trace.json"), ("trace.json", "not JSON"),
                           {"trace.json": '{"format": "genie-trace", "ranks": [}'}),
    "trace: json unknown key": Bad(("trace", "show", "{d}/trace.json"), ("trace.json", "extra"),
                                   {"trace.json": '{"format": "genie-trace", "ranks": 1, "program": [], "extra": 1}'}),
    "trace: alias bomb": Bad(SHOW, ("trace.yaml", "aliases"), {"trace.yaml": "format: genie-trace\n" + BOMB}, capped=True),
    "trace: fifo": Bad(SHOW, ("trace.yaml", "a FIFO"), build=_fifo("trace.yaml"), capped=True),
    "trace: 600 MB": Bad(SHOW, ("trace.yaml", "larger than the 512 MiB"), build=_big("trace.yaml", 600_000_000),
                         capped=True),
    # ---- Chakra ET
    "et: garbage": Bad(("trace", "show", "{d}/w.0.et"), ("w.0.et",), {"w.0.et": b"\x05\x01\x02"}),
    "et: truncated gzip": Bad(("trace", "show", "{d}/w.0.et"), ("w.0.et", "corrupt gzip"),
                              {"w.0.et": zlib.compress(b"x" * 1000, wbits=16 + zlib.MAX_WBITS)[:20]}),
    "et: gzip bomb": Bad(("trace", "show", "{d}/w.0.et"), ("w.0.et", "gunzipped trace file is larger"),
                         build=_gzip_bomb("w.0.et"), capped=True),
    "et: missing rank file": Bad(("trace", "show", "{d}/w"), ("w.0.et",), {"w.1.et": b""}),
    # chakra_converter's send kernel without comm_dst and no caller naming the peer
    "et: send without a peer": Bad(("replay", "{d}/w", "--loopback", "--out", "{d}/run"), ("w", "node 5", "comm_dst"),
                                   {"w.0.et": write_et([TraceNode(5, "ncclDevKernel_SendRecv", NodeKind.SEND, attrs=(
                                       Attribute("comm_size", AttrType.INT64, 8),))]), "w.1.et": write_et([])}),
    # ---- PyTorch execution traces (genie trace import)
    "pytorch: truncated JSON": Bad(("trace", "import", "{d}/pt", "{d}/out"), ("host.0.json", "not JSON"),
                                   {"pt/host.0.json": '{"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": ['}),
    "pytorch: node without a name": Bad(("trace", "import", "{d}/pt", "{d}/out"), ("host.0.json", "nodes[0].name"),
                                        {"pt/host.0.json": '{"schema": "1.1.1-chakra.0.0.4", "pid": 1, "time": "x", '
                                                           '"start_ts": 1, "finish_ts": 2, "nodes": [{"id": 1}]}'}),
    "pytorch: root outside the world": Bad(
        ("trace", "import", "{d}/pt", "{d}/out"), ("host.0.json", "nodes[id=7]", "root 9"),
        {"pt/host.0.json": '{"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": [{"id": 7, "name": "c10d::reduce_", '
                           '"ctrl_deps": 1, "inputs": {"values": [[[1, 2, 0, 4, 4, "cpu"]], "<Object>", "<Object>", 9, '
                           '0, false, -1], "types": ["GenericList[Tensor(float)]", "Object", "Object", "Int", "Int", '
                           '"Bool", "Int"]}}]}'}),
    # ---- PARAM basic JSON
    "param: not a list": Bad(("trace", "show", "{d}/rank0.json"), ("rank0.json",), {"rank0.json": "[{]"}),
    "param: unknown comms": Bad(("trace", "show", "{d}/rank0.json"), ("rank0.json", "explode"),
                                {"rank0.json": '[{"comms": "explode", "in_msg_size": 4, "dtype": "float"}]'}),
    "param: negative size": Bad(("trace", "show", "{d}/rank0.json"), ("rank0.json", "in_msg_size"),
                                {"rank0.json": '[{"comms": "all_reduce", "in_msg_size": -4, "dtype": "float"}]'}),
    "param: missing rank": Bad(("trace", "show", "{d}"), ("rank",), {"rank1.json": "[]"}),
    # ---- ASTRA-sim text
    "astra: no npus": Bad(("trace", "show", "{d}/w.txt"), ("w.txt", "--npus"), {"w.txt": "DATA\n1\n"}),
    "astra: too many npus": Bad(("trace", "show", "{d}/w.txt", "--npus", "1000000000"), ("w.txt", "npus"),
                                {"w.txt": "DATA\n1\nl0 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 8 10\n"}, capped=True),
    "astra: bad layer count": Bad(("trace", "show", "{d}/w.txt", "--npus", "2"), ("w.txt",), {"w.txt": "DATA\nmany\n"}),
    "astra: short layer": Bad(("trace", "show", "{d}/w.txt", "--npus", "2"), ("w.txt",), {"w.txt": "DATA\n1\nl0 -1 5\n"}),
    # ---- inventory
    "inv: duplicate key": Bad(INVENTORY, ("inv.yaml", "duplicate key 'hosts'"), {"inv.yaml": "hosts: [h0]\nhosts: [h1]\n"}),
    "inv: a billion ranks": Bad(INVENTORY, ("inv.yaml", "hosts[0].ranks", "4096"),
                                {"inv.yaml": "hosts: [{name: h0, address: 198.18.0.1, ranks: 1000000000}]\n"}),
    "inv: bad address": Bad(INVENTORY, ("inv.yaml", "hosts[0].address"), {"inv.yaml": "hosts: [{name: h0, address: nowhere!}]\n"}),
    "inv: alias bomb": Bad(INVENTORY, ("inv.yaml", "aliases"), {"inv.yaml": BOMB}, capped=True),
    "inv: 50 MB": Bad(INVENTORY, ("inv.yaml", "larger than the 8 MiB"),
                      build=_big("inv.yaml", 50_000_000), capped=True),
    # ---- CLI options
    "cli: --ranks 0": Bad(LOOP + ("--ranks", "0"), ("--ranks",)),
    "cli: -c ''": Bad(LOOP + ("-c", ""), ("--collective",)),
    "cli: -c bogus": Bad(LOOP + ("-c", "bogus"), ("--collective", "bogus")),
    "cli: --timeout 0": Bad(LOOP + ("--timeout", "0"), ("--timeout",)),
    "cli: --timeout -5": Bad(LOOP + ("--timeout", "-5"), ("--timeout",)),
    "cli: --timeout nan": Bad(LOOP + ("--timeout", "nan"), ("--timeout",)),
    "cli: --iters 0": Bad(LOOP + ("--iters", "0"), ("--iterations",)),  # --iters: the alias of --iterations
    "cli: --minbytes 1e400": Bad(LOOP + ("-b", "1e400"), ("--minbytes",)),
    "cli: replay -n 0": Bad(("replay", "{d}/trace.yaml", "--loopback", "-n", "0", "--out", "{d}/run"), ("--iterations",),
                            {"trace.yaml": OK_TRACE}),
    "cli: replay --testbed missing -n 0": Bad(("replay", "{d}/trace.yaml", "--testbed", "genie-no-such-testbed", "-n", "0",
                                               "--out", "{d}/run"), ("--iterations",), {"trace.yaml": OK_TRACE}),
    "cli: --out is a file": Bad(("bench", "--loopback", "--out", "{d}/afile"), ("--out", "not a directory"),
                                {"afile": "x"}),
    "cli: --out not empty": Bad(("bench", "--loopback", "--out", "{d}/full"), ("--out", "not empty"),
                                build=lambda d: ((d / "full").mkdir(), (d / "full" / "x").write_text("x"))),
    "cli: --sample-ms -1": Bad(LOOP + ("--sample-ms", "-1"), ("--sample-ms",)),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_bad_input_is_refused_cleanly(tmp_path: Path, name: str) -> None:
    bad = CORPUS[name]
    for file_name, content in bad.files.items():
        path = tmp_path / file_name
        path.parent.mkdir(parents=True, exist_ok=True)  # a case's files may sit in a directory (a trace set)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    if bad.build is not None:
        bad.build(tmp_path)
    before = tree(tmp_path)
    argv = [a.format(d=tmp_path) for a in bad.argv]
    outcome = run_capped(argv, cwd=tmp_path) if bad.capped else run_cli(argv)
    assert_refused(outcome, *bad.needles)
    assert tree(tmp_path) == before, "a refused input created files"


def test_the_corpus_is_large_and_covers_every_input_kind() -> None:
    assert len(CORPUS) >= 60
    kinds = {name.split(":")[0] for name in CORPUS}
    assert kinds == {"topo", "faults", "exp", "trace", "et", "pytorch", "param", "astra", "inv", "cli"}
