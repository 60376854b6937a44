"""Which path each data connection of a run really took (pure data).

A testbed with equal-cost paths (leaf-spine) spreads connections over them by the kernel's ECMP hash of each
packet's 5-tuple (``fib_multipath_hash_policy=3`` on its fields, :mod:`genie.testbed.plan`). The ports are ephemeral, so every session (a sweep round, a
replay round) is a new draw of the hash: one draw may put two all-to-all flows on one spine link, the next may
not. Ranks report the 5-tuple of every connection they send on (:class:`FlowTuple`); while the testbed is up,
genie asks each router's kernel which next hop that tuple takes (:mod:`genie.testbed.flow_paths`) and records
the node path (:class:`FlowPath`), so the fabric model can be calibrated and compared on the paths the run
actually used instead of a guess of the hash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from genie.core.errors import InputError
from genie.core.jsondoc import decode_json

#: a run directory's file of the paths its sessions' connections took (`genie bench`, `replay`, `experiment`)
PATHS_JSON = "paths.json"


@dataclass(frozen=True)
class FlowTuple:
    """One direction of a data connection: rank ``src_rank`` sends to ``dst_rank`` from ``src_ip:src_port``
    to ``dst_ip:dst_port`` (TCP), on ``channel`` (a communicator: each has its own connections)."""

    src_rank: int
    dst_rank: int
    src_ip: str
    src_port: int
    dst_ip: str
    dst_port: int
    channel: int = 0

    def to_json(self) -> list[Any]:
        return [self.src_rank, self.dst_rank, self.src_ip, self.src_port, self.dst_ip, self.dst_port, self.channel]

    @classmethod
    def from_json(cls, v: Any) -> "FlowTuple":
        src_rank, dst_rank, src_ip, src_port, dst_ip, dst_port, channel = v
        if not isinstance(src_ip, str) or not isinstance(dst_ip, str):
            raise TypeError("a flow's addresses must be strings")
        return cls(int(src_rank), int(dst_rank), src_ip, int(src_port), dst_ip, int(dst_port), int(channel))


@dataclass(frozen=True)
class FlowPath:
    """The nodes one connection's packets crossed from ``src_rank``'s host to ``dst_rank``'s."""

    src_rank: int
    dst_rank: int
    nodes: tuple[str, ...]
    channel: int = 0


@dataclass(frozen=True)
class SessionPaths:
    """The paths of one session's connections (``unresolved``: connections whose path could not be read, e.g.
    an equal-cost branch at a bridge, which has no routes; the fabric model takes the expected share there)."""

    label: str  # e.g. "round 1 sweep"
    paths: tuple[FlowPath, ...]
    unresolved: int = 0

    def by_pair(self) -> dict[tuple[int, int], tuple[tuple[str, ...], ...]]:
        """(src_rank, dst_rank) -> the path of each of its connections (one per channel; the fabric model spreads
        an op whose channel it does not know evenly over them)."""
        out: dict[tuple[int, int], list[tuple[str, ...]]] = {}
        for p in self.paths:
            out.setdefault((p.src_rank, p.dst_rank), []).append(p.nodes)
        return {k: tuple(v) for k, v in out.items()}

    def by_channel(self) -> dict[tuple[int, int, int], tuple[str, ...]]:
        """(src_rank, dst_rank, channel) -> the path of that connection."""
        return {(p.src_rank, p.dst_rank, p.channel): p.nodes for p in self.paths}

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "unresolved": self.unresolved,
                "paths": [[p.src_rank, p.dst_rank, list(p.nodes), p.channel] for p in self.paths]}

    @classmethod
    def from_json(cls, d: Any) -> "SessionPaths":
        return cls(str(d["label"]), tuple(FlowPath(int(s), int(t), tuple(str(n) for n in nodes), int(c))
                                          for s, t, nodes, c in d["paths"]), int(d.get("unresolved", 0)))


@dataclass(frozen=True)
class RunPaths:
    """A run directory's ``paths.json``: the sessions of its sweep(s) and of its replay(s), in order."""

    sweep: tuple[SessionPaths, ...] = ()
    replay: tuple[SessionPaths, ...] = ()

    def to_json(self) -> str:
        return json.dumps({"sweep": [p.to_json() for p in self.sweep],
                           "replay": [p.to_json() for p in self.replay]}, indent=1) + "\n"

    @classmethod
    def parse(cls, data: bytes, *, source: str) -> "RunPaths":
        """``paths.json`` as :meth:`to_json` writes it; anything else is an InputError naming the field."""
        doc = decode_json(data, source=source)
        if not isinstance(doc, dict):
            raise InputError("expected an object with 'sweep' and 'replay' lists", source=source)
        kinds = []
        for kind in ("sweep", "replay"):
            sessions = doc.get(kind, [])
            if not isinstance(sessions, list):
                raise InputError("expected a list of sessions", source=source, path=kind)
            parsed = []
            for i, session in enumerate(sessions):
                try:
                    parsed.append(SessionPaths.from_json(session))
                except (KeyError, TypeError, ValueError) as exc:
                    raise InputError(f"not a session's paths ({type(exc).__name__}: {exc})", source=source,
                                     path=f"{kind}[{i}]") from None
            kinds.append(tuple(parsed))
        return cls(*kinds)
