"""The all-to-all's last pieces (issue #36 item 3; run by hand as root on a testbed that is up, not a test):
genie checkouts side by side on an all-to-all, every host's link captured, to see the slow mode's mechanism
beside the iteration times.

    sudo .venv/bin/python -m benchmarks.alltoall_tails --testbed NAME [--tree A --tree B] [--rounds 3]
        [--size 1M] [--iterations 40] [--warmup 5]

Per checkout and round: `genie bench --testbed NAME --collective all_to_all -b SIZE -e SIZE -n N -w W -c 0
--no-in-place -I 1 --steps` (at the testbed's own time dilation) while `python -m genie.report.capture`
records `eth0` in every host's namespace. From the captures and steps.csv: for every message (sender, peer,
iteration), the packet that carried its last byte — did it leave the sender's link after the sender had started
its next iteration, and how many bytes of that next iteration (to other peers) left before it. Printed per run:
the iteration times (mean, min, median, max in the fabric's ms; the last iteration apart) and those counts.

Each --tree DIR runs the checkout in DIR (PYTHONPATH=DIR); without --tree, the genie this interpreter imports.
The testbed must have one rank per host (star-8). Runs of the checkouts alternate, so that a busy machine
weighs on all of them alike.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from genie.core.units import parse_size_bytes
from genie.measure.flows import decode_ethernet_frame
from genie.report.capture import read_pcap
from genie.testbed.state import load_record


def _run(tree: str | None, testbed: str, args: argparse.Namespace, out: Path) -> None:
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree
    record = load_record(testbed)
    captures = []
    for host in record.info.hosts:
        captures.append(subprocess.Popen(
            ["ip", "netns", "exec", host.netns, sys.executable, "-m", "genie.report.capture", "--ifname", "eth0",
             "--out", str(out / f"{host.host}.pcap"), "--snaplen", "96"], stdout=subprocess.PIPE, text=True, env=env))
    try:
        for c in captures:
            c.stdout.readline()  # ready
        subprocess.run([sys.executable, "-m", "genie.cli.main", "bench", "--testbed", testbed, "--collective",
                        "all_to_all", "-b", args.size, "-e", args.size, "-n", str(args.iterations), "-w",
                        str(args.warmup), "-c", "0", "--no-in-place", "-I", "1", "--steps", "--out",
                        str(out / "run"), "--force"], env=env, check=True, capture_output=True, cwd=tree or None)
    finally:
        for c in captures:
            c.send_signal(signal.SIGTERM)
        for c in captures:
            c.communicate(timeout=60)


def _clock_offset_ns() -> int:
    """pcap times are CLOCK_REALTIME, steps.csv's CLOCK_MONOTONIC (fabric time: x the dilation)."""
    import time
    return time.time_ns() - time.monotonic_ns()


def analyse(out: Path, testbed: str, message_bytes: int, warmup: int) -> dict:
    record = load_record(testbed)
    factor = record.info.dilation.factor
    address = {h.address: i for i, h in enumerate(record.info.hosts)}
    steps = list(csv.DictReader(open(out / "run" / "steps.csv")))
    start = {(int(r["iteration"]), int(r["rank"])): int(r["start_ns"]) * factor for r in steps}
    end = {}
    for r in steps:
        end[int(r["iteration"])] = max(end.get(int(r["iteration"]), 0), int(r["end_ns"]))
    offset = _clock_offset_ns()
    late = ahead_total = messages = 0
    ahead_max = 0
    for host in record.info.hosts:
        me = address[host.address]
        base: dict[tuple, int] = {}
        out_packets = []  # (time, peer, stream offset, bytes) of this host's own data packets
        with open(out / f"{host.host}.pcap", "rb") as f:
            for ts, frame, wire in read_pcap(f):
                seg = decode_ethernet_frame(ts, frame, wire)
                if seg is None or address.get(seg.src) != me or seg.dst not in address:
                    continue
                if seg.flags & 0x02:  # SYN: the stream starts after it and genie's 8-byte link header
                    base[seg.key] = seg.seq + 1 + 8
                    continue
                if seg.payload_bytes and seg.key in base:
                    out_packets.append((ts - offset, address[seg.dst], (seg.seq - base[seg.key]) % 2 ** 32,
                                        seg.payload_bytes))
        out_packets.sort()
        last_packet = {}
        for i, (_ts, peer, o, n) in enumerate(out_packets):
            for m in range(o // message_bytes, (o + n) // message_bytes):  # messages whose last byte it carries
                last_packet.setdefault((peer, m), i)  # the first: a retransmission is not what ended it
        for (peer, m), i in last_packet.items():
            k = m - warmup
            if k < 0 or (k + 1, me) not in start:
                continue
            messages += 1
            next_start = start[(k + 1, me)]
            if out_packets[i][0] <= next_start:
                continue
            late += 1
            ahead = sum(n for ts, p, o, n in out_packets[:i] if p != peer and o // message_bytes > m
                        and ts >= next_start)
            ahead_total += ahead
            ahead_max = max(ahead_max, ahead)
    ends = [end[k] for k in sorted(end)]
    first_ref = max(int(r["start_ns"]) for r in steps if int(r["iteration"]) == 0)
    times_ms = [(b - a) / 1e6 for a, b in zip([first_ref] + ends[:-1], ends)]
    return {"times_ms": times_ms, "messages": messages, "late": late, "ahead_total": ahead_total,
            "ahead_max": ahead_max}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.alltoall_tails", description=__doc__.split("\n")[0])
    parser.add_argument("--testbed", required=True)
    parser.add_argument("--tree", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", default="1M")
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    ranks = len(load_record(args.testbed).info.hosts)
    message_bytes = parse_size_bytes(args.size) // ranks // 4 * 4
    trees = args.tree or [None]
    with tempfile.TemporaryDirectory(prefix="alltoall-tails-") as tmp:
        for r in range(args.rounds):
            for t, tree in enumerate(trees):
                out = Path(tmp) / f"{t}-{r}"
                out.mkdir()
                load = os.getloadavg()[0]
                _run(tree, args.testbed, args, out)
                a = analyse(out, args.testbed, message_bytes, args.warmup)
                body = a["times_ms"][:-1]
                print(f"{tree or 'this genie'} round {r + 1} (load {load:.1f}): iterations 1..{len(body)} mean "
                      f"{statistics.mean(body):.2f} min {min(body):.2f} median {statistics.median(body):.2f} max "
                      f"{max(body):.2f} ms, last {a['times_ms'][-1]:.2f} ms; last byte left after the sender's "
                      f"next iteration began: {a['late']} of {a['messages']} messages, with {a['ahead_total'] / 1e3:.0f}"
                      f" kB of next-iteration data ahead of them (at most {a['ahead_max'] / 1e3:.0f} kB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
