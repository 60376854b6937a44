"""links.csv (per link direction), tcp.csv (per host namespace) and link_samples.csv (per direction over time):
writers and readers. Units in the column names; docs/reports.md describes every column."""

from __future__ import annotations

import csv
import io
from typing import Sequence

from genie.core.errors import InputError
from genie.measure.links import LinkDirectionTraffic, LinkRateSample, NamespaceTcp

LINKS_COLUMNS = ("link_index", "src", "dst", "netns", "ifname", "rate_bps", "duration_s", "bytes", "packets",
                 "tx_drops", "rx_drops", "qdisc_drops", "mean_rate_bps", "utilisation_pct")
TCP_COLUMNS = ("host", "netns", "out_segs", "in_segs", "retrans_segs", "retrans_pct", "in_errs", "out_rsts",
               "active_opens", "passive_opens")
SAMPLES_COLUMNS = ("t_start_s", "t_end_s", "link_index", "src", "dst", "bytes", "rate_bps")


def _csv(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    w.writerows(rows)
    return out.getvalue()


def _blank(v: object) -> object:
    return "" if v is None else v


def links_csv(rows: Sequence[LinkDirectionTraffic]) -> str:
    return _csv(LINKS_COLUMNS, [
        (r.link_index, r.src, r.dst, r.netns or "", r.ifname, _blank(r.rate_bps), round(r.duration_s, 6), r.bytes,
         r.packets, r.tx_drops, _blank(r.rx_drops), r.qdisc_drops, round(r.mean_rate_bps, 1),
         _blank(None if r.utilisation_pct is None else round(r.utilisation_pct, 3))) for r in rows])


def tcp_csv(rows: Sequence[NamespaceTcp]) -> str:
    return _csv(TCP_COLUMNS, [
        (r.host, r.netns, r.counters.out_segs, r.counters.in_segs, r.counters.retrans_segs, round(r.retrans_pct, 4),
         r.counters.in_errs, r.counters.out_rsts, r.counters.active_opens, r.counters.passive_opens) for r in rows])


def samples_csv(rows: Sequence[LinkRateSample]) -> str:
    return _csv(SAMPLES_COLUMNS, [(r.t_start_s, r.t_end_s, r.link_index, r.src, r.dst, r.bytes,
                                   round(r.rate_bps, 1)) for r in rows])


def read_table(data: bytes | str, columns: Sequence[str], *, source: str,
               numeric: Sequence[str] = ()) -> list[dict[str, object]]:
    """Rows of a CSV that must have `columns`; `numeric` columns become float (blank → None)."""
    text = data.decode() if isinstance(data, (bytes, bytearray)) else data
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in columns if c not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"missing column {missing[0]!r}", source=source)
    rows: list[dict[str, object]] = []
    for line, raw in enumerate(reader, start=2):
        row: dict[str, object] = dict(raw)
        for c in numeric:
            value = raw.get(c)
            if value in ("", None):
                row[c] = None
                continue
            try:
                row[c] = float(value)  # type: ignore[arg-type]
            except ValueError:
                raise InputError(f"expected a number, got {value!r}", source=source, path=f"line {line}: {c}") from None
        rows.append(row)
    return rows


def read_links_csv(data: bytes | str, *, source: str = "links.csv") -> list[dict[str, object]]:
    return read_table(data, LINKS_COLUMNS, source=source,
                      numeric=("link_index", "rate_bps", "duration_s", "bytes", "packets", "tx_drops", "rx_drops",
                               "qdisc_drops", "mean_rate_bps", "utilisation_pct"))


def read_samples_csv(data: bytes | str, *, source: str = "link_samples.csv") -> list[dict[str, object]]:
    return read_table(data, SAMPLES_COLUMNS, source=source,
                      numeric=("t_start_s", "t_end_s", "link_index", "bytes", "rate_bps"))
