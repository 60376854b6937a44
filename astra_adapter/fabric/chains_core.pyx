# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A ring's per-event work under ring chains, compiled: :meth:`astra_adapter.fabric.chains.RingOp.move` and
:meth:`~astra_adapter.fabric.chains.RingOp.horizon_ns` on its per-connection arrays in one call each.

Operation for operation the numpy methods': the same subtractions (``wait - dt``, ``left - rate * dt``; built
with ``-ffp-contract=off`` so no product and difference fuse), the same comparisons against the same
thresholds, the minimum over the same quotients (a minimum is exact in any order). What it saves is a dozen
small numpy calls per ring in flight per event (``tests/test_fabric_chain_engine.py`` compares whole plays with
the reference engine's span for span).
"""

from libc.math cimport INFINITY
from libc.stdint cimport int64_t

import numpy as np

from astra_adapter.fabric.chains import SENDER_CEIL

cdef double _THROUGH = 1e-6  # chains.RingOp: a wait at most this is over
cdef double sender_ceil = SENDER_CEIL  # chains.RingOp.move: faster than its sender's link's ceil is a burst


cdef inline double _remaining(Py_ssize_t i, const int64_t[::1] chunk, const int64_t[::1] pred,
                              const unsigned char[::1] ready, const double[::1] left, const double[:, ::1] sizes,
                              const double[:, ::1] before, int64_t count):
    """:meth:`RingOp.remaining_bytes` of connection ``i`` (:func:`_ring_remaining`'s arithmetic)."""
    cdef int64_t k = chunk[i] if chunk[i] < count - 1 else count - 1
    cdef bint on = chunk[i] < count
    cdef int64_t p = chunk[pred[i]] if pred[i] >= 0 else count
    cdef int64_t held = p + 1 if p + 1 < count else count
    cdef double later, now
    if held < k + 1:
        held = k + 1
    later = before[held, i] - before[k + 1, i] if on else 0.0
    if ready[i]:
        now = left[i]
    else:
        now = sizes[k, i] if on else 0.0
    return now + later


cdef (bint, Py_ssize_t, bint) _ring_move(int64_t[::1] chunk, double[::1] left, double[::1] wait,
                                         unsigned char[::1] ready, unsigned char[::1] active,
                                         const unsigned char[::1] next_ready, double[::1] next_wait,
                                         const double[::1] r, bint moved, double dt_ns, double done_bytes,
                                         int64_t last, const double[::1] send_buffer, double[::1] fill,
                                         const double[::1] inj, bint bounded, const int64_t[::1] pred,
                                         const double[:, ::1] sizes, const double[:, ::1] before, int64_t count,
                                         double[::1] had) noexcept:
    """:meth:`RingOp.move`'s arithmetic in place (``r``: the connections' rates, read only where ``moved``;
    ``inj``: the senders' link rates, read only where ``bounded``, whose excess over ``r`` a moving connection adds
    to its ``fill``, which then is at most what the connection had left to send - ``RingOp._had_bytes``, into
    ``had`` - before the data that comes in at the end): returns (whether some connection finished a chunk, the
    count of moving connections after, whether a connection on its ``last`` chunk got within its
    ``send_buffer`` - its sender's last send is written then). ``active`` is refreshed."""
    cdef Py_ssize_t i, n = chunk.shape[0]
    cdef bint filling = moved and bounded
    cdef bint went = False, written = False
    cdef Py_ssize_t count_on = 0
    cdef double x, grow
    if bounded:  # before anything moves: what each connection has, less what it moves now
        for i in range(n):
            x = _remaining(i, chunk, pred, ready, left, sizes, before, count)
            if moved and active[i]:
                x = x - r[i] * dt_ns
            had[i] = x if x > 0.0 else 0.0
    for i in range(n):
        if ready[i] and not active[i]:  # in its latency or wait
            x = wait[i] - dt_ns
            wait[i] = x if x > 0.0 else 0.0
        if next_ready[i]:
            x = next_wait[i] - dt_ns
            next_wait[i] = x if x > 0.0 else 0.0
        if filling and active[i]:
            grow = inj[i] - r[i]
            if grow > 0:
                fill[i] = fill[i] + grow * dt_ns
            elif r[i] <= inj[i] * sender_ceil:  # its sender's link holds it (else: a burst, the fill stays)
                fill[i] = INFINITY
        if moved and active[i]:
            x = left[i]
            left[i] = x - r[i] * dt_ns
            if chunk[i] == last and x > send_buffer[i] and not left[i] > send_buffer[i]:
                written = True
        if ready[i] and wait[i] <= _THROUGH and left[i] <= done_bytes:
            chunk[i] += 1
            ready[i] = 0
            left[i] = 0.0
            went = True
        active[i] = ready[i] and wait[i] <= _THROUGH and left[i] > done_bytes
        count_on += active[i]
    if bounded:
        for i in range(n):
            if had[i] < fill[i]:
                fill[i] = had[i]
    return went, count_on, written


cdef bint _ring_done(const int64_t[::1] chunk, int64_t count) noexcept:
    """Every connection past its last chunk (``np.all(chunk >= count)``)."""
    cdef Py_ssize_t i
    for i in range(chunk.shape[0]):
        if chunk[i] < count:
            return False
    return True


cdef double _ring_horizon(const unsigned char[::1] ready, const unsigned char[::1] active,
                          const double[::1] wait, const double[::1] left, const double[::1] r, bint moved,
                          const int64_t[::1] chunk, int64_t last, const double[::1] send_buffer) noexcept:
    """:meth:`RingOp.horizon_ns`: the least of the idle connections' waits (0.0 if one has none left), each
    moving connection's ``left / r`` (``r`` read only where ``moved``), and for one on its ``last`` chunk still
    above its send buffer ``(left - send_buffer) / r``; inf where nothing is pending."""
    cdef Py_ssize_t i, n = ready.shape[0]
    cdef double best = INFINITY, q
    for i in range(n):
        if ready[i] and not active[i]:
            if not wait[i] > 0:
                return 0.0  # a chunk of nothing: through now
            if wait[i] < best:
                best = wait[i]
    if not moved:
        return best
    for i in range(n):
        if active[i]:
            q = left[i] / r[i]
            if q < best:
                best = q
            if chunk[i] == last and left[i] > send_buffer[i]:
                q = (left[i] - send_buffer[i]) / r[i]
                if q < best:
                    best = q
    return best


cdef void _ring_remaining(const int64_t[::1] chunk, const int64_t[::1] pred, const unsigned char[::1] ready,
                          const double[::1] left, const double[:, ::1] sizes, const double[:, ::1] before,
                          int64_t count, double[::1] out) noexcept:
    """:meth:`RingOp.remaining_bytes` into ``out``: per connection the rest of its chunk (``left`` where it is
    ready, else the chunk's size; 0 past its last) plus the later chunks whose data its sender holds (``before``'s
    difference; 0 past its last), the same two operations on the same floats as the numpy method."""
    cdef Py_ssize_t i, n = chunk.shape[0]
    for i in range(n):
        out[i] = _remaining(i, chunk, pred, ready, left, sizes, before, count)


cdef (bint, bint) _ring_starting(const int64_t[::1] chunk, const int64_t[::1] pred,
                                 const unsigned char[::1] ready, const unsigned char[::1] next_ready, int64_t count,
                                 unsigned char[::1] which, unsigned char[::1] needed) noexcept:
    """Which connections start their chunk now (:meth:`RingOp.startable`) into ``which``, and into ``needed``
    those and the ones whose next chunk's data is in once they have (``ChainFlowEngine._begin_chunks``: who takes
    a wait from this read); returns whether any starts and whether any is needed."""
    cdef Py_ssize_t i, n = chunk.shape[0]
    cdef int64_t p, k
    cdef bint start, early, any_which = False, any_needed = False
    for i in range(n):
        k = chunk[i]
        p = chunk[pred[i]] if pred[i] >= 0 else count
        start = not ready[i] and k < count and (k == 0 or p >= k)
        early = (ready[i] or start) and not (next_ready[i] and not start) and k + 1 < count and p >= k + 1
        which[i] = start
        needed[i] = start or early
        any_which |= start
        any_needed |= start or early
    return any_which, any_needed


cdef bint _ring_arriving(const int64_t[::1] chunk, const int64_t[::1] pred, const unsigned char[::1] ready,
                         const unsigned char[::1] next_ready, int64_t count, unsigned char[::1] early) noexcept:
    """:meth:`RingOp.arriving` into ``early``; returns whether any."""
    cdef Py_ssize_t i, n = chunk.shape[0]
    cdef int64_t p
    cdef bint e, found = False
    for i in range(n):
        p = chunk[pred[i]] if pred[i] >= 0 else count
        e = ready[i] and not next_ready[i] and chunk[i] + 1 < count and p >= chunk[i] + 1
        early[i] = e
        found |= e
    return found


cdef Py_ssize_t _ring_begin(const unsigned char[::1] which, const int64_t[::1] chunk,
                            unsigned char[::1] next_ready, double[::1] next_wait, const double[::1] extra_wait_ns,
                            unsigned char[::1] ready, double[::1] left, double[::1] wait,
                            const double[:, ::1] sizes, const double[::1] latencies, double done_bytes,
                            unsigned char[::1] active, double[::1] fill, double fill_start) noexcept:
    """:meth:`RingOp.begin` in place: connections ``which`` start their chunk (its size left; its latency plus
    the wait it began when its data came in, else ``extra_wait_ns`` and its ``fill`` from ``fill_start``), then
    every connection's moving flag refreshed; returns the count moving."""
    cdef Py_ssize_t i, n = chunk.shape[0], count = 0
    cdef double extra
    for i in range(n):
        if which[i]:
            extra = next_wait[i] if next_ready[i] else extra_wait_ns[i]
            if not next_ready[i]:
                fill[i] = fill_start
            next_ready[i] = 0
            next_wait[i] = 0.0
            ready[i] = 1
            left[i] = sizes[chunk[i], i]
            wait[i] = latencies[chunk[i]] + extra
    for i in range(n):
        active[i] = ready[i] and wait[i] <= _THROUGH and left[i] > done_bytes
        count += active[i]
    return count


cdef class RingState:
    """A ring's per-connection arrays (:class:`astra_adapter.fabric.chain_flows.CompiledRingOp`'s: the same array
    objects for the op's life, written in place only) held as typed views once, so that its per-event calls take a
    buffer of their own arguments alone (the rates, the masks asked for), not of every array at every call: the
    256-host what-if's spread placement spent ~11 % of its play acquiring them (benchmarks/README.md, session 31).
    The arithmetic is the module's functions' above: :meth:`move`, :meth:`horizon`, :meth:`remaining`,
    :meth:`starting`, :meth:`arriving`, :meth:`begin`."""

    cdef int64_t[::1] chunk
    cdef double[::1] left, wait, next_wait, fill, had
    cdef unsigned char[::1] ready, active, next_ready
    cdef const double[::1] send_buffer, inj, latencies
    cdef const int64_t[::1] pred
    cdef const double[:, ::1] sizes, before
    cdef bint bounded
    cdef double done_bytes
    cdef int64_t count

    def __init__(self, int64_t[::1] chunk, double[::1] left, double[::1] wait, unsigned char[::1] ready,
                 unsigned char[::1] active, unsigned char[::1] next_ready, double[::1] next_wait,
                 const double[::1] send_buffer, double[::1] fill, inject, const int64_t[::1] pred,
                 const double[:, ::1] sizes, const double[:, ::1] before, const double[::1] latencies,
                 double done_bytes, int64_t count, double[::1] had):
        """``ready``, ``active``, ``next_ready``: the flag arrays' byte views; ``inject``: None or the senders' link
        rates; ``count``: chunks per connection; ``had``: :meth:`move`'s scratch."""
        self.chunk, self.left, self.wait, self.ready, self.active = chunk, left, wait, ready, active
        self.next_ready, self.next_wait, self.send_buffer, self.fill = next_ready, next_wait, send_buffer, fill
        self.bounded = inject is not None
        if self.bounded:
            self.inj = inject
        self.pred, self.sizes, self.before, self.latencies = pred, sizes, before, latencies
        self.done_bytes, self.count, self.had = done_bytes, count, had

    def move(self, rate, double dt_ns):
        """:meth:`RingOp.move` (``rate``: None or the connections' rates): (whether some connection finished a
        chunk, the count moving after, whether a last send got written, whether every connection is past its last
        chunk - read where one finished a chunk, the chunks change only then)."""
        cdef const double[::1] r
        cdef bint went, written
        cdef Py_ssize_t count_on
        if rate is not None:
            r = rate
        went, count_on, written = _ring_move(self.chunk, self.left, self.wait, self.ready, self.active,
                                             self.next_ready, self.next_wait, r, rate is not None, dt_ns,
                                             self.done_bytes, self.count - 1, self.send_buffer, self.fill, self.inj,
                                             self.bounded, self.pred, self.sizes, self.before, self.count, self.had)
        return went, count_on, written, went and _ring_done(self.chunk, self.count)

    def horizon(self, rate):
        """:meth:`RingOp.horizon_ns` (``rate``: None or the connections' rates)."""
        cdef const double[::1] r
        if rate is not None:
            r = rate
        return _ring_horizon(self.ready, self.active, self.wait, self.left, r, rate is not None, self.chunk,
                             self.count - 1, self.send_buffer)

    def remaining(self, double[::1] out):
        """:meth:`RingOp.remaining_bytes` into ``out``."""
        _ring_remaining(self.chunk, self.pred, self.ready, self.left, self.sizes, self.before, self.count, out)

    def starting(self, unsigned char[::1] which, unsigned char[::1] needed):
        """Which connections start their chunk now into ``which``, and who takes a wait into ``needed``
        (:func:`_ring_starting`); whether any of each."""
        return _ring_starting(self.chunk, self.pred, self.ready, self.next_ready, self.count, which, needed)

    def arriving(self, unsigned char[::1] early):
        """:meth:`RingOp.arriving` into ``early``; whether any."""
        return _ring_arriving(self.chunk, self.pred, self.ready, self.next_ready, self.count, early)

    def busy(self, unsigned char[::1] receiving, unsigned char[::1] sending):
        """:meth:`RingOp.busy_ranks`' masks: into ``receiving`` the connections before the end of their last chunk,
        into ``sending`` those of them not on their last chunk with at most their send buffer left to write."""
        cdef Py_ssize_t i
        cdef bint on
        for i in range(self.chunk.shape[0]):
            on = self.chunk[i] < self.count
            receiving[i] = on
            sending[i] = on and not (self.chunk[i] == self.count - 1 and self.ready[i]
                                     and self.left[i] <= self.send_buffer[i])

    def standing(self):
        """:meth:`RingOp.standing_bytes`: per connection what its sender has to send (:meth:`remaining`), at most its
        ``fill`` (``np.minimum``: the fill where it is less, else the bytes; nan from either)."""
        cdef Py_ssize_t i, n = self.chunk.shape[0]
        out = np.empty(n)
        cdef double[::1] o = out
        cdef double x
        for i in range(n):
            x = _remaining(i, self.chunk, self.pred, self.ready, self.left, self.sizes, self.before, self.count)
            o[i] = x if (x <= self.fill[i] or x != x) else self.fill[i]
        return out

    def begin(self, const unsigned char[::1] which, const double[::1] extra_wait_ns, double fill_start):
        """:meth:`RingOp.begin`'s start of connections ``which`` (after the FIFO order's waits); the count moving."""
        return _ring_begin(which, self.chunk, self.next_ready, self.next_wait, extra_wait_ns, self.ready, self.left,
                           self.wait, self.sizes, self.latencies, self.done_bytes, self.active, self.fill,
                           fill_start)


include "chains_reads.pxi"
