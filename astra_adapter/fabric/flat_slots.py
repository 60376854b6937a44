"""The flat engine's flows kept in place between events (pure): each op moving flows holds a slice - a *slot* - of
one set of arrays (bytes left, moving flags, routes, done thresholds) from its first step that moves until it
leaves the engine, so an op starting, changing step or leaving writes its own slice, where the rebuilt lay-out
(``FlatFlowEngine.slots = False``) concatenated every flowing op's arrays again (issue #36 item 6).

A slot keeps its place while its op pays a step's latency (its flags all 0: none of its flows moves, and the
sweeps step over it), and the op's next step that moves takes the same slot where it has as many flows (a ring's
steps all have) or a new one at the end. A slot whose op left is dead until the arrays are compacted (when the
dead flows outnumber the others). The moving flows are counted on their routes in the incremental solve
(:class:`~astra_adapter.fabric.fairshare_core.LiveRates`) as a slot takes them and uncounted as it gives them
back, so a solve sees the counts per route a lay-out's recount (``LiveRates.set_moving``) gives; the sweeps
(``LiveRates.earliest_end``, ``LiveRates.move``) run over the arrays as before, every slot an op's (an idle or
dead slot moves nothing and counts 0). The per-flow arithmetic, the set of moving flows and the counts per route
are the rebuilt lay-out's, so every float is the same (``tests/test_fabric_slots.py``).

The arrays are bound to ``LiveRates`` whenever their views change (``LiveRates.bind_slots``), so a sweep takes
no array per call (a buffer per array per call cost a few us an event). Each slot also lists its moving flows
(their indices, ascending: the first ``counts[k]`` entries of its span of ``listed``), kept by the move that ends
them, so the sweeps (``LiveRates.earliest_end_listed``, ``LiveRates.move_listed``) read only the flows that move:
late in a ring step its slot still spans every flow while the last few, slowed on links ECMP made collide, move
(256 ranks, draw 0: 566 moving flows an event on average, in slots spanning 1216). The same flows in the same
order: the same floats.

On these slots the player's plain events - flows ending inside steps that go on, no member leaving, no compute end
due - are played in C (:meth:`OnSlots.flow_events`, ``fairshare_core.FlowEvents``: the solve, the earliest end, the
move and the clock, the same calls in the same order), the first other event handed back with its move done; each
slot keeps for it whether its op is on its last step, each flow's ranks and its count of busy ranks. A coflow ring
step's end whose next step is the same step object, with no latency and not the op's last, is entered there too
(``FlowEvents._enter``: the slot's bytes, flags, list and count reset from its step's, the same recounts in the same
order; the op's step written back): each slot keeps for it how many such entries are left (:func:`repeats_of`) and
each flow's step bytes and moving flag.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from astra_adapter.fabric.flows import FabricOp

_MIN_COMPACT = 4096  # dead flows kept at least up to this many before the arrays are compacted
_UNCOUNTED = 1 << 62  # a slot's busy ranks not counted yet (FlowEvents: its first move in C goes on in Python)


class FlowSlots:
    """The flowing ops' flows, a slot per op (see the module doc). The arrays the sweeps take - ``left``,
    ``active`` (the moving flags' uint8 view), ``done_below``, ``routes``, ``starts`` (per slot its first flow),
    ``counts`` (per slot its moving flows) - are views exactly as long as the slots in use; ``ops``: per slot its
    op (None: dead); ``flowing``: how many ops move flows."""

    def __init__(self, live, num_route_ids: Callable[[], int], listed: bool = True, events=None) -> None:
        self._live = live  # LiveRates: counts the moving flows per route
        self._events = events  # FlowEvents: the per-event loop compiled (None: off), bound to the slots too
        self.listed_sweeps = listed  # the sweeps read each slot's moving flows from its list (``listed``)
        self._num_route_ids = num_route_ids  # route ids so far (the network memoises routes as ops are planned)
        self.ops: list[FabricOp | None] = []
        self._len: list[int] = []  # per slot its flows
        self._held: list = []  # per slot the step (StepFlows) whose routes, threshold and ranks it holds
        self._used = 0  # flows in slots (moving, idle or dead)
        self._dead = 0  # flows in dead slots
        self._dead_slots = 0
        self.flowing = 0
        self._left = self._done = np.zeros(0)
        self._flags = np.zeros(0, dtype=bool)
        self._routes = self._starts = self._counts = self._listed = np.zeros(0, dtype=np.int64)
        self._last = np.zeros(0, dtype=np.uint8)  # per slot: its op is on its last step (FlowEvents.bind)
        self._begun = np.zeros(0)  # per slot: when its step's flows started moving (LiveRates.end_precision)
        self._src = self._dst = self._busy = np.zeros(0, dtype=np.int64)  # per flow its ranks; per slot its busy ones
        self._again = np.zeros(0, dtype=np.int64)  # per slot: entries of the same step left to FlowEvents (repeats_of)
        self._init, self._init_flags = np.zeros(0), np.zeros(0, dtype=np.uint8)  # per flow: its step's bytes, flag
        self._repeats: dict[int, tuple[tuple, list[int]]] = {}  # id(an op's steps) -> (steps, repeats_of(steps))
        self._compact(1024, 64)

    def _compact(self, cap: int, slot_cap: int) -> None:
        """New arrays of ``cap`` flows and ``slot_cap`` slots holding the slots of ops, in their order (the dead
        dropped; each moving op's ``left`` and ``active`` viewing its new place)."""
        left, flags, done = np.zeros(cap), np.zeros(cap, dtype=bool), np.zeros(cap)
        routes, starts, counts, listed = (np.zeros(n, dtype=np.int64) for n in (cap, slot_cap, slot_cap, cap))
        last, begun = np.zeros(slot_cap, dtype=np.uint8), np.zeros(slot_cap)
        src, dst, busy, again = (np.zeros(n, dtype=np.int64) for n in (cap, cap, slot_cap, slot_cap))
        init, init_flags = np.zeros(cap), np.zeros(cap, dtype=np.uint8)
        ops: list[FabricOp | None] = []
        lens: list[int] = []
        held: list = []
        at = 0
        for k, op in enumerate(self.ops):
            if op is None:
                continue
            n, a = self._len[k], int(self._starts[k])
            left[at:at + n], flags[at:at + n] = self._left[a:a + n], self._flags[a:a + n]
            done[at:at + n], routes[at:at + n] = self._done[a:a + n], self._routes[a:a + n]
            starts[len(ops)], counts[len(ops)], last[len(ops)] = at, self._counts[k], self._last[k]
            begun[len(ops)] = self._begun[k]
            src[at:at + n], dst[at:at + n], busy[len(ops)] = self._src[a:a + n], self._dst[a:a + n], self._busy[k]
            init[at:at + n], init_flags[at:at + n], again[len(ops)] = \
                self._init[a:a + n], self._init_flags[a:a + n], self._again[k]
            c = int(self._counts[k])
            listed[at:at + c] = self._listed[a:a + c] - a + at
            op.slot = len(ops)  # type: ignore[attr-defined]
            if op.left.base is self._left:  # moving in its slot (not yet on to a step the slots do not hold)
                op.left, op.active = left[at:at + n], flags[at:at + n]
            ops.append(op)
            lens.append(n)
            held.append(self._held[k])
            at += n
        self._left, self._flags, self._done, self._routes = left, flags, done, routes
        self._starts, self._counts, self.ops, self._len, self._held = starts, counts, ops, lens, held
        self._listed, self._last, self._begun = listed, last, begun
        self._src, self._dst, self._busy = src, dst, busy
        self._again, self._init, self._init_flags = again, init, init_flags
        self._used, self._dead, self._dead_slots = at, 0, 0
        self._views()

    def _views(self) -> None:
        self._flags_u8 = self._flags.view(np.uint8)  # (the moving flags as LiveRates reads them: one view kept)
        n, s = self._used, len(self.ops)
        self.left, self.active = self._left[:n], self._flags[:n].view(np.uint8)
        self.done_below, self.routes = self._done[:n], self._routes[:n]
        self.starts, self.counts = self._starts[:s], self._counts[:s]
        self.listed = self._listed[:n]
        if self.listed_sweeps:  # the sweeps then take these arrays from LiveRates, not one buffer each per call
            self._live.bind_slots(self.left, self.active, self.done_below, self.routes, self.starts, self.counts,
                                  self.listed)
            self._live.bind_begun(self._begun[:s])
        if self._events is not None:
            self._events.bind(self._last[:s], self.ops, self._src[:n], self._dst[:n], self._busy[:s],
                              self._again[:s], self._init[:n], self._init_flags[:n])

    def place(self, op: FabricOp) -> None:
        """``op``'s step (just entered; its flows move now) into its slot - the one it holds where that has as
        many flows, else a new one at the end; ``op.left`` and ``op.active`` become views into it, and its
        moving flows are counted on their routes."""
        self.idle(op)
        s = op.steps[op.step]
        n = len(s.routes)
        k = op.slot  # type: ignore[attr-defined]
        if k >= 0 and self._len[k] != n:
            self.release(op)
            k = -1
        if k < 0:
            if self._used + n > len(self._left) or len(self.ops) >= len(self._starts):
                self._compact(max(1024, 2 * (self._used - self._dead + n)),
                              max(64, 2 * (len(self.ops) - self._dead_slots + 1)))
            k = op.slot = len(self.ops)  # type: ignore[attr-defined]
            self._starts[k] = self._used
            self.ops.append(op)
            self._len.append(n)
            self._held.append(None)
            self._used += n
            self._views()
        a = int(self._starts[k])
        b = a + n
        self._left[a:b], self._flags[a:b] = op.left, op.active
        if self._held[k] is not s:  # (a ring's next step is most often the same step: these in place already)
            self._done[a:b], self._routes[a:b] = s.done_below, s.routes
            if self._events is not None:
                self._src[a:b], self._dst[a:b] = s.src, s.dst
                self._init[a:b], self._init_flags[a:b] = s.wire_bytes, s.moving
            self._held[k] = s
        self._counts[k] = op.active_count
        self._last[k] = op.step == len(op.steps) - 1
        self._begun[k] = self._live.now
        if self._events is not None:
            self._busy[k] = _UNCOUNTED
            hit = self._repeats.get(id(op.steps))
            if hit is None:  # (the steps kept with their entry: their id names no other tuple while it is here)
                hit = self._repeats[id(op.steps)] = (op.steps, repeats_of(op.steps))
            self._again[k] = hit[1][op.step]
        moving = self._flags[a:b].nonzero()[0]  # (np.flatnonzero's indices: a 1-d slice; its wrapper cost more)
        self._listed[a:a + len(moving)] = moving + a
        op.left, op.active = self._left[a:b], self._flags[a:b]
        op.flowing = True  # type: ignore[attr-defined]
        self.flowing += 1
        self._live.count_flows(self._routes, self._flags_u8, a, b, 1, self._num_route_ids())

    def idle(self, op: FabricOp) -> None:
        """``op`` moves no flow from now (it entered a step's latency, has nothing to move, ended, or leaves): any
        flow of its slot still moving is uncounted (none is where its last flow just ended)."""
        if not op.flowing:  # type: ignore[attr-defined]
            return
        op.flowing = False  # type: ignore[attr-defined]
        self.flowing -= 1
        k = op.slot  # type: ignore[attr-defined]
        if self._counts[k]:
            a = int(self._starts[k])
            b = a + self._len[k]
            self._live.count_flows(self._routes, self._flags_u8, a, b, -1, self._num_route_ids())
            self._flags[a:b] = False
            self._counts[k] = 0

    def release(self, op: FabricOp) -> None:
        """``op`` gives its slot up (it leaves the engine, or its next step has another number of flows)."""
        self.idle(op)
        k = op.slot  # type: ignore[attr-defined]
        if k < 0:
            return
        self.ops[k] = None
        self._dead += self._len[k]
        self._dead_slots += 1
        op.slot = -1  # type: ignore[attr-defined]
        if self._dead > _MIN_COMPACT and 2 * self._dead > self._used or \
                self._dead_slots > max(64, len(self.ops) - self._dead_slots):
            self._compact(max(1024, 2 * (self._used - self._dead)), len(self._starts))


def repeats_of(steps: tuple) -> list[int]:
    """Per step index ``j`` of an op's ``steps``: how many steps after it are that same coflow ring step
    (:mod:`astra_adapter.fabric.coflow`; the plans memoise identical steps), in a row, paying no latency and before
    the last step - those FlowEvents enters itself (the Python loop would enter each with nothing but the op placed
    again in its own slot: see fairshare_events.pxi). Lock-step steps are left to Python (they would enter the
    same way, bit for bit; kept to the coflow ring, the estimates' model, where its 330 k returns a 1024-rank play
    were: benchmarks/README.md)."""
    out = [0] * len(steps)
    for j in range(len(steps) - 3, -1, -1):  # (j + 1 must be before the last step, len(steps) - 1)
        s = steps[j]
        if steps[j + 1] is s and s.latency_ns <= 0 and s.ranks is not None:
            out[j] = out[j + 1] + 1
    return out


class OnSlots:
    """The flat engine's lay-out, horizon and advance on its slots (:class:`FlowSlots`; the engine's ``_slots``,
    with the incremental solve ``_live``): the ops changed since the last lay-out placed again, the others as
    they were - the same ops waiting, flowing and halted as the rebuilt lay-out sorts, the same minimum, the same
    moves. A mixin of :class:`astra_adapter.fabric.flat_flows.FlatFlowEngine`."""

    _slots: FlowSlots | None
    _live: Any  # fairshare_core.LiveRates
    _pending: dict[int, FabricOp]
    _waits: dict[int, FabricOp]
    _halts: dict[int, FabricOp]
    _dirty: bool
    _rated: bool
    _events: Any  # fairshare_core.FlowEvents (None: the per-event loop in Python)
    solves: int
    events: int
    _bind_table: Callable[[], None]
    changed: set[int]
    credit: Any  # credit.LinkCredit (None: off)
    _credit_ns: Callable[[bool], float]

    def _place_changed(self) -> None:
        """The ops changed since the last lay-out sorted into waiting, flowing (their flows into their slots: the
        moving ones counted per route) and halted - as :meth:`_lay_out` sorts every op."""
        slots, waits, halts = self._slots, self._waits, self._halts
        assert slots is not None
        for key, op in self._pending.items():
            waits.pop(key, None)
            halts.pop(key, None)
            if op.done or (op.latency_ns <= 0 and not op.active_count):
                slots.idle(op)
                halts[key] = op
            elif op.latency_ns > 0:
                slots.idle(op)
                waits[key] = op
            elif not op.flowing or op.placed_step != op.step:  # type: ignore[attr-defined]
                slots.place(op)
                op.placed_step = op.step  # type: ignore[attr-defined]
        self._pending.clear()
        self._dirty = False
        self._rated = False

    def _slots_horizon_ns(self) -> float:
        """:meth:`horizon_ns` on the slots: the same latencies and flows, the same minimum."""
        slots = self._slots
        assert slots is not None and self._live is not None
        if self._dirty:
            self._place_changed()
        if slots.flowing and not self._rated:
            self._rate_flows()
        credit_ns = self._credit_ns(bool(slots.flowing)) if self.credit is not None else float("inf")
        if self._halts:
            return 0.0
        best = min(min((op.latency_ns for op in self._waits.values()), default=float("inf")), credit_ns)
        if slots.flowing:
            if slots.listed_sweeps:
                return min(best, self._live.earliest_end_bound())
            return min(best, self._live.earliest_end_of(slots.left, slots.active, slots.routes, slots.starts,
                                                        slots.counts))
        return best

    def flow_events(self, t: float, t_heap: float) -> float | None:
        """The player's events from ``t`` (the next compute end at ``t_heap``) played in C while each is only a
        flow's end inside a step that goes on, or a coflow ring step's end entering the same step again
        (``FlowEvents.run``: the solve, the horizon, the move and the clock of this engine's horizon and advance and
        the player's loop, and the entry of :meth:`FlowSlots.place`, the same calls in the same order); the first
        event that is more than that with its move done here as :meth:`_slots_advance` does it. The clock after
        the last event played (the player's loop then takes the compute ends due), or None where none was played
        (a latency running, an op halted, HTB's credit, or nothing moves: the horizon's Python then, after the
        lay-out done here as the horizon does it first)."""
        events, slots = self._events, self._slots
        if events is None or self.credit is not None:
            return None
        if self._dirty:
            self._place_changed()
        if self._waits or self._halts or not slots.flowing:
            return None
        if not self._rated:
            self._bind_table()  # (the solve's own first step: _rate_flows)
        events.rated = self._rated
        out = events.run(t, t_heap)
        self._rated = events.rated
        self.solves += events.solves
        self.events += events.events
        events.solves = events.events = 0
        if out is None:
            return None
        t, moved = out
        if moved:  # the last event's move: the rest as _slots_advance
            self._moved(moved)
        return t

    def _slots_advance(self, dt_ns: float) -> None:
        """:meth:`advance` on the slots: the same latencies run down, the same flows moved."""
        slots = self._slots
        assert slots is not None and self._live is not None
        self._run_down(self._waits.values(), self._halts.values(), dt_ns)
        if not slots.flowing:
            self._live.now += dt_ns  # (a move keeps the clock: LiveRates.end_precision)
            return
        if slots.listed_sweeps:
            moved = self._live.move_bound(dt_ns)
        else:
            moved = self._live.move(slots.left, slots.active, slots.done_below, slots.starts, slots.routes,
                                    slots.counts, dt_ns)
        if moved:
            self._rated = False
            self._moved(moved)

    def _moved(self, moved: list[tuple[int, int]]) -> None:
        """After a move: each slot's op whose active flow count changed is marked, and one with none left goes
        on to its next step."""
        changed, of_slot = self.changed, self._slots.ops
        for i, count in moved:
            op = of_slot[i]
            assert op is not None
            op.active_count = count
            changed.add(id(op))
            if not count:
                self._enter_next_step(op)
