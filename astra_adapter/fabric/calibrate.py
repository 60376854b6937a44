"""Calibration of the fabric model per link class, from a sweep's measurements (pure, numpy).

Parameters: per link class the topology has (``host``, ``fabric``, ``loopback``) an efficiency - the fraction
of the nominal rate a flow reaches there (at most 1 on a shaped link; loopback is unshaped, so its rate is
fitted freely) - and one per-message overhead and one per-op endpoint delay (ns, >= 0), and the flow
contention (>= 0: how much a link loses per extra flow crossing it; separates a ring's one flow per link from
an all-to-all's many). The model of a
measurement is the fabric model itself: the measured op on each of the groups that ran it at once, started
together (:func:`astra_adapter.fabric.flows.run_concurrently`); its time is the slowest group's.

A class is fitted only when some measurement's flows cross it (else it keeps efficiency 1, said so). The fit is
least squares on relative error (projected Gauss-Newton with finite differences: the model is piecewise linear
in the inverse efficiencies and linear in the delays); with ECMP the model is the mean over the same hash draws
the estimate uses. Given the workload (:func:`astra_adapter.measurements.workload_weights`), the points the
workload spends its time on weigh more: half of the fit is the sweep as a whole, half the workload's share of
its communication time.
**Physically impossible points are excluded**: a measurement faster than its payload can cross the links at
their nominal rates (no overhead, no delay) cannot be a real transfer (a timer artefact or a small-message
minimum) and is left out, and listed.

Each class is reported with the rms residual of the points that cross it; :data:`RESIDUAL_WARN_PCT` is the
threshold over which the experiment warns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from genie.core.errors import InputError
from genie.core.flowpath import SessionPaths

from astra_adapter.fabric.flows import ECMP_SAMPLES, WIRE_BYTES_PER_PAYLOAD_BYTE, FabricParams, FlowEngine, \
    StepSends, run_concurrently
from astra_adapter.fabric.network import FabricNetwork, LinkClass, sample_networks
from astra_adapter.measurements import CommOp, Measurement, op_time_us

RESIDUAL_WARN_PCT = 10.0
_ITERATIONS = 30


@dataclass(frozen=True)
class FabricPoint:
    op: CommOp
    groups: tuple[tuple[int, ...], ...]
    measured_us: float
    model_us: float
    bound_us: float  # the fastest the payload can cross the links at their nominal rates
    classes: tuple[LinkClass, ...]

    @property
    def possible(self) -> bool:
        return self.measured_us >= self.bound_us

    @property
    def residual_pct(self) -> float:
        return (self.model_us - self.measured_us) / self.measured_us * 100


@dataclass(frozen=True)
class ClassFit:
    link_class: LinkClass
    efficiency: float
    fitted: bool
    points: int
    rms_residual_pct: float


@dataclass(frozen=True)
class FabricCalibration:
    topology: str
    params: FabricParams
    classes: tuple[ClassFit, ...]
    points: tuple[FabricPoint, ...]
    notes: tuple[str, ...] = ()

    @property
    def used(self) -> tuple[FabricPoint, ...]:
        return tuple(p for p in self.points if p.possible)

    @property
    def excluded(self) -> tuple[FabricPoint, ...]:
        return tuple(p for p in self.points if not p.possible)

    @property
    def rms_residual_pct(self) -> float:
        used = self.used
        return math.sqrt(sum(p.residual_pct ** 2 for p in used) / len(used)) if used else 0.0

    def warnings(self) -> tuple[str, ...]:
        out = []
        if self.rms_residual_pct > RESIDUAL_WARN_PCT:
            out.append(f"fabric calibration rms residual {self.rms_residual_pct:.1f}% is over "
                       f"{RESIDUAL_WARN_PCT:g}%: the model does not explain the sweep well")
        for c in self.classes:
            if c.fitted and c.rms_residual_pct > RESIDUAL_WARN_PCT:
                out.append(f"link class {c.link_class.value}: rms residual {c.rms_residual_pct:.1f}% over "
                           f"{RESIDUAL_WARN_PCT:g}%")
        return tuple(out)


def _members(m: Measurement) -> tuple[tuple[int, ...], ...]:
    return m.groups or (tuple(range(m.ranks)),)


def _op(m: Measurement) -> CommOp:
    return CommOp(m.collective, m.algorithm, m.ranks, m.size_bytes)


def _classes_crossed(network: FabricNetwork, engine: FlowEngine, m: Measurement) -> tuple[LinkClass, ...]:
    crossed = set()
    for g in _members(m):
        for step in engine.plan(_op(m), g):
            for rid in set(step.routes.tolist()):
                crossed |= {network.resources[r].link_class for r, _ in network.routes[rid].loads}
    return tuple(c for c in LinkClass if c in crossed)


def _params(classes: tuple[LinkClass, ...], x: np.ndarray) -> FabricParams:
    """x = (1 / efficiency per class..., message overhead us, endpoint delay us, flow contention)."""
    eff = tuple((c, 1.0 / float(v)) for c, v in zip(classes, x[:len(classes)]))
    return FabricParams(eff, float(x[-3]) * 1000, float(x[-2]) * 1000, float(x[-1]))


def model_times_us(network: FabricNetwork | list[FabricNetwork], params: FabricParams, ms: list[Measurement],
                   sends: StepSends | None = None) -> np.ndarray:
    """Each measurement's model time (us); over several networks (ECMP hash draws), their mean."""
    nets = network if isinstance(network, list) else [network]
    sends = sends or StepSends()
    total = np.zeros(len(ms))
    for net in nets:
        engine = FlowEngine(net, params, sends)
        total += [max(run_concurrently(engine, [(_op(m), g) for g in _members(m)])) / 1000 for m in ms]
    return total / len(nets)


def calibrate_fabric(measurements: tuple[Measurement, ...] | list[Measurement], network: FabricNetwork,
                     ecmp_samples: int = ECMP_SAMPLES, paths: tuple[SessionPaths, ...] = (),
                     weights: tuple[float, ...] | None = None) -> FabricCalibration:
    """Fit the fabric model's per-class efficiencies, message overhead and endpoint delay (with ECMP: the model
    is the mean over all ``ecmp_samples`` hash draws, a fixed set: a fit compares many points, the estimate's
    stopping rule (:func:`astra_adapter.fabric.estimate.draws_enough`) does not apply - or, given the ``paths``
    the sweep's sessions took on a testbed, the mean over those sessions' networks: the draws the measurements
    really got).
    ``weights``: one per measurement (:func:`astra_adapter.measurements.workload_weights`), each point's
    squared relative error counted that many times; None: all 1."""
    traced = bool(paths) and network.multipath
    nets = [network.with_paths(p) for p in paths] if traced else sample_networks(network, ecmp_samples)
    sends = StepSends()
    kept = [i for i, m in enumerate(measurements) if m.time_us > 0 and m.ranks >= 2]
    ms = [measurements[i] for i in kept]
    if weights is not None and len(weights) != len(measurements):
        raise ValueError("one weight per measurement")
    if not ms:
        raise InputError("no measurements to calibrate the fabric model on", path="measurements")
    probe = FlowEngine(network)
    crossed = [_classes_crossed(network, probe, m) for m in ms]
    bound = lower_bounds_us(ms, network, sends)
    possible = [i for i, m in enumerate(ms) if m.time_us >= bound[i]]
    notes = [f"ECMP as the sweep's connections took it ({len(nets)} session(s), "
             f"{sum(len(p.paths) for p in paths)} connection paths read from the testbed)"] if traced else []
    if len(possible) < len(ms):
        notes.append(f"{len(ms) - len(possible)} of {len(ms)} measurements are faster than their links' nominal "
                     f"rates allow and are left out of the fit")
    fit_ms = [ms[i] for i in possible]
    classes = tuple(c for c in network.classes() if any(c in crossed[i] for i in possible))
    lower = np.array([1.0 if c is not LinkClass.LOOPBACK else 1e-3 for c in classes] + [0.0, 0.0, 0.0])
    x = np.array([1.2 if c is not LinkClass.LOOPBACK else 1.0 for c in classes] + [50.0, 0.0, 0.0])
    if fit_ms:
        fit_weights = np.array([1.0 if weights is None else weights[kept[i]] for i in possible])
        x = _fit(nets, classes, fit_ms, x, lower, sends, np.sqrt(fit_weights))
    params = _params(classes, x)
    model = model_times_us(nets, params, ms, sends)
    points = tuple(FabricPoint(_op(m), _members(m), m.time_us, float(model[i]), float(bound[i]), crossed[i])
                   for i, m in enumerate(ms))
    fits = []
    for c in network.classes():
        pts = [p for p in points if p.possible and c in p.classes]
        rms = math.sqrt(sum(p.residual_pct ** 2 for p in pts) / len(pts)) if pts else 0.0
        fits.append(ClassFit(c, params.efficiency_of(c), c in classes, len(pts), rms))
        if c not in classes:
            notes.append(f"no measurement crosses {c.value} links: their efficiency stays 1 (not fitted)")
    return FabricCalibration(network.topology.name, params, tuple(fits), points, tuple(notes))


def _fit(network: list[FabricNetwork], classes: tuple[LinkClass, ...], ms: list[Measurement], x: np.ndarray,
         lower: np.ndarray, sends: StepSends, scale: np.ndarray) -> np.ndarray:
    measured = np.array([m.time_us for m in ms])

    def residual(v: np.ndarray) -> np.ndarray:
        return scale * (model_times_us(network, _params(classes, v), ms, sends) - measured) / measured

    r = residual(x)
    cost = float(r @ r)
    damping = 1e-3
    for _ in range(_ITERATIONS):
        jac = np.empty((len(r), len(x)))
        for j in range(len(x)):
            h = max(abs(x[j]) * 1e-4, 1e-4)
            step = x.copy()
            step[j] += h
            jac[:, j] = (residual(step) - r) / h
        improved = False
        for _ in range(8):
            a = jac.T @ jac + damping * np.diag(np.diag(jac.T @ jac) + 1e-12)
            delta = np.linalg.lstsq(a, -jac.T @ r, rcond=None)[0]
            trial = np.maximum(x + delta, lower)
            rt = residual(trial)
            ct = float(rt @ rt)
            if ct < cost:
                x, r, cost, improved = trial, rt, ct, True
                damping = max(damping / 3, 1e-9)
                break
            damping *= 10
        if not improved or float(np.max(np.abs(delta))) < 1e-6:
            break
    return x


def summary_lines(cal: FabricCalibration) -> list[str]:
    """The fitted classes with their residuals, the excluded points and the warnings (for summary.txt)."""
    classes = "; ".join(f"{c.link_class.value} efficiency {c.efficiency:.3f} (rms residual {c.rms_residual_pct:.1f}% "
                        f"on {c.points} points)" if c.fitted else f"{c.link_class.value} not fitted"
                        for c in cal.classes)
    lines = [f"fabric calibration: {classes}; message overhead {cal.params.message_overhead_ns / 1e3:.1f} us, "
             f"endpoint delay {cal.params.endpoint_delay_ns / 1e3:.1f} us, flow contention "
             f"{cal.params.flow_contention:.3f}; rms residual "
             f"{cal.rms_residual_pct:.2f}% on {len(cal.used)} points"]
    for p in cal.excluded:
        lines.append(f"# excluded (faster than the links allow): {p.op.describe()}: {p.measured_us:.1f} us < "
                     f"{p.bound_us:.1f} us")
    lines += [f"# note: {n}" for n in cal.notes if "faster than" not in n]
    lines += [f"WARNING: {w}" for w in cal.warnings()]
    return lines


def lower_bounds_us(measurements: tuple[Measurement, ...] | list[Measurement], network: FabricNetwork,
                    sends: StepSends | None = None) -> np.ndarray:
    """Per measurement, the fastest its payload can cross the links at their nominal rates (no overhead, no
    delay, ECMP as the expected share): a time below it is physically impossible. The one rule every fit's
    exclusion uses (this module's, the ASTRA-sim calibration's, the best-iterations line's); a measurement of
    fewer than 2 ranks moves nothing: 0."""
    ms = list(measurements)
    moving = [i for i, m in enumerate(ms) if m.ranks >= 2]
    bounds = np.zeros(len(ms))
    bounds[moving] = model_times_us(network, FabricParams(), [ms[i] for i in moving], sends) / \
        WIRE_BYTES_PER_PAYLOAD_BYTE
    return bounds


def fastest_possible(measurements: tuple[Measurement, ...], network: FabricNetwork
                     ) -> tuple[tuple[Measurement, ...], int]:
    """The "best iterations" statistic made honest: each measurement's fastest iteration that is physically
    possible (at or above :func:`lower_bounds_us`); a measurement with none keeps its typical time. Returns them
    and how many iterations were impossible."""
    bounds = lower_bounds_us(measurements, network)
    out, impossible = [], 0
    for m, bound in zip(measurements, bounds):
        iterations = m.iterations_us or (m.time_us,)
        possible = [t for t in iterations if t >= bound]
        impossible += len(iterations) - len(possible)
        time = min(possible) if possible else op_time_us(iterations)
        out.append(Measurement(m.collective, m.algorithm, m.ranks, m.size_bytes, time, m.source, m.groups,
                               m.iterations_us))
    return tuple(out), impossible
