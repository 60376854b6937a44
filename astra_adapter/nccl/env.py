"""NCCL's environment settings that change what its tuner may choose, and where genie learns them.

A cluster's NCCL often runs with ``NCCL_ALGO``, ``NCCL_PROTO`` or ``NCCL_NVLS_ENABLE`` set (cloud images ship
profiles that do: e.g. Google's GPUDirect-TCPX(O) profiles set ``NCCL_NVLS_ENABLE=0``). NCCL then never picks
what they exclude, whatever its cost model says. With ``NCCL_DEBUG=INFO`` an nccl-tests output prints each one
(``NCCL INFO NCCL_ALGO set by environment to Ring``); otherwise the user says them (``genie calibrate --nccl-env``).

The rules carried over (NCCL's user guide, "Environment Variables"): ``NCCL_ALGO`` and ``NCCL_PROTO`` are
comma-separated, case-insensitive lists of names; a leading ``^`` makes the list the ones to exclude. From 2.24 a
list may be given per collective, ``allreduce:tree,ring;allgather:ring``; collectives it does not name keep every
algorithm. ``NCCL_NVLS_ENABLE=0`` turns NVLink SHARP off. ``NCCL_NCHANNELS_PER_NET_PEER`` sets the channels a
send/receive peer on another node runs on (:mod:`astra_adapter.nccl.p2p`). Other variables (other channel counts,
buffer sizes, plugins) are kept as given but do not change the model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from astra_adapter.nccl.p2p import CHANNELS_PER_NET_PEER_VARIABLE, channels_per_net_peer_setting
from astra_adapter.nccl.tuning import NcclAlgorithm, NcclEnv, NcclProtocol
from genie.core.errors import InputError
from genie.core.collective import Collective

MODELLED = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", CHANNELS_PER_NET_PEER_VARIABLE)
_SET_BY_ENV = re.compile(rb"NCCL INFO (NCCL_[A-Z0-9_]+) set by environment to (\S+?)\.?\s*$")
_ALGORITHMS = {a.value.lower(): a for a in NcclAlgorithm}
_PROTOCOLS = {p.value.lower(): p for p in NcclProtocol}
_OPS = {"allreduce": Collective.ALL_REDUCE, "allgather": Collective.ALL_GATHER,
        "reducescatter": Collective.REDUCE_SCATTER, "broadcast": Collective.BROADCAST, "reduce": Collective.REDUCE}


def _names(value: str, table: dict, variable: str, source: str) -> frozenset:
    exclude = value.startswith("^")
    names = [n.strip().lower() for n in value.lstrip("^").split(",") if n.strip()]
    unknown = [n for n in names if n not in table]
    if unknown or not names:
        known = ", ".join(sorted({v.value for v in table.values()}))
        raise InputError(f"{variable}={value!r}: unknown name {unknown[0] if unknown else '(empty)'!r}"
                         f" (NCCL knows {known})", source=source, path=variable)
    chosen = frozenset(table[n] for n in names)
    return frozenset(table.values()) - chosen if exclude else chosen


def _algorithms(value: str, source: str) -> tuple[tuple[Collective | None, frozenset[NcclAlgorithm]], ...]:
    if ":" not in value:
        return ((None, _names(value, _ALGORITHMS, "NCCL_ALGO", source)),)
    scoped = []
    for part in filter(None, (p.strip() for p in value.split(";"))):
        op, _, names = part.partition(":")
        if op.strip().lower() not in _OPS:
            raise InputError(f"NCCL_ALGO={value!r}: unknown collective {op.strip()!r} (NCCL knows "
                             f"{', '.join(_OPS)})", source=source, path="NCCL_ALGO")
        scoped.append((_OPS[op.strip().lower()], _names(names, _ALGORITHMS, "NCCL_ALGO", source)))
    return tuple(scoped)


def parse_env(settings: Iterable[tuple[str, str]], *, source: str) -> NcclEnv:
    """The tuner's limits from ``(variable, value)`` pairs (later pairs win); unmodelled variables are ignored."""
    merged = dict(settings)
    env = NcclEnv()
    if (algo := merged.get("NCCL_ALGO")) is not None:
        env = NcclEnv(_algorithms(algo, source), env.protocols, env.nvls)
    if (proto := merged.get("NCCL_PROTO")) is not None:
        env = NcclEnv(env.algorithms, _names(proto, _PROTOCOLS, "NCCL_PROTO", source), env.nvls)
    if (nvls := merged.get("NCCL_NVLS_ENABLE")) is not None:
        if nvls.strip() not in ("0", "1", "2"):
            raise InputError(f"NCCL_NVLS_ENABLE={nvls!r}: expected 0, 1 or 2", source=source, path="NCCL_NVLS_ENABLE")
        env = NcclEnv(env.algorithms, env.protocols, nvls.strip() != "0")
    channels_per_net_peer_setting(tuple(merged.items()), source=source)  # checked here; read by the p2p model
    return env


def parse_assignment(text: str, *, source: str) -> tuple[str, str]:
    """``NCCL_ALGO=Ring,Tree`` as a (variable, value) pair."""
    name, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"NCCL_[A-Z0-9_]+", name.strip()):
        raise InputError(f"{text!r}: expected NCCL_VARIABLE=value", source=source, path="nccl-env")
    return name.strip(), value.strip()


def env_from_output(data: bytes) -> tuple[tuple[str, str], ...]:
    """The modelled variables an nccl-tests output says NCCL read from its environment (NCCL_DEBUG=INFO lines),
    each once, in the order first printed."""
    seen: dict[str, str] = {}
    for line in data.splitlines():
        if b"set by environment" in line and (m := _SET_BY_ENV.search(line)):
            name = m.group(1).decode()
            if name in MODELLED:
                seen.setdefault(name, m.group(2).decode(errors="replace"))
    return tuple(seen.items())
