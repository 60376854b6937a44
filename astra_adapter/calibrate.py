"""Fit ASTRA-sim's network model to measured collective latencies (``calibration.json`` / ``calibration.csv``).

The model of a measurement is **the built-in estimator itself**: the measured op (collective, algorithm, ranks
0..n-1 of the mapped topology, size) becomes a one-node-per-rank trace; a group smaller than the world is a
process group (which ASTRA-sim runs as a ring); system.json comes from :func:`astra_adapter.export.system_config`
with the op's algorithm. Its parameters are, per dimension, the latency per hop (ns) and the time per byte
(``1 / bandwidth``), and the endpoint delay (ns, one for all dimensions).

With those parameters the estimator's time is affine (its per-message delay ``int(hops * latency + bytes / bw)``
is exact at integer latencies and whole ns per byte), so each measurement's coefficients come from probing the
estimator at such points (finite differences, checked at a further point). The fit is least squares on relative
error (each row divided by its measurement, so small and large sizes count alike; given the workload, each
point weighted as the fabric model's fit weighs it, :func:`astra_adapter.measurements.workload_weights`, so the
ops the workload spends its time on are not outvoted by a grid of small sizes) with numpy, subject to
latency >= 0, bandwidth > 0 and endpoint delay >= 1; a parameter the measurements cannot separate keeps its
default (endpoint delay first, then latencies). The endpoint delay is fitted only on request
(``fit_endpoint_delay``): on genie's testbed the per-message cost is software, which the latency per hop
carries into process groups too, while ASTRA-sim charges groups smaller than the world a fixed 10 ns instead of
the endpoint delay. A fitted one is rounded to whole ns (ASTRA-sim reads an integer) and the rest refitted. Residuals are the estimator's own times at the fitted values. When a probe
shows a measurement's model is not affine (tree algorithms), the fit is repeated once around the first answer.

**Size factors.** ASTRA-sim's network has one bandwidth per dimension, but collectives do not use a real
link equally well: a direct all-to-all's n-1 concurrent flows into every host (incast) reach far less of the
line rate than a ring's single flow per link, which the congestion-unaware model cannot express. So the
bandwidth belongs to a reference collective (all-reduce when measured, else the most measured one) and every
other measured collective gets a *size factor*: the model moves ``factor x`` its bytes (fitted jointly, by
alternating least squares). Calibrated mode and a calibrated export scale those nodes' ``comm_size``.

**Physically impossible points** are left out of the fit: given each measurement's lower bound (``bounds_us``:
the fastest its payload can cross the topology's links at their nominal rates, which the caller computes with
the fabric model's one rule, :func:`astra_adapter.fabric.calibrate.lower_bounds_us`), a measurement faster than
it is a timer artefact or a small-message minimum, not a transfer; it is kept in ``Calibration.excluded`` (with
the model's time at the fitted values) and named in a note. When no point is left, nothing is fitted: the
dimensions keep the topology's link values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from genie.core.collective import Algorithm, Collective
from genie.core.errors import GenieError, InputError
from genie.core.trace import CommType, NodeKind, ProcessGroup, Trace, collective_node, make_trace, recv_node, send_node

from astra_adapter.config import GIB_BYTES, NetworkConfig, NetworkDim, TopologyKind
from astra_adapter.estimate import estimate
from astra_adapter.export import SystemParams, system_config
from astra_adapter.mapping import DimRole, MappedDim, TopologyMapping, TopologyShape
from astra_adapter.measurements import CommOp, Measurement

MIN_NS_PER_BYTE = 1e-6
_PROBE = (1000.0, 1.0, 10.0)  # latency ns, ns per byte, endpoint delay ns: exact for the estimator
_STEP = (1000.0, 1.0, 10.0)


@dataclass(frozen=True)
class CalibratedDim:
    role: DimRole
    topology: TopologyKind
    npus_count: int
    bandwidth_gb_per_s: float
    latency_ns: float
    fitted: bool  # False: no measurement spans this dimension (the value is the topology's or a default)


@dataclass(frozen=True)
class CalibrationPoint:
    collective: Collective
    algorithm: Algorithm
    ranks: int
    size_bytes: int
    measured_us: float
    model_us: float
    group: tuple[int, ...] = ()
    bound_us: float = 0.0  # the fastest the links allow (0: not known)

    @property
    def residual_pct(self) -> float:
        return (self.model_us - self.measured_us) / self.measured_us * 100


@dataclass(frozen=True)
class Calibration:
    topology: str
    dims: tuple[CalibratedDim, ...]
    endpoint_delay_ns: int
    points: tuple[CalibrationPoint, ...]
    params: SystemParams = SystemParams()
    notes: tuple[str, ...] = ()
    size_factors: tuple[tuple[Collective, float], ...] = ()  # model bytes / real bytes, per collective
    excluded: tuple[CalibrationPoint, ...] = ()  # faster than the links allow: left out of the fit

    def size_factor(self, collective: Collective) -> float:
        return dict(self.size_factors).get(collective, 1.0)

    @property
    def rms_residual_pct(self) -> float:
        if not self.points:
            return 0.0
        return math.sqrt(sum(p.residual_pct ** 2 for p in self.points) / len(self.points))

    def system_params(self, base: SystemParams | None = None) -> SystemParams:
        return replace(base or self.params, endpoint_delay_ns=self.endpoint_delay_ns)


# ---- the model of one measurement ----------------------------------------------------------------------
def network_at(mapping: TopologyMapping, theta: np.ndarray | list[float]) -> NetworkConfig:
    """The network for parameter vector ``theta`` = (latency_0, ns_per_byte_0, latency_1, ..., endpoint delay)."""
    dims = []
    for i, d in enumerate(mapping.dims):
        lat, npb = float(theta[2 * i]), float(theta[2 * i + 1])
        dims.append(NetworkDim(d.topology, d.npus_count, 1e9 / npb / GIB_BYTES, lat))
    return NetworkConfig(tuple(dims))


def op_trace(op: CommOp, world: int, group: tuple[int, ...] | None = None):
    """The measured op as a trace on ``world`` ranks: the ranks of ``group`` (default 0..n-1, as the bench
    runs it) run it, the rest idle. A group of all ranks in order is the world; a message goes from the group's
    first rank to its last."""
    members = tuple(group) if group else tuple(range(op.ranks))
    nodes: list[list] = [[] for _ in range(world)]
    if op.collective is Collective.SEND_RECV:
        src, dst = members[0], members[-1]
        nodes[src] = [send_node(0, "send", rank=src, peer=dst, size_bytes=op.size_bytes)]
        nodes[dst] = [recv_node(0, "recv", rank=dst, peer=src, size_bytes=op.size_bytes)]
        return make_trace(nodes)
    comm_type = CommType.from_collective(op.collective)
    size = op.size_bytes // op.ranks if op.collective is Collective.ALL_GATHER else op.size_bytes
    name = None if members == tuple(range(world)) else "1"
    for r in members:
        nodes[r] = [collective_node(0, "op", comm_type=comm_type, size_bytes=size, process_group=name)]
    groups = () if name is None else (ProcessGroup(name, members),)
    return make_trace(nodes, groups=groups)


def op_time_ns(op: CommOp, mapping: TopologyMapping, network: NetworkConfig,
               params: SystemParams = SystemParams(), group: tuple[int, ...] | None = None) -> int:
    """The estimator's time for ``op`` on ``network`` (latest finish among its ranks)."""
    algorithm = Algorithm.HALVING_DOUBLING if op.algorithm is Algorithm.RECURSIVE_DOUBLING else op.algorithm
    overrides = {c: a for c, a in params.algorithms}
    if op.collective is not Collective.SEND_RECV:
        overrides[op.collective] = algorithm
    system, _ = system_config(mapping, replace(params, algorithms=tuple(overrides.items())))
    est = estimate(op_trace(op, mapping.npus_count, group), system, network, symmetry=False)
    return max(r.finish_cycles for r in est.result.ranks)


def model_ns(op: CommOp, mapping: TopologyMapping, theta, params: SystemParams = SystemParams(),
             group: tuple[int, ...] | None = None) -> int:
    """:func:`op_time_ns` with parameter vector ``theta`` (see :func:`network_at`)."""
    p = replace(params, endpoint_delay_ns=max(1, int(round(float(theta[-1])))))
    return op_time_ns(op, mapping, network_at(mapping, theta), p, group)


def modelable(op: CommOp, mapping: TopologyMapping, group: tuple[int, ...] | None = None) -> str | None:
    """Why the estimator cannot model ``op`` on ``mapping`` (None: it can)."""
    if op.collective is Collective.BROADCAST:
        return "ASTRA-sim replays a broadcast as its trace duration"
    if op.ranks > mapping.npus_count:
        return f"{op.ranks} ranks but the topology has {mapping.npus_count}"
    if op.ranks < 2:
        return "a single rank"
    try:
        if group and max(group) >= mapping.npus_count:
            return f"group {list(group)} is outside the topology's {mapping.npus_count} NPUs"
        model_ns(op, mapping, [*_PROBE[:2] * len(mapping.dims), _PROBE[2]], group=group)
    except (GenieError, ValueError) as exc:
        return str(exc)
    return None


def _theta(mapping: TopologyMapping, lat: float, npb: float, ed: float) -> np.ndarray:
    return np.array([*(lat, npb) * len(mapping.dims), ed], dtype=float)


def _coefficients(op: CommOp, group: tuple[int, ...], mapping: TopologyMapping, params: SystemParams,
                  base: np.ndarray) -> tuple[np.ndarray, float, bool]:
    """(a, d, affine): model(theta) = a . theta + d near ``base``; ``affine`` checked at a further point."""
    t0 = model_ns(op, mapping, base, params, group)
    steps = np.array([*(_STEP[0], _STEP[1]) * len(mapping.dims), _STEP[2]])
    a = np.zeros(len(base))
    for j in range(len(base)):
        probe = base.copy()
        probe[j] += steps[j]
        a[j] = (model_ns(op, mapping, probe, params, group) - t0) / steps[j]
    d = t0 - float(a @ base)
    far = base + 2 * steps
    affine = abs(model_ns(op, mapping, far, params, group) - (float(a @ far) + d)) <= 1e-6 * max(1.0, t0)
    return a, d, affine


def _solve(a: np.ndarray, rhs: np.ndarray, defaults: np.ndarray, lower: np.ndarray,
           free: list[int]) -> np.ndarray:
    """min ||a theta - rhs|| over the ``free`` columns (others at ``defaults``), clamping at ``lower``."""
    theta = defaults.copy()
    free = list(free)
    while free:
        fixed = [j for j in range(len(theta)) if j not in free]
        target = rhs - a[:, fixed] @ theta[fixed]
        sub = a[:, free]
        scale = np.linalg.norm(sub, axis=0)
        scale[scale == 0] = 1.0
        sol, *_ = np.linalg.lstsq(sub / scale, target, rcond=None)
        sol = sol / scale
        low = [k for k, j in enumerate(free) if sol[k] < lower[j]]
        if not low:
            theta[free] = sol
            return theta
        worst = min(low, key=lambda k: sol[k] - lower[free[k]])
        theta[free[worst]] = lower[free[worst]]
        free.pop(worst)
    return theta


def _full_rank(a: np.ndarray, cols: list[int]) -> bool:
    """The columns are far from dependent (condition number of the normalized columns below 1000)."""
    sub = a[:, cols] / np.maximum(np.linalg.norm(a[:, cols], axis=0), 1e-300)
    singular = np.linalg.svd(sub, compute_uv=False)
    return len(singular) >= len(cols) and singular[-1] > 1e-3 * singular[0]


def _identifiable(a: np.ndarray, free: list[int], priority: list[int]) -> list[int]:
    """Drop parameters in ``priority`` order until the measurements determine the rest."""
    free = list(free)
    for j in priority:
        if not free or _full_rank(a, free):
            break
        if j in free:
            free.remove(j)
    return free


def _op_key(k: tuple[CommOp, tuple[int, ...]]) -> tuple:
    return k[0].collective.value, k[0].algorithm.value, k[0].ranks, k[0].size_bytes, k[1]


def _measured_ops(measurements, mapping: TopologyMapping, bounds_us, weights
                  ) -> tuple[list, np.ndarray, np.ndarray, list[str],
                             list[tuple[tuple[CommOp, tuple[int, ...]], float, float]]]:
    """(ops to fit, their median measured ns, their weights (the mean of their measurements'), notes, excluded
    (op key, measured us, bound us) - physically impossible)."""
    grouped: dict[tuple[CommOp, tuple[int, ...]], list[float]] = {}
    weighed: dict[tuple[CommOp, tuple[int, ...]], list[float]] = {}
    impossible = []
    for i, m in enumerate(measurements):
        group = m.groups[0] if m.groups else tuple(range(m.ranks))
        key = (CommOp(m.collective, m.algorithm, m.ranks, m.size_bytes), group)
        if bounds_us is not None and m.time_us < bounds_us[i]:
            impossible.append((key, m.time_us, float(bounds_us[i])))
        else:
            grouped.setdefault(key, []).append(m.time_us)
            weighed.setdefault(key, []).append(1.0 if weights is None else float(weights[i]))
    ops, skipped = [], {}
    for key in sorted({*grouped, *(k for k, _, _ in impossible)}, key=_op_key):
        why = modelable(key[0], mapping, key[1])
        if why is None:
            if key in grouped:
                ops.append(key)
        else:
            skipped[f"not fitted: {key[0].collective.value}/{key[0].algorithm.value} on {key[0].ranks} ranks: {why}"] = 1
    excluded = sorted(((k, t, b) for k, t, b in impossible if modelable(k[0], mapping, k[1]) is None),
                      key=lambda e: _op_key(e[0]))
    if not ops and not excluded:
        raise InputError("no measurement the model can reproduce" + (f" ({next(iter(skipped))})" if skipped else ""),
                         path="measurements")
    notes = list(skipped)
    if impossible:
        notes.append(f"{len(impossible)} of {len(measurements)} measurements are faster than their links' nominal "
                     f"rates allow and are left out of the fit" + ("" if ops else
                                                                  ": nothing left to fit, the links' values are kept"))
    return (ops, np.array([float(np.median(grouped[key])) * 1000 for key in ops]),
            np.array([float(np.mean(weighed[key])) for key in ops]), notes, excluded)


def _fit(a_raw: np.ndarray, d: np.ndarray, m: np.ndarray, w: np.ndarray, kinds: list[Collective],
         reference: Collective, defaults: np.ndarray, lower: np.ndarray, free: list[int], fit_factors: bool,
         round_delay: bool) -> tuple[np.ndarray, dict[Collective, float]]:
    """Alternating least squares: parameters with the size factors fixed, then each factor alone; each row's
    squared relative error counted ``w`` times."""
    root_w = np.sqrt(w)
    bw = list(range(1, len(defaults) - 1, 2))
    other = [j for j in range(len(defaults)) if j not in bw]
    factors = {c: 1.0 for c in kinds}
    end = len(defaults) - 1
    theta = defaults.copy()
    for _ in range(60):
        a = a_raw.copy()
        a[:, bw] *= np.array([factors[c] for c in kinds])[:, None]
        rel_a, rhs = a * (root_w / m)[:, None], (m - d) / m * root_w
        theta = _solve(rel_a, rhs, defaults, lower, free)
        if round_delay and end in free:
            theta[end] = max(1.0, float(round(theta[end])))
            theta = _solve(rel_a, rhs, theta, lower, [j for j in free if j != end])
        if not fit_factors:
            break
        new = {}
        for c in set(kinds):
            rows = [i for i, k in enumerate(kinds) if k is c]
            g = a_raw[rows][:, bw] @ theta[bw] / m[rows]
            r = (m[rows] - d[rows] - a_raw[rows][:, other] @ theta[other]) / m[rows]
            wc = w[rows]
            new[c] = 1.0 if c is reference or not g @ g > 0 else max(0.05, float((wc * g) @ r / ((wc * g) @ g)))
        converged = all(abs(new[c] - factors[c]) <= 1e-12 * new[c] for c in new)
        factors = new
        if converged:
            break
    return theta, factors


def calibrate(measurements: tuple[Measurement, ...] | list[Measurement], mapping: TopologyMapping,
              params: SystemParams = SystemParams(), *, fit_endpoint_delay: bool = False,
              size_factors: bool = True, bounds_us=None, weights=None) -> Calibration:
    """Fit per-dimension bandwidth and latency, the endpoint delay and per-collective size factors to
    ``measurements`` on ``mapping``, leaving out those faster than their ``bounds_us`` (one per measurement;
    None: no bound known); ``weights`` (one per measurement, :func:`astra_adapter.measurements.workload_weights`;
    None: all 1) count each point's squared relative error that many times (see the module doc)."""
    if weights is not None and len(weights) != len(measurements):
        raise ValueError(f"{len(weights)} weights for {len(measurements)} measurements")
    ops, measured, w, notes, excluded = _measured_ops(measurements, mapping, bounds_us, weights)
    if not ops:
        return _unfitted(mapping, params, notes, excluded)
    kinds = [op.collective for op, _ in ops]
    counts = {c: kinds.count(c) for c in kinds}
    reference = Collective.ALL_REDUCE if Collective.ALL_REDUCE in counts else max(counts, key=counts.get)
    defaults = _defaults(mapping, params)
    lower = np.array([*(0.0, MIN_NS_PER_BYTE) * len(mapping.dims), 1.0])
    base = _theta(mapping, *_PROBE)
    end = len(defaults) - 1
    for attempt in range(2):
        rows = [_coefficients(op, group, mapping, params, base) for op, group in ops]
        a_raw, d = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
        used = [j for j in range(a_raw.shape[1]) if np.any(a_raw[:, j] != 0)]
        if not fit_endpoint_delay:
            used = [j for j in used if j != end]
        free = _identifiable(a_raw / measured[:, None], used, [end, *range(0, end, 2)])
        theta, factors = _fit(a_raw, d, measured, w, kinds, reference, defaults, lower, free, size_factors, True)
        if all(r[2] for r in rows) or attempt:
            break
        notes.append("some models are not affine in the parameters (tree algorithms): refitted around the answer")
        base = np.array([*(round(theta[j]) if j % 2 == 0 else max(1.0, round(theta[j] * 1024)) / 1024
                           for j in range(end)), max(1.0, round(theta[end]))])
    fitted_cols = set(free)
    dims = tuple(CalibratedDim(d.role, d.topology, d.npus_count, float(1e9 / theta[2 * i + 1] / GIB_BYTES),
                               float(theta[2 * i]), (2 * i in fitted_cols) or (2 * i + 1 in fitted_cols))
                 for i, d in enumerate(mapping.dims))
    for i, d in enumerate(dims):
        if not d.fitted:
            notes.append(f"dimension {i} ({mapping.dims[i].description}): no measurement spans it, kept "
                         f"{d.bandwidth_gb_per_s:g} GB/s, {d.latency_ns:g} ns")
    if fit_endpoint_delay and end not in fitted_cols:
        notes.append(f"endpoint delay not separable from the latencies: kept {int(theta[end])} ns")
    kept = tuple((c, f) for c, f in sorted(factors.items(), key=lambda kv: kv[0].value) if c is not reference)
    if kept:
        notes.append(f"bandwidth is {reference.value}'s; size factors: "
                     + ", ".join(f"{c.value} x{f:.3f}" for c, f in kept))
    points = tuple(CalibrationPoint(op.collective, op.algorithm, op.ranks, op.size_bytes, float(m) / 1000,
                                    model_ns(scaled_op(op, factors.get(op.collective, 1.0)), mapping, theta, params,
                                             group) / 1000, group)
                   for (op, group), m in zip(ops, measured))
    return Calibration(mapping.topology_name, dims, int(theta[end]), points, params, tuple(notes), kept,
                       _excluded_points(excluded, mapping, theta, params, factors))


def _excluded_points(excluded, mapping: TopologyMapping, theta: np.ndarray, params: SystemParams,
                     factors: dict[Collective, float]) -> tuple[CalibrationPoint, ...]:
    return tuple(CalibrationPoint(op.collective, op.algorithm, op.ranks, op.size_bytes, t,
                                  model_ns(scaled_op(op, factors.get(op.collective, 1.0)), mapping, theta, params,
                                           group) / 1000, group, bound)
                 for (op, group), t, bound in excluded)


def _unfitted(mapping: TopologyMapping, params: SystemParams, notes: list[str], excluded) -> Calibration:
    """No possible point to fit: the topology's link values (and the default endpoint delay), nothing fitted."""
    theta = _defaults(mapping, params)
    dims = tuple(CalibratedDim(d.role, d.topology, d.npus_count, float(1e9 / theta[2 * i + 1] / GIB_BYTES),
                               float(theta[2 * i]), False) for i, d in enumerate(mapping.dims))
    return Calibration(mapping.topology_name, dims, int(theta[-1]), (), params, tuple(notes), (),
                       _excluded_points(excluded, mapping, theta, params, {}))


def scaled_op(op: CommOp, factor: float) -> CommOp:
    return op if factor == 1.0 else replace(op, size_bytes=max(1, round(op.size_bytes * factor)))


def scaled_trace(trace: Trace, calibration: Calibration) -> Trace:
    """``trace`` with the calibration's size factors applied to its collectives' (and messages') ``comm_size``."""
    factors = dict(calibration.size_factors)
    if not factors:
        return trace
    ranks = []
    for rank in trace.ranks:
        nodes = []
        for node in rank.nodes:
            coll = (node.comm_type.collective if node.kind is NodeKind.COLLECTIVE and node.comm_type else
                    Collective.SEND_RECV if node.kind in (NodeKind.SEND, NodeKind.RECV) else None)
            if coll in factors and node.size_bytes:
                node = node.with_attr("comm_size", max(1, round(node.size_bytes * factors[coll])))
            nodes.append(node)
        ranks.append(replace(rank, nodes=tuple(nodes)))
    return replace(trace, ranks=tuple(ranks))


def _defaults(mapping: TopologyMapping, params: SystemParams) -> np.ndarray:
    values = []
    for d in mapping.dims:
        bw = d.bandwidth_gb_per_s or 1.0
        values += [d.latency_ns, 1e9 / (bw * GIB_BYTES)]
    return np.array([*values, float(params.endpoint_delay_ns)])


# ---- applying a calibration ----------------------------------------------------------------------------
def calibrated_network(mapping: TopologyMapping, calibration: Calibration) -> tuple[NetworkConfig, tuple[str, ...]]:
    """``mapping``'s network with the calibrated bandwidth and latency of the dimension of the same role (ranks
    of a host, hosts); the topology kind and NPU count stay the mapping's, so a calibration on one topology can
    answer what-if questions on another. Dimensions without a calibrated counterpart keep the link values."""
    by_role = {d.role: d for d in calibration.dims if d.fitted}
    dims, notes = [], []
    for i, d in enumerate(mapping.dims):
        cal = by_role.get(d.role)
        if cal is None:
            if d.bandwidth_gb_per_s is None:
                raise InputError(f"dimension {i} ({d.description}) has unshaped links and the calibration has no "
                                 f"{d.role.value} dimension", source=calibration.topology)
            dims.append(NetworkDim(d.topology, d.npus_count, d.bandwidth_gb_per_s, d.latency_ns))
            notes.append(f"dimension {i} ({d.description}) is not calibrated: link values")
            continue
        if cal.topology is not d.topology or cal.npus_count != d.npus_count:
            notes.append(f"dimension {i}: calibrated on {cal.npus_count}-NPU {cal.topology.value}, used as "
                         f"{d.npus_count}-NPU {d.topology.value}")
        dims.append(NetworkDim(d.topology, d.npus_count, cal.bandwidth_gb_per_s, cal.latency_ns))
    return NetworkConfig(tuple(dims)), tuple(notes)


def calibration_mapping(cal: Calibration) -> TopologyMapping:
    """The dimensions a calibration was fitted on, as a mapping (for estimates without a topology file)."""
    shape = {TopologyKind.RING: TopologyShape.RING, TopologyKind.FULLY_CONNECTED: TopologyShape.FULL_MESH}.get(
        cal.dims[-1].topology, TopologyShape.STAR)
    rph = cal.dims[0].npus_count if cal.dims[0].role is DimRole.INTRA_HOST else 1
    dims = tuple(MappedDim(d.role, d.topology, d.npus_count, d.bandwidth_gb_per_s, d.latency_ns,
                           f"{d.npus_count} NPUs ({d.role.value}, {d.topology.value})") for d in cal.dims)
    return TopologyMapping(cal.topology or "calibration", shape, rph, dims)
