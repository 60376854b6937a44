"""`genie astra export` as a service: a trace and the topology it runs on become ASTRA-sim's input set (per-rank
Chakra ETs, system.json, network.yml, remote_memory.json, comm groups), with the link rates and delays of the
topology or of a calibration."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from genie.core.collective import Algorithm, Collective
from genie.core.errors import InputError


@dataclass(frozen=True)
class ExportRequest:
    trace: Path
    out: Path
    topology: Path
    network: Optional[Path] = None  # a calibration (calibration.json or its run directory) or a network.yml
    npus: Optional[int] = None
    name: str = "workload"
    algorithms: tuple[tuple[Collective, Algorithm], ...] = ()
    splits: int = 1
    endpoint_delay_ns: Optional[int] = None


@dataclass(frozen=True)
class ExportDone:
    export: Any  # astra_adapter.export.ExportResult
    ranks: int
    notes: tuple[str, ...]  # what the calibration changed, before the export's own notes


def parse_algorithms(items: list[str]) -> tuple[tuple[Collective, Algorithm], ...]:
    """COLLECTIVE=ALGORITHM items (InputError naming `algorithms`)."""
    chosen = []
    for item in items:
        coll, _, alg = item.partition("=")
        try:
            chosen.append((Collective.parse(coll), Algorithm.parse(alg)))
        except ValueError as exc:
            raise InputError(f"{exc} (expected COLLECTIVE=ALGORITHM)", path="algorithms") from None
    return tuple(chosen)


def run_export(request: ExportRequest) -> ExportDone:
    from astra_adapter.calibrate import calibrated_network, scaled_trace
    from astra_adapter.calibration_io import load_calibration
    from astra_adapter.config import load_network
    from astra_adapter.export import SystemParams, export_astra
    from astra_adapter.mapping import map_topology
    from genie.services.replay import load_checked_trace
    from genie.topology import load_topology_file

    if request.splits < 1:
        raise InputError("must be >= 1", path="splits")
    mapping = map_topology(load_topology_file(request.topology), source=str(request.topology))
    params = SystemParams(preferred_dataset_splits=request.splits, algorithms=request.algorithms)
    net, calibration, notes = None, None, []
    if request.network is not None:
        if request.network.suffix in (".yml", ".yaml"):
            net = load_network(request.network)
        else:
            calibration = load_calibration(request.network)
            net, more = calibrated_network(mapping, calibration)
            params = calibration.system_params(params)
            notes += more
    if request.endpoint_delay_ns is not None:
        params = replace(params, endpoint_delay_ns=request.endpoint_delay_ns)
    loaded = load_checked_trace(request.trace, request.npus)
    if calibration is not None and calibration.size_factors:
        loaded = scaled_trace(loaded, calibration)
        notes.append("comm_size scaled by the calibration's size factors: "
                     + ", ".join(f"{c.value} x{f:.3f}" for c, f in calibration.size_factors))
    done = export_astra(loaded, mapping, request.out, network=net, params=params, name=request.name)
    return ExportDone(done, loaded.num_ranks, tuple(notes))
