"""A ring's ranks each on their own step (pure, numpy): every connection moves its chunks in turn, a chunk as
soon as its sender has received the previous step's - the replay's data dependency - not when every rank has.

:class:`astra_adapter.fabric.flows.FlowEngine` moves an op's ranks through its steps together: a step ends when
its slowest flow does. The replay does not (``genie.engine.executor.run_schedule``): a rank starts its next step
once its own receives of the step before are in, its sends of that step still queued on their connection. On a
ring whose connections move at unequal rates - another job's elephants share some of its links, not others -
the ranks behind the slow connection fall behind and the others run ahead: the op ends rank by rank, the
ranks upstream of the bottleneck up to a few chunks' time before the last (measured on the oversubscribed
leaf-spine, benchmarks/README.md "Job mixes": the MoE EP4 job's 82 MB ring all-reduce beside a DDP ring left
its four ranks over 0.5-1.2 s where the lock-step model leaves them within 0.3 s, and its next iteration's
all-to-all then waits for the last). A job whose iterations follow each other without a barrier (a mix) carries
that skew into its iteration.

A *ring-like* op (:func:`ring_like`): every step runs the same connections, one into and one out of each rank.
Its state here is per connection: the chunk (step) it is on, the bytes left of it, the wait before it moves
(the step's latency, and with standing queues its own wait behind them, counted from when the chunk's data came
in - a wait delays only the ranks downstream of that connection, which is what
:func:`astra_adapter.fabric.queues.step_wait_ns`'s mean approximates in lock step), and whether its sender has
the data yet: connection ``s -> d`` moves chunk ``k`` once the connection into ``s`` has delivered chunk
``k - 1``. A rank leaves the op when its receives are in and its last send is written into its socket (all but
the send buffer sent). Rates stay the engine's max-min solve over every flow moving.
"""

from __future__ import annotations

import numpy as np

from genie.core.htb import CATCH_UP_FRACTION
from genie.core.tcp_window import RENDEZVOUS_MIN_BYTES, send_buffer_bytes

# a connection moving faster than its sender's link's ceil (HTB's rate x 1.02) does so only in an after-idle burst
# of every link on its path (astra_adapter.fabric.credit): nothing queues then (RingOp.move)
SENDER_CEIL = 1.0 + CATCH_UP_FRACTION


def ring_sides(network, capacity: np.ndarray, step, refill: bool, wire_per_payload: float
               ) -> tuple[np.ndarray, np.ndarray | None]:
    """Per connection of a ring-like op's ``step`` on ``network`` (resource ``capacity`` in bytes/ns): what its
    sender's socket holds (:func:`genie.core.tcp_window.send_buffer_bytes`, wire bytes) and, with ``refill``, the
    rate its sender's own link puts its bytes on the wire - the link out of the sender's host on its route
    (infinite where it has none, a loopback): how fast the connection refills its queue after a step's gap
    (:meth:`RingOp.standing_bytes`)."""
    buffers, inject = [], []
    for src, rid in zip(step.src.tolist(), step.routes.tolist()):
        route = network.routes[rid]
        rate = network.resources[route.loads[0][0]].rate_bps if route.loads else 0
        buffers.append(send_buffer_bytes(rate, 2 * route.delay_ns / 1000) * wire_per_payload)
        host = network.rank_hosts[src]
        own = [r for r, _ in route.loads if network.resources[r].a == host != network.resources[r].b]
        inject.append(float(capacity[own[0]]) if own else np.inf)
    return np.array(buffers), np.array(inject) if refill else None


def pair_start_connections(steps: tuple) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, int]]] | None:
    """A ring-like op (:func:`ring_like`) whose every connection moves at least the clear-to-send size over the
    op (:data:`genie.core.tcp_window.RENDEZVOUS_MIN_BYTES`, payload) and whose every rank both sends and receives
    in it: its connections' senders and receivers, and per rank the peer it sends to and the one it receives
    from. Such a connection starts when its own pair is in - its sender has entered the op and holds its
    receiver's clear-to-send token, sent when the receiver entered (``genie.engine.program.clear_to_send``) -
    not when the op's last member enters (:attr:`RingOp.held`). None for any other op (it starts at its last
    member's entry)."""
    if not ring_like(steps):
        return None
    first = steps[0]
    src, dst = first.src.tolist(), first.dst.tolist()
    if set(src) != set(dst) or not np.all(sum(step.bytes for step in steps) >= RENDEZVOUS_MIN_BYTES):
        return None
    into = dict(zip(dst, src))
    return first.src, first.dst, {s: (d, into[s]) for s, d in zip(src, dst)}


class PairStarts:
    """A flow engine's ring-like ops that start pair by pair (with ring chains): the replay's sender of at least
    the clear-to-send size per peer and op waits for its receiver's token, sent when the receiver enters the op
    (``genie.engine.program.clear_to_send``), not for the op's last member. Measured (benchmarks/README.md, "The
    DDP ring's step-boundary drains"): the two DDP ranks fed over one uplink left each all-reduce 8-31 ms apart on
    the testbed, together (0.0 ms) in a model that started the whole ring at its last member's entry."""

    _pairs: dict | None = None  # per plan (by id): it, and its pair-start connections (pair_starts)
    releases = 0  # held connections released (a counter for the tests and benchmarks)

    def pair_starts(self, steps: tuple) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, int]]] | None:
        """With ring chains, :func:`pair_start_connections` of the plan ``steps`` (kept per plan): the player starts
        such an op at its first pair in, ``held`` the others (``start``), and releases each as its pair comes in."""
        if not self.params.ring_chains:  # type: ignore[attr-defined]
            return None
        if self._pairs is None:
            self._pairs = {}
        hit = self._pairs.get(id(steps))
        if hit is None or hit[0] is not steps:  # (the entry keeps its steps: their id names no other while here)
            hit = self._pairs[id(steps)] = (steps, pair_start_connections(steps))
        return hit[1]

    def release(self, op: RingOp, which: np.ndarray) -> None:
        """Held connections ``which`` (mask) of the ring ``op`` may start: their pairs are in (now)."""
        op.release(which)
        self.releases += int(np.count_nonzero(which))
        self._begin_chunks(op)  # type: ignore[attr-defined]

    _fifos: dict | None = None  # per plan (by its first step's id): it, and its FIFO table (RingOp.fifo)

    def _new_ring(self, steps: tuple, held: np.ndarray | None) -> "RingOp":
        """A ring-like op's state (the engine's ``ring_op``), ``held`` its connections held at chunk 0 and, with
        standing queues, its connections' shared links for the FIFO order of their chunks
        (:meth:`RingOp.fifo_waits`)."""
        first = steps[0]
        buffers, inject = self._ring_sides(first)  # type: ignore[attr-defined]
        ring = self.ring_op(steps, buffers, inject).hold(held)  # type: ignore[attr-defined]
        if self.queues is not None and inject is not None:  # type: ignore[attr-defined]
            if self._fifos is None:
                self._fifos = {}
            hit = self._fifos.get(id(first))
            if hit is None or hit[0] is not first:
                capacity = self.capacity if self.credit is None else \
                    self.credit.sustained(self.capacity)  # type: ignore[attr-defined]
                windows = self.queues.entries(first)[3]  # type: ignore[attr-defined]  # each flow's window
                hit = self._fifos[id(first)] = (first, fifo_sharing(self.network, capacity, first,  # type: ignore
                                                                     inject), windows)
            if hit[1] is not None:
                ring.fifo, ring.fits, ring.windows = hit[1], ring.sizes <= hit[2], hit[2]
        return ring


def fifo_sharing(network, capacity: np.ndarray, step, inject: np.ndarray) -> tuple | None:
    """Per connection of a ring-like op's ``step`` on ``network``: the links of its path it shares with other
    connections of the op and where its bytes queue (the link's ``capacity`` below its sender's own rate,
    ``inject``), as (rate in bytes/ns, the other connections) - :meth:`RingOp.fifo_waits`; None where none shares
    one. Only whole-path links count (an ECMP route's expected shares do not)."""
    full = [{r for r, w in network.routes[rid].loads if w == 1.0} for rid in step.routes.tolist()]
    users: dict[int, list[int]] = {}  # per link, the connections crossing it whole (ascending)
    for c, mine in enumerate(full):
        for r in mine:
            users.setdefault(r, []).append(c)
    out, shared = [], False
    for c, mine in enumerate(full):
        rows = []
        for r in sorted(mine):
            others = tuple(p for p in users[r] if p != c)
            if others and capacity[r] < inject[c]:
                rows.append((float(capacity[r]), others))
        out.append(tuple(rows))
        shared = shared or bool(rows)
    return tuple(out) if shared else None


def ring_like(steps: tuple) -> bool:
    """True for a multi-step op whose every step runs the same connections (same sender -> receiver, same
    routes), each rank sending at most one flow and receiving at most one per step: a ring's shape."""
    if len(steps) < 2:
        return False
    first = steps[0]
    if not len(first.src) or len(np.unique(first.src)) != len(first.src) or \
            len(np.unique(first.dst)) != len(first.dst):
        return False
    return all(s is first or (np.array_equal(s.src, first.src) and np.array_equal(s.dst, first.dst)
                              and np.array_equal(s.routes, first.routes)) for s in steps[1:])


class RingOp:
    """A ring-like op in flight, per connection (see the module doc), with what the engine reads of an op
    (:class:`astra_adapter.fabric.flows.FabricOp`'s fields): ``step`` stays 0 (every step has the same routes,
    so the engine's rates read ``steps[0]``), ``latency_ns`` 0 (the waits are per connection), ``left`` and
    ``active`` per connection. ``steps``: the op's :class:`astra_adapter.fabric.flows.StepFlows`."""

    __slots__ = ("steps", "step", "latency_ns", "left", "active", "active_count", "done", "chunk", "wait", "ready",
                 "next_ready", "next_wait", "pred", "sizes", "before", "latencies", "count", "send_buffer", "_index",
                 "_remaining", "_done", "_busy_key", "_busy", "inject", "fill", "fill_start", "held", "holding",
                 "fifo", "fits", "windows", "queued_seq", "next_seq", "_seq")

    def __init__(self, steps: tuple, send_buffer: np.ndarray | None = None,
                 inject: np.ndarray | None = None) -> None:
        self.steps = steps
        self.latency_ns = 0.0
        self.done = False
        first = steps[0]
        n = len(first.src)
        self.step = 0
        self.count = len(steps)  # chunks per connection
        self.sizes = np.array([s.wire_bytes for s in steps])  # [chunk, connection]
        # per chunk and connection: the bytes of the chunks before it (what the connection has sent when it starts
        # that chunk); with a column of totals, the bytes up to any chunk a sender has the data for
        self.before = np.concatenate((np.zeros((1, n)), np.cumsum(self.sizes, axis=0)))
        self.latencies = np.array([s.latency_ns for s in steps])
        # per connection, the bytes its socket holds (genie.core.tcp_window.send_buffer_bytes, on the wire's scale):
        # the sender leaves once its last chunk is written and no more than this of it is still to arrive
        self.send_buffer = np.zeros(n) if send_buffer is None else np.asarray(send_buffer, dtype=float)
        # per connection, the rate its sender's own link puts bytes on the wire (bytes/ns; None: at once), and the
        # bytes it has put into the queues since it last started a chunk from empty (:meth:`standing_bytes`)
        self.inject = None if inject is None else np.asarray(inject, dtype=float)
        self.fill_start = np.inf if inject is None else 0.0
        self.fill = np.full(n, self.fill_start)
        into = {int(d): k for k, d in enumerate(first.dst.tolist())}
        self.pred = np.array([into.get(int(s), -1) for s in first.src.tolist()], dtype=np.int64)
        self.chunk = np.zeros(n, dtype=np.int64)
        self.left = np.zeros(n)
        self.wait = np.zeros(n)
        self.ready = np.zeros(n, dtype=bool)  # its sender has the chunk's data: waiting out ``wait`` or moving
        # the next chunk's data is in while the connection is still on its chunk: the next chunk joined the
        # queues then, and its wait behind them (next_wait) runs down from that moment, not from its start
        self.next_ready = np.zeros(n, dtype=bool)
        self.next_wait = np.zeros(n)
        self.active = np.zeros(n, dtype=bool)
        self.active_count = 0
        self._index = np.arange(n)
        self._done = 1e-6 + 1e-9 * float(self.sizes.max(initial=0.0))  # a chunk with less left is through
        self._remaining: np.ndarray | None = None  # remaining_bytes until the state next changes
        self._busy_key = b""  # busy_ranks: the masks it was last computed from, and its answer
        self._busy: set[int] = set()
        # per connection, held at its chunk 0 until its pair is in (:func:`pair_start_connections`; the player
        # releases it, :meth:`release`); ``holding``: any held
        self.held = np.zeros(n, dtype=bool)
        self.holding = False
        # per connection, its shared links where chunks queue in arrival order (fifo_sharing; None: no FIFO order),
        # and per chunk and connection whether the chunk fits its window (all of it in the queue at once)
        self.fifo: tuple | None = None
        self.fits: np.ndarray | None = None
        self.windows: np.ndarray | None = None  # per connection, its window (bytes)
        # with a FIFO order: per connection, when its chunk joined the queues (an order number: a chunk fed early
        # at its feed, :meth:`queue_next`, another at its start), and when its next chunk did (fed early)
        self._seq = 0
        self.queued_seq = np.zeros(n, dtype=np.int64)
        self.next_seq = np.zeros(n, dtype=np.int64)

    def fifo_waits(self, which: np.ndarray, extra_wait_ns: np.ndarray) -> np.ndarray:
        """``extra_wait_ns`` of connections ``which`` starting their chunk now, with the FIFO order of chunks
        that fit their window (:attr:`fifo`): such a chunk waits, on each link it shares with other connections of
        the op where its bytes queue, the bytes of theirs queued ahead of it at the link's rate (the longest of its
        links). A chunk not fed early joins the queue now, behind the rest of their chunks under way and of the
        ones starting now fed early or with a lower connection index (a tie at one instant is the model's, the
        replay's arrivals are never equal). A chunk fed early (``next_ready``: its data came in while its
        connection was still on its previous chunk) joined at its feed (:meth:`queue_next`): it waits the rest of
        their chunks queued before that and their next chunks fed before it (up to their windows), added to what
        is left of its wait behind the other ops' queues (``next_wait``). Max-min shares would end them together;
        a FIFO serves them in turn (measured: DDP's bucket0, benchmarks/README.md "The DDP ring's step-boundary
        drains"; the way back's two connections, both fed early every step, "The DDP ring's bucket1 gap")."""
        fifo, fits, windows = self.fifo, self.fits, self.windows
        if fifo is None or fits is None or windows is None:
            return extra_wait_ns
        chunk, ready, left, sizes, fed, count = self.chunk, self.ready, self.left, self.sizes, self.next_ready, \
            self.count
        queued, nxt = self.queued_seq, self.next_seq
        self._seq += 1
        now = self._seq
        out = None
        for c in np.flatnonzero(which).tolist():
            if not fits[chunk[c], c]:
                continue
            key = nxt[c] if fed[c] else now
            longest = 0.0
            for rate, others in fifo[c]:
                ahead = 0.0
                for p in others:
                    k = chunk[p]
                    if k >= count:
                        continue
                    mine = 0.0
                    if which[p]:  # starting now too: its chunk joined at its feed, or now
                        at = nxt[p] if fed[p] else now
                        if fits[k, p] and (at < key or (at == key and p < c)):
                            mine = sizes[k, p]
                    else:
                        if ready[p] and fits[k, p] and queued[p] < key:
                            mine = left[p]
                        if fed[c] and fed[p] and k + 1 < count and fits[k + 1, p] and nxt[p] < key:
                            mine += sizes[k + 1, p]
                    ahead += min(mine, windows[p])
                if ahead / rate > longest:
                    longest = ahead / rate
            if longest > 0.0:
                if fed[c]:  # begin reads what is left of its wait behind the other ops' queues
                    self.next_wait[c] += longest
                else:
                    if out is None:
                        out = np.array(extra_wait_ns, dtype=float)
                    out[c] += longest
        queued[which] = np.where(fed[which], nxt[which], now)
        return extra_wait_ns if out is None else out

    def hold(self, which: np.ndarray | None) -> "RingOp":
        """Connections ``which`` (mask; None: none) wait at their chunk 0 until released (set before the op's first
        chunks start); the op."""
        if which is not None:
            self.held = np.array(which, dtype=bool)
            self.holding = bool(self.held.any())
        return self

    def release(self, which: np.ndarray) -> None:
        """Connections ``which`` (mask) are no longer held: their chunk 0 starts at the engine's next chunk starts."""
        self.held &= ~which
        self.holding = bool(self.held.any())

    def startable(self) -> np.ndarray:
        """Connections not yet on their way (nor held) whose sender has the data for their chunk: the connection
        into the sender has delivered the chunk before (or there is none, or it is the first chunk)."""
        pred_chunk = np.where(self.pred >= 0, self.chunk[np.maximum(self.pred, 0)], self.count)
        which = ~self.ready & (self.chunk < self.count) & ((self.chunk == 0) | (pred_chunk >= self.chunk))
        return which & ~self.held if self.holding else which

    def arriving(self) -> np.ndarray:
        """Connections on a chunk whose next chunk's data has come in since (not yet counted): it joins the
        queues now (:meth:`queue_next`)."""
        nxt = self.chunk + 1
        pred_chunk = np.where(self.pred >= 0, self.chunk[np.maximum(self.pred, 0)], self.count)
        return self.ready & ~self.next_ready & (nxt < self.count) & (pred_chunk >= nxt)

    def queue_next(self, which: np.ndarray, wait_ns: np.ndarray) -> None:
        """The next chunk of connections ``which`` joined the queues now: ``wait_ns`` behind them from now."""
        self.next_ready[which] = True
        self.next_wait[which] = wait_ns[which]
        if self.fifo is not None:
            self._seq += 1
            self.next_seq[which] = self._seq

    def begin(self, which: np.ndarray, extra_wait_ns: np.ndarray) -> None:
        """Connections ``which`` (mask) start their chunk: its latency plus its wait behind the standing
        queues - ``extra_wait_ns`` (from now), or what is left of the wait it began when its data came in while
        the connection was still on its previous chunk - then its bytes (and the FIFO order, :meth:`fifo_waits`)."""
        extra_wait_ns = self.fifo_waits(which, extra_wait_ns)
        self._remaining = None
        k = self.chunk[which]
        extra_wait_ns = np.where(self.next_ready, self.next_wait, extra_wait_ns)
        self.fill[which & ~self.next_ready] = self.fill_start  # nothing of it in flight: it fills from empty
        self.next_ready[which] = False
        self.next_wait[which] = 0.0
        self.ready[which] = True
        self.left[which] = self.sizes[k, np.flatnonzero(which)]
        self.wait[which] = self.latencies[k] + extra_wait_ns[which]
        self._refresh()

    def move(self, dt_ns: float, rate: np.ndarray | None) -> bool:
        """``dt_ns`` passes: waits run down, moving connections move at ``rate``; a connection whose chunk is
        through goes on to the next (not yet ready). True when some connection finished a chunk."""
        had = self._had_bytes(dt_ns, rate)
        self._remaining = None
        waiting = self.ready & ~self.active
        if waiting.any():
            self.wait[waiting] = np.maximum(self.wait[waiting] - dt_ns, 0.0)
        if self.next_ready.any():
            self.next_wait[self.next_ready] = np.maximum(self.next_wait[self.next_ready] - dt_ns, 0.0)
        if rate is not None and self.active_count:
            if self.inject is not None:  # what its sender puts on the wire beyond what the bottleneck takes
                # (at or near its sender's rate: its own link holds it, the queue is there; above its ceil: a
                # burst of every link on its path after idle, which queues nothing - the fill stays)
                grow = self.inject - rate
                grown = np.where(grow > 0, self.fill + grow * dt_ns,
                                 np.where(rate <= self.inject * SENDER_CEIL, np.inf, self.fill))
                self.fill = np.where(self.active, grown, self.fill)
            self.left = np.where(self.active, self.left - rate * dt_ns, self.left)
        through = self.ready & (self.wait <= 1e-6) & (self.left <= self._done)
        went = bool(through.any())
        if went:
            self.chunk[through] += 1
            self.ready[through] = False
            self.left[through] = 0.0
            self.done = bool(np.all(self.chunk >= self.count))  # the chunks only change here
        self._refresh()
        if had is not None:
            np.minimum(self.fill, had, out=self.fill)
        return went

    def _had_bytes(self, dt_ns: float, rate: np.ndarray | None) -> np.ndarray | None:
        """Per connection, the least it had to send over the next ``dt_ns`` moved at ``rate``: what it has now less
        what it moves - the data that comes in at the end of that time (a chunk going through upstream) not yet
        counted. Its queue holds no more than that (:meth:`standing_bytes`); None without a refill (``inject``)."""
        if self.inject is None:
            return None
        had = self.remaining_bytes().copy()
        if rate is not None and self.active_count:
            had -= np.where(self.active, rate * dt_ns, 0.0)
        return np.maximum(had, 0.0, out=had)

    def horizon_ns(self, rate: np.ndarray | None) -> float:
        """Time to the next wait running out, chunk going through, or last chunk fitting in its sender's socket
        (its sender leaves then, :meth:`busy_ranks`) at ``rate``."""
        best = float("inf")
        idle = self.ready & ~self.active  # in their latency or wait
        if idle.any():
            waits = self.wait[idle]
            if not (waits > 0).all():
                return 0.0  # a chunk of nothing: through now
            best = float(np.min(waits))
        if rate is not None and self.active_count:
            on = self.active
            best = min(best, float(np.min(self.left[on] / rate[on])))
            filling = on & (self.chunk == self.count - 1) & (self.left > self.send_buffer)
            if filling.any():
                best = min(best, float(np.min((self.left[filling] - self.send_buffer[filling]) / rate[filling])))
        return best

    def busy_ranks(self) -> set[int]:
        """Ranks still in the op: receiving a chunk yet, or sending one not yet written whole into its socket
        (the replay's rank ends its op when its receives are in and its sends are out of its outbox; what the
        socket holds arrives after it has gone on)."""
        receiving = self.chunk < self.count
        written = (self.chunk == self.count - 1) & self.ready & (self.left <= self.send_buffer)
        return self._busy_of(receiving, receiving & ~written)

    def _busy_of(self, receiving: np.ndarray, sending: np.ndarray) -> set[int]:
        """:meth:`busy_ranks` from its masks: the receivers of the connections ``receiving`` and the senders of those
        ``sending``."""
        key = receiving.tobytes() + sending.tobytes()
        if key != self._busy_key:  # the same ranks as last asked for most events: kept (callers only read it)
            first = self.steps[0]
            self._busy_key = key
            self._busy = set(first.dst[receiving].tolist()) | set(first.src[sending].tolist())
        return self._busy

    def remaining_bytes(self) -> np.ndarray:
        """Per connection, what its sender has to send now: the rest of its chunk and the later chunks whose data
        it already has (chunk ``j`` once the connection into the sender has delivered chunk ``j - 1``). What TCP
        keeps in flight is bounded by it (astra_adapter.fabric.queues): a sender writes only data it holds, so a
        ring whose chunks are smaller than a window keeps at most a chunk or two queued, not a window (the
        replay's 4.7 MB DDP bucket beside the spread TP job, benchmarks/README.md "Job mixes")."""
        if self._remaining is not None:  # several queue reads between two changes of the op (one advance)
            return self._remaining
        k = np.minimum(self.chunk, self.count - 1)
        on = self.chunk < self.count
        pred_chunk = np.where(self.pred >= 0, self.chunk[np.maximum(self.pred, 0)], self.count)
        held = np.maximum(np.minimum(pred_chunk + 1, self.count), k + 1)  # chunks whose data the sender has
        later = np.where(on, self.before[held, self._index] - self.before[k + 1, self._index], 0.0)
        self._remaining = np.where(self.ready, self.left, np.where(on, self.sizes[k, self._index], 0.0)) + later
        return self._remaining

    def standing_bytes(self) -> np.ndarray:
        """Per connection, what it keeps in the queues on its path (up to its window, astra_adapter.fabric.queues):
        what its sender has to send (:meth:`remaining_bytes`), but no more than it has put on the wire beyond what
        its bottleneck took since it last started a chunk from empty (``fill``).

        A ring's step ends when its last bytes are through: its connections' queues drain with them, and the next
        step's bytes follow only when the sender's receive of the step is in (the engine starts the chunk then,
        after the step's latency). They leave the sender at its own link's rate (``inject``, the sender's link,
        one ring connection per rank) while the bottleneck takes them at the flow's share (``rate``), so the
        queue refills at the difference, up to the window: a spine link two DDP ring flows share (each 250 of
        500 Mbit/s) refills its 6 MiB in (3 MiB / (1000 - 250 Mbit/s)) = 33.5 ms from 1 Gbit/s hosts (measured:
        back at 5 MiB ~30 ms after the dip's bottom, benchmarks/README.md "Job mixes"), not at once. A connection
        whose next chunk's data came in while it was still sending keeps its fill, but the queue never holds more
        than the sender had left to send (:meth:`move` lowers ``fill`` to that): one fed as its chunk's last bytes
        drain (a balanced ring's every connection, at the same moment) refills from what it had left, one fed a
        window or more before its chunk's end keeps its window (its stream did not pause). Measured on the
        oversubscribed leaf-spine (benchmarks/README.md, "The spread TP2xDP2 job at the DDP ring's step
        boundaries"): the TP ops starting in the first 20 ms after a DDP ring step's end took 41 ms (mean), the
        window at once charged them 60 (+ 20 ms before the end: 16 ms). Where the sender's own link is the
        bottleneck (``inject <= rate``) its queue is there and fills at once."""
        left = self.remaining_bytes()
        return left if self.inject is None else np.minimum(left, self.fill)

    def _refresh(self) -> None:
        self.active = self.ready & (self.wait <= 1e-6) & (self.left > self._done)
        self.active_count = int(np.count_nonzero(self.active))
