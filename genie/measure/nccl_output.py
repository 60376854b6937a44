"""A reader of nccl-tests output as people have it (pure): the stdout of any nccl-tests 2.x release (srun or mpirun
labels, collectors' ``### `` separators, NCCL's own lines, with or without the header) or its ``-J`` JSON file (file
versions 2 and 3 of src/util.cu), and what genie writes in those layouts (genie.report.nccl_table, nccl_json).

Conventions of every release (``*GetCollByteCount``, ``*GetBw`` in NVIDIA/nccl-tests): ``size`` is the larger of
the send and receive buffers; ``count`` is *per rank* for all_gather, reduce_scatter, alltoall, gather and scatter
(size = count x element x ranks), the whole buffer for the others. No release differs, so only that convention is
accepted. algbw = size / time, busbw = algbw x the collective's factor; with ``-C 1`` the time is CPU time and the
bandwidths GPU figures (algbw is not checked then). Releases before 2.13 titled ``#wrong`` ``error`` and printed no
redop column for all_gather, sendrecv, broadcast, gather, scatter, no root column but for reduce, broadcast, gather
and scatter (columns are read by title). One header may cover sweeps of ``-d all``, ``-o all``, ``-r -1``."""

from __future__ import annotations

import math
import operator
import re
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from pathlib import PurePath
from typing import Any

from genie.collectives.busbw import busbw_factor
from genie.core.collective import Collective
from genie.core.errors import InputError
from genie.core.files import decode_text
from genie.core.jsondoc import JsonSyntaxError, decode_json
from genie.core.sizes import PER_RANK_SPLIT
from genie.measure.nccl_check import WrongValues, add_wrong, footer_wrong
from genie.measure.nccl_devices import NcclDevice, device, device_line, gpus_per_thread, header_gpus_per_thread
from genie.measure.nccl_log_lines import output_lines

MAX_INPUT_BYTES = 64 << 20
MAX_ROWS = 100_000


class Phase(Enum):
    OUT_OF_PLACE = "out_of_place"
    IN_PLACE = "in_place"


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    count: int  # as printed: per rank for all_gather, reduce_scatter, alltoall, gather, scatter
    dtype: str
    redop: str  # 'none' where the release printed no reduction
    root: int  # -1: no root
    time_us: float  # out-of-place
    algbw_gb_s: float
    busbw_gb_s: float
    in_place_time_us: float | None
    in_place_algbw_gb_s: float | None
    in_place_busbw_gb_s: float | None
    line: int  # 1-based line in the file (JSON: 0)

    def figures(self, phase: Phase) -> tuple[float, float, float] | None:
        """(time_us, algbw_gb_s, busbw_gb_s) of one phase; None when it was not measured (N/A)."""
        if phase is Phase.OUT_OF_PLACE:
            return self.time_us, self.algbw_gb_s, self.busbw_gb_s
        t, a, b = self.in_place_time_us, self.in_place_algbw_gb_s, self.in_place_busbw_gb_s
        return None if t is None or a is None or b is None else (t, a, b)


@dataclass(frozen=True)
class NcclTable:
    source: str
    collective: Collective
    ranks: int
    devices: tuple[NcclDevice, ...]
    rows: tuple[NcclRow, ...]
    first_line: int  # the column titles' line, or the first row's without a header (JSON: 0)
    nccl_version: str  # '' if unknown
    title: str  # the nearest preceding `### ` line's text, or ''
    gpus_per_thread: int = 1  # one host thread launched each call on so many GPUs (nccl_devices.gpus_per_thread)
    wrong: WrongValues | None = None  # the wrong elements nccl-tests' own check counted (nccl_check)

    def nodes(self) -> tuple[str, ...]:
        """The distinct hosts in rank order (empty when no device names its host)."""
        hosts = [d.host for d in sorted(self.devices, key=lambda d: d.rank)]
        return () if not hosts or "" in hosts else tuple(dict.fromkeys(hosts))

    def ranks_per_node(self) -> int | None:
        """Ranks per node when every node has the same count, else None."""
        counts = set(Counter(d.host for d in self.devices).values()) if self.nodes() else set()
        return counts.pop() if len(counts) == 1 else None


@dataclass(frozen=True)
class NcclTestsOutput:
    source: str
    tables: tuple[NcclTable, ...]


BINARIES = {"all_reduce_perf": Collective.ALL_REDUCE, "all_gather_perf": Collective.ALL_GATHER,
            "reduce_scatter_perf": Collective.REDUCE_SCATTER, "alltoall_perf": Collective.ALL_TO_ALL,
            "sendrecv_perf": Collective.SEND_RECV, "broadcast_perf": Collective.BROADCAST,
            "reduce_perf": Collective.REDUCE, "gather_perf": Collective.GATHER, "scatter_perf": Collective.SCATTER}
_BINARY = re.compile(r"(?<![a-z0-9])(?:all_reduce|all_gather|reduce_scatter|alltoallv?|sendrecv|broadcast|reduce|gather"
                     r"|scatter|hypercube)_perf(?![a-z0-9])")
_NAME = re.compile(r"(?<![a-z])(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|send_?recv|broadcast)(?![a-z])")
DTYPE_BYTES = {"int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
               "e4m3": 1, "e5m2": 1, "half": 2, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "float": 4,
               "float32": 4, "int32": 4, "uint32": 4, "int": 4, "double": 8, "float64": 8, "int64": 8, "uint64": 8}
#: busbw factor f(n) = L - L/n (genie.collectives.busbw); the others' is 1
_LIMIT = {Collective.ALL_REDUCE: 2.0, **{c: 1.0 for c in PER_RANK_SPLIT}}
_NAMED_ONLY = (Collective.GATHER, Collective.SCATTER)
#: which collectives print rows of a (no reduction, rooted) kind; pre-2.13 sendrecv printed no redop column
_KINDS = {(False, False): (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.SEND_RECV),
          (True, False): (Collective.ALL_GATHER, Collective.ALL_TO_ALL, Collective.SEND_RECV),
          (False, True): (Collective.REDUCE,),
          (True, True): (Collective.BROADCAST, Collective.GATHER, Collective.SCATTER)}

_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version\b.*?\bnccl-library=(\d+)")
_NCCL_VERSION = re.compile(r"\bNCCL version\s+v?(\d+\.\d+(?:\.\d+)?)")
_FOOTER = re.compile(r"^#\s*(?:Out of bounds values|Avg bus bandwidth|Collective test concluded)\b")
_ROW_START = re.compile(r"^\d+\s+\d+\s+[A-Za-z]\w*(?:\s|$)")
_INT = re.compile(r"\d+", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_MISSING = ("n/a", "nan", "-nan")
_FIGURES = ("time", "cputime", "algbw", "busbw", "#wrong", "error", "i_min", "i_max", "i_p99", "i_cv%")
_JSON_HALF_UNIT = 5e-7  # nccl-tests writes JSON doubles with %lf (6 decimals)

Num = tuple[float, float]  # a printed value and half its last digit's unit (what rounding may hide)
Body = tuple[Num, Num, Num]  # time_us, algbw, busbw


@dataclass(frozen=True)
class _Layout:
    width: int  # tokens in a row (the type is always the third)
    redop_at: int | None
    root_at: int | None
    bodies: tuple[tuple[int, int, int], ...]  # (time, algbw, busbw) indexes: out-of-place, then in-place
    numeric: tuple[int, ...]  # every figure's index (bodies, #wrong, -I's i_*)
    cputime: bool
    from_header: bool = True


def _layout(titles: list[str], from_header: bool = True) -> _Layout | None:
    if len(titles) < 3 or titles[0] not in ("size", "bytes") or titles[1] not in ("count", "N"):
        return None
    times = [i for i, t in enumerate(titles) if t in ("time", "cputime")]
    algbw = [i for i, t in enumerate(titles) if t == "algbw"]
    busbw = [i for i, t in enumerate(titles) if t == "busbw"]
    if not times or not len(times) == len(algbw) == len(busbw):
        return None
    redop = next((i for i, t in enumerate(titles) if t in ("redop", "op")), None)
    return _Layout(len(titles) + ("timestamp" in titles), redop, titles.index("root") if "root" in titles else None,
                   tuple(zip(times, algbw, busbw))[:2], tuple(i for i, t in enumerate(titles) if t in _FIGURES),
                   "cputime" in titles, from_header)


_CURRENT = "size count type redop root".split() + "time algbw busbw #wrong".split() * 2
_PER_ITER = "size count type redop root".split() + "time algbw busbw #wrong i_min i_max i_p99 i_cv%".split() * 2
#: rows without a header: current releases' layouts (-I 1: per-iteration columns; -Z: a timestamp)
_HEADERLESS = {len(t) + z: _layout(t + ["timestamp"] * z, False) for t in (_CURRENT, _PER_ITER) for z in (0, 1)}


@dataclass(frozen=True)
class _RawRow:
    size: int
    count: int
    dtype: str
    redop: str
    root: int
    bodies: tuple[Body | None, Body | None]
    line: int  # 0: JSON's results[index]
    index: int

    def at(self, name: str) -> str:
        """Where a field is: the line of a text row, the field path of a JSON one."""
        return f"line {self.line}" if self.line else f"results[{self.index}].{name}"

    def kind(self) -> tuple[bool, bool]:
        return self.redop.lower() in ("none", ""), self.root >= 0


@dataclass
class _Segment:
    """One table being read: what precedes its rows (title, test banner, devices, versions) and the rows."""
    title: str = ""
    stated: str = ""  # the binary the output names (`# Collective test starting`, JSON args)
    stated_at: str = ""
    version: str = ""
    devices: list[NcclDevice] = field(default_factory=list)
    devices_at: str = ""
    layout: _Layout | None = None
    first_line: int = 0
    cputime: bool = False
    rows: list[_RawRow] = field(default_factory=list)
    gpus_per_thread: int = 0  # the header's nGpus (0: not printed)
    stage: int = 0  # how far nccl-tests' printing order got (see _read_text)
    wrong: WrongValues | None = None  # the footer's count (text), the results' nwrong (JSON)


def _fail(source: str, where: str | None, message: str) -> InputError:
    return InputError(message, source=source, path=where or None)


def _version(code: int) -> str:
    """NCCL_VERSION_CODE → "2.21.5" (X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before); 0 → ''."""
    major, rest = divmod(code, 10000 if code >= 10000 else 1000)
    return f"{major}.{rest // 100}.{rest % 100}" if code > 0 else ""


def _number(token: str) -> Num | None:
    """A printed figure with its rounding (None: N/A); ValueError when it is no number."""
    if token.lower() in _MISSING:
        return None
    if not _FLOAT.fullmatch(token):
        raise ValueError(repr(token))
    mantissa, _, exponent = token.lower().partition("e")
    return float(token), 0.5 * 10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2]))


def _text_row(tokens: list[str], layout: _Layout, number: int, source: str) -> _RawRow:
    where = f"line {number}"
    if layout.redop_at is not None and len(tokens) == layout.width - 1 and _FLOAT.fullmatch(tokens[layout.redop_at]):
        tokens = tokens[:layout.redop_at] + ["none"] + tokens[layout.redop_at:]  # <= 2.11 alltoall: empty redop
    if len(tokens) != layout.width:
        raise _fail(source, where, f"row has {len(tokens)} columns, the table's "
                    f"{'header' if layout.from_header else 'first row'} has {layout.width}"
                    + (" (truncated?)" if len(tokens) < layout.width else ""))
    root = tokens[layout.root_at] if layout.root_at is not None else "-1"
    if not (_INT.fullmatch(tokens[0]) and _INT.fullmatch(tokens[1]) and re.fullmatch(r"-?\d+", root)):
        raise _fail(source, where, f"size {tokens[0]!r}, count {tokens[1]!r} and root {root!r} must be whole numbers")
    try:
        figures = {i: _number(tokens[i]) for i in layout.numeric}
    except ValueError as e:
        raise _fail(source, where, f"{e} is not a number (a row cut mid-way?)") from None
    bodies: list[Any] = [None if None in (v := [figures[i] for i in b]) else tuple(v) for b in layout.bodies] + [None]
    redop = tokens[layout.redop_at] if layout.redop_at is not None else "none"
    return _RawRow(int(tokens[0]), int(tokens[1]), tokens[2], redop, int(root), (bodies[0], bodies[1]), number, 0)


def _read_text(text: str, source: str) -> list[_Segment]:
    segments: list[_Segment] = []
    seg, title, markdown, rows = _Segment(), "", 0, 0

    def close() -> _Segment:
        if seg.layout is not None and seg.layout.from_header and not seg.rows:
            raise _fail(source, f"line {seg.first_line}", "the table's header has no rows (truncated?)")
        segments.extend([seg] if seg.rows else [])
        return _Segment(title=title)

    for number, line in enumerate(output_lines(text), 1):
        tokens = line.split()
        # what nccl-tests prints in order (version, test banner, devices, header, rows): an earlier stage (or a
        # repeat of one printed once) begins the next table
        m = _TESTS_VERSION.match(line) or _STARTING.match(line) or device_line(line)
        stage = (1 if m and m.re is _TESTS_VERSION else 2 if m and m.re is _STARTING else 4 if m
                 else 3 if re.match(r"#\s*Using devices", line) else 0)
        layout = _layout(tokens[1:]) if line.startswith("#") and not stage else None
        began = bool(seg.rows or seg.layout)
        if not began and _ROW_START.match(line):
            layout = _HEADERLESS.get(len(tokens))
            if layout is None:
                raise _fail(source, f"line {number}", f"row has {len(tokens)} columns and no header says what they "
                            f"are (without one, nccl-tests' {len(_CURRENT)}-column layout is read)")
        stage = 5 if layout else stage
        if stage and (seg.stage > stage or seg.stage == stage != 4):
            seg = close()
        seg.stage = max(seg.stage, stage)
        if threads := header_gpus_per_thread(line):
            seg = close() if began else seg  # a table without a footer: the header begins the next
            seg.gpus_per_thread = threads
        if line.startswith("###") and (len(line) == 3 or line[3].isspace()):
            title = line[3:].strip()
            seg = close()
        elif _FOOTER.match(line):
            seg.wrong = add_wrong(seg.wrong, footer_wrong(line), f"line {number}")
            seg = close()
        elif m and stage == 1:
            seg.version = _version(int(m.group(1)))
        elif m and stage == 2:
            seg.stated, seg.stated_at = m.group(1), f"line {number}"
        elif stage in (3, 4):
            seg.devices_at = seg.devices_at or f"line {number}"
            seg.devices += [device(m)] if m else []
        elif layout:
            seg.layout, seg.first_line = layout, number
        if (v := _NCCL_VERSION.search(line)) and not began and not line.startswith("#"):
            seg.version = seg.version or v.group(1)
        elif line.startswith("|") and not began:
            markdown = markdown or number
        if seg.layout is not None and tokens and _INT.fullmatch(tokens[0]):
            if (rows := rows + 1) > MAX_ROWS:
                raise _fail(source, f"line {number}", f"more than {MAX_ROWS} rows")
            seg.rows.append(_text_row(tokens, seg.layout, number, source))
    seg = close()
    if not segments:
        if markdown:
            raise _fail(source, f"line {markdown}", "a Markdown summary table, not nccl-tests output: give the raw "
                        "stdout of the *_perf binary (or its -J JSON file)")
        raise _fail(source, None, "no nccl-tests table rows found (not nccl-tests output?)")
    return segments


def _json_value(value: Any, path: str, source: str, whole: bool = False) -> Any:
    """A JSON int (root is written as its printed text, "    -1"), or a figure (null or "nan": None)."""
    if whole and isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    if not whole and (value is None or (isinstance(value, str) and value.lower() in _MISSING)):
        return None
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        raise _fail(source, path, f"expected {'a whole number' if whole else 'a number'}, got {value!r:.40}")
    return value if whole else (float(value), _JSON_HALF_UNIT + 1e-9 * abs(value))


def _read_json(text: str, source: str) -> _Segment:
    try:
        doc = decode_json(text, source=source, what="valid JSON")
    except JsonSyntaxError as e:
        raise _fail(source, f"line {e.line}", f"{e.detail} (truncated?)") from None
    if not isinstance(doc, dict) or "results" not in doc:
        raise _fail(source, "results", "no results list (not an nccl-tests -J file?)")
    seg = _Segment()
    args: list[Any] = doc["args"] if isinstance(doc.get("args"), list) else []
    seg.stated, seg.stated_at = next(((m[0], f"args[{i}]") for i, a in enumerate(args) if isinstance(a, str)
                                      and (m := _BINARY.search(PurePath(a).name.lower()))), ("", ""))
    seg.version = _version(v) if isinstance(v := doc.get("nccl_version"), int) and not isinstance(v, bool) else ""
    config: dict[str, Any] = doc["config"] if isinstance(doc.get("config"), dict) else {}
    for key, items in (("config.devices", config.get("devices") or []), ("results", doc["results"])):
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise _fail(source, key, "expected a list of objects")
    seg.devices_at = "config.devices"
    for i, d in enumerate(config.get("devices") or []):
        rank, device = (_json_value(d.get(k, v), f"config.devices[{i}].{k}", source, True)
                        for k, v in (("rank", i), ("device", 0)))
        seg.devices.append(NcclDevice(rank, str(d.get("hostname") or ""), device, str(d.get("device_info") or "")))
    for i, r in enumerate(doc["results"]):
        at, bodies = f"results[{i}]", []
        for phase in Phase:
            b = r.get(phase.value) or {}
            if not isinstance(b, dict):
                raise _fail(source, f"{at}.{phase.value}", "expected an object or null")
            seg.cputime = seg.cputime or "cpu_time" in b
            keys = ("cpu_time" if "cpu_time" in b else "time", "alg_bw", "bus_bw")
            values = [_json_value(b.get(k), f"{at}.{phase.value}.{k}", source) for k in keys]
            bodies.append(None if None in values else tuple(values))
            seg.wrong = add_wrong(seg.wrong, b.get("nwrong"), f"{at}.{phase.value}.nwrong")
        dtype, redop = r.get("type"), r.get("redop")
        if not isinstance(dtype, str):
            raise _fail(source, f"{at}.type", f"expected a type name, got {dtype!r:.40}")
        size, count, root = (_json_value(r.get(k, -1 if k == "root" else None), f"{at}.{k}", source, True)
                             for k in ("size", "count", "root"))
        seg.rows.append(_RawRow(size, count, dtype, redop if isinstance(redop, str) and redop.strip() else "none", root,
                                (bodies[0], bodies[1]), 0, i))
    if not seg.rows or len(seg.rows) > MAX_ROWS:
        raise _fail(source, "results", f"{len(seg.rows)} rows (nccl-tests output has 1 to {MAX_ROWS})")
    return seg


def _check_rows(seg: _Segment, source: str) -> tuple[float, float]:
    """Per-row checks that need no collective; returns the busbw/algbw interval every row allows."""
    first, lo, hi = seg.rows[0], 0.0, math.inf
    for prev, r in zip([None, *seg.rows], seg.rows):
        if r.kind() != first.kind():
            raise _fail(source, r.at("redop"), f"redop/root {r.redop}/{r.root} after {first.redop}/{first.root} in "
                        "one table: rows of two collectives without a header between")
        sweep = prev is not None and (r.dtype, r.redop, r.root) != (prev.dtype, prev.redop, prev.root)
        if prev is not None and r.size < prev.size and not sweep:
            raise _fail(source, r.at("size"), f"size {r.size} after {prev.size}: sizes go down within one table "
                        "(two runs without a header between?)")
        if prev is not None and sweep and r.size > prev.size:
            raise _fail(source, r.at("redop"), f"type/redop/root change to {r.dtype}/{r.redop}/{r.root} while the "
                        "size still grows (rows of two runs mixed?)")
        for phase, body in zip(Phase, r.bodies):
            (t, ht), (a, ha), (b, hb) = body or ((0.0, 0.0),) * 3
            # algbw = size / time, as printed (rounded)
            if not (seg.cputime or seg.layout and seg.layout.cputime) and r.size and t > 0:
                e, low, high = (r.size / ((t + d) * 1e3) if t + d > 0 else math.inf for d in (0.0, ht, -ht))
                if abs(a - e) > max(0.01 * e, 0.011) and not (low * 0.99 <= a + ha and a - ha <= high * 1.01):
                    raise _fail(source, r.at(f"{phase.value}.alg_bw"), f"algbw {a:g} GB/s but size {r.size} / time "
                                f"{t:g} us is {e:.4g} GB/s")
            if a - ha > 0:  # the busbw/algbw interval the printed figures allow
                ratio = max(0.0, b - hb) / (a + ha) * (1 - 1e-9), (b + hb) / (a - ha) * (1 + 1e-9)
                if ratio[0] > hi or ratio[1] < lo:
                    raise _fail(source, r.at(f"{phase.value}.bus_bw"), f"busbw/algbw is {b / a:.3f} here "
                                f"but {lo:.3f}..{hi:.3f} above: rows of two collectives or rank counts in "
                                "one table without a header between")
                lo, hi = max(lo, ratio[0]), min(hi, ratio[1])
    return lo, hi


def _ranks_range(collective: Collective, lo: float, hi: float) -> tuple[int, float]:
    """The whole rank counts (first, last) whose busbw factor falls in [lo, hi]; first > last: none."""
    limit = _LIMIT.get(collective, 0.0)
    if limit == 0.0:
        return (1, math.inf) if lo <= 1.0 <= hi else (1, 0)
    if lo >= limit:
        return 1, 0
    first = math.ceil(limit / (limit - max(lo, 0.0)) - 1e-9)
    return first, (math.floor(limit / (limit - hi) + 1e-9) if hi < limit else math.inf)


def _fits(collective: Collective, ratio: tuple[float, float], ranks: int | None) -> bool:
    if ranks is None:
        return bool(operator.le(*_ranks_range(collective, *ratio)))
    return ratio[0] - 1e-9 <= busbw_factor(collective, ranks) <= ratio[1] + 1e-9


def _binary(name: str, source: str, where: str) -> Collective:
    name = re.sub(r"(_perf)_[a-z0-9]+$", r"\1", name.lower().rsplit("/", 1)[-1])  # make NAME_SUFFIX=_mpi
    if name not in BINARIES:
        raise _fail(source, where, f"{name} output is not supported (only {', '.join(BINARIES)})")
    return BINARIES[name]


def _named(text: str, source: str, names: bool) -> Collective | None:
    """The one collective a file name (binary names, and with `names` collective names) or a title names."""
    text = text.lower().replace("-", "_")
    found = {_binary(m.group(0), source, "") for m in _BINARY.finditer(text)}
    if names and not found:
        found = {Collective.parse(m.group(1).replace("_", "")) for m in _NAME.finditer(text)}
    return found.pop() if len(found) == 1 else None


def _collective(seg: _Segment, source: str, given: Collective | None, ranks: int | None,
                ratio: tuple[float, float]) -> Collective:
    first = seg.rows[0]
    chosen = (_binary(seg.stated, source, seg.stated_at) if seg.stated else None) or given \
        or _named(PurePath(source).name, source, True) or _named(seg.title, source, False)
    if chosen is not None:
        if chosen not in _KINDS[first.kind()]:
            raise _fail(source, first.at("redop"), f"rows with redop {first.redop!r} and root {first.root} are not "
                        f"{chosen.value} output")
        return chosen
    # gather and scatter only when named: from the rows, busbw ~ algbw is broadcast (or either of them on 500 ranks)
    fits = [c for c in _KINDS[first.kind()] if c not in _NAMED_ONLY and _fits(c, ratio, ranks)]
    if len(fits) == 1:
        return fits[0]
    shown = f"busbw/algbw {ratio[0]:.3f}..{ratio[1]:.3f}" if ratio[1] < math.inf else "no busbw/algbw ratio"
    if not fits:
        raise _fail(source, first.at("bus_bw"), f"{shown} with redop {first.redop!r}, root {first.root} fits no "
                    "nccl-tests collective" + (f" on {ranks} ranks" if ranks else ""))
    raise _fail(source, first.at("redop"), f"the rows could be {' or '.join(c.value for c in fits)} ({shown}): "
                "give the collective (for one table of several, a `### <binary>_perf` line above it)")


def _ranks(seg: _Segment, source: str, collective: Collective, ratio: tuple[float, float]) -> int:
    """The rank count the rows imply (the output lists no devices, none was given)."""
    if collective in PER_RANK_SPLIT:  # size = count x element x ranks (each row is checked after)
        units = [(r.size, r.count * DTYPE_BYTES.get(r.dtype.lower(), 0)) for r in seg.rows]
        if derived := next((s // u for s, u in units if u and s and s % u == 0), 0):
            return derived
    first, last = _ranks_range(collective, *ratio)
    if collective in _LIMIT and first == last:
        return first
    why = "the rows do not say" if first <= last else "the busbw/algbw ratio fits no whole rank count"
    raise _fail(source, seg.first_line and f"line {seg.first_line}" or None,
                f"cannot tell how many ranks ran this {collective.value} table ({why}): give the rank count")


def _table(seg: _Segment, source: str, given: Collective | None, given_ranks: int | None) -> NcclTable:
    ratio = _check_rows(seg, source)
    if seg.devices and given_ranks not in (None, len(seg.devices)):
        raise _fail(source, seg.devices_at, f"the output lists {len(seg.devices)} ranks but {given_ranks} were given")
    known = len(seg.devices) or given_ranks
    collective = _collective(seg, source, given, known, ratio)
    ranks = known or _ranks(seg, source, collective, ratio)
    if ratio[1] < math.inf and not _fits(collective, ratio, ranks):
        raise _fail(source, seg.rows[0].at("bus_bw"), f"busbw/algbw {ratio[0]:.3f}..{ratio[1]:.3f} is not "
                    f"{collective.value} on {ranks} ranks ({busbw_factor(collective, ranks):.3f})")
    split = collective in PER_RANK_SPLIT
    rows = []
    for r in seg.rows:
        element = DTYPE_BYTES.get(r.dtype.lower())
        if element is None:
            raise _fail(source, r.at("type"), f"unknown type {r.dtype!r}")
        expected = r.count * element * (ranks if split else 1)
        if expected != r.size:
            raise _fail(source, r.at("size"), f"size {r.size} is not count {r.count} x {element} B ({r.dtype})"
                        + (f" x {ranks} ranks" if split else "") + f" = {expected}")
        out, inp = r.bodies
        if out is None:
            raise _fail(source, r.at("out_of_place"), "no out-of-place figures (N/A)")
        ip: list[float | None] = [v for v, _ in inp] if inp else [None] * 3
        rows.append(NcclRow(r.size, r.count, r.dtype, r.redop, r.root, out[0][0], out[1][0], out[2][0], ip[0], ip[1],
                            ip[2], r.line))
    return NcclTable(source, collective, ranks, tuple(seg.devices), tuple(rows), seg.first_line, seg.version,
                     seg.title, gpus_per_thread(seg.gpus_per_thread, seg.devices), seg.wrong)


def parse_nccl_tests(data: bytes, *, source: str, collective: Collective | None = None,
                     ranks: int | None = None) -> NcclTestsOutput:
    """Every table of an nccl-tests stdout or -J JSON file (JSON: the first non-space character is ``{``); `collective`
    and `ranks` serve where the output does not say (ranks contradicting its devices: error). Bad input: InputError
    naming the line (or the JSON field)."""
    if len(data) > MAX_INPUT_BYTES:
        raise _fail(source, None, f"{len(data)} bytes: more than the {MAX_INPUT_BYTES >> 20} MiB read")
    if ranks is not None and ranks < 1:
        raise _fail(source, "ranks", f"the rank count must be >= 1, got {ranks}")
    if collective is not None and collective not in BINARIES.values():
        raise _fail(source, "collective", f"nccl-tests has no {collective.value} test")
    text = decode_text(bytes(data))
    segments = [_read_json(text, source)] if text.lstrip().startswith("{") else _read_text(text, source)
    return NcclTestsOutput(source, tuple(_table(s, source, collective, ranks) for s in segments))
