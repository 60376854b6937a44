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
    """Per step of an op (memoised: its flows' resources in path order, weights and windows); per moment the
    queues the flows in flight keep, and the wait a step's flows have behind them."""

    def __init__(self, network: FabricNetwork, capacity: np.ndarray, incidence) -> None:
        self.network = network
        self.capacity = capacity  # bytes per ns (calibrated rates)
        self.limit = np.array([float(r.queue_limit_bytes) for r in network.resources])
        self.incidence = incidence  # route id -> (resources, weights), in path order
        self._windows: dict[int, float] = {}
        self._steps: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}

    def window_bytes(self, rid: int) -> float:
        hit = self._windows.get(rid)
        if hit is None:
            route = self.network.routes[rid]
            first = self.network.resources[route.loads[0][0]] if route.loads else None
            rate = first.rate_bps if first is not None else 0
            hit = self._windows[rid] = float(testbed_window_bytes(rate, 2 * route.delay_ns / 1000))
        return hit

    def _arrays(self, step) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(resources, weights, flow index) of every flow of ``step`` in path order, and each flow's window; the
        engine's steps live as long as its plans, so their ids key this."""
        hit = self._steps.get(id(step))
        if hit is None:
            routes = step.routes.tolist()
            parts = [self.incidence(rid) for rid in routes]
            hit = self._steps[id(step)] = (
                np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64),
                np.concatenate([p[1] for p in parts]) if parts else np.zeros(0),
                np.repeat(np.arange(len(parts)), [len(p[0]) for p in parts]),
                np.array([self.window_bytes(rid) for rid in routes]))
        return hit

    def load(self, rated: list) -> np.ndarray:
        """Bytes/ns on each resource from ``(step, rates in bytes/ns)`` of every step moving."""
        if not rated:
            return np.zeros(len(self.capacity))
        arrays = [self._arrays(step) for step, _ in rated]
        weights = np.concatenate([a[1] * rate[a[2]] for a, (_, rate) in zip(arrays, rated)])
        return np.bincount(np.concatenate([a[0] for a in arrays]), weights=weights, minlength=len(self.capacity))

    def queued_bytes(self, in_flight: list, load: np.ndarray) -> np.ndarray:
        """Bytes standing in each resource's queue, given the steps in flight: ``(step, active mask, bytes left,
        rates in bytes/ns)`` each, and the ``load`` that says which resources are saturated."""
        res_l, w_l, flow_l, keep_l = [], [], [], []
        offset = 0
        for step, active, left in in_flight:
            res, w, flow, win = self._arrays(step)
            on = active[flow]
            res_l.append(res[on])
            w_l.append(w[on])
            flow_l.append(flow[on] + offset)
            keep_l.append(np.minimum(np.where(active, left, 0.0), win))
            offset += len(active)
        queued = np.zeros(len(self.capacity))
        if not offset:
            return queued
        res, w, flow = np.concatenate(res_l), np.concatenate(w_l), np.concatenate(flow_l)
        full = (load >= _FULL * self.capacity) & (self.limit > 0)
        at = np.flatnonzero(full[res])
        if not len(at):
            return queued
        flows, first = np.unique(flow[at], return_index=True)  # each flow's queue: at its first bottleneck
        at = at[first]
        np.add.at(queued, res[at], w[at] * np.concatenate(keep_l)[flows])
        return np.minimum(queued, self.limit)

    def delay_ns(self, queued: np.ndarray, step_routes: np.ndarray) -> float:
        """The longest wait one of a step's flows has behind the queues on its path."""
        worst = 0.0
        for rid in set(step_routes.tolist()):
            res, w = self.incidence(rid)
            worst = max(worst, float(np.sum(w * queued[res] / self.capacity[res])))
        return worst
