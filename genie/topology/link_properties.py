"""The link properties of the topology YAML format: how each is written, read, formatted and range-checked.

One table (`LINK_PROPERTIES`) maps a YAML key (``bandwidth``) to a `LinkShape` field (``rate_bps``); the reader,
the writer and the validator all go through it, so the three never disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from genie.core.errors import shown
from genie.core.topology import LinkShape
from genie.core.units import format_rate, parse_rate_bps, parse_time_ns

MIN_RATE_BPS = 8  # tc works in bytes per second: one byte per second is the smallest rate it can express
MAX_DELAY_US = 10_000_000.0  # 10 s per hop: anything larger is a typo, not a network
MIN_MTU_BYTES = 576  # the smallest datagram every IPv4 host must accept (RFC 791)
MAX_MTU_BYTES = 65535  # the largest MTU a veth accepts
MAX_QUEUE_PACKETS = 2**32 - 1  # tc limits are 32-bit
MAX_LOSS_BURST_PACKETS = 1_000_000.0


@dataclass(frozen=True)
class EmulatedLinkShape(LinkShape):
    """A `LinkShape` plus the options only the delay emulators read. A link gets this class only when one of
    them differs from its default, so every other shape stays a plain (and equal-comparing) LinkShape.

    * ``reorder``: with jitter, may packets overtake each other (netem's behaviour)? False keeps each link
      direction FIFO: a packet leaves no earlier than the one before it.
    * ``loss_burst_packets``: mean length of a loss burst; 0 means independent (Bernoulli) losses, >= 1 a
      Gilbert(-Elliott) two-state loss process with the same mean loss rate (``loss_pct``).

    Kept here until `genie.core.topology.LinkShape` carries these fields; read them through `shape_option`.
    """

    reorder: bool = False
    loss_burst_packets: float = 0.0


SHAPE_OPTION_DEFAULTS: dict[str, object] = {f.name: f.default for f in fields(EmulatedLinkShape)
                                            if f.name not in {g.name for g in fields(LinkShape)}}


def make_shape(**values: object) -> LinkShape:
    """A LinkShape from field values; an `EmulatedLinkShape` only when an emulator option is not its default."""
    if any(values.get(key, default) != default for key, default in SHAPE_OPTION_DEFAULTS.items()):
        return EmulatedLinkShape(**values)  # type: ignore[arg-type]
    return LinkShape(**{k: v for k, v in values.items() if k not in SHAPE_OPTION_DEFAULTS})  # type: ignore[arg-type]


def shape_option(shape: LinkShape, field: str) -> object:
    """A shape field, with the default of the emulator options for a plain LinkShape."""
    return getattr(shape, field, SHAPE_OPTION_DEFAULTS.get(field))


def shape_reorders(shape: LinkShape) -> bool:
    return bool(shape_option(shape, "reorder"))


def shape_loss_burst(shape: LinkShape) -> float:
    return float(shape_option(shape, "loss_burst_packets"))  # type: ignore[arg-type]


@dataclass(frozen=True)
class LinkProperty:
    """A YAML key of a link (or of ``defaults``) and the `LinkShape` field it sets."""

    key: str
    field: str
    read: Callable[[object], object]  # YAML value -> field value; raises ValueError("expected ...")
    write: Callable[[object], object]  # field value -> YAML value


def _reject_bool(value: object, what: str) -> None:
    if isinstance(value, bool):
        raise ValueError(f"expected {what}, got {shown(value)} (YAML reads yes/no/on/off as booleans)")


def _read_rate(value: object) -> int | None:
    if value is None:
        return None
    _reject_bool(value, "a rate with a unit such as '100mbit' or '25gbit'")
    if isinstance(value, (int, float)):
        raise ValueError(f"expected a rate with a unit such as '100mbit' or '25gbit', got {shown(value)} (unit missing)")
    return parse_rate_bps(str(value))


def _read_time_us(value: object) -> float:
    _reject_bool(value, "a time with a unit such as '50us' or '2ms'")
    if value is None:
        raise ValueError("expected a time with a unit such as '50us' or '2ms' (write 0 for none), got null")
    return parse_time_ns(value) / 1000  # type: ignore[arg-type]


def _read_loss_pct(value: object) -> float:
    what = "a loss percentage such as 0.5 or '0.5%'"
    _reject_bool(value, what)
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    try:
        return float(text.removesuffix("%").strip())
    except ValueError:
        raise ValueError(f"expected {what}, got {shown(value)}") from None


def _read_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {shown(value)}")
    return value


def _read_loss_burst(value: object) -> float:
    what = "a mean loss burst length in packets such as 4 (0: independent losses)"
    _reject_bool(value, what)
    if not isinstance(value, (int, float)):
        raise ValueError(f"expected {what}, got {shown(value)}")
    return float(value)


def _read_int(value: object, what: str) -> int:
    _reject_bool(value, what)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, int):
        raise ValueError(f"expected {what}, got {shown(value)}")
    return value


def _read_queue(value: object) -> int | None:
    if value is None:
        return None
    return _read_int(value, "a queue length in packets such as 100")


def _read_mtu(value: object) -> int:
    return _read_int(value, f"an MTU in bytes such as 1500 or 9000 ({MIN_MTU_BYTES}..{MAX_MTU_BYTES})")


def format_time_us(delay_us: float) -> str | int:
    """50.0 -> '50us', 2000.0 -> '2ms', 0.5 -> '500ns', 0 -> 0. Precision is one nanosecond."""
    ns = round(delay_us * 1000)
    if ns == 0:
        return 0
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns % scale == 0:
            return f"{ns // scale}{unit}"
    return f"{ns}ns"


def _write_rate(rate_bps: object) -> str | None:
    return None if rate_bps is None else format_rate(int(rate_bps))  # type: ignore[call-overload]


def _write_loss(loss_pct: object) -> float | int:
    value = float(loss_pct)  # type: ignore[arg-type]
    return int(value) if value.is_integer() else value


LINK_PROPERTIES: tuple[LinkProperty, ...] = (
    LinkProperty("bandwidth", "rate_bps", _read_rate, _write_rate),
    LinkProperty("delay", "delay_us", _read_time_us, format_time_us),  # type: ignore[arg-type]
    LinkProperty("jitter", "jitter_us", _read_time_us, format_time_us),  # type: ignore[arg-type]
    LinkProperty("loss", "loss_pct", _read_loss_pct, _write_loss),
    LinkProperty("queue", "queue_packets", _read_queue, lambda v: v),
    LinkProperty("mtu", "mtu_bytes", _read_mtu, lambda v: v),
)
# Options only the delay emulators read (fields of EmulatedLinkShape, not of LinkShape).
EMULATOR_LINK_PROPERTIES: tuple[LinkProperty, ...] = (
    LinkProperty("reorder", "reorder", _read_bool, lambda v: v),
    LinkProperty("loss_burst", "loss_burst_packets", _read_loss_burst, _write_loss),
)
ALL_LINK_PROPERTIES = LINK_PROPERTIES + EMULATOR_LINK_PROPERTIES
LINK_PROPERTY_KEYS: tuple[str, ...] = tuple(p.key for p in ALL_LINK_PROPERTIES)


def property_for_key(key: str) -> LinkProperty:
    for prop in ALL_LINK_PROPERTIES:
        if prop.key == key:
            return prop
    raise KeyError(key)


def shape_problems(shape: LinkShape) -> tuple[tuple[str, str], ...]:
    """Range problems of a shape as (YAML key, message) pairs, empty when the shape is possible.

    Jitter larger than the delay is rejected: netem would clip the negative delays at zero, so the link's
    mean delay would no longer be the one written down.
    """
    problems: list[tuple[str, str]] = []
    if shape.rate_bps is not None and shape.rate_bps < MIN_RATE_BPS:
        problems.append(("bandwidth", f"expected a rate of at least {MIN_RATE_BPS}bit (1 byte/s), "
                                      f"got {shape.rate_bps}bit"))
    for key, value in (("delay", shape.delay_us), ("jitter", shape.jitter_us)):
        if not 0 <= value <= MAX_DELAY_US:
            problems.append((key, f"expected a time between 0 and 10s, got {format_time_us(value)}"))
    if shape.jitter_us > shape.delay_us:
        problems.append(("jitter", f"jitter {format_time_us(shape.jitter_us)} exceeds delay "
                                   f"{format_time_us(shape.delay_us)}; expected jitter <= delay"))
    if not 0 <= shape.loss_pct < 100:
        why = " (a link that drops everything cannot carry a collective)" if shape.loss_pct >= 100 else ""
        problems.append(("loss", f"expected a loss percentage in [0, 100), got {shape.loss_pct:g}{why}"))
    burst = shape_loss_burst(shape)
    if burst != 0 and not 1 <= burst <= MAX_LOSS_BURST_PACKETS:
        problems.append(("loss_burst", f"expected 0 (independent losses) or a mean burst length of at least 1 "
                                       f"packet, got {burst:g}"))
    elif burst and not shape.loss_pct:
        problems.append(("loss_burst", "loss_burst shapes the losses of `loss`, which is 0; set loss too"))
    elif burst and 0 <= shape.loss_pct < 100 and shape.loss_pct / 100 > burst / (burst + 1):
        problems.append(("loss_burst", f"loss {shape.loss_pct:g}% cannot come in bursts of {burst:g} packets on "
                                       f"average (at most {100 * burst / (burst + 1):.3g}%); expected a longer "
                                       "burst or less loss"))
    if shape.queue_packets is not None and not 1 <= shape.queue_packets <= MAX_QUEUE_PACKETS:
        problems.append(("queue", f"expected a queue of at least 1 packet, got {shape.queue_packets}"))
    if not MIN_MTU_BYTES <= shape.mtu_bytes <= MAX_MTU_BYTES:
        problems.append(("mtu", f"expected an MTU between {MIN_MTU_BYTES} and {MAX_MTU_BYTES} bytes, "
                                f"got {shape.mtu_bytes}"))
    return tuple(problems)


def shape_to_yaml(shape: LinkShape, *, relative_to: LinkShape = LinkShape()) -> dict[str, object]:
    """The YAML keys of `shape` whose values differ from `relative_to`, in table order."""
    return {
        p.key: p.write(shape_option(shape, p.field))
        for p in ALL_LINK_PROPERTIES
        if shape_option(shape, p.field) != shape_option(relative_to, p.field)
    }
