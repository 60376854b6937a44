"""nccl-tests stdout as launchers and loggers hand it over (pure): the prefixes they put on each line taken off
(:func:`output_lines`: ``srun --label``'s `` 0: ``, ``mpirun --tag-output``'s ``[1,0]<stdout>:``, the RFC 3339
timestamp of ``kubectl logs --timestamps``), and a row cut by NCCL's own log lines put back together.

nccl-tests prints a row's size, count, type, redop and root before it runs the collective, and the row's figures
after. NCCL may log in between with ``NCCL_DEBUG=INFO``: NCCL >= 2.22 connects peers lazily at a collective's first
call, so e.g. ``host:1904979:1905073 [0] NCCL INFO Channel 00/0 : 7[3] -> 0[0] [receive] via NET/IB/2/GDRDMA`` is
glued to the end of the row's head, and the figures follow later on a line of their own (e.g. a 2-node H100 log:
``     2097152        524288     float     sum      -1host:...NCCL INFO ...`` then, some log lines later,
``    87.18   24.05   42.10      0    85.11   24.64   43.12      0``). ``rejoin_rows`` joins such a head with the
first later line that holds only figures, and leaves everything else (line numbers included) as it was."""

from __future__ import annotations

import re

#: a logger's timestamp (kubectl logs --timestamps: RFC 3339, UTC or an offset), then a launcher's label (srun
#: --label, mpirun --tag-output)
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?[ \t]")
_LABEL = re.compile(r"^(?:\s*\d+:(?:\s|$)|\[\d+,\d+\]<std(?:out|err)>:)")
#: a row's head as nccl-tests prints it before running the collective (size, count, type, [redop], [root]) with
#: NCCL's log prefix ("host:pid:tid [dev] NCCL INFO") glued to it; the root is read as short as it can be, so a
#: host name that starts with a digit is not taken for part of it
_CUT = re.compile(r"^(\d+\s+\d+\s+[A-Za-z]\w*(?:\s+[A-Za-z]\w*)?(?:\s+-?\d+?)?)"
                  r"[A-Za-z0-9][\w.-]*:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE)\b")
#: a row's figures on their own: times, bandwidths, #wrong and the -I columns (numbers or N/A)
_FIGURES = re.compile(r"^(?:(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|N/A|n/a|-?nan)(?:\s+|$))+$")


def rejoin_rows(lines: list[str]) -> list[str]:
    """``lines`` (stripped of srun/mpirun labels) with each row head that a log line cut joined to its figures:
    the head's line gets the whole row, the figures' line becomes empty. A head whose figures never come is left
    as it is (the reader then names its line)."""
    out = list(lines)
    pending: int | None = None  # index of a head waiting for its figures
    for i, line in enumerate(lines):
        if cut := _CUT.match(line):
            pending, out[i] = i, cut.group(1)
        elif pending is not None and _FIGURES.match(line.strip()):
            out[pending], out[i], pending = f"{out[pending]} {line.strip()}", "", None
    if pending is not None:
        out[pending] = lines[pending]
    return out


def output_lines(text: str) -> list[str]:
    """``text``'s lines, stripped, each without its logger's timestamp and launcher's label, and with the rows NCCL's
    log lines cut joined again (:func:`rejoin_rows`); line numbers stay the file's."""
    return rejoin_rows([_LABEL.sub("", _TIMESTAMP.sub("", raw, count=1), count=1).strip() for raw in text.split("\n")])
