"""The one JSON decoder for input files: every way a document can fail to decode is one InputError naming the
file (exit code 2), never a traceback.

Besides malformed text it refuses what Python's `json` accepts but a genie input never holds:
- nesting deeper than the decoder's stack (``[[[[...`` a million deep: a RecursionError inside `json`),
- ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON; Python writes them unless told not to),
- a number too large for a float (``1e400``, read as infinity) or an integer of more digits than Python converts,
- text that is not UTF-8,
and, when the caller names one, a top-level value of the wrong type."""

from __future__ import annotations

import json
import math

from genie.core.errors import InputError


class _NotFinite(ValueError):
    pass


def _refuse_constant(name: str) -> object:
    raise _NotFinite(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(f"number {text[:40]} is too large for a float")
    return value


class JsonSyntaxError(InputError):
    """Text that is not JSON at `line` (1-based): most often a file cut off while it was written."""

    def __init__(self, message: str, *, source: str, line: int) -> None:
        super().__init__(message, source=source)
        self.line = line


_TYPE_NAMES = {dict: "a JSON object", list: "a JSON list"}


def decode_json(data: bytes | bytearray | str, *, source: str, what: str = "JSON",
                top: type | None = None, allow_nan: bool = False) -> object:
    """The value of the JSON document `data` read from `source`; any failure is an InputError
    ``<source>: not <what>: <why>`` (a syntax error is a JsonSyntaxError: its line and column in the message,
    the line in its ``line``). With `top`
    (dict or list), a document of another top-level type is refused too. `allow_nan`: NaN and Infinity are
    read as floats (a run directory's own files: Python's json writes them for a NaN it is given)."""
    try:
        doc = json.loads(data, parse_constant=None if allow_nan else _refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise InputError(f"not {what}: nested too deeply (more levels than genie decodes)", source=source) from None
    except json.JSONDecodeError as exc:
        raise JsonSyntaxError(f"not {what}: {exc.msg} (line {exc.lineno}, column {exc.colno})", source=source,
                              line=exc.lineno) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not {what}: expected UTF-8 text, got an undecodable byte at offset {exc.start}",
                         source=source) from None
    except ValueError as exc:  # _NotFinite, or an integer of more digits than int() converts
        raise InputError(f"not {what}: {' '.join(str(exc).split())[:160]}", source=source) from None
    if top is not None and not isinstance(doc, top):
        kind = "null" if doc is None else _TYPE_NAMES.get(type(doc), f"a JSON {type(doc).__name__}")
        raise InputError(f"expected {_TYPE_NAMES.get(top, top.__name__)} at the top level, got {kind}",
                         source=source)
    return doc
