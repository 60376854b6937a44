"""`genie bench --osu TEST`'s stdout in OSU micro-benchmarks' layout (c/util/osu_util*.c: ``# <test name>``, then
``%-10s%20s`` titles and ``%-10d%20.2f`` rows, FIELD_WIDTH 20, FLOAT_PRECISION 2), so scripts that parse
osu_latency / osu_bw / osu_bibw / osu_mbw_mr read genie's."""

from __future__ import annotations

from genie.measure.osu import OsuRow, OsuTest

FIELD_WIDTH = 20
FLOAT_PRECISION = 2

TITLES = {OsuTest.LATENCY: "OSU MPI Latency Test", OsuTest.BW: "OSU MPI Bandwidth Test",
          OsuTest.BIBW: "OSU MPI Bi-Directional Bandwidth Test",
          OsuTest.MBW_MR: "OSU MPI Multiple Bandwidth / Message Rate Test"}


def header(test: OsuTest, *, pairs: int = 1) -> str:
    lines = [f"# {TITLES[test]} (genie, CPU ranks over TCP)"]
    if test is OsuTest.MBW_MR:
        lines.append(f"# [ pairs: {pairs} ] [ window size: 1 ]")
        lines.append("%-*s%*s%*s" % (10, "# Size", FIELD_WIDTH, "MB/s", FIELD_WIDTH, "Messages/s"))
    elif test is OsuTest.LATENCY:
        lines.append("%-*s%*s" % (10, "# Size", FIELD_WIDTH, "Latency (us)"))
    else:
        lines.append("%-*s%*s" % (10, "# Size", FIELD_WIDTH, "Bandwidth (MB/s)"))
    return "\n".join(lines)


def row(test: OsuTest, r: OsuRow) -> str:
    if test is OsuTest.MBW_MR:
        return "%-*d%*.*f%*.*f" % (10, r.size_bytes, FIELD_WIDTH, FLOAT_PRECISION, r.bandwidth_MBps,
                                   FIELD_WIDTH, FLOAT_PRECISION, r.messages_per_s)
    value = r.latency_us if test is OsuTest.LATENCY else r.bandwidth_MBps
    return "%-*d%*.*f" % (10, r.size_bytes, FIELD_WIDTH, FLOAT_PRECISION, value)
