"""Control-channel framing between the orchestrator and rank programs: 4-byte big-endian length + JSON."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

_HEADER = struct.Struct("!I")
MAX_MESSAGE_BYTES = 1 << 30


class ControlClosed(ConnectionError):
    """The other side of a control connection went away."""


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    payload = json.dumps(message, separators=(",", ":")).encode()
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ControlClosed("control connection closed")
        got += n
    return bytes(buf)


def recv_message(sock: socket.socket) -> dict[str, Any]:
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if size > MAX_MESSAGE_BYTES:
        raise ControlClosed(f"control message of {size} bytes is too large")
    return json.loads(_recv_exact(sock, size))
