"""Packet capture on one testbed link end during a run: `capture-<link>.pcap` and `flows.csv`.

How (and why this way):
- The capture runs in a **child process** started inside the link end's namespace with an argv list
  (``ip netns exec NS python -m genie.report.capture --ifname eth0 --out FILE``): its own interpreter, so it
  does not compete for the orchestrator's GIL, and it dies with the orchestrator (PR_SET_PDEATHSIG).
- It reads a raw ``AF_PACKET`` socket bound to the interface (both directions, GSO super-packets as one
  packet), keeps the first `snaplen` bytes (headers are enough), kernel timestamps (``SO_TIMESTAMPNS``,
  Unix epoch ns), and writes a nanosecond pcap (the format is 24 + 16 bytes of headers, written with
  `struct`: no scapy in the hot loop). The socket is created with protocol 0 and only then bound with
  ``ETH_P_ALL`` to the interface, so nothing of other interfaces is ever queued.
- It says ``{"ready": true}`` on stdout once bound (the run starts only then, so the connections' SYNs are
  seen); SIGTERM or SIGINT ends it: it drains what the socket still holds, fsyncs, renames the partial file
  to its name (atomic) and prints its statistics (kernel drops included) as one JSON line.
- Afterwards the parent parses the pcap (`read_pcap`, `genie.measure.flows`) into ``flows.csv``.
Decoding with scapy's dissectors was measured at ~2.5k packets/s on this 2-core VM; the header parser in
`genie.measure.flows` is ~100x faster, so scapy is not needed (the pcap opens in scapy, wireshark, tcpdump).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from genie.core.errors import EnvironmentProblem, InputError
from genie.core.testbed import LinkEnd, TestbedInfo
from genie.core.process import die_with_parent  # PR_SET_PDEATHSIG, imported before any fork
from genie.measure.flows import FlowStats, analyze_flows, decode_ethernet_frame

SNAPLEN_BYTES = 128
LIMIT_BYTES = 1 << 30  # the pcap stops growing here (packets still counted as over_limit)
READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
_PCAP_MAGIC_NS, _PCAP_MAGIC_US = 0xA1B23C4D, 0xA1B2C3D4
_LINKTYPE_ETHERNET = 1
_ETH_P_ALL = 0x0003
_SOL_PACKET, _PACKET_STATISTICS = 263, 6
_SO_TIMESTAMPNS, _SO_RCVBUFFORCE = 35, 33
_RCVBUF_BYTES = 64 << 20


# ---- pcap files -------------------------------------------------------------------------------------------
def pcap_header(snaplen: int = SNAPLEN_BYTES, linktype: int = _LINKTYPE_ETHERNET) -> bytes:
    """The global header of a little-endian nanosecond pcap file (version 2.4)."""
    return struct.pack("<IHHiIII", _PCAP_MAGIC_NS, 2, 4, 0, 0, snaplen, linktype)


def pcap_record(ts_ns: int, data: bytes, wire_len: int) -> bytes:
    sec, nsec = divmod(ts_ns, 1_000_000_000)
    return struct.pack("<IIII", sec, nsec, len(data), wire_len) + data


def read_pcap(stream: BinaryIO) -> Iterator[tuple[int, bytes, int]]:
    """(timestamp ns, captured bytes, length on the wire) per record of a pcap stream (either byte order,
    us or ns timestamps). A record cut short at the end (a killed writer) is ignored."""
    head = stream.read(24)
    if len(head) < 24:
        raise InputError("not a pcap file (too short)", path="pcap")
    for order in ("<", ">"):
        (magic,) = struct.unpack(order + "I", head[:4])
        if magic in (_PCAP_MAGIC_NS, _PCAP_MAGIC_US):
            break
    else:
        raise InputError("not a pcap file (bad magic)", path="pcap")
    (linktype,) = struct.unpack(order + "I", head[20:24])
    if linktype & 0xFFFF != _LINKTYPE_ETHERNET:
        raise InputError(f"link type {linktype} is not Ethernet", path="pcap")
    scale = 1 if magic == _PCAP_MAGIC_NS else 1000
    record = struct.Struct(order + "IIII")
    while True:
        rh = stream.read(16)
        if len(rh) < 16:
            return
        sec, frac, caplen, wire_len = record.unpack(rh)
        data = stream.read(caplen)
        if len(data) < caplen:
            return
        yield sec * 1_000_000_000 + frac * scale, data, wire_len


def pcap_flows(stream: BinaryIO) -> list[FlowStats]:
    segments = (decode_ethernet_frame(ts, data, wire) for ts, data, wire in read_pcap(stream))
    return analyze_flows(s for s in segments if s is not None)  # streamed: memory does not grow with the file


FLOW_COLUMNS = ("src", "sport", "dst", "dport", "bytes", "packets", "retransmissions", "rtt_samples",
                "rtt_median_us", "first_ns", "last_ns")


def flows_csv(flows: list[FlowStats], dilation: float = 1.0) -> str:
    """flows.csv; on a testbed dilated by N its times are the stated fabric's (real / N; the pcap stays real)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(FLOW_COLUMNS)
    for f in flows:
        writer.writerow([f.src, f.sport, f.dst, f.dport, f.bytes, f.packets, f.retransmissions, f.rtt_samples,
                         "" if f.rtt_median_us is None else f"{f.rtt_median_us / dilation:.3f}",
                         round(f.first_ns / dilation), round(f.last_ns / dilation)])
    return out.getvalue()


# ---- which link --------------------------------------------------------------------------------------------
def resolve_link(info: TestbedInfo, spec: str) -> LinkEnd:
    """The link end named by `spec` (``A-B`` or ``A:B``, A and B the link's endpoints): A's end of the link.
    Node names may contain ``-``, so every split point is tried."""
    text = spec.strip()
    ends = {(e.node, e.peer): e for e in reversed(info.link_ends)}  # the first link of a pair wins
    candidates = [(text[:i], text[i + 1:]) for i, ch in enumerate(text) if ch in "-:"]
    for pair in candidates:
        if pair in ends:
            return ends[pair]
    known = ", ".join(f"{e.node}-{e.peer}" for e in info.link_ends if e.netns)
    raise InputError(f"no link {spec!r} in testbed {info.name} (links: {known})", path="capture")


def capture_file_name(end: LinkEnd) -> str:
    return f"capture-{end.node}-{end.peer}.pcap"


# ---- the parent side ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CaptureResult:
    file: str | None  # the pcap's name in the run directory (None: nothing was kept)
    stats: dict
    flows: tuple[FlowStats, ...] = ()

    def summary(self) -> dict:
        return {"capture_packets": self.stats.get("packets"), "capture_drops": self.stats.get("kernel_drops")}


class LinkCapture:
    """``with LinkCapture(run_dir, end) as cap: run()`` then ``cap.result``. Entering waits until the capture
    is listening (or raises `EnvironmentProblem`); leaving stops it by PID and parses the pcap."""

    def __init__(self, run_dir: Path, end: LinkEnd, *, snaplen: int = SNAPLEN_BYTES) -> None:
        self.end, self.snaplen = end, snaplen
        self.path = Path(run_dir).resolve() / capture_file_name(end)
        self.proc: subprocess.Popen | None = None
        self.result = CaptureResult(None, {})
        self.errors: list[str] = []

    def argv(self) -> list[str]:
        inner = [sys.executable, "-m", "genie.report.capture", "--ifname", self.end.ifname,
                 "--out", str(self.path), "--snaplen", str(self.snaplen)]
        return inner if self.end.netns is None else ["ip", "netns", "exec", self.end.netns, *inner]

    def __enter__(self) -> LinkCapture:
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, preexec_fn=die_with_parent, close_fds=True)
        try:
            ready = self._read_line(READY_TIMEOUT_S).startswith(b"{")
        except BaseException:
            self._stop()
            raise
        if not ready:
            self._stop()
            err = self._stderr_tail() or f"not ready after {READY_TIMEOUT_S:.0f} s"
            raise EnvironmentProblem(f"--capture {self.end.node}-{self.end.peer}: capture did not start: {err}")
        return self

    def __exit__(self, *_: object) -> None:
        stats_line = self._stop()
        stats = {}
        try:
            stats = json.loads(stats_line) if stats_line else {}
        except ValueError:
            pass
        if not stats or not self.path.exists():  # without statistics, a file there is not this run's
            self.errors.append(f"no pcap was written: {self._stderr_tail() or 'the capture ended without output'}")
            self.result = CaptureResult(None, stats)
            return
        try:
            with open(self.path, "rb") as f:
                flows = pcap_flows(f)
        except (OSError, InputError) as exc:
            self.errors.append(f"reading {self.path.name}: {exc}")
            flows = []
        self.result = CaptureResult(self.path.name, stats, tuple(flows))

    # -- internals
    def _read_line(self, timeout_s: float) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        buf = b""
        fd = self.proc.stdout.fileno()
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return buf
            chunk = os.read(fd, 4096)
            if not chunk:
                return buf
            buf += chunk
        return buf

    def _stop(self) -> bytes:
        """SIGTERM by PID, wait (SIGKILL after STOP_TIMEOUT_S); the child's last stdout line."""
        proc = self.proc
        if proc is None:
            return b""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        self._stderr = err or b""
        self.proc = None
        with contextlib.suppress(OSError):  # what a killed capture left (`ip netns exec` keeps the PID)
            self.path.with_name(f".{self.path.name}.partial-{proc.pid}").unlink()
        lines = [ln for ln in (out or b"").splitlines() if ln.startswith(b"{")]
        return lines[-1] if lines else b""

    def _stderr_tail(self) -> str:
        text = getattr(self, "_stderr", b"").decode(errors="replace").strip().splitlines()
        return " | ".join(text[-3:])


def capture_end(info: TestbedInfo | None, spec: str | None) -> LinkEnd | None:
    """Check ``--capture`` before anything runs: the link end to capture, or None without the option."""
    if spec is None:
        return None
    if info is None:
        raise InputError("needs a testbed (`topology` or `testbed`), not `loopback`", path="capture")
    return resolve_link(info, spec)


@contextlib.contextmanager
def capture_link(run, end: LinkEnd | None, dilation: float = 1.0) -> Iterator[LinkCapture | None]:
    """Capture link end `end` (from `capture_end`) for the block; the pcap and flows.csv are added to `run`
    (a RunRecorder) also when the block fails or is interrupted. Yields None when `end` is None."""
    if end is None:
        yield None
        return
    capture = LinkCapture(run.run_dir, end)
    try:
        with capture:
            yield capture
    finally:
        result = capture.result
        if result.file is not None:
            run.record(result.file)
            run.write("flows.csv", flows_csv(list(result.flows), dilation))
        drops = result.stats.get("kernel_drops") or 0
        if drops:
            capture.errors.append(f"the kernel dropped {drops} of {result.stats.get('kernel_packets')} packets "
                                  "(capture too slow)")
        if result.stats.get("over_limit"):
            capture.errors.append(f"{result.stats['over_limit']} packets not written (pcap size limit)")
        for error in capture.errors:
            run.warn(f"capture {capture.path.name}: {error}")


def summary_line(result: CaptureResult) -> str:
    if result.file is None:
        return "# capture: nothing recorded (see the manifest's warnings)"
    s = result.stats
    drops = s.get("kernel_drops")
    return (f"# capture: {s.get('packets', '?')} packets in {result.file} ({drops if drops is not None else '?'} "
            f"dropped by the kernel), {len(result.flows)} TCP flow directions in flows.csv")


# ---- the child: python -m genie.report.capture -------------------------------------------------------------
class _Stop(Exception):
    pass


def _raise_stop(_signum: int, _frame: object) -> None:
    raise _Stop


def capture_interface(ifname: str, out: Path, *, snaplen: int, limit_bytes: int = LIMIT_BYTES) -> dict:
    """Capture `ifname` (in the current namespace) into `out` until SIGTERM/SIGINT; return statistics."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # receives nothing until bound
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, _RCVBUF_BYTES)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF_BYTES)
    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    sock.bind((ifname, _ETH_P_ALL))
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    packets = over_limit = 0
    size = 24
    buf = bytearray(snaplen)
    view = memoryview(buf)
    anc_size = socket.CMSG_SPACE(16)
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask decides, as for other run files
        with open(fd, "wb", buffering=1 << 20) as f:
            f.write(pcap_header(snaplen))

            def receive(flags: int) -> None:
                nonlocal packets, over_limit, size
                n, anc, _msg_flags, _addr = sock.recvmsg_into([buf], anc_size, socket.MSG_TRUNC | flags)
                ts_ns = 0
                for level, kind, data in anc:
                    if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= 16:
                        sec, nsec = struct.unpack("qq", data[:16])
                        ts_ns = sec * 1_000_000_000 + nsec
                record = pcap_record(ts_ns or time.time_ns(), bytes(view[:min(n, snaplen)]), n)
                if size + len(record) > limit_bytes:
                    over_limit += 1
                    return
                f.write(record)
                size += len(record)
                packets += 1

            signal.signal(signal.SIGTERM, _raise_stop)
            signal.signal(signal.SIGINT, _raise_stop)
            print(json.dumps({"ready": True, "ifname": ifname}), flush=True)
            try:
                while True:
                    receive(0)
            except _Stop:
                pass
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            with contextlib.suppress(BlockingIOError, InterruptedError):
                while True:  # what the socket still holds
                    receive(socket.MSG_DONTWAIT)
            f.flush()
            os.fsync(f.fileno())
        tp_packets, tp_drops = struct.unpack("II", sock.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, 8))
        os.replace(partial, out)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    finally:
        sock.close()
    return {"packets": packets, "kernel_packets": tp_packets, "kernel_drops": tp_drops, "over_limit": over_limit,
            "file_bytes": size, "snaplen": snaplen}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m genie.report.capture",
                                     description="Capture one interface of this namespace into a pcap until "
                                                 "SIGTERM/SIGINT (started by genie bench/replay --capture).")
    parser.add_argument("--ifname", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--snaplen", type=int, default=SNAPLEN_BYTES)
    parser.add_argument("--limit-bytes", type=int, default=LIMIT_BYTES)
    args = parser.parse_args(argv)
    try:
        stats = capture_interface(args.ifname, args.out, snaplen=args.snaplen, limit_bytes=args.limit_bytes)
    except _Stop:  # stopped before the capture was set up
        return 1
    except OSError as exc:
        print(f"capture {args.ifname}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
