"""``fabric_calibration.json``: the fitted fabric model (per link class), written by ``genie experiment`` and
``genie estimate --mode fabric``, read back by ``genie estimate --calibration RUN_DIR`` to estimate another
topology with the same link classes (pure but for reading the file)."""

from __future__ import annotations

import json
from pathlib import Path

from genie.core.errors import InputError
from genie.core.files import InputKind, read_input
from genie.core.jsondoc import decode_json

from astra_adapter.fabric.calibrate import ClassFit, FabricCalibration
from astra_adapter.fabric.flows import FabricParams
from astra_adapter.fabric.network import FabricNetwork, LinkClass

FABRIC_CALIBRATION_JSON = "fabric_calibration.json"


def fabric_calibration_json(cal: FabricCalibration) -> str:
    doc = {"topology": cal.topology,
           "classes": [{"link_class": c.link_class.value, "efficiency": c.efficiency, "fitted": c.fitted,
                        "points": c.points, "rms_residual_pct": c.rms_residual_pct} for c in cal.classes],
           "message_overhead_ns": cal.params.message_overhead_ns,
           "endpoint_delay_ns": cal.params.endpoint_delay_ns,
           "flow_contention": cal.params.flow_contention,
           "rms_residual_pct": cal.rms_residual_pct,
           "points": [{"collective": p.op.collective.value, "algorithm": p.op.algorithm.value, "ranks": p.op.ranks,
                       "size_bytes": p.op.size_bytes, "groups": [list(g) for g in p.groups],
                       "measured_us": p.measured_us, "model_us": p.model_us, "bound_us": p.bound_us,
                       "used": p.possible, "classes": [c.value for c in p.classes]} for p in cal.points],
           "notes": list(cal.notes)}
    return json.dumps(doc, indent=1) + "\n"


def load_fabric_params(run_dir: Path) -> tuple[FabricParams, tuple[LinkClass, ...], str]:
    """The fitted parameters in ``run_dir``, the classes that were fitted, and the file read."""
    path = Path(run_dir) / FABRIC_CALIBRATION_JSON if Path(run_dir).is_dir() else Path(run_dir)
    if not path.is_file():
        raise InputError(f"no {FABRIC_CALIBRATION_JSON} in {run_dir} (run genie experiment on a fabric topology, or "
                         f"genie estimate --mode fabric)", source=str(run_dir), path="calibration")
    doc = decode_json(read_input(path, InputKind.RUN_FILE), source=str(path), top=dict)
    try:
        classes = doc["classes"]
        eff, fitted = [], []
        for i, c in enumerate(classes):
            link_class = LinkClass.parse(c["link_class"], source=str(path), path=f"classes[{i}].link_class")
            efficiency = float(c["efficiency"])
            if not efficiency > 0:
                raise InputError(f"expected an efficiency > 0, got {efficiency}", source=str(path),
                                 path=f"classes[{i}].efficiency")
            eff.append((link_class, efficiency))
            if c.get("fitted", True):
                fitted.append(link_class)
        params = FabricParams(tuple(eff), float(doc.get("message_overhead_ns", 0.0)),
                              float(doc.get("endpoint_delay_ns", 0.0)), float(doc.get("flow_contention", 0.0)))
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"not a fabric calibration: {exc}", source=str(path), path="classes") from None
    return params, tuple(fitted), str(path)


def check_classes(fitted: tuple[LinkClass, ...], network: FabricNetwork, *, calibration_source: str) -> tuple[str, ...]:
    """InputError when a fitted class does not exist in the target topology; notes for target classes the
    calibration did not fit (they run at their nominal rates)."""
    present = network.classes()
    for i, c in enumerate(fitted):
        if c not in present:
            raise InputError(f"link class {c.value} was calibrated but topology {network.topology.name} has no "
                             f"{c.value} links (it has: {', '.join(p.value for p in present)})",
                             source=calibration_source, path="classes")
    return tuple(f"link class {c.value} of {network.topology.name} is not in the calibration: nominal rate"
                 for c in present if c not in fitted)


def fitted_classes(cal: FabricCalibration) -> tuple[ClassFit, ...]:
    return tuple(c for c in cal.classes if c.fitted)
