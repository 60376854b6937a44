"""The flow engine that plays ring chains fast (pure): :class:`FlowEngine`'s results bit for bit, with the work
whose answer is known skipped and the rate solve compiled.

With ring chains (:mod:`astra_adapter.fabric.chains`) and standing queues on, every chunk a ring's connection
starts and every step a lock-step op enters reads the queues the other ops' flows keep, mid-advance: the rates
of every flow moving (a max-min solve of that moment's moving set, rarely one seen before), each op's bytes
still to send, the load and queue on every resource, then each connection's wait along its path. Most of the
answer is not needed, and some of it is known without being computed:

- a wait is a sum along the connection's path of ``queued / rate``, and a queue stands only on a saturated
  resource (:meth:`StandingQueues.saturated`): where no resource on the paths of the connections that take a
  wait now is saturated, every wait is 0.0 (the reference adds ``0.0`` to a latency, or begins the chunk with
  a wait of ``0.0``), and the queues are not built;
- only the queues on those paths are read, so only the ops whose moving flows cross one of its saturated
  resources add to them: the others are left out of the queue sums (a resource's queue sums the same flows'
  terms in the same order, the others add nothing there);
- only the connections starting a chunk now, or whose next chunk's data has come in, take their wait (the
  reference computes every connection's and reads theirs); a path without a queue on it waits 0.0 (the same
  sum of zeros), the others sum the same terms with the same numpy call as the reference's
  :meth:`StandingQueues.chunk_waits_ns`;
- the player asks only the ops whose busy ranks may have changed (:attr:`ChainFlowEngine.changed`, as the flat
  engine keeps it), and a moving set's load and saturated resources are kept with its rates;
- a ring's per-event arithmetic runs compiled (:class:`CompiledRingOp`, ``fabric/chains_core.pyx``): its move
  and horizon, its chunk starts (which connections start, which take a wait, the start itself) and the bytes its
  senders hold, each one call on its per-connection arrays, held as typed views once
  (:class:`astra_adapter.fabric.chains_core.RingState`);
- a queue read whose paths no other op's moving flow crosses has no queue whatever the rates: answered 0.0
  before the moving set is solved (a read takes the set's rates only where another op's flow is on its paths);
  the flows each step moves on a resource are kept per (step, flows with a rate)
  (:meth:`StandingQueues.flows_on`), the chunk a ring's FIFO wait is reckoned with per plan;
- a queue read's load on every resource, its saturated resources and its queue sums run compiled
  (``chains_core.moving_load`` and ``queued_of``: :meth:`StandingQueues.load`, :meth:`StandingQueues.saturated`
  and :meth:`StandingQueues.queued_bytes`, the same terms added in the same order), on a step's arrays held as
  typed views once (``chains_core.StepEntries``, ``MovingEntries``); which other ops cross the paths read, and
  which of them a saturated resource there, is a test of sets of resources (kept with the moving entries);
- a ring's connection waits run compiled (``chains_core.ring_waits``: :func:`fifo_wait_ns` per connection, summed
  as ``np.sum`` does, and ``flows_on_of``: :meth:`StandingQueues.flows_on`), and so do a lock-step op's move
  (``lock_step_move``), a ring's busy ranks' masks and its standing bytes;
- a moving set's routes one after the other are kept per its steps, its moving flags are its memo key's bytes;
- the max-min solve on moving sets the memo has not seen runs compiled
  (:class:`astra_adapter.fabric.fairshare_core.MovingRates` as one solve of every moving flow, the same floats
  as the numpy solve) where it is built.

Each read is taken at the moment the reference takes it (the ops before in ``ops`` advanced, the ones after
not yet), so every time is the same float; ``tests/test_fabric_chain_engine.py`` compares the two span for
span on random job mixes.
"""

from __future__ import annotations

import numpy as np

from astra_adapter.fabric.chains import RingOp
from astra_adapter.fabric.fairshare import MovingRates

try:  # a ring's per-event work compiled, the same floats (built by the install step when it can be)
    from astra_adapter.fabric.chains_core import (MovingEntries, RingState, StepEntries, flows_on_of, lock_step_move,
                                                  moving_load, queued_of, ring_waits)
except ImportError:  # not built: RingOp's numpy methods run
    MovingEntries = RingState = StepEntries = flows_on_of = lock_step_move = moving_load = queued_of = \
        ring_waits = None
from astra_adapter.fabric.flows import _MEMO_LIMIT, FabricOp, FabricParams, FlowEngine, StepSends
from astra_adapter.fabric.queues import SATURATED_FRACTION, MovingQueueEntries, ring_chunk_bytes
from astra_adapter.fabric.queues import fifo_wait_ns
from astra_adapter.fabric.network import FabricNetwork


class CompiledRingOp(RingOp):
    """:class:`RingOp` with :meth:`move`, :meth:`horizon_ns`, :meth:`remaining_bytes`, :meth:`standing_bytes` and
    :meth:`busy_ranks`' masks in one compiled call each (:mod:`astra_adapter.fabric.chains_core`: the same
    arithmetic on the same arrays). Its per-connection arrays
    stay the same objects for the op's life (written in place only: ``active`` refreshed in place), so their
    byte views are taken once, and :class:`astra_adapter.fabric.chains_core.RingState` holds them as typed views
    for its per-event calls."""

    __slots__ = ("busy_moved", "_state")

    def __init__(self, steps: tuple, send_buffer: np.ndarray | None = None,
                 inject: np.ndarray | None = None) -> None:
        super().__init__(steps, send_buffer, inject)
        self.busy_moved = True  # the ranks busy in it may have changed since the engine last looked
        self.sizes = np.ascontiguousarray(self.sizes, dtype=float)  # the compiled calls' layout (the same values)
        self.latencies = np.ascontiguousarray(self.latencies, dtype=float)
        # the arrays as typed views, once (the flags' byte views; a scratch for what each connection had,
        # RingOp._had_bytes)
        self._state = RingState(self.chunk, self.left, self.wait, self.ready.view(np.uint8),
                                self.active.view(np.uint8), self.next_ready.view(np.uint8), self.next_wait,
                                self.send_buffer, self.fill, self.inject, self.pred, self.sizes, self.before,
                                self.latencies, self._done, self.count, np.empty(len(self.chunk)))

    def begin(self, which: np.ndarray, extra_wait_ns: np.ndarray) -> None:
        extra_wait_ns = self.fifo_waits(which, extra_wait_ns)
        self._remaining = None
        self.active_count = self._state.begin(which.view(np.uint8), extra_wait_ns, self.fill_start)
        self.busy_moved = True  # connections ready: a last chunk within its send buffer is written

    def starting(self) -> tuple[np.ndarray, np.ndarray, bool, bool]:
        """The connections starting their chunk now (:meth:`startable`), those and the ones whose next chunk's
        data is in once they have (who takes a wait from a queue read now), and whether any of each."""
        which = np.empty(len(self.chunk), dtype=bool)
        needed = np.empty(len(self.chunk), dtype=bool)
        any_which, any_needed = self._state.starting(which.view(np.uint8), needed.view(np.uint8))
        if self.holding:  # a held connection (chunk 0, not ready) starts nothing and takes no wait
            which &= ~self.held
            needed &= ~self.held
            any_which, any_needed = bool(which.any()), bool(needed.any())
        return which, needed, any_which, any_needed

    def arriving_any(self) -> tuple[np.ndarray, bool]:
        """:meth:`arriving`, and whether any."""
        early = np.empty(len(self.chunk), dtype=bool)
        return early, self._state.arriving(early.view(np.uint8))

    def _refresh(self) -> None:
        active = self.active  # RingOp._refresh's mask, written into the same array
        np.logical_and(self.ready, self.wait <= 1e-6, out=active)
        np.logical_and(active, self.left > self._done, out=active)
        self.active_count = int(np.count_nonzero(active))

    def move(self, dt_ns: float, rate: np.ndarray | None) -> bool:
        self._remaining = None
        went, count, written, done = self._state.move(rate if self.active_count else None, dt_ns)
        self.active_count = count
        if went:
            self.done = done
        if went or written:  # busy_ranks reads the chunks, the ready flags and the last chunks' bytes left
            self.busy_moved = True
        return went

    def horizon_ns(self, rate: np.ndarray | None) -> float:
        return self._state.horizon(rate if self.active_count else None)

    def remaining_bytes(self) -> np.ndarray:
        if self._remaining is None:  # kept until the state next changes (RingOp.remaining_bytes)
            out = self._remaining = np.empty(len(self.chunk))
            self._state.remaining(out)
        return self._remaining

    def standing_bytes(self) -> np.ndarray:
        return self.remaining_bytes() if self.inject is None else self._state.standing()

    def busy_ranks(self) -> set[int]:
        receiving = np.empty(len(self.chunk), dtype=bool)
        sending = np.empty(len(self.chunk), dtype=bool)
        self._state.busy(receiving.view(np.uint8), sending.view(np.uint8))
        return self._busy_of(receiving, sending)


class ChainFlowEngine(FlowEngine):
    """:class:`FlowEngine` for plays with ring chains (see the module doc): the same results, less work."""

    compiled_solve = True  # new moving sets solved on fairshare_core where it is built (the same floats)
    ring_op = CompiledRingOp if RingState is not None else RingOp
    compiled_queues = moving_load is not None  # queue reads' load and sums on chains_core (the same floats)

    def __init__(self, network: FabricNetwork, params: FabricParams = FabricParams(),
                 sends: StepSends | None = None) -> None:
        super().__init__(network, params, sends)
        # one solve of every moving flow (by_component False): the reference's floats
        self._compiled = MovingRates(self.capacity, params.flow_contention, False) \
            if MovingRates is not None and self.compiled_solve else None
        # a path without a queue waits 0.0 only where every rate is positive (0 / 0 would be nan)
        self._zero_waits_known = bool(np.all(self.capacity > 0))
        self.changed: set[int] = set()  # ids of the ops whose busy ranks may have changed (the player clears it)
        self.solves = 0  # max-min solves run (the memo's misses)
        self.queue_asks = 0  # queue reads asked for (a chunk starting, a step entering, with queues on)
        self.queue_reads = 0  # of them, the reads that built the queues (the others were known to be 0.0)
        self._last_moving: tuple[list[FabricOp], list] = ([], [None, None])  # _flow_rates' moving set, memo entry
        self._chunks: dict[int, tuple] = {}  # per ring plan's first step (id): :meth:`_chunks_of`
        # per moving set's steps (their ids): the steps, their routes one after the other, each one's flows' bounds
        self._steps_routes: dict[tuple, tuple] = {}
        self._step_entries: dict[int, tuple] = {}  # per step (id): it, its entries as typed views (_entries_of)
        self._moving_views: dict[int, tuple] = {}  # per moving entries (id): them, as typed views
        self._bound_table: np.ndarray | None = None  # the route table's ptr bound to the compiled solve

    # ---- ops --------------------------------------------------------------------------------------------
    def start(self, steps, held: np.ndarray | None = None) -> FabricOp:
        op = super().start(steps, held)
        self.changed.add(id(op))
        return op

    def release(self, op: RingOp, which: np.ndarray) -> None:
        super().release(op, which)
        self.changed.add(id(op))

    def advance(self, dt_ns: float) -> None:
        """:meth:`FlowEngine.advance`, noting the ops whose busy ranks may have changed (:attr:`changed`: the
        player asks only those): a ring that says so (:class:`CompiledRingOp`; any other ring always), a
        lock-step op whose step, latency, count of moving flows or end changed (its busy ranks are its last
        step's flows still above their done threshold, which leave the moving ones in the same advance)."""
        changed = self.changed
        for op, rate in zip(self.ops, self._current):
            if isinstance(op, RingOp):
                if not op.done and op.move(dt_ns, rate):
                    self._begin_chunks(op)
                if not isinstance(op, CompiledRingOp):
                    changed.add(id(op))
                elif op.busy_moved:
                    changed.add(id(op))
                    op.busy_moved = False
            elif not op.done:  # an op changes only in its own turn: compared right after it
                was = (op.step, op.latency_ns > 0, op.active_count)
                self._advance_lock_step(op, rate, dt_ns)
                if op.done or was != (op.step, op.latency_ns > 0, op.active_count):
                    changed.add(id(op))
        self._credit_advance(dt_ns)

    def _advance_lock_step(self, op: FabricOp, rate: np.ndarray | None, dt_ns: float) -> None:
        """:meth:`FlowEngine._advance_lock_step`, its flows' move in one compiled call (``chains_core.lock_step_move``:
        new arrays, the same floats) where it is built."""
        if op.latency_ns > 0 or rate is None or not self.compiled_queues:  # (chains_core built and on)
            super()._advance_lock_step(op, rate, dt_ns)
            return
        op.left, op.active, op.active_count = lock_step_move(op.left, rate, op.active.view(np.uint8), dt_ns,
                                                             op.steps[op.step].done_below)
        if not op.active_count:
            self._enter_next_step(op)

    def _capacity_changed(self) -> None:
        if self._compiled is not None:
            self._compiled.set_capacity(self.capacity)

    # ---- rates ----------------------------------------------------------------------------------------
    def _moving_ops(self) -> list[FabricOp]:
        """The ops moving flows now, in the order of ``ops``."""
        return [op for op in self.ops if not op.done and op.latency_ns <= 0 and op.active_count]

    def _moving(self, moving: list[FabricOp] | None = None) -> tuple[list[FabricOp], list]:
        """The ops moving flows now (``moving``: :meth:`_moving_ops` taken since nothing changed), in the order of
        ``ops``, and the memo entry of that moving set: [their rates, (load, saturated) once a queue read asked for
        them]. Keyed on the steps and one string of their moving flags (a step's flows are as many as its routes,
        so the string splits one way only)."""
        if moving is None:
            moving = self._moving_ops()
        if not moving:
            return moving, [None, None]
        key = (self._mode_key, tuple([id(op.steps[op.step]) for op in moving]),
               b"".join([op.active.tobytes() for op in moving]))
        hit = self._moving_rates.get(key)
        if hit is None:
            self.solves += 1
            hit = [self._solve_moving(moving, key), None]
            if len(self._moving_rates) >= _MEMO_LIMIT:
                self._moving_rates.clear()
            self._moving_rates[key] = hit
        return moving, hit

    def _solve_moving(self, moving: list[FabricOp], key: tuple) -> list[np.ndarray]:
        """Each moving op's flows' max-min rates (0 for a flow not moving): :meth:`FlowEngine._flow_rates`'s
        solve, compiled where it is built (``key``: :meth:`_moving`'s, whose last part is the moving flags, one
        byte per flow in the moving ops' order)."""
        if self._compiled is None:
            rates = []
            routes = np.sort(np.concatenate([op.steps[op.step].routes[op.active] for op in moving]))
            unique, per_flow = self._solve(routes)
            for op in moving:
                rate = np.zeros(len(op.active))
                rate[op.active] = per_flow[np.searchsorted(unique, op.steps[op.step].routes[op.active])]
                rates.append(rate)
            return rates
        steps = self._steps_routes.get(key[1])
        if steps is None or any(a is not b for a, b in zip(steps[0], (op.steps[op.step] for op in moving))):
            first = [op.steps[op.step] for op in moving]  # the entry keeps its steps: their ids name no others
            bounds = np.cumsum([0] + [len(op.active) for op in moving]).tolist()
            steps = (first, np.concatenate([s.routes for s in first]), list(zip(bounds[:-1], bounds[1:])))
            if len(self._steps_routes) >= _MEMO_LIMIT:
                self._steps_routes.clear()
            self._steps_routes[key[1]] = steps
        ptr, res, w = self._route_table(len(self.network.routes) - 1)
        if ptr is not self._bound_table:  # (the table's arrays are new objects whenever it grows)
            self._compiled.bind_table(ptr, res, w)
            self._bound_table = ptr
        rate = self._compiled.rates_bound(steps[1], key[2])
        return [rate[a:b] for a, b in steps[2]]  # each op's slice of the flows

    def _credit_horizon_ns(self, rates: list) -> float:
        """:meth:`FlowEngine._credit_horizon_ns` with the load kept with the moving set's rates (a function of it
        and the modes, as they are): the moving set and memo entry :meth:`_flow_rates` just took (the horizon asks
        for the rates first)."""
        moving, hit = self._last_moving
        if not moving:
            self._credit_load = None
        else:
            if len(hit) < 3:
                hit.append(self._load_of(np.concatenate([op.steps[op.step].routes[op.active] for op in moving]),
                                         np.concatenate([r[op.active] for op, r in zip(moving, hit[0])])))
            self._credit_load = hit[2]
        assert self.credit is not None
        return self.credit.horizon_ns(self._credit_load)

    def _flow_rates(self) -> list[np.ndarray | None]:
        moving, hit = self._last_moving = self._moving()
        rates = hit[0]
        if not moving:
            return [None] * len(self.ops)
        if len(moving) == len(self.ops):  # every op moving (``moving`` keeps the order of ``ops``)
            return list(rates)
        of = dict(zip(map(id, moving), rates))
        return [of.get(id(op)) for op in self.ops]

    # ---- standing queues --------------------------------------------------------------------------------
    def _begin_chunks(self, op: RingOp) -> None:
        if isinstance(op, CompiledRingOp):  # the same masks, compiled
            which, needed, any_which, any_needed = op.starting()
            waits = self._connection_waits(op, needed) if self.queues is not None and any_needed else \
                np.zeros(len(which))
            if any_which:
                op.begin(which, waits)
            early, any_early = op.arriving_any()
            if any_early:
                op.queue_next(early, waits)
            return
        which = op.startable()
        waits = np.zeros(len(which))
        if self.queues is not None:
            # who takes a wait from this read: the connections starting now, and those whose next chunk's data
            # is in once they have (op.arriving() after op.begin(which): begin marks them ready, not queued)
            nxt = op.chunk + 1
            pred_chunk = np.where(op.pred >= 0, op.chunk[np.maximum(op.pred, 0)], op.count)
            early = (op.ready | which) & ~(op.next_ready & ~which) & (nxt < op.count) & (pred_chunk >= nxt)
            needed = which | early
            if needed.any():
                waits = self._connection_waits(op, needed)
        if which.any():
            op.begin(which, waits)
        early = op.arriving()
        if early.any():
            op.queue_next(early, waits)

    def _connection_waits(self, op: RingOp, needed: np.ndarray) -> np.ndarray:
        """Per connection of ``op`` (read where ``needed``), its wait behind the queues the other ops' flows
        keep now: :meth:`FlowEngine._queued` and :meth:`StandingQueues.chunk_waits_ns`, with the parts whose
        answer is 0.0 skipped."""
        routes = op.steps[0].routes
        waits = np.zeros(len(routes))
        read = self._read_queues(op, op.steps[0], needed)
        if read is None:
            return waits
        queued, _, ops, hit = read
        if self.compiled_queues and self._zero_waits_known:  # the loop below in one call (the same floats)
            ptr, res, w = self._route_table(self._chunks_of(op)[2])
            needed8 = needed.view(np.uint8)
            if ring_waits(routes, needed8, ptr, res, w, queued, self.capacity, None, None, None):
                flows_on = flows_on_of([(self._entries_of(o.steps[o.step]), rate) for o, rate in zip(ops, hit[0])
                                        if o is not op], len(self.capacity))
                ring_waits(routes, needed8, ptr, res, w, queued, self.capacity, flows_on, self._chunks_of(op)[1],
                           waits)
            return waits
        incidence = self.queues.incidence
        capacity = self.capacity
        flows_on = None
        chunk = None
        for k in np.flatnonzero(needed).tolist():
            res, w = incidence(int(routes[k]))
            q = queued[res]
            if q.any() or not self._zero_waits_known:
                if flows_on is None:  # (the moving set the read took: nothing moved since)
                    flows_on = self.queues.flows_on([(o.steps[o.step], rate) for o, rate in zip(ops, hit[0])
                                                     if o is not op])
                    chunk = self._chunk_bytes(op)
                waits[k] = fifo_wait_ns(w, q, capacity[res], flows_on[res], float(chunk[k]))
        return waits

    def _entries_of(self, step) -> StepEntries:
        """``step``'s queue entries (:meth:`StandingQueues.entries`) as compiled typed views, kept per step (the entry
        keeps the step, so its id names no other)."""
        hit = self._step_entries.get(id(step))
        if hit is None or hit[0] is not step:
            res, w, flow, _ = self.queues.entries(step)
            if len(self._step_entries) >= _MEMO_LIMIT:
                self._step_entries.clear()
            hit = self._step_entries[id(step)] = (step, StepEntries(res, w, flow))
        return hit[1]

    def _moving_entries_of(self, step, entries: MovingQueueEntries) -> MovingEntries:
        """``step``'s moving entries ``entries`` (:meth:`StandingQueues.moving_entries`) and its flows' windows as
        compiled typed views, kept per entries (the entry keeps them, so their id names no others)."""
        hit = self._moving_views.get(id(entries))
        if hit is None or hit[0] is not entries:
            hop, res, w, flow, own, _ = entries
            if len(self._moving_views) >= _MEMO_LIMIT:
                self._moving_views.clear()
            hit = self._moving_views[id(entries)] = (entries, MovingEntries(hop, res, w, flow, own.view(np.uint8),
                                                                            self.queues.entries(step)[3]))
        return hit[1]

    def _chunk_bytes(self, op: RingOp) -> np.ndarray:
        """:func:`astra_adapter.fabric.queues.ring_chunk_bytes` of ``op``, a function of its first step (its
        routes and wire bytes): kept per first step (:meth:`_chunks_of`)."""
        return self._chunks_of(op)[1]

    def _chunks_of(self, op: RingOp) -> tuple:
        """Per ring plan's first step: it, its :func:`astra_adapter.fabric.queues.ring_chunk_bytes` and its
        highest route id (the route table read covers it); the entry keeps the step, so its id names no other."""
        first = op.steps[0]
        hit = self._chunks.get(id(first))
        if hit is None or hit[0] is not first:
            hit = self._chunks[id(first)] = (first, ring_chunk_bytes(self.queues, op), int(first.routes.max()))
        return hit

    def _enter_next_step(self, op: FabricOp) -> None:
        op.next_step()
        if self.queues is None or op.done or not op.active_count:
            return
        step = op.steps[op.step]
        read = self._read_queues(op, step, op.active)
        if read is not None and read[0].any():
            op.latency_ns += self.queues.delay_ns(read[0], step.routes[op.active],
                                                  step.dst[op.active] if len(op.steps) > 1 else None)

    def _read_queues(self, op, step, needed: np.ndarray) -> tuple[np.ndarray, np.ndarray, list, list] | None:
        """The queues the flows moving now other than ``op``'s keep, on the resources the paths of ``step``'s
        flows ``needed`` cross (elsewhere 0), the load, and the moving set and memo entry read (:meth:`_moving`);
        None where every one of those queues is 0 (no other op's moving flow crosses those paths - known without
        the rates -, or no resource on them is saturated)."""
        q = self.queues
        assert q is not None
        self.queue_asks += 1
        ops = self._moving_ops()
        res, _, flow, _ = q.entries(step)
        mine = res[needed[flow]]  # the resources on the paths read
        on_path = set(mine.tolist())
        crossing = []  # the other ops with a moving flow on a path read (only they may add to its queues)
        for o in ops:
            if o is not op:
                # (hop, resource, weight, flow, own link; the set of those resources)
                entries = q.moving_entries(o.steps[o.step], o.active)
                if not on_path.isdisjoint(entries.resources):
                    crossing.append((o, entries))
        if not crossing:  # no queue on the paths read whatever the rates: answered without solving them
            return None
        ops, hit = self._moving(ops)
        if hit[1] is None:  # the load and its saturated resources: a function of the moving set, as its rates
            if self.compiled_queues:  # with StandingQueues.saturated's flags
                full = np.empty(len(self.capacity), dtype=bool)
                load = moving_load([(self._entries_of(o.steps[o.step]), rate) for o, rate in zip(ops, hit[0])],
                                   len(self.capacity), q.flow_contention, self.capacity, q.limit,
                                   SATURATED_FRACTION, full.view(np.uint8))
            else:
                load = q.load([(o.steps[o.step], rate) for o, rate in zip(ops, hit[0])])
                full = q.saturated(load)
            hit[1] = (load, full, full.view(np.uint8))
        load, full, full8 = hit[1]
        hot = set(mine[full[mine]].tolist())  # the saturated resources on the paths read
        if not hot:
            return None
        in_flight = []
        compiled = self.compiled_queues
        for o, entries in crossing:
            s = o.steps[o.step]
            if hot.isdisjoint(entries.resources):
                continue  # adds to no queue on the paths read
            left = o.standing_bytes() if isinstance(o, RingOp) else o.left + q.later_bytes(o.steps, o.step)
            if compiled:
                in_flight.append((self._moving_entries_of(s, entries), o.active.view(np.uint8), left))
            else:
                in_flight.append((s, o.active, left))
        if not in_flight:
            return None
        queued = queued_of(in_flight, full8, q.sender_limit, q.limit) if compiled else \
            q.queued_bytes(in_flight, load)
        self.queue_reads += 1
        return queued, load, ops, hit
