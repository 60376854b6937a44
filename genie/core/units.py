"""Parsing of human quantities into integers with units in their names.

Rates are bits per second with ``bit`` suffixes (``100mbit``, ``25gbit``), SI prefixes powers of 1000. ``bps``
suffixes are refused: tc reads ``1gbps`` as gigaBYTES per second (8 Gbit/s) where an iperf user means gigabits,
so the error names both spellings (``1gbit``; ``8gbit`` for 1 GByte/s). Times accept ``ns``, ``us``, ``ms``, ``s``.
Sizes accept ``B``, ``K``/``KiB`` (1024) , ``KB`` (1000), ``M``/``MiB``, ``MB``, ``G``/``GiB``, ``GB``.
"""

from __future__ import annotations

import math
import re

from genie.core.errors import shown
from genie.core.limits import MAX_RATE_BPS, MAX_SIZE_BYTES, MAX_TIME_NS

_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*"

_RATE_UNITS_BPS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_AMBIGUOUS_RATE_UNITS = {"bps": "bit", "kbps": "kbit", "mbps": "mbit", "gbps": "gbit", "tbps": "tbit"}
_TIME_UNITS_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kib": 1024, "kb": 1000,
    "m": 1024**2, "mib": 1024**2, "mb": 1000**2,
    "g": 1024**3, "gib": 1024**3, "gb": 1000**3,
}


def _split(text: str, what: str) -> tuple[float, str]:
    m = re.fullmatch(_NUMBER + r"(?P<unit>[A-Za-z]*)", str(text).strip())
    if not m:
        raise ValueError(f"expected a {what} such as {_EXAMPLES[what]}, got {shown(text)}")
    value = float(m.group("num"))
    if not math.isfinite(value):
        raise ValueError(f"expected a {what} such as {_EXAMPLES[what]}, got {shown(text)} (too large a number)")
    return value, m.group("unit").lower()


def _bounded(value: float, limit: int, text: object, what: str, shown_limit: str) -> int:
    """`value` rounded; past `limit` (or not finite) a ValueError naming the limit, before any int overflows."""
    if not value <= limit:
        raise ValueError(f"expected a {what} of at most {shown_limit}, got {shown(text)}")
    return round(value)


_EXAMPLES = {"rate": "'100mbit' or '25gbit'", "time": "'50us' or '2ms'", "size": "'1KiB' or '64M'"}


def parse_rate_bps(text: str) -> int:
    """'1gbit' -> 1_000_000_000. A unit is required."""
    value, unit = _split(text, "rate")
    if unit in _AMBIGUOUS_RATE_UNITS:
        bits = _AMBIGUOUS_RATE_UNITS[unit]
        raise ValueError(f"{text!r} is ambiguous: tc reads {unit!r} as bytes per second ({value * 8:g}{bits}), "
                         f"iperf as bits; write '{value:g}{bits}' for bits per second or '{value * 8:g}{bits}' "
                         "for that many bytes per second")
    if unit not in _RATE_UNITS_BPS:
        raise ValueError(f"expected a rate with a unit (bit, kbit, mbit, gbit, tbit), got {shown(text)}")
    return _bounded(value * _RATE_UNITS_BPS[unit], MAX_RATE_BPS, text, "rate", "10tbit")


def parse_time_ns(text: str | int | float) -> int:
    """'50us' -> 50_000. A unit is required for strings; 0 may stand alone."""
    if isinstance(text, (int, float)) and not isinstance(text, bool) and text == 0:
        return 0
    value, unit = _split(str(text), "time")
    if unit not in _TIME_UNITS_NS:
        if unit == "" and value == 0:
            return 0
        raise ValueError(f"expected a time with a unit (ns, us, ms, s), got {shown(text)}")
    return _bounded(value * _TIME_UNITS_NS[unit], MAX_TIME_NS, text, "time", "30 days")


def parse_size_bytes(text: str | int) -> int:
    """'64M' -> 67108864, '1KB' -> 1000, 4096 -> 4096."""
    if isinstance(text, int) and not isinstance(text, bool):
        return _bounded(text, MAX_SIZE_BYTES, text, "size", "1TiB")
    value, unit = _split(str(text), "size")
    if unit not in _SIZE_UNITS:
        raise ValueError(f"expected a size such as '1KiB', '64M' or '4096', got {shown(text)}")
    return _bounded(value * _SIZE_UNITS[unit], MAX_SIZE_BYTES, text, "size", "1TiB")


def format_rate(bps: int) -> str:
    """A rate written back in genie's input syntax, exactly (``1gbit``, ``33333333bit``): for files and specs
    that are read again (a topology written out, a fault's spec). What a person reads: `describe_rate`."""
    for unit, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= scale and bps % scale == 0:
            return f"{bps // scale}{unit}"
    return f"{bps}bit"


_READ_UNITS = (("Tbit/s", 10**12), ("Gbit/s", 10**9), ("Mbit/s", 10**6), ("kbit/s", 10**3))


def describe_rate(bps: float) -> str:
    """A rate as people read it, to 3 significant digits: 33333333 -> ``33.3 Mbit/s``, 10**9 -> ``1 Gbit/s``,
    999999999 -> ``1 Gbit/s``. The one format for every rate printed to a user (plans, status, limits)."""
    rounded = float(f"{bps:.3g}")
    for unit, scale in _READ_UNITS:
        if rounded >= scale:
            return f"{rounded / scale:.3g} {unit}"
    return f"{rounded:.3g} bit/s"


def format_size(size_bytes: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size_bytes >= scale and size_bytes % scale == 0:
            return f"{size_bytes // scale}{unit}"
    return f"{size_bytes}B"


def parse_nccl_size_bytes(text: str | int) -> int:
    """A size as nccl-tests' -b/-e parse it: a number and an optional K, M or G, all powers of 1024
    (``1K`` = ``1KB`` = ``1KiB`` = 1024; a trailing ``B``/``iB`` is allowed); no suffix is bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    m = re.fullmatch(_NUMBER + r"(?P<unit>(?:[kKmMgG](?:i?[bB])?|[bB])?)", str(text).strip())
    if not m:
        raise ValueError(f"expected a size such as '1K', '64M' or '4096' (K, M, G are powers of 1024), "
                         f"got {shown(text)}")
    scale = {"k": 1024, "m": 1024**2, "g": 1024**3}.get(m.group("unit")[:1].lower(), 1)
    return _bounded(float(m.group("num")) * scale, MAX_SIZE_BYTES, text, "size", "1TiB")
