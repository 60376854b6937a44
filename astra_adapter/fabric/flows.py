"""Collectives as flows on the fabric: genie's own schedules, step by step, at max-min fair rates (pure).

An op (a collective on its members, or one message) runs the exact per-rank steps the replay executes
(:func:`genie.collectives.registry.build_schedule`). Its ranks go through the steps together (the replay's
ranks wait on each step's receives), except that a rank whose flows of the last step are done leaves the op
(:meth:`FlowEngine.busy_ranks`). A step first pays its latency - the per-message overhead times the most
messages one rank posts in it, plus the longest expected path delay, plus the op's endpoint delay on its first
step - then every send of the step is a flow from its rank's host to the peer's host, at the max-min fair rate
(:mod:`astra_adapter.fabric.fairshare`) over every resource it crosses, shared with the flows of every other op
in flight (other process groups, other messages). When a flow ends, the rates are recomputed; when the last
flow of a step ends, the next step starts.

Bytes on the wire: a shaped link's rate counts frames, so a flow moves ``WIRE_BYTES_PER_PAYLOAD_BYTE`` times
its payload (a 1448-byte TCP segment is a 1514-byte frame). A link class's *efficiency* (calibrated,
default 1) scales its rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from genie.core.collective import Collective
from genie.core.alltoallv import matrix_op_size
from genie.core.schedule import CollectiveOp
from genie.core.sizes import dtype_bytes_for
from genie.collectives.sends import SendStep, step_sends

from astra_adapter.fabric.chains import PairStarts, RingOp, ring_like, ring_sides
from astra_adapter.fabric.coflow import RingModel, coflow_steps
from astra_adapter.fabric.credit import LinkCredit, link_load
from astra_adapter.fabric.fairshare import max_min_rates
from astra_adapter.fabric.network import FabricNetwork, LinkClass
from astra_adapter.fabric.queues import StandingQueues, ring_chunk_bytes
from astra_adapter.measurements import CommOp

WIRE_BYTES_PER_PAYLOAD_BYTE = 1514 / 1448
ECMP_SAMPLES = 8  # draws of the ECMP hash an estimate and a calibration average over (where there is ECMP)
_EPS_BYTES = 1e-6
END_PRECISION = 1e-3  # the estimates' end_precision unless told (genie estimate --end-precision; benchmarks/README.md)
_MEMO_LIMIT = 4096  # configurations of moving flows whose rates the engine keeps


@dataclass(frozen=True)
class FabricParams:
    """The model's parameters: per link class an efficiency (fraction of the nominal rate a flow reaches), a
    per-message overhead and a per-op endpoint delay (ns), and the flow contention: a link crossed by ``n``
    flows at once delivers ``1 / (1 + flow_contention x (n - 1))`` of its rate (TCP flows sharing a shaped
    queue lose throughput to drops and retransmissions as they multiply - the incast of an all-to-all; 0: none).
    ``standing_queues``: a step first waits behind the queues other ops' flows keep on saturated links
    (:mod:`astra_adapter.fabric.queues`). ``ring_chains``: a ring's ranks each on their own step, as the replay's
    are (:mod:`astra_adapter.fabric.chains`), not in lock step. ``htb_credit``: every link shaped below the
    device's speed has the testbed's HTB buckets, played as a fluid (:mod:`astra_adapter.fabric.credit`): after an
    idle spell it sends its ceil burst at once, then at 1.02 x its rate until its rate bucket is spent.
    ``end_precision`` (a simulation setting, not fitted): where the flat engine's incremental solve runs, a flow
    whose time left after an event is at most this share of its step's time so far ends with that event (its last
    bytes dropped), so flow ends that close are one event - SimGrid's ``surf/precision``, relative; 0: exact,
    every flow to its own instant (the reference engine, and standing queues, are always exact). ``ring_model``:
    lock step, or a ring step one flow (:mod:`astra_adapter.fabric.coflow`; not with ring chains or queues).
    """

    efficiency: tuple[tuple[LinkClass, float], ...] = ()
    message_overhead_ns: float = 0.0
    endpoint_delay_ns: float = 0.0
    flow_contention: float = 0.0
    standing_queues: bool = False
    ring_chains: bool = False
    htb_credit: bool = False
    end_precision: float = 0.0
    ring_model: RingModel = RingModel.LOCKSTEP

    def __post_init__(self) -> None:
        if self.ring_model is RingModel.COFLOW and (self.ring_chains or self.standing_queues):
            raise ValueError("the coflow ring model plays lock-step flows: not with ring chains or standing queues")

    def efficiency_of(self, link_class: LinkClass) -> float:
        return dict(self.efficiency).get(link_class, 1.0)


class StepFlows:
    """One step of an op: its flows' routes and payload bytes, and its latency before they move."""

    __slots__ = ("routes", "src", "dst", "bytes", "latency_ns", "wire_bytes", "moving", "moving_count",
                 "done_below", "ranks", "compiled_busy")

    def __init__(self, routes: np.ndarray, src: np.ndarray, dst: np.ndarray, size_bytes: np.ndarray,
                 latency_ns: float) -> None:
        self.routes = routes
        self.src = src  # each flow's sending rank
        self.dst = dst  # and receiving rank
        self.bytes = size_bytes
        self.latency_ns = latency_ns
        self.wire_bytes = size_bytes * WIRE_BYTES_PER_PAYLOAD_BYTE  # what the flows move (never written to)
        self.moving = self.wire_bytes > _EPS_BYTES
        self.moving_count = int(np.count_nonzero(self.moving))
        self.done_below = _EPS_BYTES + 1e-9 * float(size_bytes.max(initial=0.0))  # a flow with less left is done
        self.ranks: np.ndarray | None = None  # a coflow step's member ranks, busy while its one flow moves

    def busy_of(self, left: np.ndarray) -> set[int]:
        """The ranks busy while the flows ``left`` (a mask) are not done: theirs, or a coflow step's every rank."""
        return (set(self.ranks.tolist()) if left.any() else set()) if self.ranks is not None else \
            set(self.src[left].tolist()) | set(self.dst[left].tolist())


class FabricOp:
    """An op in flight: the step it is in, its latency left, its flows' bytes left."""

    __slots__ = ("steps", "step", "latency_ns", "left", "active", "active_count", "done")

    def __init__(self, steps: tuple[StepFlows, ...]) -> None:
        self.steps = steps
        self.step = -1
        self.latency_ns = 0.0
        self.left = np.zeros(0)
        self.active = np.zeros(0, dtype=bool)
        self.active_count = 0  # flows still moving (active.sum())
        self.done = False

    def next_step(self) -> None:
        self.step += 1
        while self.step < len(self.steps) and not len(self.steps[self.step].routes) and \
                not self.steps[self.step].latency_ns:
            self.step += 1
        if self.step >= len(self.steps):
            self.done = True
            return
        s = self.steps[self.step]
        self.latency_ns = s.latency_ns
        self.left = s.wire_bytes
        self.active = s.moving
        self.active_count = s.moving_count


class StepSends:
    """Per op, its schedule's steps as arrays of (src rank, dst rank, payload bytes) and the most messages one
    rank posts in the step (:func:`genie.collectives.sends.step_sends`: no Schedule objects) - independent of
    the network and the parameters, so engines share it (one build per op across hash draws and calibration
    steps)."""

    def __init__(self) -> None:
        self._cache: dict[tuple, tuple[SendStep, ...]] = {}

    def of(self, op: CommOp, members: tuple[int, ...]) -> tuple[SendStep, ...]:
        key = (op.collective, op.algorithm, op.size_bytes, members, op.split_bytes)
        hit = self._cache.get(key)
        if hit is None:
            p2p = op.collective is Collective.SEND_RECV
            # an uneven all-to-all runs its own per-pair sizes (the replay's schedule), not its even equivalent
            size, dtype = matrix_op_size(op.split_bytes) if op.split_bytes else \
                (op.size_bytes, dtype_bytes_for(op.size_bytes))
            hit = self._cache[key] = step_sends(CollectiveOp(
                collective=op.collective, size_bytes=size, group=members, algorithm=op.algorithm,
                root=members[0], peer=members[-1] if p2p else None, dtype_bytes=dtype, split_bytes=op.split_bytes))
        return hit


class FlowEngine(PairStarts):
    """Running ops on one fabric: ``horizon_ns`` (time to the next change at the current rates), ``advance``."""

    # the ids of the ops whose busy ranks may have changed since the player last asked (None: any op's; an
    # engine that tracks it, :class:`astra_adapter.fabric.flat_flows.FlatFlowEngine`, is cleared by the player)
    changed: set[int] | None = None
    _max_min = staticmethod(max_min_rates)  # the solve (an engine may take a faster one with the same results)
    ring_op = RingOp  # a ring-like op's state under ring chains (an engine may take a faster one, the same floats)
    # whether the engine plays the player's plain events itself (``flow_events(t, t_heap)``: the flat engine's
    # compiled loop, :meth:`astra_adapter.fabric.flat_slots.OnSlots.flow_events`); the others leave them to the player
    plays_events = False

    def __init__(self, network: FabricNetwork, params: FabricParams = FabricParams(),
                 sends: "StepSends | None" = None) -> None:
        self.network = network
        self.params = params
        self.sends = sends or StepSends()
        self.capacity = np.array([r.rate_bps * params.efficiency_of(r.link_class) / 8e9
                                  for r in network.resources])  # bytes per ns (with the credit: now)
        credit = LinkCredit(network, self.capacity) if params.htb_credit else None
        self.credit = credit if credit else None  # the links' HTB buckets (None: off, or no link has them)
        self._mode_key = credit.key if credit else b""  # the credit links' modes (the capacities), in every memo
        # key of rates
        self._credit_load: np.ndarray | None = None  # the load on each resource at the current rates (credit)
        self._credit_loads: dict[tuple, np.ndarray | None] = {}  # an engine that keeps the load: per moving set
        self._plans: dict[tuple, tuple[StepFlows, ...]] = {}
        self._sides: dict[int, tuple] = {}  # per ring-like step (id): its senders' socket bytes and link rates
        self._route_ptr = np.zeros(1, dtype=np.int64)  # the routes' loads as CSR (:meth:`_route_table`)
        self._route_res = np.zeros(0, dtype=np.int64)
        self._route_w = np.zeros(0)
        self._rates: dict[tuple[bytes, bytes], tuple[np.ndarray, np.ndarray]] = {}
        self._moving_rates: dict[tuple, list[np.ndarray]] = {}
        self.ops: list[FabricOp] = []
        self._current: list[np.ndarray | None] = []
        self.queues = StandingQueues(network, self.capacity, self._route_incidence, params.flow_contention) \
            if params.standing_queues else None

    # ---- ops ----------------------------------------------------------------------------------------
    def plan(self, op: CommOp, members: tuple[int, ...], channel: int | None = None) -> tuple[StepFlows, ...]:
        """The op's steps as flows; ``channel``: the communicator it runs on in the replay (routes on a traced
        network follow that connection's path)."""
        key = (op.collective, op.algorithm, op.size_bytes, members, channel, op.split_bytes)
        steps = self._plans.get(key)
        if steps is None:
            steps = self._plans[key] = coflow_steps(self._build(op, members, channel), self.network, self.params)
        return steps

    def _build(self, op: CommOp, members: tuple[int, ...], channel: int | None) -> tuple[StepFlows, ...]:
        out, seen, paths = [], {}, {}
        for sends in self.sends.of(op, members):
            pair = (sends.src.tobytes(), sends.dst.tobytes())  # a ring's steps all have the same pairs
            hit = paths.get(pair)
            if hit is None:
                routes = np.array([self.network.route(a, b, channel) for a, b in zip(sends.src.tolist(),
                                                                                     sends.dst.tolist())],
                                  dtype=np.int64)
                hit = paths[pair] = (routes, max((self.network.routes[r].delay_ns for r in routes.tolist()),
                                                 default=0.0))
            routes, delay = hit
            latency = sends.messages * self.params.message_overhead_ns + delay + \
                (self.params.endpoint_delay_ns if not out else 0.0)
            sizes = sends.size_bytes.astype(float)
            key = (routes.tobytes(), sends.src.tobytes(), sends.dst.tobytes(), sizes.tobytes(), latency)
            step = seen.get(key)
            if step is None:
                step = seen[key] = StepFlows(routes, sends.src, sends.dst, sizes, latency)
            out.append(step)
        return tuple(out)

    def start(self, steps: tuple[StepFlows, ...], held: np.ndarray | None = None) -> FabricOp:
        if self.params.ring_chains and ring_like(steps):  # (held: connections held at chunk 0, chains.PairStarts)
            ring = self._new_ring(steps, held)  # (chains.PairStarts)
            self._begin_chunks(ring)
            self.ops.append(ring)
            return ring  # type: ignore[return-value]  # what the engine reads of an op (chains.RingOp)
        op = FabricOp(steps)
        self._enter_next_step(op)
        self.ops.append(op)
        return op

    def _ring_sides(self, step: StepFlows) -> tuple[np.ndarray, np.ndarray | None]:
        """Per connection of a ring-like op's ``step``: its sender's socket bytes and (standing queues) its sender's
        link's sustained rate, never a burst's (:func:`astra_adapter.fabric.chains.ring_sides`); kept per step."""
        hit = self._sides.get(id(step))
        if hit is None:  # (the step is kept with its entry: its id names no other step while it is here)
            cap = self.capacity if self.queues is None or self.credit is None else self.credit.sustained(self.capacity)
            hit = self._sides[id(step)] = (step, ring_sides(self.network, cap, step, self.queues is not None,
                                                            WIRE_BYTES_PER_PAYLOAD_BYTE))
        return hit[1]

    def _begin_chunks(self, op: RingOp) -> None:
        """The connections of a ring-like op whose senders have their chunk's data start it; with standing
        queues each chunk waits behind the queues on its own path from when its data came in (only its downstream
        ranks wait for it; a chunk whose data came in while the connection was still on its previous one joined
        the queues then: a TP pair's all-reduce behind a queue one way waits it once, not once per step)."""
        which = op.startable()
        waits = np.zeros(len(which))
        queued = self._queued(op) if self.queues is not None and which.any() else None
        if queued is not None:
            waits = self._chunk_waits(op, queued)
        if which.any():
            op.begin(which, waits)
        early = op.arriving()
        if early.any():
            if self.queues is not None and queued is None:
                queued = self._queued(op)
                if queued is not None:
                    waits = self._chunk_waits(op, queued)
            op.queue_next(early, waits)

    def _chunk_waits(self, op: RingOp, queued: np.ndarray) -> np.ndarray:
        """Per connection of ``op``, its chunk's wait behind ``queued`` as a FIFO gives it
        (:func:`astra_adapter.fabric.queues.fifo_wait_ns`: beside the other ops' flows moving now)."""
        assert self.queues is not None
        rated = [(o.steps[o.step], rate) for o, rate in zip(self.ops, self._flow_rates())
                 if rate is not None and o is not op]
        return self.queues.chunk_waits_ns(queued, op.steps[0].routes, ring_chunk_bytes(self.queues, op),
                                          self.queues.flows_on(rated))

    def _queued(self, op) -> np.ndarray | None:
        """Bytes standing in each resource's queue, kept by the flows moving now other than ``op``'s, at the
        max-min rates they have now (None: no other op moves)."""
        assert self.queues is not None
        moving = [(o, rate) for o, rate in zip(self.ops, self._flow_rates()) if rate is not None]
        in_flight = [(o.steps[o.step], o.active, o.standing_bytes() if isinstance(o, RingOp) else
                      o.left + self.queues.later_bytes(o.steps, o.step)) for o, _ in moving if o is not op]
        if not in_flight:
            return None
        load = self.queues.load([(o.steps[o.step], rate) for o, rate in moving])
        return self.queues.queued_bytes(in_flight, load)

    def _enter_next_step(self, op: FabricOp) -> None:
        """``op`` on to its next step; with standing queues its latency grows by the wait behind them."""
        op.next_step()
        if self.queues is None or op.done or not op.active_count:
            return
        # the flows moving now, at the max-min rates they have now (an op that just ended has left its links to
        # them; ``op`` itself is in its latency), say which links are saturated and hold the queues ``op`` meets
        queued = self._queued(op)
        if queued is not None and queued.any():
            step = op.steps[op.step]
            op.latency_ns += self.queues.delay_ns(queued, step.routes[op.active],
                                                  step.dst[op.active] if len(op.steps) > 1 else None)

    @staticmethod
    def busy_ranks(op: FabricOp) -> set[int] | None:
        """On the op's last step, the ranks that still send or receive in it (a rank whose flows are all done
        leaves the op, as the replay's ranks do); None before the last step (every member is in it)."""
        if isinstance(op, RingOp):
            return op.busy_ranks()
        if op.done:
            return set()
        if op.step < len(op.steps) - 1 or op.latency_ns > 0:
            return None
        s = op.steps[op.step]
        return s.busy_of(s.moving & (op.left > s.done_below))

    def remove(self, op: FabricOp) -> None:
        self.ops.remove(op)

    # ---- rates ----------------------------------------------------------------------------------------
    def _route_table(self, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every route's loads up to route id ``top`` as one CSR table: route ``r``'s resources and fractions
        are ``resource[ptr[r]:ptr[r + 1]]`` and ``weight[...]`` (extended as the network memoises routes)."""
        if len(self._route_ptr) <= top + 1:
            start = len(self._route_ptr) - 1
            loads = [route.loads for route in self.network.routes[start:]]
            lengths = np.fromiter((len(x) for x in loads), dtype=np.int64, count=len(loads))
            self._route_ptr = np.concatenate((self._route_ptr, self._route_ptr[-1] + np.cumsum(lengths)))
            self._route_res = np.concatenate((self._route_res, np.array([r for x in loads for r, _ in x],
                                                                         dtype=np.int64)))
            self._route_w = np.concatenate((self._route_w, np.array([w for x in loads for _, w in x], dtype=float)))
        return self._route_ptr, self._route_res, self._route_w

    def _route_incidence(self, rid: int) -> tuple[np.ndarray, np.ndarray]:
        """Route ``rid``'s resources and fractions, in path order (its row of :meth:`_route_table`)."""
        ptr, res, w = self._route_table(rid)
        return res[ptr[rid]:ptr[rid + 1]], w[ptr[rid]:ptr[rid + 1]]

    def _gather(self, unique: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The CSR rows (:meth:`_route_table`) of the distinct routes ``unique`` gathered in one go, route by route
        in the order of ``unique``: each entry's resource and fraction, and each route's number of entries."""
        ptr, res, w = self._route_table(int(unique[-1]))
        starts, lengths = ptr[unique], ptr[unique + 1] - ptr[unique]
        first = np.cumsum(lengths) - lengths  # each route's first entry in the gathered rows
        index = np.repeat(starts - first, lengths) + np.arange(int(lengths.sum()))
        return res[index], w[index], lengths

    def _solve(self, routes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = (self._mode_key, routes.tobytes())  # a tuple: modes' bytes run into the routes' in a concatenation
        hit = self._rates.get(key)
        if hit is not None:
            return hit
        # identical flows get identical max-min rates: solve one per route, weighted by its multiplicity
        unique, counts = np.unique(routes, return_counts=True)
        resource_of_all, w, lengths = self._gather(unique)
        flow_of = np.repeat(np.arange(len(unique)), lengths)
        weight_all = w * np.repeat(counts, lengths)
        capacity = self.capacity
        if self.params.flow_contention > 0:
            flows_on = np.bincount(resource_of_all, weights=weight_all, minlength=len(capacity))
            capacity = capacity / (1 + self.params.flow_contention * np.maximum(flows_on - 1, 0))
        per_flow = self._max_min(flow_of, resource_of_all, weight_all, capacity, len(unique))
        if len(self._rates) >= _MEMO_LIMIT:
            self._rates.clear()
        hit = self._rates[key] = (unique, per_flow)
        return hit

    # ---- HTB's credit (astra_adapter.fabric.credit) ------------------------------------------------------
    def _credit_horizon_ns(self, rates: list) -> float:
        """With the credit: the load of the moving flows at ``rates`` (per op, as :meth:`_flow_rates` gives
        them) kept for :meth:`_credit_advance`, and the time until a bucket runs dry under it."""
        assert self.credit is not None
        parts = [(op.steps[op.step].routes[op.active], rate[op.active]) for op, rate in zip(self.ops, rates)
                 if rate is not None]
        self._credit_load = self._load_of(np.concatenate([p[0] for p in parts]),
                                          np.concatenate([p[1] for p in parts])) if parts else None
        return self.credit.horizon_ns(self._credit_load)

    def _load_of(self, routes: np.ndarray, rates: np.ndarray) -> np.ndarray | None:
        """The load on every resource (:func:`link_load`) of the moving flows on ``routes`` at ``rates``; None
        where none moves."""
        if not len(routes):
            return None
        unique, first, counts = np.unique(routes, return_index=True, return_counts=True)
        return self._route_load(unique, counts, rates[first])

    def _kept_load(self, key: tuple, load_of) -> np.ndarray | None:
        """The moving flows' load (``load_of()``, :meth:`_load_of`) kept per ``key``: the modes and moving set the
        rates are a function of (a full-size array per key, up to _MEMO_LIMIT keys)."""
        if key in self._credit_loads:  # (None kept too: nothing moves)
            return self._credit_loads[key]
        if len(self._credit_loads) >= _MEMO_LIMIT:
            self._credit_loads.clear()
        load = self._credit_loads[key] = load_of()
        return load

    def _route_load(self, unique: np.ndarray, counts: np.ndarray, rates: np.ndarray) -> np.ndarray:
        """:meth:`_load_of` from the distinct moving routes ``unique`` (ascending), their flows and per-flow rates."""
        res, w, lengths = self._gather(unique)
        return link_load(res, w, lengths, counts, rates, len(self.capacity), self.params.flow_contention)

    def _credit_advance(self, dt_ns: float) -> None:
        """The buckets ``dt_ns`` on at the load of the last horizon (every engine's advance ends with it); a mode
        that changed changes the capacities, so the rates (memoised on the modes) are solved again."""
        if self.credit is not None and self.credit.advance(self._credit_load, dt_ns):
            self._mode_key = self.credit.key
            self._capacity_changed()

    def _capacity_changed(self) -> None:
        """A hook for engines that keep a copy of the capacities (their compiled solves)."""

    def _flow_rates(self) -> list[np.ndarray | None]:
        moving = [op for op in self.ops if not op.done and op.latency_ns <= 0 and op.active_count]
        if not moving:
            return [None] * len(self.ops)
        # the rates depend only on which flows of which steps move: memoised on that (a ring's 2(n-1) steps
        # are one configuration); the step objects live as long as the engine's plans, so their ids are stable
        key = (self._mode_key,) + tuple((id(op.steps[op.step]), op.active.tobytes()) for op in moving)
        rates = self._moving_rates.get(key)
        if rates is None:
            routes = np.sort(np.concatenate([op.steps[op.step].routes[op.active] for op in moving]))
            unique, per_flow = self._solve(routes)
            rates = []
            for op in moving:
                rate = np.zeros(len(op.active))
                idx = np.searchsorted(unique, op.steps[op.step].routes[op.active])
                rate[op.active] = per_flow[idx]
                rates.append(rate)
            if len(self._moving_rates) >= _MEMO_LIMIT:
                self._moving_rates.clear()
            self._moving_rates[key] = rates
        of = dict(zip(map(id, moving), rates))
        return [of.get(id(op)) for op in self.ops]

    def horizon_ns(self) -> float:
        """Time to the next step boundary or flow end at the current rates (inf: nothing running)."""
        rates = self._current = self._flow_rates()
        best = float("inf") if self.credit is None else self._credit_horizon_ns(rates)
        for op, rate in zip(self.ops, rates):
            if op.done:
                return 0.0
            if isinstance(op, RingOp):
                h = op.horizon_ns(rate)
            elif op.latency_ns > 0:
                h = op.latency_ns
            elif rate is None:
                return 0.0  # a step with nothing left to move: ends now
            elif op.active_count == len(op.left):
                h = float(np.min(op.left / rate))
            else:
                h = float(np.min(op.left[op.active] / rate[op.active]))
            if h < best:  # min() without its call: this runs once per op and event
                best = h
        return best

    def advance(self, dt_ns: float) -> None:
        for op, rate in zip(self.ops, self._current):
            if op.done:
                continue
            if isinstance(op, RingOp):
                if op.move(dt_ns, rate):
                    self._begin_chunks(op)
                continue
            self._advance_lock_step(op, rate, dt_ns)
        self._credit_advance(dt_ns)

    def _advance_lock_step(self, op: FabricOp, rate: np.ndarray | None, dt_ns: float) -> None:
        """A lock-step op (not done) ``dt_ns`` on: its latency runs down, or its flows move at ``rate``; on to its
        next step when nothing of this one is left."""
        if op.latency_ns > 0:
            op.latency_ns -= dt_ns
            if op.latency_ns <= 1e-6:
                op.latency_ns = 0.0
                if not op.active_count:
                    self._enter_next_step(op)
            return
        if rate is not None:
            op.left = op.left - rate * dt_ns
            op.active = op.active & (op.left > op.steps[op.step].done_below)
            op.active_count = int(np.count_nonzero(op.active))
        if not op.active_count:
            self._enter_next_step(op)


def run_concurrently(engine: FlowEngine, ops: list[tuple[CommOp, tuple[int, ...]]]) -> list[float]:
    """Each op's completion time (ns) when all start at 0 together (a sweep item's disjoint groups)."""
    started = [engine.start(engine.plan(op, members)) for op, members in ops]
    finished = [0.0] * len(started)
    t = 0.0
    while engine.ops:
        for op in [o for o in engine.ops if o.done]:
            finished[started.index(op)] = t
            engine.remove(op)
        if not engine.ops:
            break
        dt = engine.horizon_ns()
        if dt == float("inf"):
            raise RuntimeError("fabric model: ops in flight but nothing moves")
        engine.advance(dt)
        t += dt
    return finished

