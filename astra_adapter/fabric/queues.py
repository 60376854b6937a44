"""Standing queues on saturated links (pure, numpy): the wait a step's flows add behind other flows' queues.

The max-min fair model shares a link's *rate* among its flows and gives a flow that joins a full link its
share at once. A real shaped link is a FIFO: a TCP flow whose bottleneck it is keeps its whole window in flight,
and with the testbed's sub-millisecond delays nearly all of that waits in the bottleneck's queue
(:mod:`genie.core.tcp_window`). A flow that starts while such a queue stands waits for it to drain before its
own bytes get through: ``queued bytes / link rate`` per saturated link on its path. That is what sends a small
tensor-parallel all-reduce across a spine link another job's data-parallel ring keeps full from a millisecond
to tens of milliseconds.

The queue is derived, not fitted: on link ``r``, the sum over the flows in flight whose first saturated link
is ``r`` of what each still has to send, up to one TCP window (its route's
:func:`genie.core.tcp_window.testbed_window_bytes`), the whole at most the link's queue limit
(``Resource.queue_limit_bytes``); a link is saturated when the max-min rates fill it. Only other ops' flows
count: a step's own flows start together, so they find no queue of their own (their sharing is the rates').
"""

from __future__ import annotations

import numpy as np

from genie.core.tcp_window import testbed_window_bytes

from astra_adapter.fabric.network import FabricNetwork

_FULL = 1.0 - 1e-6  # a resource loaded to this fraction of its capacity is saturated


class StandingQueues:
    """Per route (memoised): its resources, weights and window; per configuration of flows: the queues."""

    def __init__(self, network: FabricNetwork, capacity: np.ndarray) -> None:
        self.network = network
        self.capacity = capacity  # bytes per ns (calibrated rates)
        self.limit = np.array([float(r.queue_limit_bytes) for r in network.resources])
        self._windows: dict[int, float] = {}

    def window_bytes(self, rid: int) -> float:
        hit = self._windows.get(rid)
        if hit is None:
            route = self.network.routes[rid]
            first = self.network.resources[route.loads[0][0]] if route.loads else None
            rate = first.rate_bps if first is not None else 0
            hit = self._windows[rid] = float(testbed_window_bytes(rate, 2 * route.delay_ns / 1000))
        return hit

    def queued_bytes(self, routes: np.ndarray, left_bytes: np.ndarray, rates: np.ndarray,
                     incidence) -> np.ndarray:
        """Bytes standing in each resource's queue, given the flows in flight (``routes``, ``left_bytes``,
        ``rates`` in bytes/ns) and ``incidence(rid) -> (resources, weights)`` in path order."""
        load = np.zeros(len(self.capacity))
        for rid, rate in zip(routes.tolist(), rates.tolist()):
            res, w = incidence(rid)
            np.add.at(load, res, w * rate)
        saturated = load >= _FULL * self.capacity
        queued = np.zeros(len(self.capacity))
        if not saturated.any():
            return queued
        for rid, left in zip(routes.tolist(), left_bytes.tolist()):
            res, w = incidence(rid)
            full = np.flatnonzero(saturated[res] & (self.limit[res] > 0))
            if len(full):  # its queue stands at its first bottleneck on the path
                k = full[0]
                queued[res[k]] += w[k] * min(left, self.window_bytes(rid))
        return np.minimum(queued, self.limit)

    def delay_ns(self, queued: np.ndarray, step_routes: np.ndarray, incidence) -> float:
        """The longest wait one of a step's flows has behind the queues on its path."""
        worst = 0.0
        for rid in set(step_routes.tolist()):
            res, w = incidence(rid)
            worst = max(worst, float(np.sum(w * queued[res] / self.capacity[res])))
        return worst
