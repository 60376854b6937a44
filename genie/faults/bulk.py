"""Background cross-traffic: one bulk TCP flow between two testbed hosts.

Two small programs, each started inside its host's namespace with an argv list (``ip netns exec NS python -m
genie.faults.bulk recv --address A`` / ``send --address A --port P``), dying with the orchestrator
(PR_SET_PDEATHSIG) and registered to the testbed, so `genie testbed down` ends them by PID too. The receiver
binds the host's testbed address (port 0), prints ``ready PORT`` and discards what arrives; the sender
connects and sends as fast as the link takes until it is ended (SIGTERM). They only ever talk between testbed
addresses inside genie's namespaces.
"""

from __future__ import annotations

import argparse
import select
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass

from genie.core.congestion import CongestionControl, pin_congestion
from genie.core.process import die_with_parent, first_line
from genie.testbed.emulators import python_env
from genie.testbed.lifecycle import terminate_pids

READY_TIMEOUT_S = 10.0
CHUNK_BYTES = 256 * 1024


@dataclass(frozen=True)
class CrossTraffic:
    """A running flow: its receiver and sender processes."""

    src: str
    dst: str
    receiver: subprocess.Popen
    sender: subprocess.Popen

    @property
    def pids(self) -> list[int]:
        return [self.receiver.pid, self.sender.pid]


def _argv(netns: str | None, args: list[str]) -> list[str]:
    inner = [sys.executable, "-m", "genie.faults.bulk", *args]
    if netns is None or not netns.startswith("genie-"):  # None would be this (the root) namespace
        raise ValueError(f"refusing to start cross-traffic outside genie's namespaces: {netns!r}")
    return ["ip", "netns", "exec", netns, *inner]


def _wait_ready(proc: subprocess.Popen) -> int:
    try:
        line = first_line(proc, READY_TIMEOUT_S)
    except TimeoutError:
        raise RuntimeError(f"the cross-traffic receiver did not become ready within {READY_TIMEOUT_S:g} s") from None
    if not line:
        raise RuntimeError(f"the cross-traffic receiver exited with code {proc.wait(timeout=5)}")
    word, _, port = line.decode().strip().partition(" ")
    if word != "ready":
        raise RuntimeError(f"unexpected answer from the cross-traffic receiver: {line!r}")
    return int(port)


def start(src: str, src_netns: str | None, dst: str, dst_netns: str | None, dst_address: str,
          on_pids=None, congestion: CongestionControl = CongestionControl.CUBIC) -> CrossTraffic:
    """Start the receiver in `dst_netns`, then the sender in `src_netns` with `congestion` (as the ranks'
    connections, `genie.core.congestion`); `on_pids` is told of each PID as soon as it exists."""
    common = dict(stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent,
                  close_fds=True, env=python_env(), cwd="/")
    receiver = subprocess.Popen(_argv(dst_netns, ["recv", "--address", dst_address]), stdout=subprocess.PIPE,
                                **common)
    try:
        if on_pids:
            on_pids([receiver.pid])
        port = _wait_ready(receiver)
        sender = subprocess.Popen(_argv(src_netns, ["send", "--address", dst_address, "--port", str(port),
                                                    "--congestion", congestion.value]),
                                  stdout=subprocess.DEVNULL, **common)
        if on_pids:
            on_pids([sender.pid])
    except BaseException:
        stop_processes([receiver])
        raise
    finally:
        if receiver.stdout is not None:
            receiver.stdout.close()
    return CrossTraffic(src, dst, receiver, sender)


def stop_processes(procs: list[subprocess.Popen]) -> None:
    terminate_pids([p.pid for p in procs if p.poll() is None], grace_s=1.0)
    for p in procs:
        try:
            p.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            pass


def stop(flow: CrossTraffic) -> None:
    stop_processes([flow.sender, flow.receiver])


# ---- the child programs --------------------------------------------------------------------------------------
def _receive(address: str) -> int:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, 0))
    listener.listen(4)
    print(f"ready {listener.getsockname()[1]}", flush=True)
    sink = bytearray(CHUNK_BYTES)
    conns: list[socket.socket] = []
    while True:
        readable, _, _ = select.select([listener, *conns], [], [])
        for sock in readable:
            if sock is listener:
                conns.append(listener.accept()[0])
            elif sock.recv_into(sink) == 0:
                conns.remove(sock)
                sock.close()


def _send(address: str, port: int, congestion: CongestionControl) -> int:
    payload = memoryview(bytes(CHUNK_BYTES))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        pin_congestion(sock, congestion)
        sock.settimeout(10.0)
        sock.connect((address, port))
        sock.settimeout(None)
        while True:
            sock.sendall(payload)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="genie-bulk")
    parser.add_argument("role", choices=["recv", "send"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--congestion", type=CongestionControl, default=CongestionControl.CUBIC)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        return _receive(args.address) if args.role == "recv" else _send(args.address, args.port, args.congestion)
    except (OSError, KeyboardInterrupt):
        return 1


if __name__ == "__main__":
    sys.exit(main())
