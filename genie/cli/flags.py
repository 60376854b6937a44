"""Flag names, only here: a service names the request field a problem is in (``InputError(path="iterations")``,
other fields in backquotes in the message); each command maps its request fields to its flags, so the user
reads ``--iters: must be >= 1``."""

from __future__ import annotations

import contextlib
import re
from typing import Iterator, Mapping

from genie.core.errors import InputError

_FIELD = re.compile(r"`([a-z][a-z0-9_]*)`")

#: the fields of genie.services.options.RunOptions, as every rank-running command spells them
RUN_FLAGS: Mapping[str, str] = {
    "topology": "--topology", "testbed": "--testbed", "loopback": "--loopback", "launcher": "--launcher",
    "transport": "--transport", "inventory": "--inventory", "mpiexec": "--mpiexec", "port_range": "--port-range",
    "out": "--out", "sample_ms": "--sample-ms", "capture": "--capture", "faults_file": "--faults",
    "faults": "--fault", "fault": "--fault", "timeout_s": "--timeout", "force": "--force",
    "shared": "--shared", "time_dilation": "--time-dilation",
}
_HEAD = re.compile(r"^([a-z][a-z0-9_]*)(.*)$", re.S)


def flag_path(path: str | None, flags: Mapping[str, str]) -> str | None:
    """A field path (``iterations``, ``fault[2].rate``) with its leading field spelt as its flag."""
    match = _HEAD.match(path or "")
    if match is None or match.group(1) not in flags:
        return path
    return flags[match.group(1)] + match.group(2)


def flag_message(text: str, flags: Mapping[str, str]) -> str:
    """`text` with every backquoted request field that has a flag replaced by the flag."""
    return _FIELD.sub(lambda m: flags.get(m.group(1), m.group(0)), text)


@contextlib.contextmanager
def flag_names(flags: Mapping[str, str]) -> Iterator[None]:
    """Inside the block, an InputError about a request field (no file named) is re-raised about its flag."""
    try:
        yield
    except InputError as exc:
        path = flag_path(exc.path, flags)
        if exc.source is not None or (path == exc.path and not _FIELD.search(exc.detail)):
            raise
        raise InputError(flag_message(exc.detail, flags), path=path) from None
