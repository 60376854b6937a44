"""One bulk TCP flow of the per-flow limit measurement (stdlib only; iperf3 is not on this machine). Run in
host i's namespace, it sends to host i+1 and receives from host i-1, so N of them make N simultaneous flows in
the ring pattern of a ring all-reduce:

    python -m benchmarks.peers.flow_rank --listen ADDR:PORT --connect PEER:PORT --sync-dir DIR --rank R \
        --warmup-s 1 --duration-s 3

Once connected both ways it creates DIR/ready-R and waits for DIR/start, which the harness writes when every
flow is ready: a start time T0 on CLOCK_MONOTONIC (shared by all namespaces of the machine). Every process
starts sending at T0 and counts the bytes it receives between T0 + warmup and T0 + warmup + duration. It
prints one JSON line: {"bytes": B, "seconds": S, "GBps": B / S / 1e9, "retrans_segs": R} (R: TCP
retransmissions of its namespace while it sent). The sending socket uses the congestion control genie's
undilated connections pin (`genie.core.congestion`), so the limit is measured with the same TCP.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time

CHUNK = 1 << 20


def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def connect(peer: tuple[str, int], deadline_ns: int) -> socket.socket:
    while True:
        try:
            return socket.create_connection(peer, timeout=5)
        except OSError:
            if time.monotonic_ns() > deadline_ns:
                raise
            time.sleep(0.05)


def receive(conn: socket.socket, window: tuple[int, int], result: dict) -> None:
    """Count what arrives inside `window`, then drain until the sender closes."""
    buf = memoryview(bytearray(CHUNK))
    total = 0
    marks: list[tuple[int, int]] = []
    t_a, t_b = window
    while True:
        n = conn.recv_into(buf)
        if n == 0:
            break
        total += n
        now = time.monotonic_ns()
        if not marks and now >= t_a:
            marks.append((now, total))
        elif len(marks) == 1 and now >= t_b:
            marks.append((now, total))
    if len(marks) == 2:
        (ta, ba), (tb, bb) = marks
        result.update(bytes=bb - ba, seconds=(tb - ta) / 1e9)


def retrans_segs() -> int | None:
    """TCP segments retransmitted so far in this network namespace (/proc/net/snmp, Tcp: RetransSegs)."""
    try:
        with open("/proc/net/snmp", encoding="ascii") as f:
            tcp = [line.split() for line in f if line.startswith("Tcp:")]
        return int(tcp[1][tcp[0].index("RetransSegs")])
    except (OSError, IndexError, ValueError):
        return None


def wait_for_start(sync_dir: str, rank: int, deadline_ns: int) -> int:
    """Say ready, then wait for the harness's common start time."""
    with open(os.path.join(sync_dir, f"ready-{rank}"), "w", encoding="ascii"):
        pass
    path = os.path.join(sync_dir, "start")
    while not os.path.exists(path):
        if time.monotonic_ns() > deadline_ns:
            raise TimeoutError("no start time from the harness")
        time.sleep(0.01)
    with open(path, encoding="ascii") as f:
        return int(f.read())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--listen", required=True)
    p.add_argument("--connect", required=True)
    p.add_argument("--sync-dir", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--setup-timeout-s", type=float, default=60.0)
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--duration-s", type=float, default=3.0)
    args = p.parse_args(argv)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(_endpoint(args.listen))
    listener.listen(1)
    deadline_ns = time.monotonic_ns() + int(args.setup_timeout_s * 1e9)
    out = connect(_endpoint(args.connect), deadline_ns)
    from genie.core.congestion import CongestionControl, pin_congestion

    pin_congestion(out, CongestionControl.CUBIC)
    listener.settimeout(args.setup_timeout_s)
    conn, _ = listener.accept()
    conn.settimeout(None)
    out.settimeout(None)
    start_ns = wait_for_start(args.sync_dir, args.rank, deadline_ns)
    t_a = start_ns + int(args.warmup_s * 1e9)
    t_b = t_a + int(args.duration_s * 1e9)
    result: dict = {}
    receiver = threading.Thread(target=receive, args=(conn, (t_a, t_b), result), daemon=True)
    receiver.start()
    time.sleep(max(0.0, (start_ns - time.monotonic_ns()) / 1e9))
    retrans_before = retrans_segs()
    payload = memoryview(bytes(CHUNK))
    stop = t_b + 200_000_000  # keep sending a little past the window
    while time.monotonic_ns() < stop:
        out.sendall(payload)
    retrans_after = retrans_segs()
    out.shutdown(socket.SHUT_WR)
    receiver.join(timeout=30)
    out.close()
    conn.close()
    listener.close()
    if "bytes" not in result:
        print(json.dumps({"error": "the receive window was not covered"}))
        return 1
    retrans = None if retrans_before is None or retrans_after is None else retrans_after - retrans_before
    print(json.dumps({**result, "GBps": result["bytes"] / result["seconds"] / 1e9, "retrans_segs": retrans}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
