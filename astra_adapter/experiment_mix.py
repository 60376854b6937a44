"""``genie experiment`` with a job mix as its workload (pure part): the sweep the mix needs, and per job the
fabric model's estimate against the mix's replay - iteration alone and together, slowdown, error.

The sweep is planned on the mix's merged trace (every job once, on its host slots: the topology's rank
numbering), so every (collective, algorithm, group size) of every job is measured on the groups the jobs
really use, plus a message curve for each link class none of them crosses (the fabric model is fitted per
class). The estimate is :func:`astra_adapter.fabric.mix.estimate_mix` with that calibration, on the paths the
replay's sessions took (ECMP as it happened) and with the replay's repetitions; the replay is ``genie replay
--jobs``' (``genie.services.mix_replay.replay_mix_on``). The testbed work is ``genie.services.experiment_mix``'s.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genie.core.topology import Topology
from genie.core.trace import Trace

from astra_adapter.experiment_spec import SweepCase, plan_sweep

MIX_ACCURACY_CSV = "jobs_accuracy.csv"
MIX_ACCURACY_COLUMNS = ("job", "hosts", "repetitions", "measured_alone_s", "estimated_alone_s", "error_alone_pct",
                        "measured_together_s", "estimated_together_s", "error_together_pct",
                        "measured_slowdown_pct", "estimated_slowdown_pct", "slowdown_points")


def mix_sweep(merged: Trace, topology: Topology, grid_bytes: tuple[int, ...]) -> tuple[SweepCase, ...]:
    """The bench curves of a mix: its merged trace's (ranks = the topology's slots), every link class covered."""
    from astra_adapter.fabric.experiment import cover_link_classes

    return cover_link_classes(plan_sweep(merged, grid_bytes), topology, grid_bytes)


def _pct(estimated: float | None, measured: float | None) -> float | None:
    if estimated is None or not measured:
        return None
    return (estimated - measured) / measured * 100


@dataclass(frozen=True)
class JobAccuracy:
    """One job of the mix: measured (the replay's medians) against estimated (the fabric model), in ns."""

    name: str
    hosts: tuple[str, ...]
    repetitions: int
    measured_alone_ns: float | None  # None: the alone runs were skipped
    estimated_alone_ns: float
    measured_together_ns: float
    estimated_together_ns: float
    measured_slowdown_pct: float | None
    estimated_slowdown_pct: float

    @property
    def error_alone_pct(self) -> float | None:
        return _pct(self.estimated_alone_ns, self.measured_alone_ns)

    @property
    def error_together_pct(self) -> float | None:
        return _pct(self.estimated_together_ns, self.measured_together_ns)

    @property
    def slowdown_points(self) -> float | None:
        if self.measured_slowdown_pct is None:
            return None
        return self.estimated_slowdown_pct - self.measured_slowdown_pct


def compare_jobs(measured: tuple[Any, ...], estimate: Any) -> tuple[JobAccuracy, ...]:
    """Per job its replay row (``genie.measure.mix.JobComparison``) beside the fabric model's
    (``astra_adapter.fabric.mix.JobEstimate`` of ``estimate``), matched by name."""
    by_name = {j.name: j for j in estimate.jobs}
    out = []
    for m in measured:
        e = by_name[m.name]
        out.append(JobAccuracy(m.name, tuple(m.hosts), m.repetitions, m.alone_ns, e.alone_ns, m.together_ns,
                               e.mixed_ns, m.slowdown_pct, e.slowdown_pct))
    return tuple(out)


def _cell(value: float | None, scale: float = 1.0, digits: int = 6) -> str:
    return "" if value is None else f"{value / scale:.{digits}f}"


def jobs_accuracy_csv(rows: tuple[JobAccuracy, ...]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(MIX_ACCURACY_COLUMNS)
    for r in rows:
        w.writerow((r.name, " ".join(r.hosts), r.repetitions, _cell(r.measured_alone_ns, 1e9),
                    _cell(r.estimated_alone_ns, 1e9), _cell(r.error_alone_pct, digits=3),
                    _cell(r.measured_together_ns, 1e9), _cell(r.estimated_together_ns, 1e9),
                    _cell(r.error_together_pct, digits=3), _cell(r.measured_slowdown_pct, digits=3),
                    _cell(r.estimated_slowdown_pct, digits=3), _cell(r.slowdown_points, digits=3)))
    return out.getvalue()


@dataclass(frozen=True)
class MixExperimentResult:
    run_dir: Path
    name: str
    topology: str
    placement: str
    jobs: tuple[JobAccuracy, ...]
    sweep_points: int  # measured (case, size) points the fabric model was fitted on
    calibration_lines: tuple[str, ...]  # astra_adapter.fabric.calibrate.summary_lines
    notes: tuple[str, ...]  # the estimate's
    shared_links: tuple[str, ...]  # link directions crossed by more than one job (the estimate's)
    load_average: tuple[float, float] = ()

    @property
    def measured_ranking(self) -> tuple[str, ...]:
        """Jobs by measured slowdown, least slowed first (None: alone skipped, last)."""
        return tuple(r.name for r in sorted(self.jobs, key=lambda r: (r.measured_slowdown_pct is None,
                                                                       r.measured_slowdown_pct or 0.0, r.name)))

    @property
    def estimated_ranking(self) -> tuple[str, ...]:
        return tuple(r.name for r in sorted(self.jobs, key=lambda r: (r.estimated_slowdown_pct, r.name)))


def _ms(value: float | None) -> str:
    return f"{value / 1e6:.3f}" if value is not None else "-"


def _signed(value: float | None, unit: str) -> str:
    return f"{value:+.2f}{unit}" if value is not None else "-"


def format_mix_summary(result: MixExperimentResult) -> str:
    lines = [f"# experiment {result.name}: job mix of {len(result.jobs)} jobs on {result.topology} "
             f"(placement {result.placement}); fabric model fitted on {result.sweep_points} sweep points",
             *result.calibration_lines,
             f"#{'job':<12} {'alone meas/est ms':>22} {'err':>8} {'together meas/est ms':>24} {'err':>8} "
             f"{'slowdown meas/est':>19} {'points':>7}"]
    for r in result.jobs:
        slow = (f"{r.measured_slowdown_pct:.1f}%" if r.measured_slowdown_pct is not None else "-") + \
            f"/{r.estimated_slowdown_pct:.1f}%"
        lines.append(f" {r.name:<12} {_ms(r.measured_alone_ns):>11}/{_ms(r.estimated_alone_ns):<10} "
                     f"{_signed(r.error_alone_pct, '%'):>8} {_ms(r.measured_together_ns):>12}/"
                     f"{_ms(r.estimated_together_ns):<11} {_signed(r.error_together_pct, '%'):>8} {slow:>19} "
                     f"{_signed(r.slowdown_points, ''):>7}")
    lines.append("ranking by slowdown (least first): measured " + ", ".join(result.measured_ranking)
                 + "; estimated " + ", ".join(result.estimated_ranking)
                 + (" (equal)" if result.measured_ranking == result.estimated_ranking else " (DIFFERENT)"))
    lines.append("jobs meet on " + (", ".join(result.shared_links) if result.shared_links else "no link"))
    lines += [f"# {n}" for n in result.notes]
    if result.load_average:
        lines.append(f"load average (1 min) before/after: {result.load_average[0]:.2f}/{result.load_average[1]:.2f}"
                     f" on {os.cpu_count()} CPUs")
    lines.append(f"# results in {result.run_dir}")
    return "\n".join(lines)


def mix_experiment_json(result: MixExperimentResult) -> str:
    doc = {"experiment": result.name, "workload": "jobs", "topology": result.topology,
           "placement": result.placement, "sweep_points": result.sweep_points,
           "jobs": [{"name": r.name, "hosts": list(r.hosts), "repetitions": r.repetitions,
                     "measured_alone_ns": r.measured_alone_ns, "estimated_alone_ns": r.estimated_alone_ns,
                     "error_alone_pct": r.error_alone_pct, "measured_together_ns": r.measured_together_ns,
                     "estimated_together_ns": r.estimated_together_ns, "error_together_pct": r.error_together_pct,
                     "measured_slowdown_pct": r.measured_slowdown_pct,
                     "estimated_slowdown_pct": r.estimated_slowdown_pct, "slowdown_points": r.slowdown_points}
                    for r in result.jobs],
           "ranking": {"measured": list(result.measured_ranking), "estimated": list(result.estimated_ranking)},
           "shared_links": list(result.shared_links), "notes": list(result.notes),
           "load_average": list(result.load_average)}
    return json.dumps(doc, indent=2) + "\n"
