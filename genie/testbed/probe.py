"""The measuring programs of `genie testbed verify`, run inside testbed namespaces as
``python -m genie.testbed.probe MODE ...``; each prints one JSON object on stdout.

* ``serve``: one per host. UDP echo (RTT probes), UDP counter (loss probes, answered on query) and a TCP sink
  that answers each bulk flow with its receive timeline; ends after ``--lifetime`` seconds or on ``quit``.
* ``rtt``: paced UDP probes to a server, RTT samples from the echoes.
* ``loss``: paced UDP probes to a server, then how many it counted (queried until it answers).
* ``bulk``: one TCP flow for a few seconds; the sink's timeline gives the rate after a warm-up. The sender and
  the sink each report how busy their machine's CPUs were meanwhile (``sender_cpu_busy``,
  ``receiver_cpu_busy``, from its own /proc/stat: on a lab, each end's VM).

Traffic goes only to the address given, which the caller takes from the testbed (its hosts, or 127.0.0.1).
Every loop is bounded in time.
"""

from __future__ import annotations

import argparse
import json
import random
import select
import selectors
import socket
import struct
import sys
import time
from typing import Any

ECHO, COUNT, QUERY, QUIT, ANSWER = b"E", b"L", b"Q", b"X", b"A"
_PROBE = struct.Struct("!cIQ")  # kind, sequence, send time (ns)
ECHO_IP_BYTES = 20 + 8 + _PROBE.size  # an RTT probe's IP packet (IPv4 and UDP headers): what a wire serializes
_ANSWER = struct.Struct("!cII")  # ANSWER, stream id, count
_FLOW = struct.Struct("!cQ")  # first bytes of a TCP connection: BULK or RESULT, flow id
BULK, RESULT = b"B", b"R"
RESULT_TIMEOUT_S = 60.0
SO_RCVBUFFORCE = 33
UDP_BUFFER_BYTES = 16 << 20
BULK_CHUNK_BYTES = 1 << 20
TIMELINE_PERIOD_NS = 10_000_000


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def cpu_busy(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """The busy fraction of all CPUs between two `cpu_times` readings (None when no time passed)."""
    return (after[0] - before[0]) / (after[1] - before[1]) if after[1] > before[1] else None


class _Sink:
    """One TCP connection to the sink: a header (kind, flow id), then for a bulk flow the receive timeline
    (time ns, bytes so far), at most one point per 10 ms, and the CPU times since it was accepted."""

    def __init__(self) -> None:
        self.cpu_start = cpu_times()
        self.header = b""
        self.timeline: list[tuple[int, int]] = []
        self.total = 0
        self.last_ns = 0

    @property
    def kind(self) -> bytes:
        return self.header[:1]

    @property
    def flow(self) -> int:
        return int(_FLOW.unpack(self.header)[1]) if len(self.header) >= _FLOW.size else -1

    def received(self, buffer: bytearray, size: int, now_ns: int) -> None:
        if len(self.header) < _FLOW.size:
            take = min(size, _FLOW.size - len(self.header))
            self.header += bytes(buffer[:take])
            size -= take
        if size <= 0:
            return
        self.total += size
        self.last_ns = now_ns
        if not self.timeline or now_ns - self.timeline[-1][0] >= TIMELINE_PERIOD_NS:
            self.timeline.append((now_ns, self.total))

    def finish(self) -> list[tuple[int, int]]:
        if self.timeline and self.timeline[-1][1] != self.total:
            self.timeline.append((self.last_ns, self.total))
        return self.timeline


def _large_receive_buffer(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, UDP_BUFFER_BYTES)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_BUFFER_BYTES)


def serve(bind: str, port: int, lifetime_s: float, *, udp_on: bool = True, tcp_on: bool = True) -> dict[str, Any]:
    """UDP echo/counter (``udp_on``) and TCP sink (``tcp_on``) on `port` until `lifetime_s` or ``quit``. Port 0:
    one the kernel picks (the TCP listener's, the UDP socket bound to the same), said in the ready line."""
    selector = selectors.DefaultSelector()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener = socket.socket()
    if tcp_on:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((bind, port))
        port = listener.getsockname()[1]
        listener.listen(4)
        listener.setblocking(False)
        selector.register(listener, selectors.EVENT_READ, "listen")
    if udp_on:
        _large_receive_buffer(udp)  # a busy machine may not run us for a while: count, do not drop
        udp.bind((bind, port))
        port = udp.getsockname()[1]
        udp.setblocking(False)
        selector.register(udp, selectors.EVENT_READ, "udp")
    counts: dict[int, int] = {}  # loss stream id -> probes received
    buffer = bytearray(4 << 20)
    sinks: dict[socket.socket, _Sink] = {}
    results: dict[int, dict[str, Any]] = {}  # flow id -> timeline of a finished bulk flow
    flows = 0
    deadline = time.monotonic() + lifetime_s
    print(json.dumps({"ready": True, "port": port}), flush=True)
    while time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.2):
            if key.data == "udp":
                while True:
                    try:
                        data, peer = udp.recvfrom(2048)
                    except BlockingIOError:
                        break
                    kind = data[:1]
                    if kind == ECHO:
                        udp.sendto(data, peer)
                    elif kind == COUNT:
                        stream = _PROBE.unpack_from(data)[1] >> 20
                        counts[stream] = counts.get(stream, 0) + 1
                    elif kind == QUERY:
                        stream = _PROBE.unpack_from(data)[1]
                        udp.sendto(_ANSWER.pack(ANSWER, stream, counts.get(stream, 0)), peer)
                    elif kind == QUIT:
                        return {"flows": flows}
            elif key.data == "listen":
                try:
                    conn, _ = listener.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(False)
                sinks[conn] = _Sink()
                selector.register(conn, selectors.EVENT_READ, "sink")
            else:
                conn = key.fileobj  # type: ignore[assignment]
                sink = sinks[conn]
                try:
                    size = conn.recv_into(buffer)
                except BlockingIOError:
                    continue
                except OSError:  # the sender resets the flow at its deadline
                    size = 0
                if size:
                    sink.received(buffer, size, time.monotonic_ns())
                    if sink.kind != RESULT or len(sink.header) < _FLOW.size:
                        continue
                selector.unregister(conn)
                del sinks[conn]
                if sink.kind == RESULT:
                    result = results.pop(sink.flow, None)
                    conn.setblocking(True)
                    conn.settimeout(5)
                    try:
                        conn.sendall(json.dumps(result or {"pending": True}).encode() + b"\n")
                    except OSError:
                        pass
                elif sink.kind == BULK:
                    results[sink.flow] = {"timeline": sink.finish(),
                                          "receiver_cpu_busy": cpu_busy(sink.cpu_start, cpu_times())}
                    flows += 1
                conn.close()
    return {"flows": flows, "expired": True}


def _paced(count: int, rate_pps: float, send: Any, poll: Any) -> None:
    """Call send(i) for i in range(count) at about rate_pps (bursts of up to 10), poll() in between."""
    start = time.monotonic()
    sent = 0
    while sent < count:
        target = min(count, int((time.monotonic() - start) * rate_pps) + 1)
        while sent < target:
            send(sent)
            sent += 1
        poll(min(0.002, 1 / rate_pps))


def rtt(to: str, port: int, count: int, rate_pps: float, wait_s: float) -> dict[str, Any]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    _large_receive_buffer(sock)
    sock.connect((to, port))
    samples: list[float] = []

    def send(i: int) -> None:
        sock.send(_PROBE.pack(ECHO, i, time.monotonic_ns()))

    def poll(timeout: float) -> None:
        end = time.monotonic() + timeout
        while (remaining := end - time.monotonic()) > 0:
            if not select.select([sock], [], [], remaining)[0]:
                return
            try:
                data = sock.recv(64)
            except ConnectionRefusedError:
                continue
            now = time.monotonic_ns()
            kind, _, sent_ns = _PROBE.unpack_from(data)
            if kind == ECHO:
                samples.append((now - sent_ns) / 1000)

    _paced(count, rate_pps, send, poll)
    poll(wait_s)
    return {"sent": count, "rtt_us": samples}


def loss(to: str, port: int, count: int, rate_pps: float, stream: int, wait_s: float) -> dict[str, Any]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((to, port))

    def send(i: int) -> None:
        try:
            sock.send(_PROBE.pack(COUNT, (stream << 20) | i, 0))
        except ConnectionRefusedError:
            pass

    _paced(count, rate_pps, send, time.sleep)
    time.sleep(wait_s)  # let the last probes cross the link
    deadline = time.monotonic() + 10 + 4 * wait_s
    while time.monotonic() < deadline:
        try:
            sock.send(_PROBE.pack(QUERY, stream, 0))
        except ConnectionRefusedError:
            pass
        sock.settimeout(max(0.05, 2 * wait_s))
        try:
            data = sock.recv(64)
        except (socket.timeout, ConnectionRefusedError):
            continue
        kind, answered, received = _ANSWER.unpack_from(data)
        if kind == ANSWER and answered == stream:
            return {"sent": count, "received": received}
    raise SystemExit(f"no answer from {to}:{port} to the loss query")


def bulk(to: str, port: int, seconds: float) -> dict[str, Any]:
    """Send for `seconds` on one TCP flow, reset it (whatever is still buffered must not hold us up on a lossy
    link), then fetch the sink's timeline of it on a second connection."""
    flow = random.getrandbits(63)
    sock = socket.create_connection((to, port), timeout=10)
    sock.settimeout(0.2)
    sock.sendall(_FLOW.pack(BULK, flow))
    chunk = b"\0" * BULK_CHUNK_BYTES
    start = time.monotonic()
    cpu_start = cpu_times()
    sent = 0
    while time.monotonic() - start < seconds:
        try:
            sent += sock.send(chunk)
        except socket.timeout:
            continue
    sender_busy = cpu_busy(cpu_start, cpu_times())
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    deadline = time.monotonic() + RESULT_TIMEOUT_S  # a lossy link may eat SYNs and the flow's reset
    while time.monotonic() < deadline:
        try:
            result = _fetch_result(to, port, flow, timeout_s=max(1.0, deadline - time.monotonic()))
        except OSError:
            continue
        if "timeline" in result:
            return {"sent_bytes": sent, "seconds": seconds, "sender_cpu_busy": sender_busy, **result}
        time.sleep(0.05)
    raise SystemExit(f"no result from the sink at {to}:{port}")


def _fetch_result(to: str, port: int, flow: int, timeout_s: float) -> dict[str, Any]:
    with socket.create_connection((to, port), timeout=timeout_s) as query:
        query.sendall(_FLOW.pack(RESULT, flow))
        reply = b""
        while not reply.endswith(b"\n"):
            data = query.recv(1 << 16)
            if not data:
                break
            reply += data
    return json.loads(reply or b"{}")  # type: ignore[no-any-return]


def quit_server(to: str, port: int) -> dict[str, Any]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(3):
        sock.sendto(_PROBE.pack(QUIT, 0, 0), (to, port))
    return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m genie.testbed.probe")
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--lifetime", type=float, default=600.0)
    p.add_argument("--what", choices=("udp", "tcp", "both"), default="both")
    for mode in ("rtt", "loss", "bulk", "quit"):
        p = sub.add_parser(mode)
        p.add_argument("--to", required=True)
        p.add_argument("--port", type=int, required=True)
        if mode in ("rtt", "loss"):
            p.add_argument("--count", type=int, default=200)
            p.add_argument("--rate", type=float, default=1000.0, help="probes per second")
            p.add_argument("--wait", type=float, default=0.5, help="seconds to wait for the last probes")
        if mode == "loss":
            p.add_argument("--stream", type=int, default=1)
        if mode == "bulk":
            p.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    if args.mode == "serve":
        result = serve(args.bind, args.port, args.lifetime, udp_on=args.what != "tcp", tcp_on=args.what != "udp")
    elif args.mode == "rtt":
        result = rtt(args.to, args.port, args.count, args.rate, args.wait)
    elif args.mode == "loss":
        result = loss(args.to, args.port, args.count, args.rate, args.stream, args.wait)
    elif args.mode == "bulk":
        result = bulk(args.to, args.port, args.seconds)
    else:
        result = quit_server(args.to, args.port)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
