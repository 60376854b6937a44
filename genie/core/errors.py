"""The error types every layer raises; the CLI turns them into one-line messages and exit code 2."""

from __future__ import annotations


class GenieError(Exception):
    """Bad input or an impossible request: reported in one line, exit code 2."""


class InputError(GenieError):
    """Malformed or invalid input, located by file and field path (e.g. ``links[3].bandwidth``)."""

    def __init__(self, message: str, *, source: str | None = None, path: str | None = None) -> None:
        self.source = source
        self.path = path
        self.detail = message
        where = ": ".join(p for p in (source, path) if p)
        super().__init__(f"{where}: {message}" if where else message)


class EnvironmentProblem(GenieError):
    """The machine lacks something genie needs (privileges, a kernel feature, a program)."""


class RunFailure(GenieError):
    """A run started but could not finish (dead peer, op timeout)."""


SHOWN_CHARS = 60


def shown(value: object) -> str:
    """`value` quoted for an error message, cut to about SHOWN_CHARS characters: an error names the offending
    value, it never prints a whole document (a value expanded from YAML aliases can be megabytes)."""
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 64:
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS - 20]}... ({len(text)} characters)"


def parse_enum_value(cls, text: object, what: str, *, source: str | None = None, path: str | None = None,
                     note: str = ""):
    """The member of the string-valued enum ``cls`` whose value is ``text`` (case and surrounding blanks
    ignored); else an `InputError` naming ``what``, the text and the values expected (then ``note``)."""
    for member in cls:
        if member.value == str(text).strip().lower():
            return member
    raise InputError(f"unknown {what} {text!r} (expected {', '.join(m.value for m in cls)}{note})",
                     source=source, path=path)
