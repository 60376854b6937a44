"""Max-min fair rates of flows over shared resources, by progressive filling (as SimGrid's LV08 model without
its latency bound): every unfrozen flow's rate grows at the same pace until a resource saturates; the flows
crossing it freeze at that rate; repeat until every flow is frozen (pure, numpy).

A flow loads a resource with a weight (its fraction there: below 1 where ECMP splits it), so resource ``r``
is saturated when ``sum(weight[f, r] * rate[f]) == capacity[r]``.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

try:  # the flat engine's whole rate solve and per-event sweeps compiled, the same floats (built by the install
    # step when it can be)
    from astra_adapter.fabric.fairshare_core import (FlowEvents, LiveRates, MovingRates, busy_ranks_of,
                                                     earliest_end_ns, move_flows)
except ImportError:  # not built: the numpy solve below and the flat engine's numpy sweeps run
    FlowEvents = LiveRates = MovingRates = busy_ranks_of = earliest_end_ns = move_flows = None

_REL_EPS = 1e-9  # fairshare_core.pyx has the same


def max_min_rates(flow_of: np.ndarray, resource_of: np.ndarray, weight: np.ndarray, capacity: np.ndarray,
                  num_flows: int) -> np.ndarray:
    """Rates (capacity units) of ``num_flows`` flows; the sparse incidence is (flow_of, resource_of, weight)."""
    rates = np.zeros(num_flows)
    if num_flows == 0:
        return rates
    residual = capacity.astype(float).copy()
    active = np.ones(num_flows, dtype=bool)
    while active.any():
        live = active[flow_of]
        load = np.bincount(resource_of[live], weights=weight[live], minlength=len(capacity))
        used = load > 0
        if not used.any():
            rates[active] = np.inf  # crosses nothing: unbounded
            break
        delta = np.min(residual[used] / load[used])
        rates[active] += delta
        residual[used] -= delta * load[used]
        saturated = used & (residual <= _REL_EPS * capacity)
        residual[saturated] = 0.0
        active[flow_of[live & saturated[resource_of]]] = False  # the flows crossing a saturated resource
    return rates


def max_min_rates_compacting(flow_of: np.ndarray, resource_of: np.ndarray, weight: np.ndarray,
                             capacity: np.ndarray, num_flows: int) -> np.ndarray:
    """:func:`max_min_rates`, bit for bit, with the incidence of the flows frozen so far dropped after each
    round (the live entries kept in their order, so every resource's load sums the same terms in the same
    order): a round costs the flows still growing, not all of them."""
    rates = np.zeros(num_flows)
    if num_flows == 0:
        return rates
    residual = capacity.astype(float).copy()
    active = np.ones(num_flows, dtype=bool)
    live_flow, live_resource, live_weight = flow_of, resource_of, weight
    while active.any():
        load = np.bincount(live_resource, weights=live_weight, minlength=len(capacity))
        used = np.flatnonzero(load > 0)
        if not len(used):
            rates[active] = np.inf  # crosses nothing: unbounded
            break
        used_load = load[used]
        delta = np.min(residual[used] / used_load)
        rates[active] += delta
        left = residual[used] - delta * used_load
        saturated = left <= _REL_EPS * capacity[used]
        left[saturated] = 0.0
        residual[used] = left
        hit = np.zeros(len(capacity), dtype=bool)
        hit[used[saturated]] = True
        frozen = hit[live_resource]
        active[live_flow[frozen]] = False  # the flows crossing a saturated resource
        keep = active[live_flow]
        live_flow, live_resource, live_weight = live_flow[keep], live_resource[keep], live_weight[keep]
    return rates


def max_min_levels(ids: np.ndarray, mult: np.ndarray, ptr: np.ndarray, res: np.ndarray, w: np.ndarray,
                   capacity: np.ndarray, contention: float = 0.0, keys: list | None = None) -> np.ndarray:
    """The max-min rates of one flow on each route ``ids[i]`` (ascending, ``mult[i]`` flows on it; its loads
    ``res``/``w`` from ``ptr[r]`` to ``ptr[r + 1]``, resources ascending) by levels: the reference of the compiled
    fill by levels (fairshare_levels.pxi), which refills after flows end only the routes at or above the level of
    the first that ended. Every float here is a function of one resource's own sets, never of a running sum over
    all resources (as :func:`max_min_rates_compacting`'s rounds are), so such a refill gives this fill's floats:

    - ``L_q``: the weight times the flows of the routes on ``q`` not frozen yet, summed from 0 in ascending route
      order; ``F_q``: the load of the frozen ones, each added as it freezes (``F_q += (w * mult) * level``);
    - ``q``'s key: ``((cap_q - F_q) / L_q, q)``, kept above the key of the event that last touched ``q`` (the
      same level and a larger ``q``, else the next float up), so events come in ascending key order;
    - an event: the least key ``(x, q)``; the routes on ``q`` not frozen freeze at rate ``x`` in ascending order,
      each adding to ``F`` of its resources in path order; the resources they cross get new keys;
    - routes crossing nothing loaded: unbounded. With ``contention`` the capacities are scaled once, by the
      flows of all the routes (:meth:`astra_adapter.fabric.flows.FlowEngine._solve`'s scaling).

    The allocation is :func:`max_min_rates_compacting`'s; the floats agree to a relative ~1e-14 (not bit for
    bit: there a rate is a sum of rounds' increments, with a 1e-9 saturation threshold). ``keys``, if given, gets
    each route's freeze key ``(level, resource)``."""
    num = len(ids)
    rates = np.full(num, math.inf)
    weight: dict[int, dict[int, float]] = {}  # resource -> {route index: w * mult}, ascending
    for i, r in enumerate(ids.tolist()):
        for e in range(int(ptr[r]), int(ptr[r + 1])):
            weight.setdefault(int(res[e]), {})[i] = float(w[e]) * float(mult[i])
    cap = {}
    for q, on in weight.items():
        cap[q] = float(capacity[q])
        if contention > 0:
            flows = 0.0
            for x in on.values():
                flows += x
            cap[q] = float(capacity[q]) / (1 + contention * max(flows - 1, 0.0))
    frozen = np.zeros(num, dtype=bool)
    route_keys: list[tuple[float, int]] = [(math.inf, -1)] * num
    load = dict.fromkeys(weight, 0.0)
    last = dict.fromkeys(weight, (0.0, -1))  # the key of the event that last touched the resource

    def key_of(q: int) -> tuple[float, int] | None:
        total = 0.0
        for i, x in weight[q].items():
            if not frozen[i]:
                total += x
        if not total > 0:
            return None
        return level_key((cap[q] - load[q]) / total, q, last[q])

    heap, current = [], {}
    for q in sorted(weight):
        current[q] = key_of(q)
        if current[q] is not None:
            heapq.heappush(heap, current[q])
    while heap:
        x, q = top = heapq.heappop(heap)
        if current[q] != top:
            continue  # stale: q has a newer key
        current[q] = None
        touched = set()
        for i in [i for i in weight[q] if not frozen[i]]:
            frozen[i] = True
            rates[i], route_keys[i] = x, top
            r = int(ids[i])
            for e in range(int(ptr[r]), int(ptr[r + 1])):
                q2 = int(res[e])
                load[q2] = load[q2] + weight[q2][i] * x
                touched.add(q2)
        for q2 in touched:
            last[q2] = top
            current[q2] = key_of(q2)  # (None where nothing on it grows: q's, at least)
            if current[q2] is not None:
                heapq.heappush(heap, current[q2])
    if keys is not None:
        keys[:] = route_keys
    return rates


def level_key(raw: float, q: int, last: tuple[float, int]) -> tuple[float, int]:
    """Resource ``q``'s key at level ``raw``, kept above ``last`` (the key of the event that last touched it):
    ``(raw, q)`` if above, else the same level as ``last`` (if ``q`` is larger) or the next float up."""
    if (raw, q) > last:
        return raw, q
    return (last[0], q) if q > last[1] else (math.nextafter(last[0], math.inf), q)
