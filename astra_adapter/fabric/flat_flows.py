"""The flow engine with the flows of every op in flight in flat arrays (pure): :class:`FlowEngine`'s results bit
for bit, at a few numpy calls per event instead of a loop of small numpy calls over the ops in flight.

The reference engine (:class:`astra_adapter.fabric.flows.FlowEngine`, which the tests compare this one with)
keeps each op's bytes left and moving flows as arrays of its own, and every event - a step's latency or a
flow running out - walks every op in flight: its rates gathered from the memoised max-min solve, the time to
its first flow end, its bytes moved, its flows that ended, the ranks still busy in it. Here the ops moving
flows share one array of bytes left, one of moving flags, one of rates (each op a slice, its ``left`` and
``active`` views into them), laid out again only when an op starts, ends a step or leaves; an event is then
a minimum over the moving flows, one subtraction, one comparison and one count per op, plus a Python step
for the few ops whose state changed. The arithmetic is the reference's, element for element (the same
subtractions, the same max-min solve of the same sorted routes, minima over the same values), so every time
is the same float.

Which ops changed since the player last looked is kept (:attr:`FlatFlowEngine.changed`): the ranks busy in an
op change only when its step or moving flows do, so the player asks only those ops who left
(:meth:`astra_adapter.fabric.player.FabricPlayer.settle`).

Standing queues (``FabricParams.standing_queues``) read every op's flows at every step change: they run on the
reference engine (:func:`engine_for`).
"""

from __future__ import annotations

import numpy as np

from astra_adapter.fabric.fairshare import MovingRates, earliest_end_ns, max_min_rates_compacting, move_flows
from astra_adapter.fabric.flows import _MEMO_LIMIT, FabricOp, FabricParams, FlowEngine, StepFlows, StepSends
from astra_adapter.fabric.network import FabricNetwork


class _FlatOp(FabricOp):
    """An op in flight with the ranks busy in its last step memoised (per step and count of moving flows)."""

    __slots__ = ("busy_key", "busy")

    def __init__(self, steps: tuple[StepFlows, ...]) -> None:
        super().__init__(steps)
        self.busy_key: tuple[int, int] | None = None
        self.busy: set[int] = set()


class FlatFlowEngine(FlowEngine):
    """:class:`FlowEngine` with the moving flows of all ops in one set of arrays (see the module doc)."""

    _max_min = staticmethod(max_min_rates_compacting)
    compiled_solve = True  # solve and sweep on fairshare_core where it is built (the same floats; False: numpy)

    def __init__(self, network: FabricNetwork, params: FabricParams = FabricParams(),
                 sends: StepSends | None = None) -> None:
        if params.standing_queues:
            raise ValueError("standing queues run on the reference FlowEngine (engine_for chooses)")
        super().__init__(network, params, sends)
        self.changed: set[int] = set()  # ids of the ops whose step or moving flows changed (the player clears it)
        self._dirty = True  # an op started, left, or changed phase: lay the arrays out again
        self._waiting: list[FabricOp] = []  # ops paying a step's latency
        self._flowing: list[FabricOp] = []  # ops moving flows, in the order of self.ops (their slices in order)
        self._halted: list[FabricOp] = []  # done, or in a step with nothing to move and no latency: ends now
        self._compiled = MovingRates(self.capacity, params.flow_contention) \
            if MovingRates is not None and self.compiled_solve else None
        self._sweep = self._compiled is not None and move_flows is not None
        self.solves = 0  # max-min solves run (the memo's misses)
        self._left = np.zeros(0)
        self._active = np.zeros(0, dtype=bool)
        self._done_below = np.zeros(0)
        self._routes = np.zeros(0, dtype=np.int64)
        self._starts = np.zeros(0, dtype=np.int64)
        self._counts = np.zeros(0, dtype=np.int64)
        self._key_steps: tuple[int, ...] = ()
        self._rate = np.zeros(0)
        self._rated = False  # self._rate holds the rates of the current moving flows

    # ---- ops ----------------------------------------------------------------------------------------
    def start(self, steps: tuple[StepFlows, ...]) -> FabricOp:
        op = _FlatOp(steps)
        op.next_step()
        self.ops.append(op)
        self._changed(op)
        return op

    def remove(self, op: FabricOp) -> None:
        self.ops.remove(op)
        self._dirty = True

    def _changed(self, op: FabricOp) -> None:
        self.changed.add(id(op))
        self._dirty = True

    def _enter_next_step(self, op: FabricOp) -> None:
        op.next_step()
        self._changed(op)

    def busy_ranks(self, op: FabricOp) -> set[int] | None:
        """As :meth:`FlowEngine.busy_ranks`. Within a step the flows still moving only shrink, and the ranks
        busy are those of the moving flows once they moved (before, of the flows above the done threshold,
        which differ only if a flow is below it - and then the next move drops it from the count): the step
        and the count of moving flows say when to look again."""
        if op.done:
            return set()
        if op.step < len(op.steps) - 1 or op.latency_ns > 0:
            return None
        assert isinstance(op, _FlatOp)
        key = (op.step, op.active_count)
        if op.busy_key != key:
            s = op.steps[op.step]
            left = s.moving & (op.left > s.done_below)
            op.busy = set(s.src[left].tolist()) | set(s.dst[left].tolist())
            op.busy_key = key
        return op.busy

    # ---- the flat arrays --------------------------------------------------------------------------------
    def _lay_out(self) -> None:
        """Sort the ops into waiting, flowing and halted, and the flowing ops' flows into one set of arrays
        (each op's ``left`` and ``active`` then views into them, updated in place)."""
        self._waiting, self._flowing, self._halted = [], [], []
        for op in self.ops:
            if op.done:
                self._halted.append(op)
            elif op.latency_ns > 0:
                self._waiting.append(op)
            elif op.active_count:
                self._flowing.append(op)
            else:
                self._halted.append(op)
        flowing = self._flowing
        if flowing:
            steps = [op.steps[op.step] for op in flowing]
            lengths = np.array([len(op.left) for op in flowing], dtype=np.int64)
            self._left = np.concatenate([op.left for op in flowing])  # a copy: the steps' arrays stay unwritten
            self._active = np.concatenate([op.active for op in flowing])
            self._routes = np.concatenate([s.routes for s in steps])
            self._done_below = np.repeat(np.array([s.done_below for s in steps]), lengths)
            ends = np.cumsum(lengths)
            self._starts = ends - lengths
            self._counts = np.array([op.active_count for op in flowing], dtype=np.int64)
            self._key_steps = tuple(map(id, steps))
            for op, a, b in zip(flowing, self._starts.tolist(), ends.tolist()):
                op.left = self._left[a:b]
                op.active = self._active[a:b]
        self._dirty = False
        self._rated = False

    def _rate_flows(self) -> None:
        """The moving flows' max-min rates (0 for the flows that ended), memoised as the reference does: on
        the steps in flight and which of their flows move; solved on the same sorted routes (in one compiled
        call where :mod:`astra_adapter.fabric.fairshare_core` is built: the same floats)."""
        key = (self._key_steps, self._active.tobytes())
        rate = self._moving_rates.get(key)
        if rate is None:
            self.solves += 1
            if self._compiled is not None:  # the same operations, in one compiled call
                ptr, res, w = self._route_table(len(self.network.routes) - 1)
                rate = self._compiled.rates(self._routes, self._active.view(np.uint8), ptr, res, w)
            else:
                moving_routes = self._routes[self._active]
                unique, per_flow = self._solve(np.sort(moving_routes))
                rate = np.zeros(len(self._active))
                rate[self._active] = per_flow[np.searchsorted(unique, moving_routes)]
            if len(self._moving_rates) >= _MEMO_LIMIT:
                self._moving_rates.clear()
            self._moving_rates[key] = rate
        self._rate = rate
        self._rated = True

    # ---- time -------------------------------------------------------------------------------------------
    def horizon_ns(self) -> float:
        if self._dirty:
            self._lay_out()
        if self._flowing and not self._rated:
            self._rate_flows()  # also before a halt: the advance by 0 that follows moves the flows by 0
        if self._halted:
            return 0.0
        best = min((op.latency_ns for op in self._waiting), default=float("inf"))
        if self._flowing:
            active = self._active
            best = min(best, earliest_end_ns(self._left, self._rate, active.view(np.uint8)) if self._sweep else
                       float(np.min(self._left[active] / self._rate[active])))
        return best

    def advance(self, dt_ns: float) -> None:
        waiting, flowing, halted = self._waiting, self._flowing, self._halted
        for op in waiting:
            op.latency_ns -= dt_ns
            if op.latency_ns <= 1e-6:
                op.latency_ns = 0.0
                self._changed(op)
                if not op.active_count:
                    self._enter_next_step(op)
        for op in halted:
            if not op.done:
                self._enter_next_step(op)
        if not flowing:
            return
        left, active = self._left, self._active
        if self._sweep:  # the same operations in one compiled pass
            counts = move_flows(left, self._rate, active.view(np.uint8), self._done_below, self._starts, dt_ns)
        else:
            np.subtract(left, self._rate * dt_ns, out=left)
            np.logical_and(active, left > self._done_below, out=active)
            counts = np.add.reduceat(active, self._starts, dtype=np.int64)
        moved = np.flatnonzero(counts != self._counts)
        if not len(moved):
            return
        self._counts = counts
        self._rated = False
        for i in moved.tolist():
            op = flowing[i]
            op.active_count = int(counts[i])
            self.changed.add(id(op))
            if not op.active_count:
                self._enter_next_step(op)


def engine_for(network: FabricNetwork, params: FabricParams = FabricParams(),
               sends: StepSends | None = None) -> FlowEngine:
    """The engine a play runs on: the flat one, or the reference where standing queues are modelled."""
    if params.standing_queues:
        return FlowEngine(network, params, sends)
    return FlatFlowEngine(network, params, sends)
