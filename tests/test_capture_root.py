"""`genie bench --capture` on a live testbed (root only): the pcap reads back (and opens in scapy when it is
installed) and flows.csv holds the ranks' TCP flows."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from cli_support import run_genie
from genie.report.capture import read_pcap
from genie.testbed.state import STATE_DIR_ENV

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_ADMIN) to build namespaces")]

STAR_4 = Path(__file__).resolve().parent.parent / "topologies" / "star-4.yaml"


def test_bench_capture_writes_pcap_and_flows(tmp_path):
    out = tmp_path / "run"
    proc = run_genie("bench", "--topology", STAR_4, "-c", "all_reduce", "-b", "64K", "-e", "64K", "-n", "3",
                     "--capture", "h0-s0", "--out", out, env={STATE_DIR_ENV: str(tmp_path / "state")})
    assert proc.returncode == 0, proc.stderr
    assert "# capture:" in proc.stdout

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["params"]["capture"] == "h0-s0"
    names = {f["name"] for f in manifest["files"]}
    assert {"capture-h0-s0.pcap", "flows.csv"} <= names
    assert manifest["summary"]["capture_packets"] > 0 and manifest["summary"]["capture_drops"] == 0
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no partial file left

    with open(out / "capture-h0-s0.pcap", "rb") as f:
        assert len(list(read_pcap(f))) == manifest["summary"]["capture_packets"]
    try:
        import scapy.all as scapy  # the `capture` extra; genie itself does not need it
    except ImportError:
        scapy = None
    if scapy is not None:
        packets = scapy.rdpcap(str(out / "capture-h0-s0.pcap"))
        assert len(packets) == manifest["summary"]["capture_packets"]
        assert any(p.haslayer(scapy.TCP) for p in packets)

    rows = list(csv.DictReader(io.StringIO((out / "flows.csv").read_text())))
    h0 = "198.18.0.1"  # star-4: h0..h3 = 198.18.0.1..4
    with_data = [r for r in rows if int(r["bytes"]) > 0]
    # halving-doubling on 4 ranks: rank 0 (h0) talks to two peers, both directions carry data
    assert len(with_data) >= 2 and all(h0 in (r["src"], r["dst"]) for r in rows)
    for r in with_data:
        assert r["src"].startswith("198.18.") and r["dst"].startswith("198.18.")
        assert int(r["packets"]) > 0 and int(r["rtt_samples"]) > 0 and float(r["rtt_median_us"]) > 0
        assert int(r["first_ns"]) <= int(r["last_ns"])


def test_capture_refuses_loopback(tmp_path):
    out = tmp_path / "run"
    proc = run_genie("bench", "--loopback", "-b", "1K", "-e", "1K", "--capture", "h0-s0", "--out", out)
    assert proc.returncode == 2 and "--capture" in proc.stderr and not out.exists()
