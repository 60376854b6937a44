"""`genie testbed verify` as a service: every link of a live testbed measured (RTT, throughput, loss) against
its configuration, into a run directory with its manifest (``links_verify.csv``), optionally also a CSV where
the caller asks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from genie.core.dilation import DilationChoice
from genie.core.errors import RunFailure
from genie.core.topology import Topology
from genie.testbed.verify import Status, VerifyRow
from genie.testbed.verify_run import VerifySettings

if TYPE_CHECKING:
    from genie.core.testbed import Shaping
    from genie.report.manifest import InputDigest

VERIFY_CSV = "links_verify.csv"


@dataclass(frozen=True)
class VerifyRequest:
    testbed: str
    settings: VerifySettings = VerifySettings()
    pairs: Optional[tuple[tuple[str, str], ...]] = None  # host pairs (default: pairs covering every link)
    csv_path: Optional[Path] = None  # a copy of the table outside the run directory
    out: Optional[Path] = None
    time_dilation: DilationChoice = DilationChoice()  # checked against the testbed's own


@dataclass(frozen=True)
class VerifyResult:
    run_dir: Path
    rows: tuple[VerifyRow, ...]
    csv_path: Path

    @property
    def failed(self) -> list[VerifyRow]:
        return [row for row in self.rows if row.status is Status.FAIL]

    @property
    def ceilings(self) -> list[VerifyRow]:
        return [row for row in self.rows if row.status is Status.CEILING]


def check_pairs(texts: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`h0,h1` texts as host pairs (InputError naming `pairs`)."""
    from genie.core.errors import InputError

    pairs = []
    for text in texts:
        hosts = [part.strip() for part in text.split(",")]
        if len(hosts) != 2 or not all(hosts):
            raise InputError(f"expected two hosts such as h0,h1, got {text!r}", path="pairs")
        pairs.append((hosts[0], hosts[1]))
    return tuple(pairs)


def run_verify(request: VerifyRequest, progress: Callable[[str], None] | None = None) -> VerifyResult:
    from genie.report.manifest import InputDigest
    from genie.testbed.service import broken_message, dead_emulators, load_info
    from genie.testbed.state import load_record, run_lock
    from genie.testbed.verify_run import verify_testbed

    from genie.services.dilation import running_dilation

    info = load_info(request.testbed)
    running_dilation(info, request.time_dilation)
    record = load_record(request.testbed)
    dead = dead_emulators(info.name)
    if dead:  # every measurement across its delay-shaped links would only time out
        raise RunFailure(broken_message(info.name, dead))
    topology_input = InputDigest("topology", record.source or f"testbed {info.name}", record.source_digest, 1)
    with run_lock(info.name, shared=True):  # beside runs, as before; `down --all` leaves it alone meanwhile
        return record_verify(info.name, info.topology, topology_input, request.settings, request.pairs,
                             lambda: verify_testbed(request.testbed, request.settings,
                                                    pairs=list(request.pairs) if request.pairs is not None else None,
                                                    progress=progress),
                             out=request.out, csv_path=request.csv_path, shaper=info.shaper,
                             dilation=info.dilation.to_dict())


def record_verify(target: str, topology: Topology, topology_input: InputDigest | Path, settings: VerifySettings,
                  pairs: Optional[tuple[tuple[str, str], ...]], measure: Callable[[], list[VerifyRow]], *,
                  out: Optional[Path], csv_path: Optional[Path], shaper: Shaping | None,
                  dilation: Optional[Mapping[str, Any]] = None) -> VerifyResult:
    """Run `measure` inside a verify run directory: its manifest, ``links_verify.csv`` (and a copy at
    `csv_path`). Shared by testbed verify and lab verify (`genie.services.lab`)."""
    import dataclasses
    import io

    from genie.core.files import write_atomic
    from genie.report.manifest import RunRecorder, input_digest, topology_summary
    from genie.testbed.verify import write_verify_csv

    inputs = (topology_input if not isinstance(topology_input, Path) else input_digest(topology_input, "topology"),)
    params = {**dataclasses.asdict(settings), "pairs": [list(p) for p in pairs] if pairs is not None else None}
    with RunRecorder("verify", out=out, inputs=inputs, params=params) as run:
        run.describe(target=target, shaper=shaper, topology=topology_summary(topology), time_dilation=dilation)
        rows = measure()
        buffer = io.StringIO()
        write_verify_csv(rows, buffer)
        path = run.write(VERIFY_CSV, buffer.getvalue())
        if csv_path is not None:
            path = write_atomic(csv_path, buffer.getvalue())
        failed = sum(1 for row in rows if row.status is Status.FAIL)
        run.set_summary({"measurements": len(rows), "failed": failed})
    return VerifyResult(run.run_dir, tuple(rows), path)
