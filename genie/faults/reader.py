"""Reading faults (pure): a YAML file (``faults: [...]``) or compact ``--fault`` specs, both through one parser
of key/value mappings, so the two spell everything the same way.

YAML::

    faults:
      - {kind: degrade, link: h3-s0, rate: 100mbit, at_op: 10}
      - {kind: flap, link: h1-s0, duration: 200ms, at: 2s}
      - {kind: straggler, rank: 2, factor: 3, at_op: 1}
      - {kind: cross_traffic, src: h0, dst: h1, at: 0s, duration: 2s}

Compact spec (``--fault``, one fault each): ``KIND TARGET key=value ... at=2s|at=op10``, e.g.
``degrade h3-s0 rate=100mbit at=op10``, ``flap h1-s0 for=200ms at=2s``, ``straggler rank=2 factor=3 at=op1``,
``cross_traffic h0 h1 at=0s for=2s``. ``for`` is ``duration``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import IO, Any

from genie.core.errors import InputError, shown
from genie.core.units import parse_rate_bps, parse_time_ns
from genie.faults.model import Fault, FaultKind, ShapeChange, Trigger
from genie.input_yaml import as_text, describe, parse_yaml
from genie.topology.validation import did_you_mean

COMMON_KEYS = ("kind", "at", "at_op")
KIND_KEYS: dict[FaultKind, tuple[str, ...]] = {
    FaultKind.DEGRADE: ("link", "rate", "delay", "jitter", "loss", "duration"),
    FaultKind.FLAP: ("link", "duration"),
    FaultKind.DOWN: ("link",),
    FaultKind.STRAGGLER: ("rank", "factor"),
    FaultKind.CROSS_TRAFFIC: ("src", "dst", "duration"),
}
REQUIRED: dict[FaultKind, tuple[str, ...]] = {
    FaultKind.DEGRADE: ("link",),
    FaultKind.FLAP: ("link", "duration"),
    FaultKind.DOWN: ("link",),
    FaultKind.STRAGGLER: ("rank", "factor"),
    FaultKind.CROSS_TRAFFIC: ("src", "dst"),
}
ALIASES = {"for": "duration", "at_s": "at", "bandwidth": "rate"}
MAX_FACTOR = 1000.0


def _fail(message: str, source: str | None, path: str) -> InputError:
    return InputError(message, source=source, path=path)


def _time_s(value: object, source: str | None, path: str, *, positive: bool) -> float:
    if isinstance(value, bool) or value is None:
        raise _fail(f"expected a time with a unit such as '200ms' or '2s', got {describe(value)}", source, path)
    try:
        ns = parse_time_ns(value)  # type: ignore[arg-type]
    except ValueError as exc:
        raise _fail(str(exc), source, path) from None
    if positive and ns <= 0:
        raise _fail(f"expected a time > 0, got {shown(value)}", source, path)
    return ns / 1e9


def _int(value: object, what: str, source: str | None, path: str) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"expected {what}, got {describe(value)}", source, path)
    if value < 0:
        raise _fail(f"expected {what}, got {value}", source, path)
    return value


def _number(value: object, source: str | None, path: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip().removesuffix("%").strip())
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(f"expected a number, got {describe(value)}", source, path)
    return float(value)


def _name(value: object, what: str, source: str | None, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(f"expected {what}, got {describe(value)}", source, path)
    return value.strip()


def _trigger(doc: Mapping[str, Any], source: str | None, path: str) -> Trigger:
    at, at_op = doc.get("at"), doc.get("at_op")
    if isinstance(at, str) and at.strip().lower().startswith("op"):  # at=op5
        if at_op is not None:
            raise _fail("give `at` or `at_op`, not both", source, f"{path}.at_op")
        at, at_op = None, at.strip()[2:]
    if at is None and at_op is None:
        raise _fail("missing trigger: give `at` (a time such as '2s') or `at_op` (an op index)", source,
                    f"{path}.at")
    if at is not None and at_op is not None:
        raise _fail("give `at` or `at_op`, not both", source, f"{path}.at_op")
    if at_op is not None:
        return Trigger(at_op=_int(at_op, "an op index >= 0", source, f"{path}.at_op"))
    if isinstance(at, str) and at.strip().startswith("-"):
        raise _fail(f"expected a time >= 0, got {shown(at)}", source, f"{path}.at")
    return Trigger(at_s=_time_s(at, source, f"{path}.at", positive=False))


def _kind(value: object, source: str | None, path: str) -> FaultKind:
    try:
        return FaultKind.parse(str(value))
    except ValueError as exc:
        raise _fail(f"{exc}{did_you_mean(value, [k.value for k in FaultKind])}", source, f"{path}.kind") from None


def fault_from_mapping(raw: object, *, source: str | None, path: str) -> Fault:
    """One fault from its keys (YAML mapping or parsed compact spec); InputError naming `path`.key."""
    if not isinstance(raw, Mapping):
        raise _fail(f"expected a mapping with `kind`, got {describe(raw)}", source, path)
    doc = {ALIASES.get(str(k), str(k)): v for k, v in raw.items()}
    if "kind" not in doc:
        raise _fail("missing field `kind` (degrade, flap, down, straggler, cross_traffic)", source, f"{path}.kind")
    kind = _kind(doc["kind"], source, path)
    allowed = COMMON_KEYS + KIND_KEYS[kind]
    for key in doc:
        if key not in allowed:
            raise _fail(f"unknown field for a {kind.value} fault{did_you_mean(key, allowed)} (allowed: "
                        f"{', '.join(allowed)})", source, f"{path}.{key}")
    for key in REQUIRED[kind]:
        if doc.get(key) is None:
            raise _fail(f"missing field `{key}` of a {kind.value} fault", source, f"{path}.{key}")
    trigger = _trigger(doc, source, path)
    change = ShapeChange()
    if kind is FaultKind.DEGRADE:
        change = _shape_change(doc, source, path)
    factor = None
    if kind is FaultKind.STRAGGLER:
        factor = _number(doc["factor"], source, f"{path}.factor")
        if not 0 < factor <= MAX_FACTOR:
            raise _fail(f"expected a factor in (0, {MAX_FACTOR:g}], got {factor:g}", source, f"{path}.factor")
    duration = None
    if doc.get("duration") is not None:
        duration = _time_s(doc["duration"], source, f"{path}.duration", positive=True)
    return Fault(kind=kind, trigger=trigger,
                 link=_name(doc["link"], "a link such as 'h3-s0'", source, f"{path}.link") if "link" in doc else None,
                 rank=_int(doc["rank"], "a rank >= 0", source, f"{path}.rank") if "rank" in doc else None,
                 src=_name(doc["src"], "a host name", source, f"{path}.src") if "src" in doc else None,
                 dst=_name(doc["dst"], "a host name", source, f"{path}.dst") if "dst" in doc else None,
                 change=change, duration_s=duration, factor=factor, path=path, source=source)


def _shape_change(doc: Mapping[str, Any], source: str | None, path: str) -> ShapeChange:
    values: dict[str, Any] = {}
    if doc.get("rate") is not None:
        value = doc["rate"]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise _fail(f"expected a rate with a unit such as '100mbit', got {shown(value)} (unit missing)", source,
                        f"{path}.rate")
        try:
            values["rate_bps"] = parse_rate_bps(str(value))
        except ValueError as exc:
            raise _fail(str(exc), source, f"{path}.rate") from None
        if values["rate_bps"] < 8:
            raise _fail(f"expected a rate of at least 8bit, got {shown(value)}", source, f"{path}.rate")
    for key, field in (("delay", "delay_us"), ("jitter", "jitter_us")):
        if doc.get(key) is not None:
            value = doc[key]
            if isinstance(value, str) and value.strip().startswith("-") or \
                    isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise _fail(f"expected a time >= 0, got {shown(value)}", source, f"{path}.{key}")
            values[field] = _time_s(value, source, f"{path}.{key}", positive=False) * 1e6
    if doc.get("loss") is not None:
        loss = _number(doc["loss"], source, f"{path}.loss")
        if not 0 <= loss < 100:
            raise _fail(f"expected a loss percentage in [0, 100), got {loss:g} (use `down` to cut a link)",
                        source, f"{path}.loss")
        values["loss_pct"] = loss
    if not values:
        raise _fail("a degrade fault needs at least one of rate, delay, jitter, loss", source, f"{path}.rate")
    return ShapeChange(**values)


def read_faults_yaml(data: str | bytes | IO[str] | IO[bytes], *, source: str = "<faults>") -> list[Fault]:
    """Faults of a YAML document ``faults: [...]`` (a bare list is accepted too)."""
    doc = parse_yaml(as_text(data, source, reader="read_faults_yaml"), source)
    if isinstance(doc, Mapping):
        for key in doc:
            if key != "faults":
                raise _fail(f"unknown top-level field{did_you_mean(key, ['faults'])} (expected `faults`)",
                            source, str(key))
        doc = doc.get("faults")
    if not isinstance(doc, list):
        raise _fail(f"expected a list of faults, got {describe(doc)}", source, "faults")
    return faults_from_list(doc, source=source)


def faults_from_list(items: Sequence[object], *, source: str | None, prefix: str = "faults") -> list[Fault]:
    """The `faults` list of a YAML document (also usable by scenario files that embed one)."""
    return [fault_from_mapping(item, source=source, path=f"{prefix}[{i}]") for i, item in enumerate(items)]


def parse_fault_spec(spec: str, *, path: str = "fault") -> Fault:
    """One compact spec such as ``degrade h3-s0 rate=100mbit at=op10`` (see the module docstring)."""
    try:
        tokens = shlex.split(spec)
    except ValueError as exc:
        raise _fail(f"cannot split {shown(spec)}: {exc}", None, path) from None
    if not tokens:
        raise _fail("empty fault spec (expected e.g. 'degrade h3-s0 rate=100mbit at=2s')", None, path)
    doc: dict[str, Any] = {"kind": tokens[0]}
    positional: list[str] = []
    for token in tokens[1:]:
        if "=" in token:
            key, _, value = token.partition("=")
            key = ALIASES.get(key.strip(), key.strip())
            if key in doc:
                raise _fail(f"`{key}` given twice", None, f"{path}.{key}")
            doc[key] = value
        else:
            positional.append(token)
    kind = _kind(tokens[0], None, path)
    if kind is FaultKind.CROSS_TRAFFIC and len(positional) == 1 and "->" in positional[0]:
        positional = positional[0].split("->", 1)
    slots = {FaultKind.STRAGGLER: ("rank",), FaultKind.CROSS_TRAFFIC: ("src", "dst")}.get(kind, ("link",))
    if len(positional) > len(slots):
        raise _fail(f"unexpected {shown(positional[len(slots)])} (expected key=value after the target)", None, path)
    for slot, value in zip(slots, positional):
        if slot in doc:
            raise _fail(f"`{slot}` given twice", None, f"{path}.{slot}")
        doc[slot] = value
    return fault_from_mapping(doc, source=None, path=path)


def parse_fault_specs(specs: Sequence[str]) -> list[Fault]:
    return [parse_fault_spec(s, path=f"fault[{i}]") for i, s in enumerate(specs)]
