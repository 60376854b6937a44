"""Control-channel framing between the orchestrator and rank programs: each `genie.core.protocol` message as a
4-byte big-endian length + its JSON document."""

from __future__ import annotations

import json
import socket
import struct

from genie.core.protocol import Message, ProtocolError, decode_message, encode_message

_HEADER = struct.Struct("!I")
MAX_MESSAGE_BYTES = 1 << 30


class ControlClosed(ConnectionError):
    """The other side of a control connection went away."""


def send_message(sock: socket.socket, message: Message) -> None:
    payload = json.dumps(encode_message(message), separators=(",", ":")).encode()
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


def recv_message(sock: socket.socket) -> Message:
    """The next message; `ProtocolError` if it is not valid JSON or not a message."""
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if size > MAX_MESSAGE_BYTES:
        raise ControlClosed(f"control message of {size} bytes is too large")
    payload = _recv_exact(sock, size)
    try:
        doc = json.loads(payload)
    except ValueError as exc:
        raise ProtocolError(f"a control message is not JSON: {exc}") from None
    return decode_message(doc)
