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

Standing queues (``FabricParams.standing_queues``): a step entering pays the wait behind the queues of the
flows in flight (:mod:`astra_adapter.fabric.queues`), read as the reference reads them - mid-advance, in the
order of ``ops``: the ops before the entering one as they are after this advance, the ops after it as they
were before. So with queues an advance walks the ops whose phase changes in that order, and each wait is built
on one view of the flat arrays (bytes left and moving flags before or after the advance, split at the entering
op, with the few ops that started moving in this advance inserted at their places): the same max-min solve
of the same sorted routes, the same per-resource sums in the same order, the same queue arithmetic
(:meth:`StandingQueues.load_on`, :meth:`StandingQueues.queued_on`), so the same floats.

All of this holds with the rate solve in numpy, or compiled as one solve (``by_component = False``). Where
:mod:`astra_adapter.fabric.fairshare_core` is built the flat engine by default solves per connected component of
the moving flows and only the components that changed (issue #36 item 6): the same max-min rates, summed in
another order, so times agree with the reference's to a relative 1e-9 (``tests/test_fabric_rates_compiled.py``),
not bit for bit. Without standing queues that solve keeps its state between events
(:class:`~astra_adapter.fabric.fairshare_core.LiveRates`: the moving flows counted per route at each lay-out,
each flow uncounted by the move that ends it, a solve walking only from the links of the routes that changed),
the same floats as the per-call solve (``incremental = False``), the solve no longer walking every flow in
flight (the sweeps still do) - where it fills by rounds (``level_fill = False``). By default it fills by levels
(:mod:`astra_adapter.fabric.fairshare_core`'s fairshare_levels.pxi, reference
:func:`~astra_adapter.fabric.fairshare.max_min_levels`): after flows end, only the routes at or above the level of
the first that ended, reachable from them, are filled again, bit for bit what a fill from scratch gives; the same
rates as by rounds to a relative ~1e-14. On that solve each op's flows also stay in a slot of the arrays between events
(:mod:`astra_adapter.fabric.flat_slots`, ``slots``): a lay-out places only the ops that changed, counting or
uncounting only their flows per route, instead of concatenating every flowing op's arrays and counting every
flow again (``slots = False``) - the same floats. With HTB's credit (``FabricParams.htb_credit``) the solve is
told the capacities as the buckets' modes change them (``LiveRates.set_capacity``: the components holding such a
link solved again) and all of the above holds (``tests/test_fabric_credit.py``).
"""

from __future__ import annotations

import numpy as np

from astra_adapter.fabric.chain_flows import ChainFlowEngine
from astra_adapter.fabric.fairshare import (FlowEvents, LiveRates, MovingRates, busy_ranks_of, earliest_end_ns,
                                            max_min_rates_compacting, move_flows)
from astra_adapter.fabric.flat_queues import OnQueues
from astra_adapter.fabric.flat_slots import FlowSlots, OnSlots
from astra_adapter.fabric.flows import _MEMO_LIMIT, FabricOp, FabricParams, FlowEngine, StepFlows, StepSends
from astra_adapter.fabric.network import FabricNetwork


def busy_arrays(step: StepFlows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A step's flows' ranks as int64 and their moving flags as bytes: what the compiled
    :func:`astra_adapter.fabric.fairshare_core.busy_ranks_of` reads (kept on the step, whose arrays are never
    written; its slot ``compiled_busy``, unset until asked)."""
    arrays = getattr(step, "compiled_busy", None)
    if arrays is None:
        arrays = step.compiled_busy = (np.asarray(step.src, dtype=np.int64), np.asarray(step.dst, dtype=np.int64),
                                      step.moving.view(np.uint8))
    return arrays


class _FlatOp(FabricOp):
    """An op in flight with the ranks busy in its last step memoised (per step and count of moving flows), and
    where its flows sit in the kept arrays (:mod:`astra_adapter.fabric.flat_slots`)."""

    __slots__ = ("busy_key", "busy", "slot", "flowing", "placed_step")

    def __init__(self, steps: tuple[StepFlows, ...]) -> None:
        super().__init__(steps)
        self.busy_key: tuple[int, int] | None = None
        self.busy: set[int] = set()
        self.slot = -1  # its slot in FlowSlots (-1: none)
        self.flowing = False  # its flows are moving in its slot
        self.placed_step = -1  # the step its slot holds


class FlatFlowEngine(OnSlots, OnQueues, FlowEngine):
    """:class:`FlowEngine` with the moving flows of all ops in one set of arrays (see the module doc)."""

    _max_min = staticmethod(max_min_rates_compacting)
    compiled_solve = True  # solve and sweep on fairshare_core where it is built (False: numpy, the reference's floats)
    by_component = True  # the compiled solve per connected component, incremental (rates to ~1e-12 relative of the
    # one solve of every flow; False: that one solve, compiled, the same floats) - see fairshare_core
    incremental = True  # per component, with the moving routes kept between events (fairshare_core.LiveRates: the
    # same floats as MovingRates per component; False: MovingRates, every moving flow walked at every solve)
    slots = True  # with the incremental solve, each op's flows kept in a slot of the arrays between events
    # (flat_slots.FlowSlots: the same floats; False: every flowing op's arrays concatenated again at each lay-out)
    listed = True  # with slots, the sweeps read each slot's list of its moving flows (the same floats; False: every
    # flow of each slot with a flow moving, its flag tested)
    compiled_loop = True  # with listed slots, the player's events that are only a flow's end inside a step played in
    # C (fairshare_core.FlowEvents, flow_events: the same floats; False: every event through the Python loop)
    level_fill = True  # the incremental solve filling by levels (fairshare_levels.pxi: after flows end only the
    # routes at or above the first ended one's level refilled; rates to ~1e-14 relative of the fill by rounds;
    # False: by rounds, MovingRates' floats per component)
    add_fill = True  # by levels, after flows start too only the region above where they change the fill refilled
    # (fairshare_levels_add.pxi: the same floats; False: the components they join filled from scratch)

    def __init__(self, network: FabricNetwork, params: FabricParams = FabricParams(),
                 sends: StepSends | None = None) -> None:
        if params.ring_chains:
            raise ValueError("ring chains run on the reference FlowEngine (engine_for chooses)")
        super().__init__(network, params, sends)
        self.changed: set[int] = set()  # ids of the ops whose step or moving flows changed (the player clears it)
        self._dirty = True  # an op started, left, or changed phase: lay the arrays out again
        self._waiting: list[FabricOp] = []  # ops paying a step's latency
        self._flowing: list[FabricOp] = []  # ops moving flows, in the order of self.ops (their slices in order)
        self._halted: list[FabricOp] = []  # done, or in a step with nothing to move and no latency: ends now
        # the incremental solve where it applies (not with standing queues: their reads want per-flow rates); with
        # HTB's credit it is told the capacities as the buckets' modes change (_capacity_changed)
        self._live = LiveRates(self.capacity, params.flow_contention, self.level_fill) \
            if LiveRates is not None and self.compiled_solve and self.by_component and self.incremental \
            and self.queues is None else None
        if self._live is not None:
            self._live.add_fill = self.level_fill and self.add_fill
        if params.end_precision > 0 and self._live is not None and self.slots and self.listed:
            self._live.end_precision = params.end_precision  # (elsewhere - standing queues - every end exact)
        self._compiled = self._live if self._live is not None else \
            MovingRates(self.capacity, params.flow_contention, self.by_component) \
            if MovingRates is not None and self.compiled_solve else None
        self._sweep = self._compiled is not None and move_flows is not None
        network_routes = network.routes
        self._events = FlowEvents(self._live, network.world_size) if FlowEvents is not None and \
            self._live is not None and self.slots and self.listed and self.compiled_loop else None
        self._slots = FlowSlots(self._live, lambda: len(network_routes), self.listed, self._events) \
            if self._live is not None and self.slots else None
        self._pending: dict[int, FabricOp] = {}  # with slots: the ops changed since the last lay-out, by id
        self._waits: dict[int, FabricOp] = {}  # with slots: the ops paying a step's latency
        self._halts: dict[int, FabricOp] = {}  # with slots: the ops done, or with nothing to move and no latency
        self.solves = 0  # max-min solves run (the memo's misses)
        self.events = 0  # advances (the player's events), in Python or in C (flow_events)
        self._bound_ptr: np.ndarray | None = None  # the route table bound to the incremental solve (LiveRates)
        self._rate_key: tuple = ()  # the memo key of the rates in self._rate
        self._left = np.zeros(0)
        self._active = np.zeros(0, dtype=bool)
        self._done_below = np.zeros(0)
        self._routes = np.zeros(0, dtype=np.int64)
        self._starts = np.zeros(0, dtype=np.int64)
        self._counts = np.zeros(0, dtype=np.int64)
        self._key_steps: tuple[int, ...] = ()
        self._rate = np.zeros(0)
        self._rated = False  # self._rate holds the rates of the current moving flows
        self._pos: dict[int, int] = {}  # id(op) -> its index in self.ops (at the last lay-out)
        self._cuts = np.zeros(1, dtype=np.int64)  # per ops index + 1: flat index of the first flow of a later op
        self._queue_flat: tuple[np.ndarray, ...] | None = None  # the flowing flows' queue entries (lazy)
        self._queue_steps: dict[tuple[int, int], tuple[np.ndarray, ...]] = {}  # (id(steps), k) -> _queue_step
        self._flow_steps: list[tuple[tuple[StepFlows, ...], int]] = []  # the flowing ops' (steps, step) laid out

    @property
    def plays_events(self) -> bool:
        """Whether it plays the player's plain events itself, compiled (:meth:`OnSlots.flow_events`)."""
        return self._events is not None

    # ---- ops ----------------------------------------------------------------------------------------
    def start(self, steps: tuple[StepFlows, ...]) -> FabricOp:
        op = _FlatOp(steps)
        op.next_step()
        if self.queues is not None and not op.done and op.active_count:
            if self._dirty:
                self._lay_out()
            op.latency_ns += self._queue_wait_ns(op, self._left, self._active, [])  # ``op`` not yet in ops
        self.ops.append(op)
        self._changed(op)
        return op

    def remove(self, op: FabricOp) -> None:
        self.ops.remove(op)
        self._dirty = True
        if self._slots is not None:
            for where in (self._pending, self._waits, self._halts):
                where.pop(id(op), None)
            self._slots.release(op)

    def _changed(self, op: FabricOp) -> None:
        self.changed.add(id(op))
        self._dirty = True
        if self._slots is not None:
            self._pending[id(op)] = op

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
            if busy_ranks_of is not None and s.ranks is None:  # (compiled: the same set)
                src, dst, moving = busy_arrays(s)
                op.busy = busy_ranks_of(src, dst, moving, op.left, s.done_below)
            else:
                op.busy = s.busy_of(s.moving & (op.left > s.done_below))
            op.busy_key = key
        return op.busy

    # ---- the flat arrays --------------------------------------------------------------------------------
    def _lay_out(self) -> None:
        """Sort the ops into waiting, flowing and halted, and the flowing ops' flows into one set of arrays
        (each op's ``left`` and ``active`` then views into them, updated in place). With slots: only the ops
        changed since the last lay-out placed again, each op's flows in its slot."""
        if self._slots is not None:
            self._place_changed()
            return
        self._waiting, self._flowing, self._halted = [], [], []
        self._pos = {id(op): k for k, op in enumerate(self.ops)}
        self._queue_flat = None
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
            self._flow_steps = [(op.steps, op.step) for op in flowing]  # as laid out (ops move on mid-advance)
            for op, a, b in zip(flowing, self._starts.tolist(), ends.tolist()):
                op.left = self._left[a:b]
                op.active = self._active[a:b]
        else:  # nothing flows: empty arrays (a queue's view reads them)
            self._left, self._active, self._done_below = np.zeros(0), np.zeros(0, dtype=bool), np.zeros(0)
            self._routes, self._starts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
            self._counts, self._key_steps, self._flow_steps = np.zeros(0, dtype=np.int64), (), []
        if self.queues is not None:  # per ops index k: the flat index of the first flow of a flowing op after k
            at = np.array([self._pos[id(op)] for op in flowing], dtype=np.int64)
            ends = np.append(self._starts, len(self._left))
            self._cuts = ends[np.searchsorted(at, np.arange(len(self.ops)), side="right")]
        if self._live is not None:  # the moving flows now, counted per route
            self._live.set_moving(self._routes, self._active.view(np.uint8), len(self.network.routes))
        self._dirty = False
        self._rated = False

    def _rate_flows(self) -> None:
        """The moving flows' max-min rates (0 for the flows that ended), memoised as the reference does: on
        the steps in flight and which of their flows move; solved on the same sorted routes (in one compiled
        call where :mod:`astra_adapter.fabric.fairshare_core` is built: per connected component and only the
        components that changed, the same rates to a relative ~1e-12 - or, ``by_component`` False, the same
        floats). Where the incremental solve runs: the components that changed solved, no memo of the rates (each
        rate is the float a memo would have kept, and keeping the rest costs less than a memo's key); with the
        credit their load is kept per (modes, moving routes, their flows) (:meth:`_kept_load`)."""
        if self._live is not None:
            self.solves += 1
            self._bind_table()
            self._live.solve_bound()  # on the table bound (no buffers taken per call)
            if self.credit is not None:  # the load: a function of the routes, their flows and the modes
                unique, counts, rates = self._live.moving_routes()
                self._credit_load = self._kept_load((self._mode_key, unique.tobytes(), counts.tobytes()), lambda:
                                                    self._route_load(unique, counts, rates)) if len(unique) else None
            self._rated = True
            return
        key = self._rate_key = (self._mode_key, self._key_steps, self._active.tobytes())
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

    def _bind_table(self) -> None:
        """The route table bound to the incremental solve again where routes were added since."""
        ptr = self._route_ptr
        if len(ptr) < len(self.network.routes) + 1 or ptr is not self._bound_ptr:
            ptr, res, w = self._route_table(len(self.network.routes) - 1)
            self._live.bind_table(ptr, res, w)
            self._bound_ptr = ptr

    # ---- time -------------------------------------------------------------------------------------------
    def horizon_ns(self) -> float:
        if self._slots is not None:
            return self._slots_horizon_ns()
        if self._dirty:
            self._lay_out()
        if self._flowing and not self._rated:
            self._rate_flows()  # also before a halt: the advance by 0 that follows moves the flows by 0
        credit_ns = self._credit_ns(bool(self._flowing)) if self.credit is not None else float("inf")
        if self._halted:
            return 0.0
        best = min(min((op.latency_ns for op in self._waiting), default=float("inf")), credit_ns)
        if self._flowing:
            active = self._active
            if self._live is not None:
                return min(best, self._live.earliest_end(self._left, active.view(np.uint8), self._routes))
            best = min(best, earliest_end_ns(self._left, self._rate, active.view(np.uint8)) if self._sweep else
                       float(np.min(self._left[active] / self._rate[active])))
        return best

    def _credit_ns(self, flowing: bool) -> float:
        """With the credit: the moving flows' load, summed as the reference sums it (kept for the advance), and
        the time until a bucket runs dry under it."""
        assert self.credit is not None
        if not flowing:
            self._credit_load = None
        elif self._live is None:  # a function of the moving set and the modes, as the rates
            self._credit_load = self._kept_load(self._rate_key, lambda: self._load_of(self._routes[self._active],
                                                                                      self._rate[self._active]))
        # (the incremental solve took the load with the rates: _rate_flows)
        return self.credit.horizon_ns(self._credit_load)

    def advance(self, dt_ns: float) -> None:
        self.events += 1
        if self.queues is not None:
            self._advance_in_order(dt_ns)
        elif self._slots is not None:
            self._slots_advance(dt_ns)
        else:
            self._advance_flows(dt_ns)
        self._credit_advance(dt_ns)

    def _capacity_changed(self) -> None:
        self._rated = False
        if self._compiled is not None:
            self._compiled.set_capacity(self.capacity)

    def _run_down(self, waiting, halted, dt_ns: float) -> None:
        """The ops paying a step's latency ``dt_ns`` on (on to their flows, or their next step, when it is paid),
        and the halted ops on to their next step."""
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

    def _advance_flows(self, dt_ns: float) -> None:
        flowing = self._flowing
        self._run_down(self._waiting, self._halted, dt_ns)
        if not flowing:
            return
        left, active = self._left, self._active
        if self._live is not None:  # the same operations, at each flow's route's rate, the ended flows uncounted
            moved = self._live.move(left, active.view(np.uint8), self._done_below, self._starts, self._routes,
                                    self._counts, dt_ns)
            if moved:
                self._rated = False
                changed = self.changed
                for i, count in moved:
                    op = flowing[i]
                    op.active_count = count
                    changed.add(id(op))
                    if not count:
                        self._enter_next_step(op)
            return
        if self._sweep:  # the same operations in one compiled pass
            counts = move_flows(left, self._rate, active.view(np.uint8), self._done_below, self._starts, dt_ns)
        else:
            np.subtract(left, self._rate * dt_ns, out=left)
            np.logical_and(active, left > self._done_below, out=active)
            counts = np.add.reduceat(active, self._starts, dtype=np.int64)
        for op in self._take_counts(counts, flowing):
            self._enter_next_step(op)

    def _take_counts(self, counts: np.ndarray, flowing: list[FabricOp]) -> list[FabricOp]:
        """Record each flowing op's count of moving flows after a move; the ops whose last flow just ended."""
        moved = np.flatnonzero(counts != self._counts)
        if not len(moved):
            return []
        self._counts = counts
        self._rated = False
        emptied = []
        for i in moved.tolist():
            op = flowing[i]
            op.active_count = int(counts[i])
            self.changed.add(id(op))
            if not op.active_count:
                emptied.append(op)
        return emptied

    # ---- standing queues ----------------------------------------------------------------------------------
    def _advance_in_order(self, dt_ns: float) -> None:
        """:meth:`advance` with the steps entered in the order of ``ops``, each wait read on the state the
        reference reads (see the module doc)."""
        waiting, flowing, halted = self._waiting, self._flowing, self._halted
        pos = self._pos
        turns: list[tuple[int, int, FabricOp]] = []  # (ops index, 0: moves now / 1: enters its next step, op)
        for op in waiting:
            op.latency_ns -= dt_ns
            if op.latency_ns <= 1e-6:
                op.latency_ns = 0.0
                self._changed(op)
                turns.append((pos[id(op)], 0 if op.active_count else 1, op))
        for op in halted:
            if not op.done:
                turns.append((pos[id(op)], 1, op))
        left, active = self._left, self._active
        new_left, new_active = left, active
        if flowing:
            new_left = left - self._rate * dt_ns
            new_active = active & (new_left > self._done_below)
            counts = np.add.reduceat(new_active, self._starts, dtype=np.int64)
            turns.extend((pos[id(op)], 1, op) for op in self._take_counts(counts, flowing))
        extras: list[tuple[int, FabricOp, bool]] = []  # ops moving outside the flat arrays, in ops order
        cuts = self._cuts
        for k, kind, op in sorted(turns, key=lambda t: t[0]):
            if kind == 1:
                op.next_step()
                self._changed(op)
                if not op.done and op.active_count:
                    split = int(cuts[k])  # the flowing ops up to ``op``: after this advance; the rest: before
                    view_left = np.concatenate((new_left[:split], left[split:]))
                    view_active = np.concatenate((new_active[:split], active[split:]))
                    mine = [(split, op, True)] if op.latency_ns <= 0 else []
                    op.latency_ns += self._queue_wait_ns(op, view_left, view_active, extras + mine)
            if not op.done and op.latency_ns <= 0 and op.active_count:
                extras.append((int(cuts[k]), op, False))
        if flowing:
            np.copyto(left, new_left)
            np.copyto(active, new_active)


def engine_for(network: FabricNetwork, params: FabricParams = FabricParams(),
               sends: StepSends | None = None) -> FlowEngine:
    """The engine a play runs on: the flat one (standing queues or not), or where ring chains are modelled (a
    ring's connections each on their own step: state the flat arrays do not keep) the reference's with its known
    zeros skipped (:class:`astra_adapter.fabric.chain_flows.ChainFlowEngine`)."""
    if params.ring_chains:
        return ChainFlowEngine(network, params, sends)
    return FlatFlowEngine(network, params, sends)
