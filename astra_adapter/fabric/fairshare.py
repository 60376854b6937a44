"""Max-min fair rates of flows over shared resources, by progressive filling (as SimGrid's LV08 model without
its latency bound): every unfrozen flow's rate grows at the same pace until a resource saturates; the flows
crossing it freeze at that rate; repeat until every flow is frozen (pure, numpy).

A flow loads a resource with a weight (its fraction there: below 1 where ECMP splits it), so resource ``r``
is saturated when ``sum(weight[f, r] * rate[f]) == capacity[r]``.
"""

from __future__ import annotations

import numpy as np

try:  # the flat engine's whole rate solve and per-event sweeps compiled, the same floats (built by the install
    # step when it can be)
    from astra_adapter.fabric.fairshare_core import FlowEvents, LiveRates, MovingRates, earliest_end_ns, move_flows
except ImportError:  # not built: the numpy solve below and the flat engine's numpy sweeps run
    FlowEvents = LiveRates = MovingRates = earliest_end_ns = move_flows = None

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
