"""Link reports on a live testbed (root only): links.csv, tcp.csv and link_samples.csv from a real bench run,
and the link plots of `genie report`."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os

import pytest

from cli_support import run_genie
from genie.testbed.state import STATE_DIR_ENV

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_ADMIN) to build namespaces")]

TOPOLOGY = """name: star-3
defaults:
  bandwidth: 1gbit
hosts:
  - {prefix: h, count: 3}
switches:
  - {name: s0, kind: bridge}
links:
  - {endpoints: [h0, s0]}
  - {endpoints: [h1, s0]}
  - {endpoints: [h2, s0]}
"""


def _rows(path):
    return list(csv.DictReader(io.StringIO(path.read_text())))


def test_bench_on_a_testbed_writes_link_reports(tmp_path):
    topo = tmp_path / "star-3.yaml"
    topo.write_text(TOPOLOGY)
    out = tmp_path / "run"
    env = {STATE_DIR_ENV: str(tmp_path / "state")}
    proc = run_genie("bench", "--topology", str(topo), "-b", "256K", "-e", "1M", "-f", "4", "-n", "3", "-w", "1",
                     "--sample-ms", "50", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "line rate" in proc.stdout and "TCP retransmissions" in proc.stdout

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["shaper"] == "htb"
    assert manifest["topology"]["link_rate_bps"] == 10**9
    assert manifest["inputs"][0]["sha256"] == hashlib.sha256(topo.read_bytes()).hexdigest()

    links = _rows(out / "links.csv")
    assert len(links) == 6 and {(r["src"], r["dst"]) for r in links} >= {("h0", "s0"), ("s0", "h0")}
    for r in links:
        # 2 sizes x 4 iterations of an all-reduce move at least (2(n-1)/n) x size per rank and iteration
        assert int(r["bytes"]) > 4 * (256 << 10) and int(r["rate_bps"]) == 10**9
        assert 0 < float(r["utilisation_pct"]) <= 100.0
    tcp = _rows(out / "tcp.csv")
    assert sorted(r["host"] for r in tcp) == ["h0", "h1", "h2"] and all(int(r["out_segs"]) > 0 for r in tcp)
    samples = _rows(out / "link_samples.csv")
    assert samples and sum(int(s["bytes"]) for s in samples) > 0

    proc = run_genie("report", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    for name in ("busbw.png", "links_heatmap.png", "links_totals.png"):
        assert (out / "plots" / name).read_bytes()[:4] == b"\x89PNG"
