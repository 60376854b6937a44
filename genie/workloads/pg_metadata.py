"""PyTorch process-group metadata: the ``## process_group:init ##`` node of an execution trace.

PyTorch's ExecutionTraceObserver records, at the start of a trace, one node named ``## process_group:init ##``
whose only input is a JSON list of the process groups the rank knows: ``pg_name``, ``pg_desc``,
``backend_config``, ``ranks`` (global ranks; an empty list means every rank) and ``group_size``. Chakra's
converter copies it into a METADATA node whose ``inputs.values`` is that input list printed by Python
(``['[{"pg_name": "0", ...}]']``); ASTRA-sim builds its communicator groups from it
(``Workload::issue_pytorch_pg_metadata``: cut two characters off each end, parse the JSON, empty ranks = all).
A ``group_size`` that is not the group's member count (the world's: the ranks whose traces were given) is refused:
a job read from some of its ranks' traces would run its world's collectives on fewer ranks.

This module reads both forms (the raw JSON string and the converter's printed list) into ProcessGroups and
merges what the ranks say; ranks that disagree on a group's members are an InputError.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from genie.core.errors import InputError
from genie.core.jsondoc import decode_json
from genie.core.trace import ProcessGroup

PG_INIT_NODE = "## process_group:init ##"


@dataclass(frozen=True)
class GroupRecord:
    """One process group as one rank's trace describes it."""

    name: str
    description: str
    ranks: tuple[int, ...]  # global ranks, in group-rank order (the world's: 0..N-1)


def _json_text(values: str) -> str:
    """The JSON list inside ``values``: the raw string, or the converter's printed one-element list."""
    text = values.strip()
    if text.startswith("['") or text.startswith('["'):
        try:
            inner = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text[2:-2]  # what ASTRA-sim does
        if isinstance(inner, list) and inner and isinstance(inner[0], str):
            return inner[0]
    return text


def parse_pg_records(values: str, *, world_size: int, source: str) -> tuple[GroupRecord, ...]:
    """The groups in one ``## process_group:init ##`` value (empty text: none). Bad JSON -> InputError."""
    text = _json_text(values)
    if not text:
        return ()
    try:
        doc = decode_json(text, source=source)
    except InputError as exc:
        raise InputError(f"process-group metadata is {exc.detail}", source=source, path=PG_INIT_NODE) from None
    if not isinstance(doc, list):
        raise InputError("process-group metadata must be a JSON list", source=source, path=PG_INIT_NODE)
    records = []
    for i, item in enumerate(doc):
        where = f"{PG_INIT_NODE}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("pg_name"), str) or not item["pg_name"]:
            raise InputError("entry without a pg_name string", source=source, path=where)
        ranks = item.get("ranks", [])
        if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise InputError("ranks must be a list of integers", source=source, path=f"{where}.ranks")
        members = tuple(ranks) if ranks else tuple(range(world_size))
        size = item.get("group_size")
        if isinstance(size, int) and not isinstance(size, bool) and size != len(members):
            # the world of a job of which only some ranks' traces were given: its collectives would run on fewer
            held = f"{world_size} rank(s) given: give every rank's trace" if not ranks else f"ranks lists {len(ranks)}"
            raise InputError(f"process group {item['pg_name']!r} has {size} ranks (group_size), {held}",
                             source=source, path=f"{where}.group_size")
        records.append(GroupRecord(item["pg_name"], str(item.get("pg_desc", "")), members))
    return tuple(records)


def merge_groups(per_rank: dict[int, tuple[GroupRecord, ...]], *, sources: dict[int, str]) -> tuple[ProcessGroup, ...]:
    """One ProcessGroup per pg_name over all ranks (a later trace of a group must name the same members)."""
    seen: dict[str, tuple[tuple[int, ...], int]] = {}
    for rank in sorted(per_rank):
        for rec in per_rank[rank]:
            known = seen.get(rec.name)
            if known is None:
                seen[rec.name] = (rec.ranks, rank)
            elif known[0] != rec.ranks:
                raise InputError(f"ranks disagree on process group {rec.name!r}: rank {known[1]} says "
                                 f"{list(known[0])}, rank {rank} says {list(rec.ranks)}",
                                 source=sources.get(rank, f"rank {rank}"), path=f"{PG_INIT_NODE}.ranks")
    return tuple(ProcessGroup(name, ranks) for name, (ranks, _) in seen.items())
