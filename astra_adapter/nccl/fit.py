"""Fitting the NCCL model's parameters to measured calls (pure): bounded non-linear least squares on the
relative time error (scipy's ``least_squares``, trust-region reflective: the model is piecewise smooth in its
parameters and every parameter has a physical range).

Every parameter starts at what the hardware description promises (:func:`astra_adapter.nccl.model.nominal_params`)
and is held there by a weak prior (``PRIOR_WEIGHT`` per unit of log change) unless the measurements say
otherwise: a parameter the measurements cannot see (the NICs in a one-node sweep, LL128 where NCCL never picks it,
NVLS without an NVSwitch) stays nominal and is reported as not fitted, and three sizes of a sweep are enough.
The search starts from the nominal point and from a few others (:func:`_starts`) and keeps the best: a call's
launch and NCCL's per-step latencies trade off at small sizes, and a single start can stop on the wrong side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from astra_adapter.nccl.hardware import Cluster
from astra_adapter.nccl.model import Call, NcclParams, Prediction, nominal_params, predict
from astra_adapter.nccl.tuning import NcclAlgorithm, NcclProtocol

PRIOR_WEIGHT = 0.05
#: soft-L1 scale of the log-time residuals: a point off by more than about this is weighed less than squared
ROBUST_SCALE = 0.05
#: per parameter, where not ``PRIOR_WEIGHT``: the launch costs and the pipeline's fill have no value the hardware
#: description states (their nominal values are empirical starting points, see astra_adapter.nccl.model), so the
#: measurements move them almost freely; a rated bandwidth or efficiency, against them, is held at the default
#: weight (three sizes of a sweep give one large point, where a slow pipeline fill and a slow NIC look alike)
PRIOR_WEIGHTS = {"latency_scale": 0.3, "launch_us": 0.01, "launch_per_gpu_us": 0.01, "fill_us": 0.01}
#: per parameter: (lowest, highest) as a multiple of its nominal value
_BOUNDS = {"intra_busbw_gb_s": (0.02, 3.0), "nvls_busbw_gb_s": (0.02, 3.0), "nic_gb_s": (0.02, 1.5),
           "latency_scale": (0.05, 50.0), "launch_us": (1e-3, 1e3),
           "launch_per_gpu_us": (1e-3, 1e3), "ll_efficiency": (0.05, 3.0),
           "ll128_efficiency": (0.05, 3.0), "fill_us": (1e-3, 20.0)}


@dataclass(frozen=True)
class Observation:
    call: Call
    measured_us: float
    source: str = ""
    line: int = 0
    table: int = 0  # the line of its table's column titles in `source` (several tables a file: several runs)


@dataclass(frozen=True)
class Residual:
    observation: Observation
    prediction: Prediction

    @property
    def error_pct(self) -> float:
        return (self.prediction.time_us - self.observation.measured_us) / self.observation.measured_us * 100.0


@dataclass(frozen=True)
class Fit:
    cluster: Cluster
    params: NcclParams
    nominal: NcclParams
    fitted: tuple[str, ...]  # the parameters the measurements moved (the rest: nominal)
    residuals: tuple[Residual, ...]

    @property
    def rms_error_pct(self) -> float:
        if not self.residuals:
            return 0.0
        return math.sqrt(sum(r.error_pct ** 2 for r in self.residuals) / len(self.residuals))


def _seen(cluster: Cluster, nominal: NcclParams, observations: tuple[Observation, ...]) -> tuple[str, ...]:
    """The parameters at least one observation's time depends on."""
    seen = {"latency_scale", "launch_us", "fill_us"}
    for o in observations:
        p = predict(cluster, nominal, o.call)
        if o.call.gpus_per_thread > 1:
            seen.add("launch_per_gpu_us")
        if o.call.nodes > 1:
            seen.add("nic_gb_s")
        if o.call.ranks_per_node > 1:
            seen.add("intra_busbw_gb_s")
        if o.call.nodes == 1 and o.call.ranks > 1:
            seen.add("intra_busbw_gb_s")
        if p.choice is not None:
            if p.choice.algorithm in (NcclAlgorithm.NVLS, NcclAlgorithm.NVLS_TREE):
                seen.add("nvls_busbw_gb_s")
            if p.choice.protocol is NcclProtocol.LL:
                seen.add("ll_efficiency")
            if p.choice.protocol is NcclProtocol.LL128:
                seen.add("ll128_efficiency")
    if cluster.gpus_per_node == 1:
        seen.discard("intra_busbw_gb_s")
    return tuple(n for n in NcclParams.names() if n in seen)


def _to_params(x: np.ndarray, names: tuple[str, ...], nominal: NcclParams) -> NcclParams:
    values = dict(zip(NcclParams.names(), nominal.values()))
    for name, v in zip(names, x):
        values[name] = math.exp(v) * values[name]
    return NcclParams(**values)


#: the starts of the search besides the nominal point: the launch as a share of the fastest measured call, NCCL's
#: latencies scaled (the launch and the latencies trade off at small sizes, with a local minimum on each side)
_LAUNCH_SHARES = (0.25, 0.75)
_LATENCY_SCALES = (0.5, 2.0)


def _host_floor_start(names: tuple[str, ...], nominal: NcclParams,
                      observations: tuple[Observation, ...]) -> np.ndarray:
    """The nominal point, but a host thread's launch cost per GPU (:func:`astra_adapter.nccl.model.host_bound_us`)
    read off the fastest call one thread launched on several GPUs, per GPU: the smallest sizes sit on that floor
    (from below it, the floor hides under the GPUs' time and the fit would not see it)."""
    x = np.zeros(len(names))
    several = [o.measured_us / o.call.gpus_per_thread for o in observations if o.call.gpus_per_thread > 1]
    if "launch_per_gpu_us" in names and several:
        x[names.index("launch_per_gpu_us")] = math.log(min(several) / nominal.launch_per_gpu_us)
    return x


def _starts(names: tuple[str, ...], nominal: NcclParams, fastest_us: float, lo: np.ndarray,
            hi: np.ndarray, base: np.ndarray) -> list[np.ndarray]:
    """Deterministic starting points for the fit: ``base`` (the nominal parameters, the host floor read off the
    measurements), then every combination of the launch and latency starts above (only for parameters being
    fitted), clipped into the bounds."""
    starts = [np.clip(base, lo, hi)]
    for share in _LAUNCH_SHARES:
        for scale in _LATENCY_SCALES:
            x = base.copy()
            for i, n in enumerate(names):
                if n == "launch_us":
                    x[i] = math.log(max(share * fastest_us, 1e-3) / nominal.launch_us)
                elif n == "latency_scale":
                    x[i] = math.log(scale)
            starts.append(np.clip(x, lo, hi))
    return starts


def fit(cluster: Cluster, observations: tuple[Observation, ...] | list[Observation]) -> Fit:
    """The parameters that best explain ``observations`` (see the module doc)."""
    observations = tuple(observations)
    nominal = nominal_params(cluster)
    names = _seen(cluster, nominal, observations)
    names = tuple(n for n in names if getattr(nominal, n) > 0)
    lo = [math.log(_BOUNDS[n][0]) for n in names]
    hi = [math.log(_BOUNDS[n][1]) for n in names]
    x0 = [0.0] * len(names)
    measured = np.array([o.measured_us for o in observations])
    weights = np.array([PRIOR_WEIGHTS.get(n, PRIOR_WEIGHT) for n in names])

    def residuals(x: np.ndarray) -> np.ndarray:
        params = _to_params(x, names, nominal)
        model = np.array([predict(cluster, params, o.call).time_us for o in observations])
        prior = weights * np.asarray(x)
        return np.concatenate([np.log(model / measured), prior])

    if names and observations:
        best = None
        base = _host_floor_start(names, nominal, observations)
        for start in _starts(names, nominal, float(measured.min()), np.array(lo), np.array(hi), base):
            result = least_squares(residuals, start, bounds=(np.array(lo), np.array(hi)), method="trf",
                                   loss="soft_l1", f_scale=ROBUST_SCALE, x_scale="jac", diff_step=1e-3)
            if best is None or result.cost < best.cost - 1e-12:
                best = result
        params = _to_params(best.x, names, nominal)
    else:
        params = nominal
    out = tuple(Residual(o, predict(cluster, params, o.call)) for o in observations)
    moved = tuple(n for n in names if not math.isclose(getattr(params, n), getattr(nominal, n), rel_tol=1e-3,
                                                       abs_tol=1e-6))
    return Fit(cluster, params, nominal, moved, out)


def predict_all(cluster: Cluster, params: NcclParams, observations: tuple[Observation, ...] | list[Observation]
                ) -> tuple[Residual, ...]:
    return tuple(Residual(o, predict(cluster, params, o.call)) for o in observations)


def geomean_abs_error_pct(residuals: tuple[Residual, ...] | list[Residual]) -> float:
    """The geometric mean of |time error| in % (what ASTRA-sim's validation reports); a point predicted exactly
    counts as 0.01 % so that one exact point does not make the mean 0."""
    errs = [max(abs(r.error_pct), 0.01) for r in residuals]
    return math.exp(sum(math.log(e) for e in errs) / len(errs)) if errs else 0.0
