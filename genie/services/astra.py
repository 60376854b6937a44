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


def dropin_simulator():
    """genie's ASTRA-sim drop-in by this interpreter's absolute path, so that ``cmd.sh`` needs no venv on PATH."""
    import sys

    import genie
    from astra_adapter.export import Simulator

    source_root = Path(genie.__file__).resolve().parents[1]
    return Simulator((sys.executable, "-m", "genie.cli.astra_dropin", "congestion_unaware"), str(source_root))


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
    topology = load_topology_file(request.topology)
    mapping = map_topology(topology, source=str(request.topology))
    params = SystemParams(preferred_dataset_splits=request.splits, algorithms=request.algorithms)
    net, calibration, notes = None, None, []
    if request.network is not None:
        from astra_adapter.nccl.calibration_io import has_nccl_calibration

        if request.network.suffix in (".yml", ".yaml"):
            net = load_network(request.network)
        elif has_nccl_calibration(request.network):  # a real cluster's calibration (genie calibrate)
            from astra_adapter.nccl.astra_network import nccl_network
            from astra_adapter.nccl.calibration_io import load_calibration as load_nccl_calibration

            cluster, fitted, _ = load_nccl_calibration(request.network)
            net, more = nccl_network(mapping, topology, cluster, fitted, source=str(request.topology))
            notes += more
        else:
            calibration = load_calibration(request.network)
            net, more = calibrated_network(mapping, calibration)
            params = calibration.system_params(params)
            notes += more
    if request.endpoint_delay_ns is not None:
        params = replace(params, endpoint_delay_ns=request.endpoint_delay_ns)
    loaded, warnings = load_checked_trace(request.trace, request.npus)
    notes += warnings  # dependencies on missing nodes: the export drops them (ASTRA-sim aborts on one)
    if calibration is not None and calibration.size_factors:
        loaded = scaled_trace(loaded, calibration)
        notes.append("comm_size scaled by the calibration's size factors: "
                     + ", ".join(f"{c.value} x{f:.3f}" for c, f in calibration.size_factors))
    done = export_astra(loaded, mapping, request.out, network=net, params=params, name=request.name,
                        simulator=dropin_simulator())
    return ExportDone(done, loaded.num_ranks, tuple(notes))


# ---- genie astra simulate (and the ASTRA-sim drop-in executables) ----------------------------------------
@dataclass(frozen=True)
class SimulateRequest:
    """ASTRA-sim's analytical command line: ``<prefix>.<rank>.et`` and the configuration files."""

    workload: str  # the ET prefix
    system: Path
    network: Path
    remote_memory: Optional[Path] = None
    comm_group: Optional[Path] = None  # None, or ASTRA-sim's "empty": no communicator groups
    backend: str = "congestion_unaware"
    queues_per_dim: int = 1
    injection_scale: float = 1.0
    comm_scale: float = 1.0
    compute_scale: float = 1.0
    rendezvous_protocol: bool = False
    symmetry: Optional[bool] = None
    out: Optional[Path] = None  # also write OUT/estimate.csv


@dataclass(frozen=True)
class SimulateDone:
    estimate: Any  # astra_adapter.estimate.Estimate
    csv_path: Optional[Path]


def parse_backend(name: str):
    """A backend name (InputError naming `backend`)."""
    from astra_adapter.config import NetworkBackend

    try:
        return NetworkBackend(name)
    except ValueError:
        choices = ", ".join(b.value for b in NetworkBackend)
        raise InputError(f"unknown backend {name!r} (choose {choices})", path="backend") from None


def run_simulate(request: SimulateRequest) -> SimulateDone:
    from astra_adapter.estimate import estimate_files
    from astra_adapter.output import write_estimate_csv

    backend = parse_backend(request.backend)
    for field_name in ("comm_scale", "compute_scale"):
        if getattr(request, field_name) != 1.0:
            raise InputError("the built-in estimator supports only 1", path=field_name)
    if request.rendezvous_protocol:
        raise InputError("the built-in estimator does not model the rendezvous protocol", path="rendezvous_protocol")
    comm_group = request.comm_group
    if comm_group is not None and "empty" in str(comm_group):
        comm_group = None  # ASTRA-sim's spelling of "no communicator groups" (it tests for the substring)
    est = estimate_files(request.workload, request.system, request.network, request.remote_memory, comm_group,
                         symmetry=request.symmetry, queues_per_dim=request.queues_per_dim,
                         injection_scale=request.injection_scale, backend=backend)
    csv_path = write_estimate_csv(est.result, request.out) if request.out is not None else None
    return SimulateDone(est, csv_path)
