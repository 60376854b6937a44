"""The flat engine's waits behind standing queues (``FabricParams.standing_queues``; the module doc of
:mod:`astra_adapter.fabric.flat_flows` says how they are read): the flowing flows' queue entries as flat arrays,
built once per lay-out, and the wait of a step entering - the reference's arithmetic in its order, so the same
floats. A mixin of :class:`astra_adapter.fabric.flat_flows.FlatFlowEngine` (its ``queues``, ``_left``,
``_routes``, ``_starts``, ``_flow_steps``, ``_queue_flat``, ``_queue_steps`` and ``_solve``)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from astra_adapter.fabric.flows import FabricOp, StepFlows
from astra_adapter.fabric.queues import kept_bytes


class OnQueues:
    """The flat engine's standing-queue waits (a mixin; the attributes it reads are the engine's)."""

    queues: Any
    _left: np.ndarray
    _routes: np.ndarray
    _starts: np.ndarray
    _flow_steps: list
    _queue_flat: tuple | None
    _queue_steps: dict
    _solve: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]  # FlowEngine's max-min solve

    def _queue_flows(self) -> tuple[np.ndarray, ...]:
        """The flowing flows' queue entries as flat arrays (per entry: resource, weight, flat flow index, hop
        from the sender, on the sender's own link; per flow: window, bytes its connection sends in later steps;
        per flow and one more: its first entry), built once per lay-out."""
        if self._queue_flat is None:
            q = self.queues
            assert q is not None
            parts = [self._queue_step(steps, k) for steps, k in self._flow_steps]
            if parts:
                flow = np.concatenate([p[2] + a for p, a in zip(parts, self._starts.tolist())])
                res, w, _, hop, own, win, later = (np.concatenate([p[i] for p in parts]) for i in range(7))
                self._queue_flat = (res, w, flow, hop, own, win, later,
                                    np.searchsorted(flow, np.arange(len(self._left) + 1)))
            else:
                self._queue_flat = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64),
                                    np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), np.zeros(0), np.zeros(0),
                                    np.zeros(1, dtype=np.int64))
        return self._queue_flat

    def _queue_step(self, steps: tuple[StepFlows, ...], k: int) -> tuple[np.ndarray, ...]:
        """Of step ``k`` of an op's ``steps``: its queue entries (resource, weight, flow, hop, own link) and per
        flow its window and the bytes its connection sends in later steps (memoised per plan and step)."""
        key = (id(steps), k)
        hit = self._queue_steps.get(key)
        if hit is None:
            q = self.queues
            assert q is not None
            res, w, flow, win = q.entries(steps[k])
            hop, own = q.path_order(steps[k])
            hit = self._queue_steps[key] = (res, w, flow, hop, own, win, q.later_bytes(steps, k))
        return hit

    def _queue_wait_ns(self, op: FabricOp, left: np.ndarray, active: np.ndarray,
                       extras: list[tuple[int, FabricOp, bool]]) -> float:
        """The wait ``op``'s step (just entered) has behind the queues of the flows moving: the flowing flows
        with bytes left ``left`` and moving flags ``active`` (flat arrays of the lay-out), and ``extras``:
        (flat index it sits before, op, whether it is ``op`` itself) for each op moving outside them, in the
        order of ``ops``. As :meth:`FlowEngine._enter_next_step` (0.0 where it adds nothing)."""
        q = self.queues
        assert q is not None
        res, w, flow, hop, own, win, later, first = self._queue_flows()
        if extras:  # the flat arrays cut at each extra op, its flows and entries in between
            f_parts: list[tuple] = []
            e_parts: list[tuple] = []
            at = offset = 0
            for cut, xop, mine in extras + [(len(left), None, False)]:
                if cut > at:
                    f_parts.append((self._routes[at:cut], active[at:cut], left[at:cut], later[at:cut], win[at:cut],
                                    active[at:cut]))
                    ea, eb = int(first[at]), int(first[cut])
                    e_parts.append((res[ea:eb], w[ea:eb], flow[ea:eb] - at + offset, hop[ea:eb], own[ea:eb]))
                    offset += cut - at
                    at = cut
                if xop is not None:
                    s = xop.steps[xop.step]
                    x_res, x_w, x_flow, x_hop, x_own, x_win, x_later = self._queue_step(xop.steps, xop.step)
                    f_parts.append((s.routes, xop.active, xop.left, x_later, x_win,
                                    np.zeros(len(s.routes), dtype=bool) if mine else xop.active))
                    e_parts.append((x_res, x_w, x_flow + offset, x_hop, x_own))
                    offset += len(s.routes)
            routes, active, left, later, win, in_flight = (np.concatenate([p[i] for p in f_parts]) for i in range(6))
            res, w, flow, hop, own = (np.concatenate([p[i] for p in e_parts]) for i in range(5))
        else:
            routes, in_flight = self._routes, active
        if not in_flight.any():
            return 0.0  # no other op moves
        moving_routes = routes[active]
        unique, per_flow = self._solve(np.sort(moving_routes))
        rate = np.zeros(len(active))
        rate[active] = per_flow[np.searchsorted(unique, moving_routes)]
        load = q.load_on(res, w, rate[flow])
        step = op.steps[op.step]
        full = q.saturated(load)
        if not full[q.entries(step)[0]].any():
            return 0.0  # queues stand only on saturated links, and none is on the step's paths: no wait
        # the in-flight flows' entries on saturated links, in order: all queued_on reads of them
        on = np.flatnonzero(full[res] & in_flight[flow])
        queued = q.queued_on(res[on], w[on], flow[on], hop[on], own[on], kept_bytes(in_flight, left + later, win),
                             load)
        if not queued.any():
            return 0.0
        return q.delay_ns(queued, step.routes[op.active], step.dst[op.active] if len(op.steps) > 1 else None)
