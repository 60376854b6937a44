"""Max-min fair rates of flows over shared resources, by progressive filling (as SimGrid's LV08 model without
its latency bound): every unfrozen flow's rate grows at the same pace until a resource saturates; the flows
crossing it freeze at that rate; repeat until every flow is frozen (pure, numpy).

A flow loads a resource with a weight (its fraction there: below 1 where ECMP splits it), so resource ``r``
is saturated when ``sum(weight[f, r] * rate[f]) == capacity[r]``.
"""

from __future__ import annotations

import numpy as np

_REL_EPS = 1e-9


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
