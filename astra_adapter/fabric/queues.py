"""Standing queues on saturated links (pure, numpy): the wait a step's flows add behind other flows' queues.

The max-min fair model shares a link's *rate* among its flows and gives a flow that joins a full link its
share at once. A real shaped link is a FIFO: a TCP flow whose bottleneck it is keeps its whole window in flight,
and with the testbed's sub-millisecond delays nearly all of that waits in the bottleneck's queue
(:mod:`genie.core.tcp_window`). A flow that starts while such a queue stands waits for it to drain before its
own bytes get through: ``queued bytes / link rate`` per saturated link on its path. That is what sends a small
tensor-parallel all-reduce across a spine link another job's data-parallel ring keeps full from a millisecond
to tens of milliseconds.

The queue is derived, not fitted: on link ``r``, the sum over the flows in flight whose first saturated link
along their path is ``r`` of what each still has to send on its connection (the rest of its step and the same
sender -> receiver's bytes in the op's later steps, :func:`later_step_bytes`), up to one TCP window (its
route's :func:`genie.core.tcp_window.testbed_window_bytes`) - on the link out of the flow's own host, up to
what TCP small queues lets into that qdisc (:func:`genie.core.tcp_window.sender_queue_bytes`) - the whole at
most the link's queue limit (``Resource.queue_limit_bytes``). A link is saturated when the max-min rates fill
what it delivers to that many flows (:func:`contended_load`). Only other ops' flows count: a step's own flows
start together, so they find no queue of their own (their sharing is the rates'). A step of a multi-step op
pays its flows' waits as :func:`step_wait_ns` combines them; a ring's chunk (ring chains) waits as a FIFO
passes it, the queue less what its max-min share charges again once it moves (:func:`fifo_wait_ns`). Measured
against the testbed in
benchmarks/README.md "Job mixes" (the spread TP job behind DDP's queues).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from genie.core.tcp_window import sender_queue_bytes, testbed_window_bytes

from astra_adapter.fabric.network import FabricNetwork

class MovingQueueEntries(NamedTuple):
    """A step's queue entries whose flow moves (:meth:`StandingQueues.moving_entries`), in entry order."""

    hop: np.ndarray  # each entry's hop from its flow's sending host
    res: np.ndarray  # its resource
    w: np.ndarray  # its flow's weight there
    flow: np.ndarray  # its flow's index (ascending)
    own: np.ndarray  # whether it is its sender's own link
    resources: frozenset[int]  # the set of those resources (crossing tests)


_MOVING_MEMO = 8192  # (step, moving flows) whose queue entries :meth:`StandingQueues.moving_entries` keeps
_FLOWS_MEMO = 1024  # (step, flows with a rate) whose flows per resource :meth:`StandingQueues.flows_on` keeps (an
# array the size of the resources each)
SATURATED_FRACTION = 1.0 - 1e-6  # a resource loaded to this fraction of its capacity is saturated


def contended_load(moved: np.ndarray, flows_on: np.ndarray, flow_contention: float) -> np.ndarray:
    """A resource's load on the scale of its calibrated rate: ``moved`` (bytes/ns) times the contention factor
    ``1 + flow_contention x (n - 1)`` of its ``flows_on`` (n) moving flows. The max-min solve fills a link
    crossed by n flows only to ``rate / (1 + flow_contention x (n - 1))`` (``FabricParams.flow_contention``);
    compared with the rate itself, a link two TCP flows share would never read as saturated, and their queue
    would never count (the 2026-12-04 fit put ``flow_contention`` at 0.006: a spine link two DDP flows kept
    full read as 99.4 % loaded and the TP job behind it waited for nothing)."""
    return moved * (1.0 + flow_contention * np.maximum(flows_on - 1.0, 0.0))


def kept_bytes(active: np.ndarray, left_bytes: np.ndarray, window_bytes: np.ndarray) -> np.ndarray:
    """Per flow, what it keeps in flight: what its connection still sends (``left_bytes``: this step's bytes
    left and the later steps', :func:`later_step_bytes`), up to its window; 0 for a flow not moving."""
    return np.minimum(np.where(active, left_bytes, 0.0), window_bytes)


def later_step_bytes(steps: tuple) -> tuple[np.ndarray, ...]:
    """Per step of an op and per flow of it, the wire bytes the same connection (sender -> receiver) moves in the
    op's later steps.

    What a TCP flow keeps queued is bounded by what its sender still has to send, and a ring's connection sends
    in every step: as the step's last bytes leave, the next step's data follows on the same connection as soon
    as the rank's own receive is in, and the queue does not drain between ring steps (measured 2026-12-04 on
    the oversubscribed leaf-spine: the spine link two DDP4 ring flows share held 5-6 MiB on average of their
    6 MiB of windows through the whole all-reduce, load 10-14). Counting only the step's own bytes left would
    empty the queue at every step's tail."""
    out: list[np.ndarray] = [np.zeros(0)] * len(steps)
    after: dict[tuple[int, int], float] = {}
    for k in range(len(steps) - 1, -1, -1):
        s = steps[k]
        pairs = list(zip(s.src.tolist(), s.dst.tolist()))
        out[k] = np.array([after.get(pair, 0.0) for pair in pairs])
        for pair, size in zip(pairs, s.wire_bytes.tolist()):
            after[pair] = after.get(pair, 0.0) + size
    return tuple(out)


class StandingQueues:
    """Per step of an op (memoised: its flows' resources, weights and windows, each resource's hop along the
    flow's path); per moment the queues the flows in flight keep, and the wait a step's flows have behind them."""

    def __init__(self, network: FabricNetwork, capacity: np.ndarray, incidence, flow_contention: float = 0.0) -> None:
        self.network = network
        self.capacity = capacity  # bytes per ns (calibrated rates)
        self.flow_contention = flow_contention  # FabricParams.flow_contention: what n flows cost a link's rate
        self.limit = np.array([float(r.queue_limit_bytes) for r in network.resources])
        self.sender_limit = np.array([float(sender_queue_bytes(r.rate_bps)) for r in network.resources])
        self._order: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.incidence = incidence  # route id -> (resources, weights), sorted by resource
        self._windows: dict[int, float] = {}
        self._steps: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._later: dict[int, tuple[np.ndarray, ...]] = {}
        self._rows: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._moving: dict[tuple[int, bytes], MovingQueueEntries] = {}  # :meth:`moving_entries`
        self._flows_of: dict[tuple[int, bytes], tuple] = {}  # :meth:`flows_on`, per step and flows with a rate

    def later_bytes(self, steps: tuple, k: int) -> np.ndarray:
        """Per flow of ``steps[k]``, the wire bytes its connection (same sender and receiver) still sends in the
        op's later steps (memoised per op plan; :func:`later_step_bytes`)."""
        hit = self._later.get(id(steps))
        if hit is None:
            hit = self._later[id(steps)] = later_step_bytes(steps)
        return hit[k]

    def window_bytes(self, rid: int) -> float:
        hit = self._windows.get(rid)
        if hit is None:
            route = self.network.routes[rid]
            first = self.network.resources[route.loads[0][0]] if route.loads else None
            rate = first.rate_bps if first is not None else 0
            hit = self._windows[rid] = float(testbed_window_bytes(rate, 2 * route.delay_ns / 1000))
        return hit

    def entries(self, step) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Of ``step``: its flows' resources, weights and flow indices, and each flow's window (:meth:`_arrays`)."""
        return self._arrays(step)

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

    def path_order(self, step) -> tuple[np.ndarray, np.ndarray]:
        """Per entry of ``step``'s resources (:meth:`_arrays`, sorted by resource, not along the path): its hop
        from the flow's sending host (0: the link out of that host, where TCP small queues bounds what the flow
        queues, :func:`sender_queue_bytes`), and whether it is that first link."""
        hit = self._order.get(id(step))
        if hit is None:
            res, _, flow, _ = self._arrays(step)
            senders = [self.network.rank_hosts[rank] for rank in step.src.tolist()]
            hops = {host: self.network.hops_from(host) for host in set(senders)}  # the network's memo
            entries = [(self.network.resources[r], senders[f]) for r, f in zip(res.tolist(), flow.tolist())]
            hop = np.array([hops[host].get(r.a, 0) for r, host in entries], dtype=np.int64)
            own = np.array([r.a == host != r.b for r, host in entries], dtype=bool)
            hit = self._order[id(step)] = (hop, own)
        return hit

    def load(self, rated: list) -> np.ndarray:
        """Bytes/ns on each resource from ``(step, rates in bytes/ns)`` of every step moving, scaled up by what
        flow contention took from the resource (:func:`contended_load`), so a link the max-min solve filled reads
        as full."""
        if not rated:
            return np.zeros(len(self.capacity))
        arrays = [self._arrays(step) for step, _ in rated]
        return self.load_on(np.concatenate([a[0] for a in arrays]), np.concatenate([a[1] for a in arrays]),
                            np.concatenate([rate[a[2]] for a, (_, rate) in zip(arrays, rated)]))

    def load_on(self, res: np.ndarray, w: np.ndarray, rate: np.ndarray) -> np.ndarray:
        """:meth:`load` from its entries: per entry a resource, the flow's weight there and the flow's rate
        (0: not moving), summed per resource in the entries' order."""
        moved = np.bincount(res, weights=w * rate, minlength=len(self.capacity))
        if self.flow_contention <= 0:
            return moved
        flows_on = np.bincount(res, weights=w * (rate > 0), minlength=len(self.capacity))
        return contended_load(moved, flows_on, self.flow_contention)

    def queued_bytes(self, in_flight: list, load: np.ndarray) -> np.ndarray:
        """Bytes standing in each resource's queue, given the steps in flight: ``(step, active mask, bytes left)``
        each, and the ``load`` that says which resources are saturated."""
        res_l, w_l, flow_l, keep_l, own_l, hop_l = [], [], [], [], [], []
        offset = 0
        for step, active, left in in_flight:
            res, w, flow, win = self._arrays(step)
            hop, res_on, w_on, flow_on, own_on, _ = self.moving_entries(step, active)
            hop_l.append(hop)
            own_l.append(own_on)
            res_l.append(res_on)
            w_l.append(w_on)
            flow_l.append(flow_on + offset)
            keep_l.append(kept_bytes(active, left, win))
            offset += len(active)
        if not offset:
            return np.zeros(len(self.capacity))
        return self.queued_on(np.concatenate(res_l), np.concatenate(w_l), np.concatenate(flow_l),
                              np.concatenate(hop_l), np.concatenate(own_l), np.concatenate(keep_l), load)

    def moving_entries(self, step, active: np.ndarray) -> MovingQueueEntries:
        """(hop, resource, weight, flow index, own link) of ``step``'s entries whose flow is ``active``, and the
        set of those resources (memoised per step and set of moving flows: a ring's connections keep one set for
        most of the op)."""
        key = (id(step), active.tobytes())
        hit = self._moving.get(key)
        if hit is None:
            res, w, flow, _ = self._arrays(step)
            on = active[flow]
            hop, own = self.path_order(step)
            if len(self._moving) >= _MOVING_MEMO:
                self._moving.clear()
            hit = self._moving[key] = MovingQueueEntries(hop[on], res[on], w[on], flow[on], own[on],
                                                         frozenset(res[on].tolist()))
        return hit

    def saturated(self, load: np.ndarray) -> np.ndarray:
        """Per resource, whether a queue can stand on it: loaded full (``load``, :meth:`load`) and with room."""
        return (load >= SATURATED_FRACTION * self.capacity) & (self.limit > 0)

    def queued_on(self, res: np.ndarray, w: np.ndarray, flow: np.ndarray, hop: np.ndarray, own: np.ndarray,
                  keep: np.ndarray, load: np.ndarray) -> np.ndarray:
        """:meth:`queued_bytes` from its entries: per entry of a moving flow its resource, weight, flow index
        (ascending in the flows' order), hop from the sender and whether it is the sender's own link; per flow
        (indexed by ``flow``) what it keeps in flight (bytes left, up to its window)."""
        queued = np.zeros(len(self.capacity))
        full = self.saturated(load)
        at = np.flatnonzero(full[res])
        if not len(at):
            return queued
        at = at[np.lexsort((hop[at], flow[at]))]  # per flow, its saturated links along its path
        flows, first = np.unique(flow[at], return_index=True)  # each flow's queue: at its first bottleneck
        at = at[first]
        keep = keep[flows]
        own = own[at]  # a queue on the sender's own link: what TCP small queues lets in
        keep[own] = np.minimum(keep[own], self.sender_limit[res[at][own]])
        np.add.at(queued, res[at], w[at] * keep)
        return np.minimum(queued, self.limit)

    def flows_on(self, rated: list) -> np.ndarray:
        """Per resource, how many flows of ``(step, rates)`` move on it (weighted as the load is): the flows a chunk
        that joins a queue there shares the resource's rate with once it moves (:func:`fifo_wait_ns`). Each step's
        count is a function of the step and which of its flows have a rate: kept per (step, those flows), and
        added step by step in the order given (the same floats as counting each again)."""
        n = np.zeros(len(self.capacity))
        kept = self._flows_of
        for step, rate in rated:
            key = (id(step), (rate > 0).tobytes())
            hit = kept.get(key)
            if hit is None or hit[0] is not step:  # the entry keeps its step: its id names no other
                res, w, flow, _ = self._arrays(step)
                hit = (step, np.bincount(res, weights=w * (rate[flow] > 0), minlength=len(self.capacity)))
                if len(kept) >= _FLOWS_MEMO:
                    kept.clear()
                kept[key] = hit
            n += hit[1]
        return n

    def chunk_waits_ns(self, queued: np.ndarray, routes: np.ndarray, chunk_bytes: np.ndarray,
                       flows_on: np.ndarray) -> np.ndarray:
        """Per ring connection (its route id and the chunk it starts, wire bytes), its wait behind the queues on
        its path as a FIFO gives it (:func:`fifo_wait_ns`)."""
        out = np.zeros(len(routes))
        for k, rid in enumerate(routes.tolist()):
            res, w = self.incidence(rid)
            out[k] = fifo_wait_ns(w, queued[res], self.capacity[res], flows_on[res], float(chunk_bytes[k]))
        return out

    def delay_ns(self, queued: np.ndarray, step_routes: np.ndarray, receivers: np.ndarray | None = None) -> float:
        """The wait a step pays behind the queues on its flows' paths: the longest one flow has, or with
        ``receivers`` (each flow's receiving rank, given for a step of a multi-step op) the combination
        :func:`step_wait_ns` gives."""
        routes, res, w, bounds = self._route_rows(step_routes)
        part = w * queued[res] / self.capacity[res]  # per route, its links' waits in path order
        crossed = np.concatenate(([0], np.cumsum(part != 0)))[bounds]
        waits = np.zeros(len(routes))
        for k in np.flatnonzero(crossed[1:] > crossed[:-1]).tolist():  # a route without a queue waits 0.0
            waits[k] = np.sum(part[bounds[k]:bounds[k + 1]])
        if receivers is None:
            return float(np.max(waits, initial=0.0))
        return step_wait_ns(waits[np.searchsorted(routes, step_routes)], receivers)

    def _route_rows(self, step_routes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The distinct routes of ``step_routes`` (sorted), their resources and weights one route after the
        other in path order, and each route's bounds in them (memoised per set of routes)."""
        key = step_routes.tobytes()
        hit = self._rows.get(key)
        if hit is None:
            routes = np.unique(step_routes)
            parts = [self.incidence(rid) for rid in routes.tolist()]
            hit = self._rows[key] = (
                routes, np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64),
                np.concatenate([p[1] for p in parts]) if parts else np.zeros(0),
                np.concatenate(([0], np.cumsum([len(p[0]) for p in parts], dtype=np.int64))).astype(np.int64))
        return hit


def fifo_wait_ns(w: np.ndarray, queued: np.ndarray, capacity: np.ndarray, flows_on: np.ndarray,
                 chunk_bytes: float) -> float:
    """A ring chunk's wait behind the queues along its path (per resource: its weight ``w``, ``queued`` bytes,
    ``capacity`` in bytes/ns, the ``flows_on`` it of other ops), a FIFO's: ``(queued - n x chunk) / rate`` each.

    A chunk of ``b`` bytes that joins a FIFO behind ``Q`` bytes leaves it ``(Q + b) / rate`` later: its bytes
    pass the link at the link's rate in their turn. The engine, after the wait, moves the chunk at its max-min
    share of the link, ``rate / (n + 1)`` beside the ``n`` flows that keep the queue: ``(n + 1) b / rate``. So the
    wait is the queue less the ``n b`` the share charges again, at least 0. ``chunk_bytes`` is the chunk up to
    what its sender's own link lets out at once (``ring_chunk_bytes``). Measured on
    the oversubscribed leaf-spine (benchmarks/README.md "Job mixes", the bucket0 section): the spread TP job's
    196 KB all-reduces behind DDP's queues took 0.7-9.3 ms more than its 512 B ones in the replay, where
    queue-then-share gave 5.4-13.1 ms more (3.3-9.8 with this wait)."""
    return float(np.sum(w * np.maximum(queued - flows_on * chunk_bytes, 0.0) / capacity))


def step_wait_ns(waits_ns: np.ndarray, receivers: np.ndarray) -> float:
    """What a step of a multi-step op pays for its flows' waits (``waits_ns``, one per flow, behind the queues on
    its path): the mean when every rank receives one of the step's flows at most, else the longest.

    The engine moves an op's ranks through its steps together, but on the testbed a rank starts its next step
    when its own receive is in, so a queue's wait delays only the ranks downstream of that flow: the chain of
    receives that makes the op's critical path crosses the ring's flows in turn, one per step. A 2-rank
    all-reduce (a TP pair) whose one direction crosses a queue of ``q_a`` and the other ``q_b`` ends ``q_a +
    q_b`` late, not ``2 x max`` (measured 2026-12-04 on the oversubscribed leaf-spine: TP all-reduces of 512 B
    took 100 ms behind DDP's 6 MiB queue in one direction - 100 ms of queue - and a partly filled one back,
    where the longest wait per step gives 200 ms). Over the op's steps that is the mean of the flows' waits per
    step. A rank that receives several flows in one step (an all-to-all, a direct algorithm) waits for the
    slowest of them: there the longest wait stands."""
    if not len(waits_ns):
        return 0.0
    if len(np.unique(receivers)) == len(receivers):
        return float(np.mean(waits_ns))
    return float(np.max(waits_ns))


def ring_chunk_bytes(queues, op) -> np.ndarray:
    """Per connection of a ring-like op, the chunk a FIFO wait is reckoned with: its first step's wire bytes (a
    ring's chunks are one size), up to what its sender's own link queues at once (TCP small queues,
    :func:`genie.core.tcp_window.sender_queue_bytes`: the burst that reaches the bottleneck at the host's rate;
    the rest of a long chunk comes ACK-clocked, at its share)."""
    net = queues.network
    return np.minimum(op.sizes[0], [queues.sender_limit[net.routes[rid].loads[0][0]] if net.routes[rid].loads else 0.0
                                    for rid in op.steps[0].routes.tolist()])
